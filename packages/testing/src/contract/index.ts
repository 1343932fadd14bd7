/**
 * The contract every dlock backend must pass (`@dlock/testing/contract`, needs vitest): suites of cases for a lock
 * service, its elections, semaphores and inspection, that a backend's own tests run against its real server.
 *
 * @module contract
 */
export { type ElectionContractOptions, electionContract } from './election-contract.js';
export { type InspectContractOptions, inspectContract } from './inspect-contract.js';
export {
  type ContractFault,
  type ContractSubject,
  type LockServiceContractOptions,
  lockServiceContract,
} from './lock-service-contract.js';
export { type SemaphoreContractOptions, semaphoreContract } from './semaphore-contract.js';

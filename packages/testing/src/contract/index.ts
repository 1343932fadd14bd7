export { type ElectionContractOptions, electionContract } from './election-contract.js';
export { type InspectContractOptions, inspectContract } from './inspect-contract.js';
export {
  type ContractFault,
  type ContractSubject,
  type LockServiceContractOptions,
  lockServiceContract,
} from './lock-service-contract.js';
export { type SemaphoreContractOptions, semaphoreContract } from './semaphore-contract.js';

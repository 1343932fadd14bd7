export {
  type ContractFault,
  type ContractSubject,
  type LockServiceContractOptions,
  lockServiceContract,
} from './lock-service-contract.js';

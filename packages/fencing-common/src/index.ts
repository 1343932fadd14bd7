export {
  FenceBrokenError,
  type FenceBrokenReason,
  FenceBusyError,
  FenceConflictError,
  FencingError,
  type FencingErrorCode,
  InvalidArgumentError,
  isDLockError,
  rolledBackError,
  StaleFencingTokenError,
  transactionEndedError,
} from './errors.js';
export {
  errorProperty,
  type Fence,
  type FenceCall,
  type GateDriver,
  type GuardVerdict,
  markFromRows,
  type RetryableKind,
  type TransactionDriver,
} from './gate-driver.js';
export { closestKey, rejectUnknownKeys } from './option-keys.js';
export {
  classifyPostgresError,
  createTableRacingOthers,
  type PostgresFencingStatements,
  postgresFencingStatements,
  postgresLockTimeout,
  quoteIdentifier,
} from './postgres-sql.js';
export { type FenceRetryOptions, withFenceRetry } from './retry.js';
export { checkGate, runGate } from './run-gate.js';
export {
  ISOLATION_LEVELS,
  type IsolationLevel,
  parseIsolationLevel,
  parseLockTimeoutMs,
} from './transaction-settings.js';
export {
  assertCallback,
  assertIdentifier,
  assertResource,
  type FencingTokenInput,
  MAX_FENCING_TOKEN,
  MAX_RESOURCE_BYTES,
  parseFence,
  parseFencingToken,
} from './validate.js';

export {
  FenceBusyError,
  FenceConflictError,
  FencingError,
  type FencingErrorCode,
  InvalidArgumentError,
  isDLockError,
  StaleFencingTokenError,
} from './errors.js';
export { closestKey, rejectUnknownKeys } from './option-keys.js';
export {
  createTableRacingOthers,
  type PostgresFencingStatements,
  postgresFencingStatements,
  quoteIdentifier,
} from './postgres-sql.js';
export { type FenceRetryOptions, withFenceRetry } from './retry.js';
export {
  assertIdentifier,
  assertResource,
  type FencingTokenInput,
  MAX_FENCING_TOKEN,
  MAX_RESOURCE_BYTES,
  parseFencingToken,
} from './validate.js';

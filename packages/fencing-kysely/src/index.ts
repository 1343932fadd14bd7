/**
 * Fencing-token gate for Kysely on PostgreSQL (incl. PGlite), MySQL/MariaDB and SQLite. See the README.
 * The errors and helpers shared with `@dlock/fencing-pg` are re-exported so one import is enough.
 */
export {
  FenceBrokenError,
  type FenceBrokenReason,
  FenceBusyError,
  FenceConflictError,
  type FenceRetryOptions,
  FencingError,
  type FencingErrorCode,
  type FencingTokenInput,
  InvalidArgumentError,
  type IsolationLevel,
  isDLockError,
  MAX_FENCING_TOKEN,
  MAX_RESOURCE_BYTES,
  parseFencingToken,
  StaleFencingTokenError,
  withFenceRetry,
} from '@dlock/fencing-common';
export type { FencingDialectName, FencingDialectSql } from './dialect/dialect.js';
export { checkFence, fenced, highWaterMark, runFenced } from './gate.js';
export {
  type CheckFenceOptions,
  DEFAULT_FENCING_TABLE,
  type FencedIsolationLevel,
  type FencedOptions,
  type FencingTableOptions,
  fencingSql,
} from './options.js';
export {
  ensureFencingTable,
  type FencingMigration,
  type FencingTable,
  fencingMigration,
} from './schema.js';

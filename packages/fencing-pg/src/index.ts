/**
 * Fencing-token gate for PostgreSQL on node-postgres. See the README for semantics and the SQL.
 * The errors and helpers shared with `@dlock/fencing-kysely` are re-exported so one import is enough.
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
  isDLockError,
  MAX_FENCING_TOKEN,
  MAX_RESOURCE_BYTES,
  parseFencingToken,
  StaleFencingTokenError,
  withFenceRetry,
} from '@dlock/fencing-common';
export type {
  NotAPool,
  PgClientLike,
  PgPoolClientLike,
  PgPoolLike,
  PgQueryable,
  PgQueryResultLike,
} from './client-like.js';
export { FencingGate, type IsolationLevel, type RunOptions } from './gate.js';
export { DEFAULT_FENCING_TABLE, type FencingSql, type FencingTableOptions, fencingSql } from './sql.js';

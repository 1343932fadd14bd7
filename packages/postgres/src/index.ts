export type {
  PGliteLike,
  PgListenClientLike,
  PgNotificationLike,
  PgPoolClientLike,
  PgPoolLike,
  PgQueryConfigLike,
  PgQueryResultLike,
} from './client-like.js';
export { PostgresServiceClosedError } from './errors.js';
export type { PostgresLockServiceOptions } from './options.js';
export { PostgresLockService } from './postgres-lock-service.js';
export { type PostgresStatements, postgresStatements } from './sql.js';

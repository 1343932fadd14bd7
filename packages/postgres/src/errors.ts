import { ClientClosedError, TransportError } from '@dlock/core';

/** Wraps a driver failure; core treats every `TransportError` as "could not reach the service". */
export function transportError(what: string, cause: unknown): TransportError {
  if (cause instanceof TransportError) return cause;
  const detail = cause instanceof Error ? cause.message : String(cause);
  return new TransportError(`PostgreSQL ${what} failed: ${detail}`, { cause });
}

/** A reply in a shape no statement of this package produces (a wrong table, a proxy rewriting results). */
export function unexpectedRow(what: string, row: unknown): TransportError {
  return new TransportError(`PostgreSQL ${what}: unexpected result ${JSON.stringify(row)}`);
}

/**
 * A renewal, release, metadata update or observer-row insert or delete that reached its rows only after its bound wrote
 * nothing (see `lateAfter` in sql.ts): its caller may have given up on it and been told its lease was lost. Not a
 * refusal: the grant may still hold, and core retries within the lease's window.
 */
export function late(what: string): TransportError {
  return new TransportError(`PostgreSQL ${what}: ran past its bound on the server, nothing written`);
}

/**
 * The service was closed; it accepts no further calls (code `CLIENT_CLOSED`: core passes it on at once instead of
 * retrying it as it would a `TransportError`).
 */
export class PostgresServiceClosedError extends ClientClosedError {
  constructor() {
    super();
    this.message = 'the PostgreSQL lock service is closed';
  }
}

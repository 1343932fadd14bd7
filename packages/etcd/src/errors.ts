import { ClientClosedError, TransportError } from '@dlock/core';

/**
 * etcd answers "requested lease not found" when a lease expired or was revoked. `etcd3` maps it to its
 * `EtcdLeaseInvalidError`; matching the message too keeps this independent of how that class is exported.
 */
export function isLeaseNotFound(error: unknown): boolean {
  for (let e = error, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (e.name === 'EtcdLeaseInvalidError' || e.message.includes('requested lease not found')) return true;
  }
  return false;
}

/** Wraps a driver failure; core treats every `TransportError` as "could not reach the service". */
export function transportError(what: string, cause: unknown): TransportError {
  if (cause instanceof TransportError) return cause;
  const detail = cause instanceof Error ? cause.message : String(cause);
  return new TransportError(`etcd ${what} failed: ${detail}`, { cause });
}

/**
 * The service was closed; it accepts no further acquires (code `CLIENT_CLOSED`: core passes it on at once instead of
 * retrying it as it would a `TransportError`).
 */
export class EtcdServiceClosedError extends ClientClosedError {
  constructor() {
    super();
    this.message = 'the etcd lock service is closed';
  }
}

import { ClientClosedError, TransportError } from '@dlock/core';

/**
 * A call on a service after its `close()`. Code `CLIENT_CLOSED`: core passes it on at once instead of retrying it as
 * it would a `TransportError`.
 */
export class RedisServiceClosedError extends ClientClosedError {
  constructor(service: 'RedisLockService' | 'RedlockService') {
    super();
    this.message = `the ${service} is closed`;
  }
}

/**
 * A reply none of our scripts gives (another client's type mapping, a server that is not Redis). Shown, shortened,
 * in the message; a reply that cannot be printed as JSON (a bigint, a cycle) is shown as a string instead.
 */
export function unexpectedReply(what: string, reply: unknown): TransportError {
  let shown: string;
  try {
    shown = JSON.stringify(reply) ?? String(reply);
  } catch {
    shown = String(reply);
  }
  return new TransportError(`${what}: unexpected reply from Redis: ${shown.slice(0, 200)}`);
}

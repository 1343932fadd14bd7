import { ClientClosedError, TransportError } from '@dlock/core';

/** The ZooKeeper error codes this package tells apart (node-zookeeper-client's `Exception` codes). */
export const ZK_ERROR = {
  CONNECTION_LOSS: -4,
  MARSHALLING_ERROR: -5,
  OPERATION_TIMEOUT: -7,
  NO_NODE: -101,
  BAD_VERSION: -103,
  NODE_EXISTS: -110,
  NOT_EMPTY: -111,
  SESSION_EXPIRED: -112,
} as const;

/** The ZooKeeper error code carried by a client error, if it is one. */
export function zkErrorCode(error: unknown): number | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const code: unknown = Reflect.get(error, 'code');
  return typeof code === 'number' ? code : undefined;
}

/**
 * True for codes the client makes up itself when it never got an answer. Any other code is the server's reply,
 * which proves the session was alive when the request arrived.
 */
export function isClientSideCode(code: number | undefined): boolean {
  return (
    code === undefined ||
    code === ZK_ERROR.CONNECTION_LOSS ||
    code === ZK_ERROR.OPERATION_TIMEOUT ||
    code === ZK_ERROR.SESSION_EXPIRED ||
    code === ZK_ERROR.MARSHALLING_ERROR
  );
}

/**
 * The ZooKeeper session a call needed has ended (expired on the server, or given up by this process after a whole
 * session timeout without an answer). Every lock of that session is lost; the adapter opens a new session for
 * later acquires when it owns the client. A `TransportError`, so core retries an acquire within its wait budget.
 */
export class ZooKeeperSessionError extends TransportError {
  constructor(
    /** The session id, 16 hex digits. */
    readonly sessionId: string,
    /** Why it ended, in words: expired on the server, an authentication failure, a timeout without an answer… */
    readonly reason: string,
  ) {
    super(`ZooKeeper session 0x${sessionId} ended: ${reason}`);
  }
}

/** The service was closed; it accepts no further calls (code `CLIENT_CLOSED`, so core does not retry). */
export class ZooKeeperServiceClosedError extends ClientClosedError {
  constructor() {
    super();
    this.message = 'the ZooKeeper lock service is closed';
  }
}

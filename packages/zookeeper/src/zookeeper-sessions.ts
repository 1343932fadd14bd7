import { createRequire } from 'node:module';
import { type Clock, InvalidArgumentError, TransportError } from '@dlock/core';
import { type CallDeadlines, unlessAborted } from '@dlock/core/adapter';
import {
  dropConnection,
  isClientClosed,
  onClientClosed,
  STATE,
  type ZooKeeperClientLike,
  type ZooKeeperModuleLike,
  type ZooKeeperStateLike,
} from './client-like.js';
import { ZooKeeperServiceClosedError, ZooKeeperSessionError } from './errors.js';
import { requestTimeoutFor } from './options.js';
import { Session } from './zookeeper-session.js';

/** How long `close()` on a client may wait for the server before its connection is dropped. */
const CLOSE_GRACE_MS = 1_000;
const noop = (): void => {};

let clientModule: ZooKeeperModuleLike | undefined;

function loadClientModule(): ZooKeeperModuleLike {
  if (!clientModule) {
    let loaded: unknown;
    try {
      loaded = createRequire(import.meta.url)('node-zookeeper-client');
    } catch {
      loaded = undefined;
    }
    if (
      typeof loaded !== 'object' ||
      loaded === null ||
      typeof Reflect.get(loaded, 'createClient') !== 'function'
    ) {
      throw new InvalidArgumentError(
        'options.connectionString',
        'needs the peer dependency node-zookeeper-client installed (or pass `client`)',
      );
    }
    clientModule = loaded as ZooKeeperModuleLike;
  }
  return clientModule;
}

function isConnected(state: ZooKeeperStateLike): boolean {
  return state.code === STATE.SYNC_CONNECTED || state.code === STATE.CONNECTED_READ_ONLY;
}

function isFinal(state: ZooKeeperStateLike): boolean {
  return state.code === STATE.EXPIRED || state.code === STATE.AUTH_FAILED;
}

export interface SessionsOptions {
  readonly clock: Clock;
  readonly deadlines: CallDeadlines;
  /** Starts the housekeeping ticker. */
  readonly wake: () => void;
  /** Aborts when the service closes. */
  readonly closing: AbortSignal;
  readonly client: ZooKeeperClientLike | undefined;
  readonly connectionString: string | undefined;
  readonly sessionTimeoutMs: number;
  readonly requestTimeoutMs: number | undefined;
  /** A path the heartbeat reads (that it exists does not matter). */
  readonly heartbeatPath: string;
  /** A session opened: watches must be set again on it. */
  readonly opened: (session: Session) => void;
  /**
   * The client is connected again under the same session after a disconnect: ZooKeeper kept the session's nodes,
   * but whether each one is still there (and still the holder's) must be checked, not assumed.
   */
  readonly reconnected: (session: Session) => void;
  /** A session ended: every grant of it is lost. Called once per session. */
  readonly ended: (session: Session) => void;
  /**
   * The client passed in is connected under this session id (undefined: its session expired, it has none). It may
   * be a session given up on: the server kept it alive after all, and so its nodes.
   */
  readonly callerConnected: (sessionId: string | undefined) => void;
}

/**
 * Which session is in use, opening a new one when it is needed, and deciding when one has ended: ZooKeeper says
 * so, the client came back under another session id, or the server has not answered for a whole session timeout
 * while something was at stake. A session that ended is never used again. A client this adapter made is closed
 * with it, and the next session gets a new client; a client passed in cannot be replaced.
 */
export class Sessions {
  readonly #o: SessionsOptions;
  readonly #listeners = new Map<ZooKeeperClientLike, (state: ZooKeeperStateLike) => void>();
  /** Stops following whether the caller closed the client passed in (see `onClientClosed`). */
  #unfollowClosing: (() => void) | undefined;
  /** Sessions of a caller's client that ended: never used again, even if the client comes back with one. */
  readonly #retired = new Set<string>();
  #owned: ZooKeeperClientLike | undefined;
  #ownedConnectCalled = false;
  #current: Session | undefined;
  #opening: Promise<Session> | undefined;

  constructor(options: SessionsOptions) {
    this.#o = options;
    if (options.client) {
      this.#attach(options.client);
    } else {
      try {
        this.#newClient();
      } catch (error) {
        if (error instanceof InvalidArgumentError) throw error;
        throw new InvalidArgumentError(
          'options.connectionString',
          `was refused by the client: ${String(error)}`,
        );
      }
    }
  }

  /** The live session, if one is open. */
  get current(): Session | undefined {
    const session = this.#current;
    return session && !session.ended ? session : undefined;
  }

  /** The live session, opening one if needed; rejects with `signal`'s reason if it aborts first. */
  live(signal?: AbortSignal): Promise<Session> {
    const current = this.current;
    if (current) return Promise.resolve(current);
    if (this.#o.closing.aborted) return Promise.reject(new ZooKeeperServiceClosedError());
    if (!this.#opening) {
      const opening = this.#open().finally(() => {
        if (this.#opening === opening) this.#opening = undefined;
      });
      opening.catch(noop);
      this.#opening = opening;
    }
    return signal ? unlessAborted(this.#opening, signal) : this.#opening;
  }

  /** Ends a session for good (idempotent). */
  end(session: Session, reason: string): void {
    if (!session.end(reason)) return;
    if (this.#current === session) this.#current = undefined;
    if (session.owned) this.#retire(session.client);
    else this.#retired.add(session.id);
    this.#o.ended(session);
  }

  /**
   * Gives the session up after a whole timeout of silence while it has something at stake, since the server has
   * expired it by then (or will, before a partition heals) and node-zookeeper-client may never say so. Runs on each
   * tick, and at the start of each call: a process that wakes from a pause must not act on a session the rule has
   * already ended, just because no timer ran yet. True if the session ended now.
   */
  endIfSilent(now: number, tickMs: number): boolean {
    const session = this.current;
    const since = session?.trackingSince;
    if (!session || since === undefined) return false;
    const silentMs = now - Math.max(session.lastContactAt, since);
    // One tick early, so that the tick's own lateness never makes this later than the server's expiry.
    if (silentMs < session.timeoutMs - tickMs) return false;
    this.end(
      session,
      `no answer from ZooKeeper for ${Math.round(silentMs)} ms (session timeout ${session.timeoutMs} ms)`,
    );
    return true;
  }

  /**
   * On each housekeeping tick, while the session has something at stake: keep a request in flight every third of
   * the session timeout; drop a connection silent for two thirds of it (the read timeout the client lacks), so the
   * client reconnects or fails over; and give the session up after a whole timeout of silence ({@link endIfSilent}).
   */
  check(now: number, tickMs: number): void {
    if (this.endIfSilent(now, tickMs)) return;
    const session = this.current;
    const since = session?.trackingSince;
    if (!session || since === undefined) return;
    const silentMs = now - Math.max(session.lastContactAt, since);
    if (now - session.lastContactAt >= session.timeoutMs / 3 && !session.heartbeatInFlight) {
      session.heartbeatInFlight = true;
      session
        .exists(this.#o.heartbeatPath)
        .catch(noop)
        .finally(() => {
          session.heartbeatInFlight = false;
        });
    }
    if (
      session.connected &&
      silentMs >= (2 * session.timeoutMs) / 3 &&
      now - session.droppedAt >= session.timeoutMs / 3
    ) {
      session.droppedAt = now;
      dropConnection(session.client);
    }
  }

  /**
   * A throwaway session object on the client passed in, while that client is connected under `sessionId`: what
   * deletes the nodes of a session this service gave up on but the server kept. Never current, never reused.
   */
  sweeperFor(sessionId: string): Session | undefined {
    const client = this.#o.client;
    // A client its owner closed sends its session's close: nothing more goes out on it.
    if (!client || !isConnected(client.getState()) || isClientClosed(client)) return undefined;
    if (client.getSessionId().toString('hex') !== sessionId) return undefined;
    return this.#session(client);
  }

  /**
   * After the service closed: closes the client it made. A client passed in is still followed for
   * `callerConnected` (it may come back under a session whose nodes are left over) until {@link letGoOfCaller}.
   */
  close(): void {
    if (this.#owned) this.#retire(this.#owned);
  }

  /**
   * True once the caller has closed the client passed in: its session ends with it (closed, or expired by the
   * server), and its nodes with the session.
   */
  get callerClosed(): boolean {
    const client = this.#o.client;
    return client !== undefined && isClientClosed(client);
  }

  /** Removes the listener on a client passed in: nothing of its sessions is left to delete. */
  letGoOfCaller(): void {
    if (this.#o.client) this.#detach(this.#o.client);
  }

  async #open(): Promise<Session> {
    const client = this.#o.client ?? this.#owned ?? this.#newClient();
    if (client === this.#owned && !this.#ownedConnectCalled) {
      this.#ownedConnectCalled = true;
      client.connect();
    }
    await this.#whenConnected(client);
    if (this.#o.closing.aborted) throw new ZooKeeperServiceClosedError();
    const id = client.getSessionId().toString('hex');
    if (this.#retired.has(id)) {
      throw new ZooKeeperSessionError(
        id,
        'it ended before, and a client passed in cannot open another session: create a new client and service',
      );
    }
    const session = this.#session(client);
    this.#current = session;
    this.#o.opened(session);
    return session;
  }

  #session(client: ZooKeeperClientLike): Session {
    return new Session(
      {
        clock: this.#o.clock,
        deadlines: this.#o.deadlines,
        requestTimeoutMs: requestTimeoutFor(client.getSessionTimeout(), this.#o.requestTimeoutMs),
        wake: this.#o.wake,
      },
      client,
      client !== this.#o.client,
    );
  }

  #newClient(): ZooKeeperClientLike {
    const sessionTimeout = this.#o.sessionTimeoutMs;
    const client = loadClientModule().createClient(this.#o.connectionString as string, {
      sessionTimeout,
      // The client waits up to this long, at random, before it retries a server list it went through.
      spinDelay: Math.round(Math.min(1_000, Math.max(50, sessionTimeout / 10))),
      // Retries are the adapter's: a create must not be blindly resent (protected mode finds it instead).
      retries: 0,
    });
    this.#attach(client);
    this.#owned = client;
    this.#ownedConnectCalled = false;
    return client;
  }

  async #whenConnected(client: ZooKeeperClientLike): Promise<void> {
    const state = client.getState();
    if (isConnected(state)) return;
    if (isFinal(state)) {
      throw new TransportError(`the ZooKeeper client is ${state.name}: pass a new, connected client`);
    }
    const timeoutMs = Math.max(requestTimeoutFor(this.#o.sessionTimeoutMs, this.#o.requestTimeoutMs), 2_000);
    const closing = this.#o.closing;
    await new Promise<void>((resolve, reject) => {
      const timer = new AbortController();
      const finish = (): void => {
        timer.abort();
        client.removeListener('state', listener);
        closing.removeEventListener('abort', onClose);
      };
      const listener = (next: ZooKeeperStateLike): void => {
        if (isConnected(next)) {
          finish();
          resolve();
        } else if (isFinal(next)) {
          finish();
          reject(new TransportError(`the ZooKeeper client is ${next.name}`));
        }
      };
      const onClose = (): void => {
        finish();
        reject(new ZooKeeperServiceClosedError());
      };
      client.on('state', listener);
      closing.addEventListener('abort', onClose, { once: true });
      this.#o.clock.sleep(timeoutMs, timer.signal, { unref: true }).then(() => {
        finish();
        // node-zookeeper-client bounds the TCP connect but not the handshake after it: a connection accepted and
        // then never answered (a member that hangs, a path that drops everything) would wait for its
        // ConnectResponse for ever, and the client would neither retry nor move on to another member. Dropping it
        // makes the client reconnect, so the next try can get a session. A TCP connect still pending is left to
        // the client's own connect timeout.
        if (!isConnected(client.getState())) dropConnection(client, { onceConnected: true });
        reject(new TransportError(`could not connect to ZooKeeper within ${timeoutMs} ms`));
      }, noop);
    });
  }

  #attach(client: ZooKeeperClientLike): void {
    const listener = (state: ZooKeeperStateLike): void => {
      try {
        this.#stateChanged(client, state);
      } catch (error) {
        // This runs inside the client's socket handler, which must not see an exception.
        process.emitWarning(`@dlock/zookeeper: state handling failed: ${String(error)}`, 'DLockWarning');
      }
    };
    client.on('state', listener);
    this.#listeners.set(client, listener);
    if (client === this.#o.client) {
      // Closed by its owner while disconnected, the client says nothing: told by its connection manager instead,
      // the leftovers are forgotten (the session goes, and its nodes with it) and this listener is removed.
      this.#unfollowClosing = onClientClosed(client, () => {
        try {
          this.#o.callerConnected(undefined);
        } catch (error) {
          process.emitWarning(`@dlock/zookeeper: state handling failed: ${String(error)}`, 'DLockWarning');
        }
      });
    }
  }

  #detach(client: ZooKeeperClientLike): void {
    const listener = this.#listeners.get(client);
    if (!listener) return;
    this.#listeners.delete(client);
    client.removeListener('state', listener);
    if (client === this.#o.client) {
      this.#unfollowClosing?.();
      this.#unfollowClosing = undefined;
    }
  }

  #stateChanged(client: ZooKeeperClientLike, state: ZooKeeperStateLike): void {
    if (client === this.#o.client && this.#retired.size > 0) {
      if (isConnected(state)) this.#o.callerConnected(client.getSessionId().toString('hex'));
      else if (isFinal(state)) this.#o.callerConnected(undefined);
    }
    const session = this.current;
    if (!session || session.client !== client) return;
    switch (state.code) {
      case STATE.SYNC_CONNECTED:
      case STATE.CONNECTED_READ_ONLY:
        // A client that silently got a new session (or a server that handed one out) has lost every old node.
        if (client.getSessionId().toString('hex') !== session.id) {
          this.end(session, 'the client reconnected under another session id');
        } else {
          // The server accepted the session on a handshake sent after the disconnect.
          session.noteContact(session.disconnectedAt);
          const wasDisconnected = !session.connected;
          session.connected = true;
          if (wasDisconnected) this.#o.reconnected(session);
        }
        break;
      case STATE.DISCONNECTED:
        session.connected = false;
        session.disconnectedAt = this.#o.clock.monotonic();
        break;
      case STATE.EXPIRED:
        this.end(session, 'ZooKeeper expired it');
        break;
      case STATE.AUTH_FAILED:
        this.end(session, 'authentication failed');
        break;
      default:
        break;
    }
  }

  #retire(client: ZooKeeperClientLike): void {
    if (this.#owned === client) this.#owned = undefined;
    this.#detach(client);
    try {
      client.close();
    } catch {
      // already closed
    }
    // close() waits for the server to confirm, which a stopped server or a dead network never does.
    void this.#o.clock.sleep(CLOSE_GRACE_MS, undefined, { unref: true }).then(() => dropConnection(client));
  }
}

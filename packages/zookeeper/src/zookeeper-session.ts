import { type Clock, TransportError, UnsupportedError } from '@dlock/core';
import { boundedCall, type CallDeadlines } from '@dlock/core/adapter';
import {
  replyZxid,
  type ZooKeeperAclLike,
  type ZooKeeperClientLike,
  type ZooKeeperOpResultLike,
  type ZooKeeperStatLike,
  type ZooKeeperWatcher,
} from './client-like.js';
import { isClientSideCode, ZK_ERROR, ZooKeeperSessionError, zkErrorCode } from './errors.js';

export interface SessionDeps {
  readonly clock: Clock;
  /** Bounds every request (one timer for all of them); `close()` stops it, settling what is still in flight. */
  readonly deadlines: CallDeadlines;
  readonly requestTimeoutMs: number;
  /** Starts the housekeeping ticker, which watches the session's silence. */
  readonly wake: () => void;
}

/**
 * Nodes of a session that must go once their use is over: the queue node of an attempt that has not been granted
 * (or that gave its grant back), or a node whose delete failed. The session tracks them while they may exist, so
 * that its end hands them on (see `Leftovers`) instead of forgetting them.
 */
export interface SessionNodes {
  readonly parent: string;
  /** The node's name under the parent, once known. */
  node: string | undefined;
  /** The attempt id in the node's name, when a create of it went out unanswered: any node with it must go. */
  readonly attemptId: string | undefined;
  uncertain: boolean;
  /** When retrying the delete stops, once a try has failed (monotonic ms). */
  giveUpAt: number | undefined;
}

export type CheckOutcome =
  | { readonly ok: true }
  | { readonly ok: false; readonly results: readonly ZooKeeperOpResultLike[] };

/** One operation of a {@link Session.multi} transaction. */
export type MultiOp =
  | { readonly op: 'create'; readonly path: string; readonly data: Buffer; readonly mode: number }
  | { readonly op: 'remove'; readonly path: string; readonly version?: number }
  | { readonly op: 'setData'; readonly path: string; readonly data: Buffer }
  | { readonly op: 'check'; readonly path: string };

/**
 * What a `multi` came to: committed (with the transaction's zxid, the czxid of every node it created, when the
 * client lets it be read, and per operation the path a create made: a sequential node's name is only known from
 * it), or refused by the server, naming the first operation that failed and its error code.
 */
export type MultiOutcome =
  | { readonly ok: true; readonly zxid: bigint | undefined; readonly paths: readonly (string | undefined)[] }
  | { readonly ok: false; readonly failed: number | undefined; readonly code: number | undefined };

/** ZooKeeper's code for the operations of a failed multi after the one that failed. */
const RUNTIME_INCONSISTENCY = -2;

type Done<T> = (error: unknown, value: T) => void;
/** What the client answered: a value, or its error and that error's ZooKeeper code. */
type Answer<T> = { readonly value: T } | { readonly error: unknown; readonly code: number | undefined };

/** A node's ACL as `getACL` answers it. */
export interface NodeAcl {
  readonly acls: readonly ZooKeeperAclLike[];
  readonly stat: ZooKeeperStatLike;
}

/** A node as `getData` answers it. */
export interface NodeRead {
  readonly data: Buffer;
  readonly stat: ZooKeeperStatLike;
}

const EMPTY = Buffer.alloc(0);

export interface Created {
  readonly path: string;
  readonly zxid: bigint | undefined;
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * One ZooKeeper session: a client whose session id is fixed, the promise wrappers around its calls (each with a
 * deadline, since the client has none), and what liveness tracking needs — the send time of the last request the
 * server answered. A session that ended never comes back; a new one is a new object.
 */
export class Session {
  readonly client: ZooKeeperClientLike;
  /** 16 hex digits, as `stat.ephemeralOwner` shows it. */
  readonly id: string;
  /** The negotiated session timeout. */
  readonly timeoutMs: number;
  /** True when this adapter created the client and so may close it and open another. */
  readonly owned: boolean;
  /** Send time of the newest request the server answered: the server's session timer ran no earlier than this. */
  lastContactAt: number;
  connected = true;
  /** When the client last reported a disconnect: a reconnect handshake was sent no earlier. */
  disconnectedAt = Number.NEGATIVE_INFINITY;
  heartbeatInFlight = false;
  droppedAt = Number.NEGATIVE_INFINITY;
  /** Nodes of this session that must go (see {@link SessionNodes}); each keeps the session's silence watched. */
  readonly pending = new Set<SessionNodes>();
  readonly #deps: SessionDeps;
  #endError: ZooKeeperSessionError | undefined;
  #concerns = 0;
  #trackingSince: number | undefined;

  constructor(deps: SessionDeps, client: ZooKeeperClientLike, owned: boolean) {
    this.#deps = deps;
    this.client = client;
    this.owned = owned;
    this.id = client.getSessionId().toString('hex');
    this.timeoutMs = client.getSessionTimeout();
    this.lastContactAt = deps.clock.monotonic();
  }

  get ended(): boolean {
    return this.#endError !== undefined;
  }

  get endError(): ZooKeeperSessionError | undefined {
    return this.#endError;
  }

  /**
   * Since when something has been waiting on this server without pause (a grant, a contender in a queue, a request,
   * a pending cleanup), if something is. Only then is silence from the server alarming, and it counts from no
   * earlier than this.
   */
  get trackingSince(): number | undefined {
    return this.#trackingSince;
  }

  /** Marks the session ended; returns the error to report, or undefined if it had already ended. */
  end(reason: string): ZooKeeperSessionError | undefined {
    if (this.#endError) return undefined;
    const error = new ZooKeeperSessionError(this.id, reason);
    this.#endError = error;
    return error;
  }

  /** Something now waits on the server (see {@link trackingSince}); pair with {@link disengage}. */
  engage(): void {
    if (this.#concerns === 0) this.#trackingSince = this.#deps.clock.monotonic();
    this.#concerns += 1;
    this.#deps.wake();
  }

  disengage(): void {
    this.#concerns -= 1;
    if (this.#concerns === 0) this.#trackingSince = undefined;
  }

  /** Tracks nodes that must go until {@link letGo}; idempotent. */
  hold(nodes: SessionNodes): void {
    if (this.pending.has(nodes)) return;
    this.pending.add(nodes);
    this.engage();
  }

  letGo(nodes: SessionNodes): void {
    if (this.pending.delete(nodes)) this.disengage();
  }

  noteContact(sentAt: number): void {
    if (sentAt > this.lastContactAt) this.lastContactAt = sentAt;
  }

  /**
   * Sends one request and settles when the server answers or the deadline passes. Answers the server gave (NoNode,
   * NodeExists…) reject with the client's own error, so callers can branch on its code; failures without an answer
   * (connection loss, deadline) reject with a `TransportError`. `onLate` receives a success that arrived after the
   * deadline, e.g. to delete a node nobody waits for.
   */
  request<T>(
    op: string,
    path: string,
    send: (done: Done<T>) => void,
    onLate?: (value: T) => void,
  ): Promise<T> {
    if (this.#endError) return Promise.reject(this.#endError);
    const { clock, deadlines, requestTimeoutMs } = this.#deps;
    const sentAt = clock.monotonic();
    this.engage();
    // The client's answer is passed through boundedCall as a value, so that a server's answer (NoNode…) keeps the
    // client's own error, which callers branch on, instead of becoming a TransportError.
    const answer = boundedCall<Answer<T>>(
      () =>
        new Promise<Answer<T>>((resolve) => {
          // Runs inside the client's socket handler: it must never throw.
          const done: Done<T> = (error, value) => {
            const code = error ? zkErrorCode(error) : undefined;
            if (!error || !isClientSideCode(code)) this.noteContact(sentAt);
            resolve(error ? { error, code } : { value });
          };
          try {
            send(done);
          } catch (error) {
            done(error ?? new Error('send failed'), undefined as T);
          }
        }),
      {
        deadlines,
        clock,
        timeoutMs: requestTimeoutMs,
        what: `ZooKeeper ${op} ${path}`,
        onLate: (late) => {
          if (!onLate || 'error' in late) return;
          try {
            onLate(late.value);
          } catch {
            // best effort by design
          }
        },
      },
    );
    return answer.then(
      (settled) => {
        this.disengage();
        if (!('error' in settled)) return settled.value;
        if (!isClientSideCode(settled.code)) throw settled.error;
        throw (
          this.#endError ??
          new TransportError(`ZooKeeper ${op} ${path} failed: ${describe(settled.error)}`, {
            cause: settled.error,
          })
        );
      },
      (error: unknown) => {
        this.disengage();
        throw error;
      },
    );
  }

  /** Resolves the created path and, when the client lets it be read, the create's zxid (the node's czxid). */
  create(path: string, data: Buffer, mode: number, onLate?: (created: Created) => void): Promise<Created> {
    return this.request<Created>(
      'create',
      path,
      (done) =>
        this.client.create(path, data, mode, (error, created) => {
          // Synchronously, before the client handles another reply.
          done(
            error,
            error ? { path: '', zxid: undefined } : { path: created, zxid: replyZxid(this.client) },
          );
        }),
      onLate,
    );
  }

  /** Deletes a node at `version` (-1, the default: any version). */
  remove(path: string, version = -1): Promise<void> {
    return this.request<void>('delete', path, (done) =>
      this.client.remove(path, version, (error) => done(error, undefined)),
    );
  }

  exists(path: string, watcher?: ZooKeeperWatcher): Promise<ZooKeeperStatLike | null> {
    return this.request<ZooKeeperStatLike | null>('exists', path, (done) => {
      if (watcher) this.client.exists(path, watcher, done);
      else this.client.exists(path, done);
    });
  }

  /** A node's ACL and stat; null when it does not exist. */
  async getACL(path: string): Promise<NodeAcl | null> {
    try {
      return await this.request<NodeAcl | null>('getACL', path, (done) =>
        this.client.getACL(path, (error, acls, stat) =>
          done(error, stat ? { acls: acls ?? [], stat } : null),
        ),
      );
    } catch (error) {
      if (zkErrorCode(error) === ZK_ERROR.NO_NODE) return null;
      throw error;
    }
  }

  getChildren(path: string, watcher?: ZooKeeperWatcher): Promise<string[]> {
    return this.request<string[]>('getChildren', path, (done) => {
      if (watcher) this.client.getChildren(path, watcher, done);
      else this.client.getChildren(path, done);
    });
  }

  /** Reads a node and leaves a watch on it; resolves null if it does not exist (then no watch is left). */
  async watchNode(path: string, watcher: ZooKeeperWatcher): Promise<ZooKeeperStatLike | null> {
    return (await this.readNode(path, watcher))?.stat ?? null;
  }

  /**
   * A node's data and stat, leaving a watch on it when `watcher` is given; null if it does not exist (then no watch
   * is left: getData, unlike exists, sets none on a missing node).
   */
  async readNode(path: string, watcher?: ZooKeeperWatcher): Promise<NodeRead | null> {
    try {
      return await this.request<NodeRead | null>('getData', path, (done) => {
        const callback = (
          error: Error | null | undefined,
          data: Buffer | undefined,
          stat: ZooKeeperStatLike | undefined,
        ): void => done(error, stat ? { data: data ?? EMPTY, stat } : null);
        this.client.getData(path, watcher, callback);
      });
    } catch (error) {
      if (zkErrorCode(error) === ZK_ERROR.NO_NODE) return null;
      throw error;
    }
  }

  /** Replaces a node's data whatever its version; NoNode rejects with the client's error, like `remove`. */
  setData(path: string, data: Buffer): Promise<void> {
    const { client } = this;
    const setData = client.setData;
    if (typeof setData !== 'function') {
      return Promise.reject(
        new UnsupportedError('the ZooKeeper client passed in has no setData, which updateMetadata needs'),
      );
    }
    return this.request<void>('setData', path, (done) =>
      setData.call(client, path, data, -1, (error) => done(error, undefined)),
    );
  }

  /**
   * One atomic `multi`. A refusal (NoNode, NodeExists, NotEmpty on one operation) resolves with the failing
   * operation's index and code; only a failure without an answer rejects, with a `TransportError`.
   */
  multi(ops: readonly MultiOp[], onLate?: (outcome: MultiOutcome) => void): Promise<MultiOutcome> {
    const { client } = this;
    return this.request<MultiOutcome>(
      'multi',
      ops[ops.length - 1]?.path ?? '(empty)',
      (done) => {
        const transaction = client.transaction();
        for (const op of ops) {
          if (op.op === 'check') transaction.check(op.path, -1);
          else if (op.op === 'setData')
            (transaction.setData as NonNullable<typeof transaction.setData>)(op.path, op.data, -1);
          else if (op.op === 'remove')
            (transaction.remove as NonNullable<typeof transaction.remove>)(op.path, op.version ?? -1);
          else (transaction.create as NonNullable<typeof transaction.create>)(op.path, op.data, op.mode);
        }
        transaction.commit((error, results) => {
          // Synchronously, before the client handles another reply: the header zxid is this transaction's.
          if (!error) {
            const paths = (results ?? []).map((result) => result.path);
            done(null, { ok: true, zxid: replyZxid(client), paths });
            return;
          }
          if (Array.isArray(results)) {
            const failed = results.findIndex(
              (r) => r.err !== undefined && r.err !== 0 && r.err !== RUNTIME_INCONSISTENCY,
            );
            done(null, { ok: false, failed: failed < 0 ? undefined : failed, code: results[failed]?.err });
            return;
          }
          const code = zkErrorCode(error);
          // A server's refusal without per-op results is still an answer; a client-side code is not.
          if (isClientSideCode(code)) done(error, { ok: false, failed: undefined, code });
          else done(null, { ok: false, failed: undefined, code });
        });
      },
      onLate,
    );
  }

  /** One `multi` of version-less checks: every node exists, or the per-node results say which did not. */
  checkAll(paths: readonly string[]): Promise<CheckOutcome> {
    return this.request<CheckOutcome>('multi check', `(${paths.length} nodes)`, (done) => {
      const transaction = this.client.transaction();
      for (const path of paths) transaction.check(path, -1);
      transaction.commit((error, results) => {
        if (!error) done(null, { ok: true });
        // A failed multi still carries the server's per-op results: that is an answer, not a transport failure.
        else if (Array.isArray(results)) done(null, { ok: false, results });
        else done(error, { ok: true });
      });
    });
  }
}

/** The session id that owns an ephemeral node, in the form `Session.id` uses. */
export function ownerOf(stat: ZooKeeperStatLike): string {
  return stat.ephemeralOwner.toString('hex');
}

/** The node's creation zxid: the fencing token. */
export function czxidOf(stat: ZooKeeperStatLike): bigint {
  return stat.czxid.readBigUInt64BE(0);
}

/** True when a `TransportError` came from a dropped connection (the request's fate is unknown but settled). */
export function isConnectionLoss(error: unknown): boolean {
  return error instanceof TransportError && zkErrorCode(error.cause) === ZK_ERROR.CONNECTION_LOSS;
}

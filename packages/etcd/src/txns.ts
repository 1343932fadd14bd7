import type {
  CompareLike,
  KeyValueLike,
  KvClientLike,
  RequestOpLike,
  TxnRequestLike,
  TxnResponseLike,
} from './client-like.js';
import { isLeaseNotFound } from './errors.js';
import type { EtcdRequests, RequestOptions } from './requests.js';

/** Holds when no key lies in `[key, rangeEnd)`: a comparison over a range must hold for each key, so for none. */
export const isEmpty = (key: Buffer, rangeEnd: Buffer): CompareLike => ({
  key,
  range_end: rangeEnd,
  target: 'Create',
  result: 'Equal',
  create_revision: '0',
});

/** Holds while `key` is the very key created at `revision` (0: while it does not exist). */
export const createdAt = (key: Buffer, revision: bigint): CompareLike => ({
  key,
  target: 'Create',
  result: 'Equal',
  create_revision: String(revision),
});

export const keysOnly = (key: Buffer, rangeEnd?: Buffer): RequestOpLike => ({
  request_range: { key, ...(rangeEnd ? { range_end: rangeEnd } : {}), keys_only: true },
});

/** The first `limit` keys of a range in create-revision order: a queue's head (`Ascend`) or tail (`Descend`). */
export const byCreate = (
  directory: Buffer,
  rangeEnd: Buffer,
  order: 'Ascend' | 'Descend',
  limit: number,
) => ({
  key: directory,
  range_end: rangeEnd,
  sort_target: 'Create' as const,
  sort_order: order,
  limit,
  keys_only: true,
});

export const rangeKvs = (response: TxnResponseLike, index: number): readonly KeyValueLike[] =>
  response.responses[index]?.response_range?.kvs ?? [];

/** A delete inside a transaction, run only while `guard` holds (a nested transaction, etcd ≥ 3.3). */
export const guardedDelete = (key: Buffer, guard: CompareLike | undefined): RequestOpLike => ({
  request_txn: { compare: guard ? [guard] : [], success: [{ request_delete_range: { key } }] },
});

/** The answer of {@link Txns.deleteKey}: the guard held and a key was there to delete. */
export const deletedOne = (response: TxnResponseLike): boolean =>
  response.succeeded && response.responses[0]?.response_delete_range?.deleted !== '0';

/**
 * How long after a write failed without an answer from etcd (its deadline passed, its connection reset) it may still
 * be applied: etcd gives up on a proposal it could not commit after its own request timeout (7 s by default: 5 s and
 * two election timeouts), yet one already in raft may still commit in a leader change. No hard bound exists; this
 * one covers etcd's own timeout with room to spare.
 */
export const APPLY_HORIZON_MS = 10_000;

/** An acquire attempt whose writes may land after it gave up on them. */
export interface Writer {
  readonly request: { readonly signal: AbortSignal };
  /**
   * Until when (monotonic ms) a write of the attempt may still land: +∞ while one is unanswered (even one given up
   * on), `APPLY_HORIZON_MS` past a failure without an answer from etcd, and 0 once etcd answered.
   */
  writingUntil: number;
}

/** Whether a write of `claim` may still land after `now`: a delete of its keys now must be repeated later. */
export const mayStillLand = (claim: Writer, now: number): boolean => claim.writingUntil > now;

/**
 * The transactions one driver sends: each bounded (see `EtcdRequests`), each answer's store revision noted (a watch
 * started soon after begins there), a claim's writes marked in flight until etcd answers, keys deleted by guard.
 */
export class Txns {
  readonly requests: EtcdRequests;
  readonly #kv: KvClientLike;
  /** The newest store revision a response showed, and when. */
  #seen = { revision: 0n, at: Number.NEGATIVE_INFINITY };

  constructor(kv: KvClientLike, requests: EtcdRequests) {
    this.#kv = kv;
    this.requests = requests;
  }

  async run(
    what: string,
    txn: TxnRequestLike,
    options: RequestOptions<TxnResponseLike> = {},
  ): Promise<TxnResponseLike> {
    const response = await this.requests.run(what, (call) => this.#kv.txn(txn, call), options);
    this.#saw(response);
    return response;
  }

  /**
   * A write of the claim's keys, marked in flight until etcd answers, even after the claim gave up on it; a failure
   * that is no answer from etcd (a deadline, a reset) leaves it marked for `APPLY_HORIZON_MS` more, as a proposal
   * etcd received may be applied after its client stopped waiting. "Lease not found" is etcd refusing it.
   */
  async write(
    claim: Writer,
    what: string,
    txn: TxnRequestLike,
    onLate: (late: TxnResponseLike) => void,
  ): Promise<TxnResponseLike> {
    const answered = (): void => {
      claim.writingUntil = 0;
    };
    const failed = (error: unknown): void => {
      if (isLeaseNotFound(error)) answered();
      else claim.writingUntil = this.requests.clock.monotonic() + APPLY_HORIZON_MS;
    };
    claim.writingUntil = Number.POSITIVE_INFINITY;
    const response = await this.requests.run(
      what,
      (call) => {
        const sent = this.#kv.txn(txn, call);
        sent.then(answered, failed);
        return sent;
      },
      {
        signal: claim.request.signal,
        // Seen as any answer is: a key whose revision a late answer told us is older than any write sent after it.
        onLate: (late) => {
          this.#saw(late);
          onLate(late);
        },
      },
    );
    this.#saw(response);
    return response;
  }

  /**
   * Deletes a key, guarded by its create revision when known. Unguarded only for a key no other service can own
   * (keys carry this service's random id) whose revision a lost answer hid.
   */
  deleteKey(
    key: Buffer,
    revision: bigint | undefined,
    options: { readonly timeoutMs?: number; readonly signal?: AbortSignal } = {},
  ): Promise<TxnResponseLike> {
    const compare = revision === undefined ? [] : [createdAt(key, revision)];
    return this.run('release', { compare, success: [{ request_delete_range: { key } }] }, options);
  }

  /**
   * The newest store revision any answer showed, however long ago: a write sent after now is applied at a later one,
   * and every key whose create revision this driver learned has an earlier or equal one.
   */
  newestRevision(): bigint {
    return this.#seen.revision;
  }

  /** The revision to start a watch from, if a response showed one within the last second. */
  recentRevision(): bigint | undefined {
    const now = this.requests.clock.monotonic();
    return now - this.#seen.at < 1_000 ? this.#seen.revision + 1n : undefined;
  }

  #saw(response: TxnResponseLike): void {
    const revision = BigInt(response.header.revision);
    if (revision >= this.#seen.revision) this.#seen = { revision, at: this.requests.clock.monotonic() };
  }
}

/**
 * The small structural subset of the `etcd3` client this package calls: its raw gRPC clients (`kv`, `leaseClient`,
 * `watchClient`), not its high-level `Lease`/`Lock`/`Watcher` objects, whose keep-alive bookkeeping reports a lost
 * lease only after about twice the TTL (microsoft/etcd3 #57, #110, #155). An `Etcd3` instance fits as it is; tests
 * may wrap one to count requests.
 *
 * Int64 fields travel as decimal strings, as `etcd3` configures its protobuf loader (`longs: String`).
 */

/** gRPC call options; only the deadline is used. */
export interface CallOptionsLike {
  /** Absolute wall-clock time (ms since the epoch) after which gRPC cancels the call. */
  readonly deadline?: number;
}

export interface ResponseHeaderLike {
  readonly revision: string;
}

export interface KeyValueLike {
  readonly key: Buffer;
  readonly create_revision: string;
  readonly mod_revision: string;
  readonly lease: string;
  /** Absent when the range asked for keys only. */
  readonly value?: Buffer;
}

export interface RangeRequestLike {
  key?: Buffer;
  range_end?: Buffer;
  limit?: number;
  sort_order?: 'None' | 'Ascend' | 'Descend';
  sort_target?: 'Key' | 'Create';
  keys_only?: boolean;
  max_create_revision?: string;
  /** Only the `count` of the range, no keys. */
  count_only?: boolean;
}

export interface RangeResponseLike {
  readonly header: ResponseHeaderLike;
  readonly kvs: readonly KeyValueLike[];
  /** How many keys the range holds, whatever its `limit`. */
  readonly count?: string;
}

export interface PutRequestLike {
  key?: Buffer;
  value?: Buffer;
  lease?: string;
}

export interface DeleteRangeRequestLike {
  key?: Buffer;
}

export interface DeleteRangeResponseLike {
  readonly deleted: string;
}

export interface RequestOpLike {
  request_range?: RangeRequestLike;
  request_put?: PutRequestLike;
  request_delete_range?: DeleteRangeRequestLike;
  /** A nested transaction (etcd ≥ 3.3): its own comparisons decide its own branch. */
  request_txn?: TxnRequestLike;
}

export interface ResponseOpLike {
  readonly response_range?: RangeResponseLike | null;
  readonly response_delete_range?: DeleteRangeResponseLike | null;
  readonly response_txn?: TxnResponseLike | null;
}

export interface CompareLike {
  result?: 'Equal' | 'Greater';
  target?: 'Create' | 'Lease' | 'Value';
  key?: Buffer;
  /** With it, the comparison must hold for every key in `[key, range_end)` (vacuously true for none). */
  range_end?: Buffer;
  create_revision?: string;
  /** With target `Lease`: the id of the lease the key is attached to (etcd ≥ 3.3). */
  lease?: string;
  /** With target `Value`: the key's whole value (fails for a key that does not exist). */
  value?: Buffer;
}

export interface TxnRequestLike {
  compare?: CompareLike[];
  success?: RequestOpLike[];
  failure?: RequestOpLike[];
}

export interface TxnResponseLike {
  readonly header: ResponseHeaderLike;
  readonly succeeded: boolean;
  readonly responses: readonly ResponseOpLike[];
}

export interface LeaseGrantResponseLike {
  readonly ID: string;
  readonly TTL: string;
}

export interface LeaseKeepAliveResponseLike {
  readonly ID: string;
  readonly TTL: string;
}

export interface WatchCreateRequestLike {
  key?: Buffer;
  range_end?: Buffer;
  start_revision?: string;
  filters?: 'Noput'[];
  watch_id?: string;
}

export interface WatchRequestLike {
  create_request?: WatchCreateRequestLike;
  cancel_request?: { watch_id?: string };
}

export interface WatchEventLike {
  readonly type: 'Put' | 'Delete';
  readonly kv: KeyValueLike;
}

export interface WatchResponseLike {
  readonly header: ResponseHeaderLike;
  readonly watch_id: string;
  readonly created: boolean;
  readonly canceled: boolean;
  readonly compact_revision: string;
  readonly events: readonly WatchEventLike[];
}

/** A bidirectional gRPC stream as `etcd3` hands it out. */
export interface DuplexStreamLike<Req, Res> {
  write(item: Req): void;
  end(): void;
  cancel(): void;
  on(event: 'data', listener: (item: Res) => void): this;
  on(event: 'end', listener: () => void): this;
  on(event: 'error', listener: (error: Error) => void): this;
}

export interface KvClientLike {
  txn(request: TxnRequestLike, options?: CallOptionsLike): Promise<TxnResponseLike>;
}

export interface LeaseClientLike {
  leaseGrant(
    request: { TTL?: number; ID?: number },
    options?: CallOptionsLike,
  ): Promise<LeaseGrantResponseLike>;
  leaseRevoke(request: { ID?: string }, options?: CallOptionsLike): Promise<unknown>;
  leaseKeepAlive(
    options?: CallOptionsLike,
  ): Promise<DuplexStreamLike<{ ID?: string }, LeaseKeepAliveResponseLike>>;
}

export interface WatchClientLike {
  watch(options?: CallOptionsLike): Promise<DuplexStreamLike<WatchRequestLike, WatchResponseLike>>;
}

/** What `EtcdLockService` needs of an `etcd3` client (`new Etcd3(...)`). */
export interface EtcdClientLike {
  readonly kv: KvClientLike;
  readonly leaseClient: LeaseClientLike;
  readonly watchClient: WatchClientLike;
}

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

/** The header of every etcd answer. */
export interface ResponseHeaderLike {
  /** The store's revision when the request was served. */
  readonly revision: string;
}

/** A key as etcd returns it. */
export interface KeyValueLike {
  /** The key's bytes. */
  readonly key: Buffer;
  /** The revision that created the key; a key deleted and created again gets a new one. */
  readonly create_revision: string;
  /** The revision of the key's last change (for a delete event, the delete's). */
  readonly mod_revision: string;
  /** The id of the lease the key is attached to, `"0"` for none. */
  readonly lease: string;
  /** Absent when the range asked for keys only. */
  readonly value?: Buffer;
}

/** A read of one key, or of the keys in `[key, range_end)`. */
export interface RangeRequestLike {
  /** The key, or the range's first key. */
  key?: Buffer;
  /** The end of the range, exclusive; absent to read `key` alone. */
  range_end?: Buffer;
  /** The most keys returned; 0 or absent for all. */
  limit?: number;
  /** Order of the keys returned. */
  sort_order?: 'None' | 'Ascend' | 'Descend';
  /** What the keys are sorted by: the key itself or its creation revision. */
  sort_target?: 'Key' | 'Create';
  /** Return keys without their values. */
  keys_only?: boolean;
  /** Only keys created at or before this revision. */
  max_create_revision?: string;
  /** Only the `count` of the range, no keys. */
  count_only?: boolean;
}

/** The answer to a {@link RangeRequestLike}. */
export interface RangeResponseLike {
  /** The answer's header. */
  readonly header: ResponseHeaderLike;
  /** The keys read, in the requested order, at most `limit` of them. */
  readonly kvs: readonly KeyValueLike[];
  /** How many keys the range holds, whatever its `limit`. */
  readonly count?: string;
}

/** A write of one key. */
export interface PutRequestLike {
  /** The key. */
  key?: Buffer;
  /** The value to store. */
  value?: Buffer;
  /** The lease to attach the key to: the key is deleted when the lease ends. */
  lease?: string;
}

/** A delete of one key. */
export interface DeleteRangeRequestLike {
  /** The key. */
  key?: Buffer;
}

/** The answer to a {@link DeleteRangeRequestLike}. */
export interface DeleteRangeResponseLike {
  /** How many keys were deleted. */
  readonly deleted: string;
}

/** One operation of a transaction branch; exactly one field is set. */
export interface RequestOpLike {
  /** A read. */
  request_range?: RangeRequestLike;
  /** A write. */
  request_put?: PutRequestLike;
  /** A delete. */
  request_delete_range?: DeleteRangeRequestLike;
  /** A nested transaction (etcd ≥ 3.3): its own comparisons decide its own branch. */
  request_txn?: TxnRequestLike;
}

/** The answer to one {@link RequestOpLike}, in the field matching its kind (a put's answer is not read). */
export interface ResponseOpLike {
  /** The answer to a read. */
  readonly response_range?: RangeResponseLike | null;
  /** The answer to a delete. */
  readonly response_delete_range?: DeleteRangeResponseLike | null;
  /** The answer to a nested transaction. */
  readonly response_txn?: TxnResponseLike | null;
}

/** One comparison of a transaction's guard. */
export interface CompareLike {
  /** How the key's `target` must relate to the value given. */
  result?: 'Equal' | 'Greater';
  /** What of the key is compared: its creation revision, its lease or its value. */
  target?: 'Create' | 'Lease' | 'Value';
  /** The key compared. */
  key?: Buffer;
  /** With it, the comparison must hold for every key in `[key, range_end)` (vacuously true for none). */
  range_end?: Buffer;
  /** With target `Create`: the revision to compare with; `"0"` stands for a key that does not exist. */
  create_revision?: string;
  /** With target `Lease`: the id of the lease the key is attached to (etcd ≥ 3.3). */
  lease?: string;
  /** With target `Value`: the key's whole value (fails for a key that does not exist). */
  value?: Buffer;
}

/** An atomic transaction: if every comparison holds, the `success` operations run, else the `failure` ones. */
export interface TxnRequestLike {
  /** The guard; every comparison must hold for `success` to run. */
  compare?: CompareLike[];
  /** The operations run when the guard holds. */
  success?: RequestOpLike[];
  /** The operations run when it does not. */
  failure?: RequestOpLike[];
}

/** The answer to a {@link TxnRequestLike}. */
export interface TxnResponseLike {
  /** The answer's header; its revision is the transaction's own when it wrote. */
  readonly header: ResponseHeaderLike;
  /** Whether the guard held, so that `success` ran. */
  readonly succeeded: boolean;
  /** One answer per operation of the branch that ran, in order. */
  readonly responses: readonly ResponseOpLike[];
}

/** The answer to a lease grant. */
export interface LeaseGrantResponseLike {
  /** The new lease's id. */
  readonly ID: string;
  /** The TTL the server granted, in seconds. */
  readonly TTL: string;
}

/** One answer on a keep-alive stream. */
export interface LeaseKeepAliveResponseLike {
  /** The lease kept alive. */
  readonly ID: string;
  /** The lease's TTL from now, in seconds; 0 or less when the lease no longer exists. */
  readonly TTL: string;
}

/** Opens a watch on one key, or on the keys in `[key, range_end)`. */
export interface WatchCreateRequestLike {
  /** The key, or the range's first key. */
  key?: Buffer;
  /** The end of the range, exclusive; absent to watch `key` alone. */
  range_end?: Buffer;
  /** Report changes from this revision on (inclusive), replaying those etcd still keeps; absent: from now. */
  start_revision?: string;
  /** `Noput` leaves puts out: only deletes are reported. */
  filters?: 'Noput'[];
  /** The id the service chooses for the watch; answers and cancels carry it. */
  watch_id?: string;
}

/** One message on a watch stream: open a watch or cancel one. */
export interface WatchRequestLike {
  /** Opens a watch. */
  create_request?: WatchCreateRequestLike;
  /** Cancels a watch. */
  cancel_request?: {
    /** The id of the watch to cancel. */
    watch_id?: string;
  };
}

/** One change a watch reports. */
export interface WatchEventLike {
  /** Whether the key was written or deleted. */
  readonly type: 'Put' | 'Delete';
  /** The key after the change; for a delete, its key and the delete's `mod_revision`. */
  readonly kv: KeyValueLike;
}

/** One message from a watch stream. */
export interface WatchResponseLike {
  /** The answer's header. */
  readonly header: ResponseHeaderLike;
  /** The watch it is about. */
  readonly watch_id: string;
  /** The answer to a create request: the watch is in place. */
  readonly created: boolean;
  /** The watch ended: cancelled, refused, or its start revision was compacted away. */
  readonly canceled: boolean;
  /** Not `"0"`: the oldest revision etcd still keeps, when the start revision was compacted away. */
  readonly compact_revision: string;
  /** Why etcd cancelled the watch (`etcdserver: permission denied`), if it said. */
  readonly cancel_reason?: string;
  /** The changes, oldest first. */
  readonly events: readonly WatchEventLike[];
}

/** A bidirectional gRPC stream as `etcd3` hands it out. */
export interface DuplexStreamLike<Req, Res> {
  /** Sends one message. */
  write(item: Req): void;
  /** Half-closes the stream: no more messages from this side. */
  end(): void;
  /** Cancels the call; the stream then ends with an error. */
  cancel(): void;
  /** Each message from the server. */
  on(event: 'data', listener: (item: Res) => void): this;
  /** The server ended the stream. */
  on(event: 'end', listener: () => void): this;
  /** The stream failed. */
  on(event: 'error', listener: (error: Error) => void): this;
}

/** The KV service of `etcd3`'s raw gRPC client; the service only runs transactions. */
export interface KvClientLike {
  /** Runs one transaction; rejects on a gRPC error, including a passed `options.deadline`. */
  txn(request: TxnRequestLike, options?: CallOptionsLike): Promise<TxnResponseLike>;
}

/** The lease service of `etcd3`'s raw gRPC client. */
export interface LeaseClientLike {
  /** Grants a lease of `TTL` seconds (the server may grant more); `ID` 0 or absent lets the server choose it. */
  leaseGrant(
    request: { TTL?: number; ID?: number },
    options?: CallOptionsLike,
  ): Promise<LeaseGrantResponseLike>;
  /** Ends a lease at once, deleting every key attached to it. */
  leaseRevoke(request: { ID?: string }, options?: CallOptionsLike): Promise<unknown>;
  /** Opens a keep-alive stream: each message sent refreshes that lease, and the server answers each one. */
  leaseKeepAlive(options?: CallOptionsLike): Promise<
    DuplexStreamLike<
      {
        /** The lease to refresh. */
        ID?: string;
      },
      LeaseKeepAliveResponseLike
    >
  >;
}

/** The watch service of `etcd3`'s raw gRPC client. */
export interface WatchClientLike {
  /** Opens a watch stream, on which many watches can be created and cancelled. */
  watch(options?: CallOptionsLike): Promise<DuplexStreamLike<WatchRequestLike, WatchResponseLike>>;
}

/** What `EtcdLockService` needs of an `etcd3` client (`new Etcd3(...)`). */
export interface EtcdClientLike {
  /** `etcd3`'s raw KV client. */
  readonly kv: KvClientLike;
  /** `etcd3`'s raw lease client. */
  readonly leaseClient: LeaseClientLike;
  /** `etcd3`'s raw watch client. */
  readonly watchClient: WatchClientLike;
}

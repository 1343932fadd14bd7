export type {
  CallOptionsLike,
  CompareLike,
  DeleteRangeRequestLike,
  DeleteRangeResponseLike,
  DuplexStreamLike,
  EtcdClientLike,
  KeyValueLike,
  KvClientLike,
  LeaseClientLike,
  LeaseGrantResponseLike,
  LeaseKeepAliveResponseLike,
  PutRequestLike,
  RangeRequestLike,
  RangeResponseLike,
  RequestOpLike,
  ResponseHeaderLike,
  ResponseOpLike,
  TxnRequestLike,
  TxnResponseLike,
  WatchClientLike,
  WatchCreateRequestLike,
  WatchEventLike,
  WatchRequestLike,
  WatchResponseLike,
} from './client-like.js';
export { EtcdLockService } from './etcd-lock-service.js';
export { escapeName, unescapeName } from './keys.js';
export type { EtcdLockServiceOptions, EtcdSessionOptions } from './options.js';

export type {
  CallOptionsLike,
  DuplexStreamLike,
  EtcdClientLike,
  KvClientLike,
  LeaseClientLike,
  WatchClientLike,
} from './client-like.js';
export { EtcdLockService } from './etcd-lock-service.js';
export { escapeName, unescapeName } from './keys.js';
export type { EtcdLockServiceOptions, EtcdSessionOptions } from './options.js';

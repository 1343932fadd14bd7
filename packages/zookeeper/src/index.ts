export type {
  ZooKeeperAclLike,
  ZooKeeperCallback,
  ZooKeeperClientLike,
  ZooKeeperOpResultLike,
  ZooKeeperStateLike,
  ZooKeeperStatLike,
  ZooKeeperTransactionLike,
  ZooKeeperWatcher,
} from './client-like.js';
export { ZooKeeperServiceClosedError, ZooKeeperSessionError } from './errors.js';
export { decodeLockName, encodeLockName, lockParentPath } from './keys.js';
export type {
  ZooKeeperClientOptions,
  ZooKeeperConnectionOptions,
  ZooKeeperLockServiceBaseOptions,
  ZooKeeperLockServiceOptions,
} from './options.js';
export { ZooKeeperLockService } from './zookeeper-lock-service.js';

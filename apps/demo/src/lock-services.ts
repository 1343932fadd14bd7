import type { MessagePort } from 'node:worker_threads';
import type { LockSpec } from './backends.js';
import type { ConnectedService } from './lock/connected-service.js';
import { PortLockService } from './port-lock-service.js';

export type { ConnectedService } from './lock/connected-service.js';

/**
 * Connects to the lock service `spec` names. Real backends are loaded on demand, so the embedded default needs
 * none of their drivers; each connection is made by the worker itself, so a frozen worker's connection freezes too.
 */
export async function connectLockService(
  spec: LockSpec,
  ttlMs: number,
  port?: MessagePort,
): Promise<ConnectedService> {
  switch (spec.kind) {
    case 'memory': {
      if (!port) throw new Error('the in-memory lock service needs a port to the main thread');
      const service = new PortLockService(port);
      return { service, close: async () => service.close() };
    }
    case 'redis':
      return (await import('./lock/redis.js')).connectRedis(spec.url, redisLabel(spec.url));
    case 'etcd':
      return (await import('./lock/etcd.js')).connectEtcd(spec.hosts);
    case 'zookeeper':
      return (await import('./lock/zookeeper.js')).connectZooKeeper(spec.connectionString, ttlMs);
    case 'postgres':
      return (await import('./lock/postgres.js')).connectPostgres(spec.url);
  }
}

/** Checks, from the main thread, that the backend answers; fails fast with one line when it does not. */
export async function probeLockService(spec: LockSpec, ttlMs: number): Promise<void> {
  if (spec.kind === 'memory') return;
  if (spec.kind === 'zookeeper') {
    // Opening a session is the whole check; the adapter would also create its lock root.
    await (await import('./lock/zookeeper.js')).probeZooKeeper(spec.connectionString);
    return;
  }
  const connected = await connectLockService(spec, ttlMs);
  await connected.close();
}

/** host:port of a Redis URL, never its password. */
function redisLabel(url: string): string {
  try {
    const u = new URL(url);
    return `${u.hostname}:${u.port || '6379'}`;
  } catch {
    return 'the given URL';
  }
}

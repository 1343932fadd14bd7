import { createRequire } from 'node:module';
import { ZooKeeperLockService } from '@dlock/zookeeper';
import type { ConnectedService } from './connected-service.js';
import { CONNECT_MS, within } from './deadline.js';

/** The little of node-zookeeper-client (CommonJS, untyped) the probe calls. */
interface ProbeClient {
  connect(): void;
  close(): void;
  once(event: 'connected', listener: () => void): unknown;
}
const zookeeper = createRequire(import.meta.url)('node-zookeeper-client') as {
  createClient(connectionString: string, options: { sessionTimeout: number; retries: number }): ProbeClient;
};

/** Checks that a ZooKeeper ensemble answers by opening (and closing) one session. */
export async function probeZooKeeper(connectionString: string): Promise<void> {
  const client = zookeeper.createClient(connectionString, { sessionTimeout: 4_000, retries: 0 });
  const connected = new Promise<void>((resolve) => client.once('connected', () => resolve()));
  client.connect();
  try {
    await within(connected, CONNECT_MS, `--lock: cannot reach ZooKeeper at ${connectionString}`, () =>
      client.close(),
    );
  } finally {
    client.close();
  }
}

/**
 * The adapter with its own client. A ZooKeeper lease is the session: the lock's TTL is the session timeout, so
 * the demo's TTL is asked for as the session timeout (the server clamps it to 2–20 ticks).
 */
export async function connectZooKeeper(connectionString: string, ttlMs: number): Promise<ConnectedService> {
  await probeZooKeeper(connectionString);
  const service = new ZooKeeperLockService({ connectionString, sessionTimeoutMs: ttlMs });
  return { service, close: () => service.close() };
}

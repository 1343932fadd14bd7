import { LockClient } from '@dlock/core';
import { startTcpProxy, uniqueName, ZK_CONNECT } from '@dlock/test-utils';
import { afterEach, describe, expect, it } from 'vitest';
import { ZooKeeperLockService } from '../src/index.js';

// node-zookeeper-client bounds only the TCP connect, not the handshake after it: a connection that a server (or a
// path to it) accepts but never answers waits for the ConnectResponse for ever, and the client neither retries nor
// moves on to another member. A service opening a session on such a connection must drop it, or every later call
// fails with "could not connect" long after the network is back.
const ROOT = '/dlock-test/stuck-handshake';
const SESSION_MS = 3_000; // a 1 s request deadline: the service waits 2 s for a session per try
const cleanups: (() => Promise<unknown> | unknown)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe('a session opened on a connection whose handshake is never answered', () => {
  it('a permit and a leadership are granted once the network answers again, within their waitMs', {
    timeout: 30_000,
  }, async () => {
    const proxy = await startTcpProxy({ targetPort: Number(ZK_CONNECT.split(':')[1]) });
    cleanups.push(() => proxy.close());
    // Accepted, then silent: the client's ConnectRequest is lost, as with a member that hangs after accepting.
    proxy.mode = 'blackhole';
    const service = new ZooKeeperLockService({
      connectionString: `127.0.0.1:${proxy.port}`,
      root: ROOT,
      sessionTimeoutMs: SESSION_MS,
    });
    cleanups.push(() => service.close());
    const client = new LockClient(service);
    cleanups.push(() => client.close());
    const startedAt = Date.now();
    const permit = client
      .semaphore(uniqueName('sem'), { permits: 1, ttlMs: SESSION_MS })
      .acquire({ waitMs: 9_000 })
      .then(
        (held) => ({ ok: true as const, held, ms: Date.now() - startedAt }),
        (error: unknown) => ({ ok: false as const, error: String(error), ms: Date.now() - startedAt }),
      );
    const leadership = client
      .election(uniqueName('election'), { ttlMs: SESSION_MS })
      .campaign({ value: 'a', waitMs: 9_000 })
      .then(
        (held) => ({ ok: true as const, held, ms: Date.now() - startedAt }),
        (error: unknown) => ({ ok: false as const, error: String(error), ms: Date.now() - startedAt }),
      );
    await new Promise((resolve) => setTimeout(resolve, 2_500));
    proxy.mode = 'pass';

    const [gotPermit, gotLeadership] = await Promise.all([permit, leadership]);
    expect(gotPermit).toMatchObject({ ok: true });
    expect(gotLeadership).toMatchObject({ ok: true });
    // Granted within the waitMs, a few seconds after the network answered.
    expect(gotPermit.ms).toBeLessThan(9_000);
    expect(gotLeadership.ms).toBeLessThan(9_000);
    if (gotPermit.ok) await gotPermit.held.release();
    if (gotLeadership.ok) await gotLeadership.held.resign();
  });
});

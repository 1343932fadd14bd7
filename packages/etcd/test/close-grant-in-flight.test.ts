import { performance } from 'node:perf_hooks';
import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT, runBuiltPackage, startTcpProxy, type TcpProxy } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { EtcdClientLike } from '../src/client-like.js';
import { lockName, TEST_PREFIX, waitUntil } from './helpers.js';

// close() promises to settle within one request timeout. A session lease grant in flight when it is called is
// revoked when its answer comes; that revoke must not add a second request timeout to close().

const REQUEST_TIMEOUT_MS = 1_000;
// Each direction: a round trip costs about 700 ms, so a grant answered late and a revoke after it take 1,400 ms.
const DELAY_MS = 350;

const direct = new Etcd3({ hosts: ETCD_ENDPOINT });
afterAll(() => direct.close());
const teardown: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const fn of teardown.splice(0).reverse()) await Promise.resolve(fn()).catch(() => {});
});

/** A client through a loopback proxy that records the ids of the leases it was granted. */
async function proxied(): Promise<{ proxy: TcpProxy; client: EtcdClientLike; granted: string[] }> {
  const proxy = await startTcpProxy({ targetPort: Number(new URL(ETCD_ENDPOINT).port) });
  teardown.push(() => proxy.close());
  const etcd = new Etcd3({ hosts: `127.0.0.1:${proxy.port}` });
  teardown.push(() => etcd.close());
  // The connection is up before the network slows down.
  await etcd.get('warm-up');
  const granted: string[] = [];
  const client: EtcdClientLike = {
    kv: etcd.kv,
    watchClient: etcd.watchClient,
    leaseClient: {
      leaseGrant: async (request, options) => {
        const response = await etcd.leaseClient.leaseGrant(request, options);
        granted.push(String(response.ID));
        return response;
      },
      leaseRevoke: (request, options) => etcd.leaseClient.leaseRevoke(request, options),
      leaseKeepAlive: (options) => etcd.leaseClient.leaseKeepAlive(options),
    },
  };
  return { proxy, client, granted };
}

async function leaseGone(id: string): Promise<boolean> {
  const answer = await direct.leaseClient.leaseTimeToLive({ ID: id });
  return Number(answer.TTL) <= 0;
}

/**
 * Starts a session-mode acquire of `name` through `client` with the network slowed by DELAY_MS each way, and
 * closes the service 50 ms later, once the lease grant went out. Resolves with how long close() took, after the
 * acquire settled too.
 */
async function closeDuringGrant(
  client: EtcdClientLike,
  proxy: TcpProxy,
  name: string,
  ttlMs: number,
): Promise<number> {
  const service = new EtcdLockService({
    client,
    keyPrefix: TEST_PREFIX,
    session: true,
    requestTimeoutMs: REQUEST_TIMEOUT_MS,
  });
  proxy.delayMs = DELAY_MS;
  const acquiring = service
    .acquire({
      name: lockName(name),
      ownerId: 'close-grant',
      ttlMs,
      waitMs: 0,
      signal: new AbortController().signal,
    })
    .catch((error: unknown) => error);
  // Let the grant go out before closing.
  await new Promise((resolve) => setTimeout(resolve, 50));
  const startedAt = performance.now();
  await service.close();
  const closeMs = performance.now() - startedAt;
  await acquiring;
  return closeMs;
}

describe('close() with a session lease grant in flight', () => {
  it('settles within one request timeout on a slow network, and the late grant is revoked after', {
    timeout: 15_000,
  }, async () => {
    const { proxy, client, granted } = await proxied();
    const closeMs = await closeDuringGrant(client, proxy, 'close-grant', 5_000);
    expect(closeMs).toBeLessThan(REQUEST_TIMEOUT_MS + 250);
    // The grant answered while close() ran, and was revoked then rather than left for its TTL.
    expect(await waitUntil(() => granted.length === 1, 3_000)).toBe(true);
    const id = granted[0] ?? '';
    expect(await waitUntil(() => leaseGone(id), 3_000)).toBe(true);
  });

  it('settles within one request timeout when the network dies once the grant is answered', {
    timeout: 15_000,
  }, async () => {
    const { proxy, client, granted } = await proxied();
    const watched: EtcdClientLike = {
      ...client,
      leaseClient: {
        ...client.leaseClient,
        leaseGrant: async (request, options) => {
          const response = await client.leaseClient.leaseGrant(request, options);
          // Nothing gets through after this answer: the revoke close() sends for it goes nowhere.
          proxy.mode = 'blackhole';
          return response;
        },
      },
    };
    const closeMs = await closeDuringGrant(watched, proxy, 'close-grant-dead', 2_000);
    expect(granted).toHaveLength(1);
    expect(closeMs).toBeLessThan(REQUEST_TIMEOUT_MS + 250);
  });

  it('leaves nothing that keeps the process alive (built package, child process)', {
    timeout: 20_000,
  }, async () => {
    const result = await runBuiltPackage(
      new URL('..', import.meta.url),
      `
        import { EtcdLockService } from '@dlock/etcd';
        import { startTcpProxy } from '@dlock/test-utils';
        import { Etcd3 } from 'etcd3';
        const proxy = await startTcpProxy({ targetPort: Number(new URL(process.env.ETCD).port) });
        const etcd = new Etcd3({ hosts: '127.0.0.1:' + proxy.port });
        await etcd.get('warm-up');
        const service = new EtcdLockService({ client: etcd, session: true, requestTimeoutMs: ${REQUEST_TIMEOUT_MS} });
        proxy.delayMs = ${DELAY_MS};
        const acquiring = service
          .acquire({ name: 'close-grant:' + process.pid, ownerId: 'x', ttlMs: 5000, waitMs: 0, signal: new AbortController().signal })
          .catch(() => {});
        await new Promise((resolve) => setTimeout(resolve, 50));
        const startedAt = performance.now();
        await service.close();
        console.log('closed', performance.now() - startedAt < ${REQUEST_TIMEOUT_MS + 250});
        await acquiring;
        etcd.close();
        await proxy.close();
      `,
      { timeoutMs: 15_000, env: { ETCD: ETCD_ENDPOINT } },
    );
    expect(result.stderr).toBe('');
    expect(result.stdout.trim()).toBe('closed true');
    expect(result.code).toBe(0);
    expect(result.ms).toBeLessThan(8_000);
  });
});

import { LockClient } from '@dlock/core';
import { startTcpProxy } from '@dlock/test-utils';
import { createClient } from 'redis';
import { createClient as createClient6 } from 'redis6';
import { afterEach, describe, expect, it } from 'vitest';
import { RedisLockService } from '../src/index.js';
import { sleep } from './helpers.js';

// The subscriber connection a service makes for itself (a duplicate of the user's client), given up because its first
// SUBSCRIBE failed: node-redis may still be connecting it after destroy() (a reconnect already under way is not
// stopped), and an 'error' event of a node-redis client with no listener crashes the process. Seen in the soak
// (connections reset every 200 ms): "Unhandled 'error' event ... read ECONNRESET", the worker exits with code 1.
const cleanups: (() => Promise<void>)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
});

/** The parts of a node-redis client this test watches on the service's own subscriber. */
interface Watched {
  subscribe(...args: unknown[]): Promise<unknown>;
  emit(event: string | symbol, ...args: unknown[]): boolean;
  listenerCount(event: string): number;
  destroy(): void;
}

for (const [label, make] of [
  ['node-redis 5', createClient],
  ['node-redis 6', createClient6],
] as const) {
  describe(label, () => {
    it('a subscriber given up while node-redis still reconnects it never emits an unheard error', async () => {
      const proxy = await startTcpProxy({ targetPort: 6379 });
      const client = (make as typeof createClient)({
        url: `redis://127.0.0.1:${proxy.port}`,
        socket: { reconnectStrategy: () => 20 },
      });
      client.on('error', () => {});
      await client.connect();
      const service = new RedisLockService({ client, requestTimeoutMs: 2_000 });
      const locks = new LockClient(service, { operationTimeoutMs: 2_000 });
      cleanups.push(async () => {
        proxy.mode = 'pass';
        await locks.close();
        await service.close();
        client.destroy();
        await proxy.close();
      });
      let destroyed = false;
      let errorsAfterDestroy = 0;
      let unheard = 0;
      const duplicate = client.duplicate.bind(client);
      client.duplicate = ((...args: Parameters<typeof duplicate>) => {
        const made = duplicate(...args);
        const sub = made as unknown as Watched;
        const subscribe = sub.subscribe.bind(sub);
        // The SUBSCRIBE is written and gets no reply; then its connection drops and the server refuses new ones:
        // the SUBSCRIBE fails (the service gives the subscriber up) while node-redis reconnects.
        sub.subscribe = (...subscribeArgs: unknown[]) => {
          proxy.mode = 'blackhole';
          const subscribed = subscribe(...subscribeArgs);
          setTimeout(() => {
            proxy.mode = 'refuse';
            proxy.resetAll();
          }, 50);
          return subscribed;
        };
        const destroy = sub.destroy.bind(sub);
        sub.destroy = () => {
          destroyed = true;
          destroy();
        };
        const emit = sub.emit.bind(sub);
        sub.emit = (event: string | symbol, ...emitArgs: unknown[]) => {
          if (event === 'error' && destroyed) {
            errorsAfterDestroy += 1;
            // Not passed on without a listener: that would crash this test process instead of failing the test.
            if (sub.listenerCount('error') === 0) {
              unheard += 1;
              return false;
            }
          }
          return emit(event, ...emitArgs);
        };
        return made;
      }) as typeof client.duplicate;

      const name = `node-redis-subscriber-reset-${label}-${Date.now()}`;
      const held = await locks.tryAcquire(name, { ttlMs: 5_000 });
      expect(held).not.toBeNull();
      // A waiter starts the service's subscriber.
      const waiter = locks.acquire(name, { ttlMs: 5_000, waitMs: 1_000 }).catch((error: unknown) => error);
      await waiter;
      // node-redis's reconnect to the refusing proxy reports its failures for a while after the destroy.
      const until = Date.now() + 2_000;
      while (errorsAfterDestroy === 0 && Date.now() < until) await sleep(20);
      proxy.mode = 'pass';
      expect(destroyed).toBe(true);
      expect(errorsAfterDestroy).toBeGreaterThan(0);
      // Before the fix: the service took its 'error' listener off before destroying, and each was unheard.
      expect(unheard).toBe(0);
    });
  });
}

import { getEventListeners } from 'node:events';
import { LockClient, TransportError } from '@dlock/core';
import { startTcpProxy } from '@dlock/test-utils';
import { createClient } from 'redis';
import { createClient as createClient6 } from 'redis6';
import { afterEach, describe, expect, it } from 'vitest';
import { lockKeys, RedisLockService } from '../src/index.js';
import { connect, type Redis, sleep } from './helpers.js';

// node-redis connections that drop while commands wait to be written, on the real server behind a proxy that can
// stop reading (a stalled peer): what node-redis writes after the reconnect must not outlive what the service told
// its callers.
const cleanups: (() => Promise<void>)[] = [];

const UNSENT = 'dropped before the command was written';

/** The messages of `error` and of its causes, outermost first. */
function messages(error: unknown): string[] {
  const found: string[] = [];
  for (let each = error; each instanceof Error && found.length < 10; each = each.cause)
    found.push(each.message);
  return found;
}

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
});

for (const [label, make] of [
  ['node-redis 5', createClient],
  ['node-redis 6', createClient6],
] as const) {
  describe(label, () => {
    // node-redis writes a command in the next turn of the event loop, and while its socket needs draining, one per
    // turn: the others wait in its write queue, which it keeps across a reconnect and writes once connected again.
    // The service answers such a call at its bound and undoes what it may have done until TTL + wait has passed; a
    // command written after that must not run.
    it('acquires still waiting to be written when the connection drops never run after the reconnect', async () => {
      const admin: Redis = await connect('redis://127.0.0.1:6379');
      const proxy = await startTcpProxy({ targetPort: 6379 });
      const client = (make as typeof createClient)({
        url: `redis://127.0.0.1:${proxy.port}`,
        socket: { reconnectStrategy: () => 50 },
      });
      client.on('error', () => {});
      await client.connect();
      const service = new RedisLockService({ client, requestTimeoutMs: 300 });
      const locks = new LockClient(service, { operationTimeoutMs: 300 });
      cleanups.push(async () => {
        await locks.close();
        await service.close();
        client.destroy();
        await proxy.close();
        admin.destroy();
      });
      const name = `node-redis-late-acquire-${label}-${Date.now()}`;
      // The scripts are cached on the server, so that a command written later would run as it is.
      await (await locks.tryAcquire(`${name}-warm`, { ttlMs: 1_000 }))?.release();
      // The proxy stops reading, as a stalled server would: node-redis's writes then pile up in its socket.
      proxy.mode = 'stall';
      // More than the loopback socket buffers take: the rest waits in the socket, which then needs draining.
      client.sendCommand(['SET', `${name}-filler`, 'x'.repeat(64 << 20)]).catch(() => {});
      await new Promise((resolve) => setImmediate(resolve));
      await new Promise((resolve) => setImmediate(resolve));
      const names = [0, 1, 2, 3].map((i) => `${name}-${i}`);
      const attempts = names.map((each) => locks.tryAcquire(each, { ttlMs: 500 }).catch((e: unknown) => e));
      await sleep(50);
      proxy.mode = 'refuse';
      proxy.resetAll();
      const outcomes = await Promise.all(attempts);
      for (const outcome of outcomes) expect(outcome).toBeInstanceOf(TransportError);
      // Those still queued say why (before the fix: node-redis's own "The command was aborted", not a dlock error).
      const unsent = outcomes.filter((outcome) => messages(outcome).some((text) => text.includes(UNSENT)));
      expect(unsent.length).toBeGreaterThan(0);
      for (const outcome of outcomes) expect(messages(outcome)[0]).not.toContain('The command was aborted');
      // Longer than TTL + wait: the owner-checked clean-up has given up by the time the server is back.
      await sleep(1_500);
      const ready = new Promise((resolve) => client.once('ready', resolve));
      proxy.mode = 'pass';
      await ready;
      // Whatever node-redis kept is written before this command and answered before it.
      await client.ping();
      const held = [];
      for (const each of names)
        if ((await admin.get(lockKeys('dlock:', each).lock)) !== null) held.push(each);
      // Before the fix: the acquires still queued ran after the reconnect, each a grant nobody holds for its TTL.
      expect(held).toEqual([]);
    });

    // node-redis adds one abort listener per queued command to the signal it is given, and Node checks a new
    // listener against every one already there: a burst of n commands on one shared signal cost O(n^2).
    it('a burst of 200 commands puts at most one abort listener on any signal', async () => {
      const client = await (make as typeof createClient)({ url: 'redis://127.0.0.1:6379' })
        .on('error', () => {})
        .connect();
      const service = new RedisLockService({ client });
      const locks = new LockClient(service);
      cleanups.push(async () => {
        await locks.close();
        await service.close();
        client.destroy();
      });
      const signals = new Set<AbortSignal>();
      let most = 0;
      const sendCommand = client.sendCommand.bind(client);
      client.sendCommand = ((
        args: Parameters<typeof sendCommand>[0],
        options?: Parameters<typeof sendCommand>[1],
      ) => {
        const sent = sendCommand(args, options);
        const signal = options?.abortSignal;
        if (signal !== undefined) {
          signals.add(signal);
          most = Math.max(most, getEventListeners(signal, 'abort').length);
        }
        return sent;
      }) as typeof client.sendCommand;
      const name = `node-redis-burst-${label}-${Date.now()}`;
      const held = await Promise.all(
        Array.from({ length: 200 }, (_, i) => locks.tryAcquire(`${name}-${i}`, { ttlMs: 5_000 })),
      );
      expect(held.filter((lock) => lock !== null)).toHaveLength(200);
      // Every command went with a signal of the adapter's (none of these calls has one of its own).
      expect(signals.size).toBeGreaterThan(0);
      // Before the fix: 200, all on the client's one signal.
      expect(most).toBe(1);
      for (const lock of held) await lock?.release();
    });
  });
}

import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { LockClient, TransportError } from '@dlock/core';
import { REDIS_URL, startTcpProxy, type TcpProxy } from '@dlock/test-utils';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type RedisClientLike, RedisLockService } from '../src/index.js';
import { FAMILY_PAIR } from './clients.js';
import { connect, disconnect, SideRedis, sleep } from './helpers.js';
import { subjectOn } from './semaphore-cases.js';

// Faults around permits: a holder process frozen past its TTL, a holder process killed, an acquire whose reply is
// lost. Holders that must be frozen or killed run in child processes on the built package (test/fixtures).
const FIXTURE = fileURLToPath(new URL('./fixtures/permit-process.mjs', import.meta.url));
const children: ChildProcess[] = [];
const cleanups: (() => Promise<void>)[] = [];

afterEach(async () => {
  for (const child of children.splice(0)) {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGCONT');
      child.kill('SIGKILL');
    }
  }
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A child process holding `count` permits of `name` (node-redis 5 on the shared server); its output as lines. */
function holderProcess(name: string, permits: number, ttlMs: number, count: number) {
  const child = spawn(
    process.execPath,
    [FIXTURE, REDIS_URL, name, String(permits), String(ttlMs), String(count)],
    {
      cwd: fileURLToPath(new URL('..', import.meta.url)),
    },
  );
  children.push(child);
  let output = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
  child.stderr?.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
  /** Resolves with the matches of `pattern` once it has matched `times` lines (at most 10 s). */
  const lines = async (pattern: RegExp, times: number): Promise<RegExpMatchArray[]> => {
    const until = performance.now() + 10_000;
    for (;;) {
      const matches = output
        .split('\n')
        .map((line) => line.match(pattern))
        .filter((m): m is RegExpMatchArray => m !== null);
      if (matches.length >= times) return matches;
      if (performance.now() > until || child.exitCode !== null)
        throw new Error(`holder process said: ${output}`);
      await sleep(10);
    }
  };
  return {
    child,
    held: async () =>
      (await lines(/^held (\d+) (\d+)$/, count)).map((m) => ({
        slot: Number(m[1]),
        token: BigInt(m[2] as string),
      })),
    lines,
  };
}

function clientOn(service: RedisLockService, operationTimeoutMs = 1_000): LockClient {
  const client = new LockClient(service, { operationTimeoutMs });
  cleanups.push(() => client.close());
  return client;
}

describe('permit holders in another process', () => {
  let subject: ReturnType<typeof subjectOn>;
  beforeAll(async () => {
    subject = subjectOn(await (FAMILY_PAIR[0] as (typeof FAMILY_PAIR)[number]).connect(REDIS_URL), 'dlock:');
  });
  afterAll(async () => {
    await subject?.close();
  });

  it('a holder frozen (SIGSTOP) past its TTL: its slot goes to the waiter with a higher token; its release then rejects LockLostError', async () => {
    const name = `frozen-${randomBytes(4).toString('hex')}`;
    const holder = holderProcess(name, 1, 600, 1);
    const [held] = await holder.held();
    const waiting = clientOn(subject.service)
      .semaphore(name, { permits: 1, ttlMs: 5_000 })
      .acquire({ waitMs: 5_000 });
    await sleep(100);
    holder.child.kill('SIGSTOP');
    const next = await waiting;
    expect(next.slot).toBe(held?.slot);
    expect(next.fencingToken).toBeGreaterThan(held?.token as bigint);
    holder.child.kill('SIGCONT');
    holder.child.stdin?.write('release\n');
    const [outcome] = await holder.lines(/^release-failed (\S+)$|^released$/, 1);
    expect(outcome?.[0]).toBe('release-failed LOCK_LOST');
    expect(next.isHeld()).toBe(true);
    expect(await clientOn(subject.service).semaphore(name, { permits: 1, ttlMs: 5_000 }).available()).toBe(0);
    await next.release();
  });

  it("a killed process's permits return within TTL + 300 ms, to the queued waiters", async () => {
    const name = `killed-${randomBytes(4).toString('hex')}`;
    const ttlMs = 1_000;
    const holder = holderProcess(name, 2, ttlMs, 2);
    const held = await holder.held();
    const sem = () => clientOn(subject.service).semaphore(name, { permits: 2, ttlMs: 5_000 });
    const waiting = [sem().acquire({ waitMs: 5_000 }), sem().acquire({ waitMs: 5_000 })];
    await sleep(100);
    const killedAt = performance.now();
    holder.child.kill('SIGKILL');
    const permits = await Promise.all(waiting);
    const after = performance.now() - killedAt;
    console.log(`permits of a killed process back after ${Math.round(after)} ms (TTL ${ttlMs} ms)`);
    expect(after).toBeLessThanOrEqual(ttlMs + 300);
    expect(permits.map((p) => p.slot).sort()).toEqual(held.map((h) => h.slot).sort());
    for (const permit of permits) {
      const before = held.find((h) => h.slot === permit.slot);
      expect(permit.fencingToken).toBeGreaterThan(before?.token as bigint);
    }
    await Promise.all(permits.map((p) => p.release()));
  });
});

describe('an acquire whose reply is lost', () => {
  let proxy: TcpProxy;
  beforeAll(async () => {
    proxy = await startTcpProxy({ targetPort: Number(new URL(REDIS_URL).port || 6379) });
  });
  afterAll(async () => {
    await proxy?.close();
  });

  const OPERATION_TIMEOUT_MS = 1_000;
  for (const family of FAMILY_PAIR) {
    it(`(${family.label}) leaves no orphan permit beyond operationTimeoutMs + 1 s`, async () => {
      const name = `lost-${randomBytes(4).toString('hex')}`;
      const cut = await family.connect(`redis://127.0.0.1:${proxy.port}`);
      const cutService = new RedisLockService({
        client: cut.client as RedisClientLike,
        requestTimeoutMs: 5_000,
      });
      const direct = subjectOn(await family.connect(REDIS_URL), 'dlock:');
      cleanups.push(async () => {
        await cutService.close();
        await cut.close();
        await direct.close();
      });
      const holder = clientOn(cutService, OPERATION_TIMEOUT_MS);
      const contender = clientOn(direct.service, 5_000);
      proxy.dropReplies(true);
      try {
        const startedAt = performance.now();
        const failed = holder
          .semaphore(name, { permits: 1, ttlMs: 10_000 })
          .acquire()
          .catch((error: unknown) => error);
        // The acquire ran on the server: a permit nobody will ever use, for 10 s.
        const sem = contender.semaphore(name, { permits: 1, ttlMs: 10_000 });
        let orphan = false;
        const deadline = performance.now() + 1_000;
        while (!orphan && performance.now() < deadline) {
          orphan = (await sem.available()) === 0;
          if (!orphan) await sleep(10);
        }
        expect(orphan).toBe(true);
        const next = await sem.acquire({ waitMs: 3_000 });
        const after = performance.now() - startedAt;
        expect(await failed).toBeInstanceOf(TransportError);
        expect(after).toBeLessThanOrEqual(OPERATION_TIMEOUT_MS + 1_000);
        expect(next.slot).toBe(0);
        await next.release();
        expect(await sem.available()).toBe(1);
      } finally {
        proxy.dropReplies(false);
        proxy.resetAll(); // the replies swallowed so far would otherwise be matched to later commands
      }
    });
  }
});

describe('per-slot tokens when Redis restarts empty (private server)', () => {
  it('keep rising on every slot: the next grant is above every earlier one', async () => {
    const side = await SideRedis.start();
    const client = await connect(side.url);
    const service = new RedisLockService({ client, requestTimeoutMs: 1_000 });
    const locks = clientOn(service);
    cleanups.push(async () => {
      await service.close();
      await disconnect(client);
      await side.stop();
    });
    const sem = locks.semaphore('restart', { permits: 2, ttlMs: 5_000 });
    const before = [await sem.acquire(), await sem.acquire()];
    await Promise.all(before.map((p) => p.release()));
    await side.restartEmpty();
    const until = performance.now() + 5_000;
    while (!client.isReady && performance.now() < until) await sleep(20);
    const after = [await sem.acquire({ waitMs: 2_000 }), await sem.acquire({ waitMs: 2_000 })];
    for (const permit of after) {
      const earlier = before.find((p) => p.slot === permit.slot);
      expect(permit.fencingToken).toBeGreaterThan(earlier?.fencingToken as bigint);
    }
    await Promise.all(after.map((p) => p.release()));
  });
});

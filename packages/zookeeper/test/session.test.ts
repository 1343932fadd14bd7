import { LockClient, type LockHandle, type LostReason, TransportError } from '@dlock/core';
import {
  startTcpProxy,
  startZooKeeperEnsemble,
  startZooKeeperServer,
  type TcpProxy,
  uniqueName,
  ZK_CONNECT,
} from '@dlock/test-utils';
import { afterEach, describe, expect, it } from 'vitest';
import { lockParentPath, ZooKeeperLockService } from '../src/index.js';
import { childrenOf, connectedClient, sleep, statOf, waitFor } from './helpers.js';

// Faults that take the server away run against private servers (tickTime 200 ms, so short sessions are allowed);
// faults of the network go through a proxy in front of the shared server. Everything here is timing-sensitive, so
// the file runs alone (vitest.config.ts) with wide margins.
const ROOT = '/dlock-test/session';
const cleanups: (() => Promise<unknown> | unknown)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

interface Tracked {
  readonly handle: LockHandle;
  readonly lost: LostReason[];
}

async function holdSome(client: LockClient, names: readonly string[]): Promise<Tracked[]> {
  return Promise.all(
    names.map(async (name) => {
      const lost: LostReason[] = [];
      const handle = await client.acquire(name, { ttlMs: 1_000, onLost: (_h, reason) => lost.push(reason) });
      return { handle, lost };
    }),
  );
}

function names(count: number, prefix: string): string[] {
  return Array.from({ length: count }, (_, i) => `${uniqueName(prefix)}:${i}`);
}

async function proxyToSharedServer(): Promise<TcpProxy> {
  const proxy = await startTcpProxy({ targetPort: Number(ZK_CONNECT.split(':')[1]) });
  cleanups.push(() => proxy.close());
  return proxy;
}

function viaProxy(
  proxy: TcpProxy,
  sessionTimeoutMs: number,
): { service: ZooKeeperLockService; client: LockClient } {
  const service = new ZooKeeperLockService({
    connectionString: `127.0.0.1:${proxy.port}`,
    sessionTimeoutMs,
    root: ROOT,
  });
  const client = new LockClient(service);
  cleanups.push(
    () => service.close(),
    () => client.close(),
  );
  return { service, client };
}

describe('session loss and survival', () => {
  it('a server stopped past the session timeout: every handle Lost once, the next holder fenced higher', {
    timeout: 60_000,
  }, async () => {
    const server = await startZooKeeperServer({ tickTimeMs: 200 });
    cleanups.push(() => server.stop());
    const service = new ZooKeeperLockService({
      connectionString: server.connectString,
      sessionTimeoutMs: 2_000,
    });
    const client = new LockClient(service);
    cleanups.push(
      () => service.close(),
      () => client.close(),
    );
    const locks = names(4, 'paused');
    const held = await holdSome(client, locks);
    const firstSession = service.session;
    expect(firstSession?.timeoutMs).toBe(2_000);

    server.process.pause();
    cleanups.push(() => server.process.resume());
    const stoppedAt = Date.now();
    expect(await waitFor(() => held.every((h) => h.handle.state === 'lost'), 10_000)).toBe(true);
    // Lost no later than about one session timeout after the last answer (plus slack for a busy machine).
    expect(Date.now() - stoppedAt).toBeLessThan(2_000 + 2_500);
    for (const { lost } of held) expect(lost).toHaveLength(1);
    // The adapter gives the session up itself: the client never reports anything while the server is stopped.
    expect(await waitFor(() => service.session === undefined, 5_000)).toBe(true);

    server.process.resume();
    const next = await client.acquire(locks[0] as string, { ttlMs: 1_000, waitMs: 20_000 });
    expect(next.fencingToken).toBeGreaterThan((held[0] as Tracked).handle.fencingToken);
    expect(service.session?.id).not.toBe(firstSession?.id);
    await sleep(300);
    for (const { lost } of held) expect(lost).toHaveLength(1);
    await next.release();
  });

  it('a blackholed network the client never notices: Lost within the session timeout, then a new session', {
    timeout: 60_000,
  }, async () => {
    const proxy = await proxyToSharedServer();
    const { service, client } = viaProxy(proxy, 4_000);
    const locks = names(3, 'blackhole');
    const held = await holdSome(client, locks);
    const firstSession = service.session?.id;

    proxy.mode = 'blackhole';
    const cutAt = Date.now();
    expect(await waitFor(() => held.every((h) => h.handle.state === 'lost'), 15_000)).toBe(true);
    expect(Date.now() - cutAt).toBeLessThan(4_000 + 2_500);
    for (const { lost } of held) expect(lost).toHaveLength(1);

    proxy.mode = 'pass';
    const next = await client.acquire(locks[0] as string, { ttlMs: 1_000, waitMs: 20_000 });
    expect(next.fencingToken).toBeGreaterThan((held[0] as Tracked).handle.fencingToken);
    expect(service.session?.id).not.toBe(firstSession);
    for (const { lost } of held) expect(lost).toHaveLength(1);
    await next.release();
  });

  it('reports every grant of a session it gives up on in one call (watchLeases)', {
    timeout: 60_000,
  }, async () => {
    const proxy = await proxyToSharedServer();
    const { service } = viaProxy(proxy, 4_000);
    const reports: (readonly string[])[] = [];
    service.watchLeases((tokens) => reports.push(tokens));
    const signal = new AbortController().signal;
    const leases: { name: string; ownerId: string; ownershipToken: string; fencingToken: bigint }[] = [];
    for (const name of names(3, 'report')) {
      const result = await service.acquire({ name, ownerId: 'test', ttlMs: 1_000, waitMs: 0, signal });
      if (!result.acquired) throw new Error('not acquired');
      leases.push({ name, ownerId: 'test', ...result.grant });
    }
    const tokens = leases.map((lease) => lease.ownershipToken);
    // Renewed together, as core's batch would, so none is overdue (and reaped on its own) before the session ends.
    const renewed = await service.renewMany(leases.map((lease) => ({ lease, ttlMs: 1_000 })));
    expect(renewed.every((r) => r.renewed)).toBe(true);
    proxy.mode = 'blackhole';
    expect(await waitFor(() => reports.length > 0, 10_000)).toBe(true);
    await sleep(200);
    expect(reports).toHaveLength(1);
    expect([...(reports[0] ?? [])].sort()).toEqual([...tokens].sort());
    expect(service.session).toBeUndefined();
    proxy.mode = 'pass';
  });

  it('connection resets and a short blackhole within the session timeout: handles stay held', {
    timeout: 60_000,
  }, async () => {
    const proxy = await proxyToSharedServer();
    const { service, client } = viaProxy(proxy, 4_000);
    const locks = names(3, 'reset');
    const held = await holdSome(client, locks);
    const session = service.session?.id;

    proxy.resetAll();
    await sleep(1_500);
    proxy.resetAll();
    await sleep(1_500);
    proxy.mode = 'blackhole';
    await sleep(1_000);
    proxy.mode = 'pass';
    await sleep(5_000); // past a whole session timeout after the faults: renewals must have gone on

    for (const { handle, lost } of held) {
      expect(lost).toEqual([]);
      expect(handle.state).toBe('held');
      expect(await handle.renew()).toBe(true);
    }
    expect(service.session?.id).toBe(session);
    // Each lock's queue still holds exactly one node, and that node is this session's ephemeral node.
    const raw = await connectedClient(ZK_CONNECT);
    cleanups.push(() => raw.close());
    for (const name of locks) {
      const parent = lockParentPath(ROOT, name);
      const children = await childrenOf(raw, parent);
      expect(children).toHaveLength(1);
      const stat = await statOf(raw, `${parent}/${children[0]}`);
      expect(stat?.ephemeralOwner.toString('hex')).toBe(session);
    }
    for (const { handle } of held) await handle.release();
  });

  it('a three-node ensemble whose leader is killed: fencing tokens keep increasing', {
    timeout: 90_000,
  }, async () => {
    const ensemble = await startZooKeeperEnsemble({ tickTimeMs: 200 });
    cleanups.push(() => ensemble.stop());
    const service = new ZooKeeperLockService({
      connectionString: ensemble.connectString,
      sessionTimeoutMs: 4_000,
    });
    const client = new LockClient(service, { operationTimeoutMs: 3_000 });
    cleanups.push(
      () => service.close(),
      () => client.close(),
    );
    const name = uniqueName('ensemble');
    const tokens: bigint[] = [];
    const cycle = async (): Promise<void> => {
      const handle = await client.acquire(name, { ttlMs: 1_000, waitMs: 15_000 });
      tokens.push(handle.fencingToken);
      await handle.release().catch(() => {});
    };

    // The create reply's zxid is the czxid on an ensemble member too.
    const raw = await connectedClient(ensemble.connectString);
    cleanups.push(() => raw.close());
    const signal = new AbortController().signal;
    const grant = await service.acquire({ name, ownerId: 'test', ttlMs: 1_000, waitMs: 0, signal });
    if (!grant.acquired) throw new Error('not acquired');
    const stat = await statOf(raw, `${lockParentPath('/dlock', name)}/${grant.grant.ownershipToken}`);
    expect(stat?.czxid.readBigUInt64BE(0)).toBe(grant.grant.fencingToken);
    tokens.push(grant.grant.fencingToken);
    await service.release({ name, ownerId: 'test', ...grant.grant });

    for (let i = 0; i < 10; i++) await cycle();
    const leader = await ensemble.leader();
    expect(leader).toBeDefined();
    await leader?.process.kill();
    const killedAt = tokens.length;
    let failures = 0;
    for (let done = 0; done < 10; ) {
      try {
        await cycle();
        done += 1;
      } catch (error) {
        expect(error).toBeInstanceOf(TransportError);
        failures += 1;
        expect(failures).toBeLessThan(50);
        await sleep(200);
      }
    }
    expect(tokens.length).toBe(killedAt + 10);
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]).toBeGreaterThan(tokens[i - 1] as bigint);
    expect(await ensemble.leader()).toBeDefined();
  });
});

import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type ClusterAddress,
  keySlot,
  portOpen,
  type RedisCluster,
  RedisReplyError,
  type RespReply,
  redisPipeline,
  runBuiltPackage,
  startRedisCluster,
} from '../src/index.js';

const SLOTS = 16_384;

/** Running, as opposed to gone or a zombie (a killed orphan waits as one until init reaps it). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

/** `redis-cli -c`: follows MOVED/ASK itself, so it checks the cluster's routing independently of the helper. */
function redisCliC(port: number, args: readonly string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('redis-cli', ['-c', '-p', String(port), ...args], { timeout: 5_000 }, (error, stdout) =>
      error ? reject(error) : resolve(stdout.trim()),
    );
  });
}

interface Range {
  readonly start: number;
  readonly end: number;
  readonly masterPort: number;
  readonly replicaPorts: number[];
}

/** CLUSTER SLOTS as plain ranges, read here rather than through the helper under test. */
function ranges(reply: RespReply): Range[] {
  if (!Array.isArray(reply)) throw new Error('CLUSTER SLOTS: not an array');
  return reply
    .map((entry) => {
      if (!Array.isArray(entry)) throw new Error('CLUSTER SLOTS: bad range');
      const [start, end, ...owners] = entry;
      const ports = owners.map((o) => (Array.isArray(o) ? Number(o[1]) : Number.NaN));
      return {
        start: Number(start),
        end: Number(end),
        masterPort: ports[0] as number,
        replicaPorts: ports.slice(1).sort((a, b) => a - b),
      };
    })
    .sort((a, b) => a.start - b.start);
}

const randomOf = (alphabet: readonly string[]): string =>
  alphabet[Math.floor(Math.random() * alphabet.length)] ?? '';

/** Keys meant to trip a wrong hash-tag rule, then random ones rich in braces. */
function sampleKeys(count: number): string[] {
  const edge = [
    '',
    '{',
    '}',
    '{}',
    '}{',
    '{}a',
    'a{}',
    '{a}',
    'a{b}c',
    '{{a}}',
    '{{}}',
    '}{a}',
    '{a}{b}',
    '{}{a}',
    'x{}{y}',
    'foo{{bar}}zap',
    'foo{bar}{zap}',
    '{user1000}.following',
    '{user1000}.followers',
    'a{b',
    'a}b{c',
    '{ü}é',
    'é{}ü',
    '日本{語}',
    '🔒{🔑}',
    'nul\u0000byte',
    'crlf\r\n{x}',
    ' ',
  ];
  const alphabet = [...'abcxyz019:_-', '{', '{', '}', '}', 'é', '語', '🔑', ' '];
  const keys = [...edge];
  while (keys.length < count) {
    const length = Math.floor(Math.random() * 16);
    keys.push(Array.from({ length }, () => randomOf(alphabet)).join(''));
  }
  return keys;
}

describe('startRedisCluster: 3 masters', () => {
  let cluster: RedisCluster;
  let startupMs = 0;

  beforeAll(async () => {
    const t0 = performance.now();
    cluster = await startRedisCluster();
    startupMs = performance.now() - t0;
    console.info(`3-master cluster up in ${startupMs.toFixed(0)} ms`);
  }, 30_000);

  afterAll(() => cluster?.stop(), 15_000);

  it('has 3 masters that cover all 16384 slots, and every node reports the same slot map', async () => {
    expect(cluster.nodes).toHaveLength(3);
    expect(cluster.nodes.every((n) => n.createdAs === 'master')).toBe(true);
    expect(cluster.rootNodes.map((n) => n.url)).toEqual(
      cluster.nodes.map((n) => `redis://127.0.0.1:${n.port}`),
    );
    const maps: string[] = [];
    for (const node of cluster.nodes) {
      const info = await cluster.command(node.port, 'CLUSTER', 'INFO');
      expect(info).toMatch(/^cluster_state:ok\r$/m);
      expect(info).toMatch(/^cluster_slots_assigned:16384\r$/m);
      expect(info).toMatch(/^cluster_known_nodes:3\r$/m);
      const map = ranges(await cluster.command(node.port, 'CLUSTER', 'SLOTS'));
      let covered = 0;
      for (const range of map) covered += range.end - range.start + 1;
      expect(covered).toBe(SLOTS);
      expect(map[0]?.start).toBe(0);
      expect(map.at(-1)?.end).toBe(SLOTS - 1);
      expect(new Set(map.map((r) => r.masterPort))).toEqual(new Set(cluster.nodes.map((n) => n.port)));
      expect(await cluster.command(node.port, 'CLUSTER', 'MYID')).toBe(node.id);
      maps.push(JSON.stringify(map));
    }
    expect(new Set(maps).size).toBe(1);
  });

  it('keySlot agrees with CLUSTER KEYSLOT on 200 keys, tagged, untagged and malformed', async () => {
    const keys = sampleKeys(200);
    const binary = [Buffer.from([0xff, 0xfe, 0x7b, 0x00, 0x7d]), Buffer.from([0x7b, 0x80, 0x7d, 0x41])];
    const port = cluster.nodes[0]?.port as number;
    const replies = await redisPipeline(port, [
      ...keys.map((key) => ['CLUSTER', 'KEYSLOT', key]),
      ...binary.map((key) => ['CLUSTER', 'KEYSLOT', key]),
    ]);
    expect(replies).toHaveLength(keys.length + binary.length);
    const mine = [...keys.map((key) => keySlot(key)), ...binary.map((key) => keySlot(key))];
    expect(mine).toEqual(replies);
    // A sample whose slots barely vary, or that never uses a tag, would prove little.
    expect(new Set(mine).size).toBeGreaterThan(100);
    expect(keys.filter((k) => /\{[^}]/.test(k)).length).toBeGreaterThan(30);
  });

  it('masterOf names the master that holds the key', async () => {
    const keys = Array.from({ length: 60 }, (_, i) => `k:${i}:${Math.random().toString(36).slice(2)}`);
    const entry = cluster.nodes[0]?.port as number;
    for (const key of keys) expect(await redisCliC(entry, ['SET', key, `v-${key}`])).toBe('OK');
    const owners = new Set<number>();
    for (const key of keys) {
      const owner = await cluster.masterOf(key);
      expect(owner.host).toBe('127.0.0.1');
      owners.add(owner.port);
      // The owner serves it without a redirect; every other master redirects to the owner.
      expect(await cluster.command(owner.port, 'GET', key)).toBe(`v-${key}`);
      for (const other of cluster.nodes.filter((n) => n.port !== owner.port)) {
        const moved = await cluster.command(other.port, 'GET', key).catch((error: unknown) => error);
        expect(moved).toBeInstanceOf(RedisReplyError);
        expect((moved as Error).message).toBe(`MOVED ${keySlot(key)} 127.0.0.1:${owner.port}`);
      }
    }
    expect(owners.size).toBe(3);
  });

  it('migrateSlot moves a slot with all its keys to another master', async () => {
    const tag = `{mig-${Math.random().toString(36).slice(2)}}`;
    const slot = keySlot(tag);
    const from = await cluster.masterOf(tag);
    const to = cluster.nodes.find((n) => n.port !== from.port) as ClusterAddress;
    // More keys than one GETKEYSINSLOT batch, and one that is not valid UTF-8.
    const keys: (string | Buffer)[] = Array.from({ length: 250 }, (_, i) => `${tag}:${i}`);
    keys.push(Buffer.concat([Buffer.from(tag), Buffer.from([0xff, 0x00, 0xfe])]));
    const sets = await redisPipeline(
      from.port,
      keys.map((key, i) => ['SET', key, `value-${i}`]),
    );
    expect(sets.every((r) => r === 'OK')).toBe(true);
    expect(await cluster.command(from.port, 'CLUSTER', 'COUNTKEYSINSLOT', slot)).toBe(keys.length);

    await cluster.migrateSlot(slot, to);

    expect(await cluster.command(to.port, 'CLUSTER', 'COUNTKEYSINSLOT', slot)).toBe(keys.length);
    expect(await cluster.command(from.port, 'CLUSTER', 'COUNTKEYSINSLOT', slot)).toBe(0);
    const values = await redisPipeline(
      to.port,
      keys.map((key) => ['GET', key]),
    );
    expect(values).toEqual(keys.map((_, i) => `value-${i}`));
    const moved = await cluster.command(from.port, 'GET', `${tag}:0`).catch((error: unknown) => error);
    expect((moved as Error).message).toBe(`MOVED ${slot} 127.0.0.1:${to.port}`);
    expect(await redisCliC(from.port, ['GET', `${tag}:7`])).toBe('value-7');
    expect(await cluster.masterOf(`${tag}:1`)).toEqual({ host: '127.0.0.1', port: to.port });
    for (const node of cluster.nodes) {
      const map = ranges(await cluster.command(node.port, 'CLUSTER', 'SLOTS'));
      expect(map.find((r) => r.start <= slot && slot <= r.end)?.masterPort).toBe(to.port);
      expect(await cluster.command(node.port, 'CLUSTER', 'INFO')).toMatch(/^cluster_state:ok\r$/m);
    }
  });

  it('killNode ends that one node only', async () => {
    const victim = cluster.nodes[2];
    if (victim === undefined) throw new Error('no third node');
    await cluster.killNode(victim.port);
    expect(alive(victim.process.pid)).toBe(false);
    expect(await portOpen(victim.port)).toBe(false);
    for (const node of cluster.nodes.slice(0, 2)) expect(alive(node.process.pid)).toBe(true);
  });

  it('stop() leaves no process and no directory behind, and may be called again', async () => {
    await cluster.stop();
    await cluster.stop();
    for (const node of cluster.nodes) {
      expect(alive(node.process.pid)).toBe(false);
      expect(await portOpen(node.port)).toBe(false);
      expect(existsSync(node.dir)).toBe(false);
    }
  });
});

describe('startRedisCluster: 3 masters with a replica each', () => {
  it('starts with every replica attached to its master and listed in CLUSTER SLOTS', async () => {
    const t0 = performance.now();
    const cluster = await startRedisCluster({ replicas: 1 });
    console.info(`3+3 cluster up in ${(performance.now() - t0).toFixed(0)} ms`);
    try {
      const masters = cluster.nodes.slice(0, 3);
      const replicas = cluster.nodes.slice(3);
      expect(cluster.nodes.map((n) => n.createdAs)).toEqual([
        'master',
        'master',
        'master',
        'replica',
        'replica',
        'replica',
      ]);
      const map = ranges(await cluster.command(masters[0]?.port as number, 'CLUSTER', 'SLOTS'));
      expect(new Set(map.map((r) => r.masterPort))).toEqual(new Set(masters.map((n) => n.port)));
      expect(map.every((r) => r.replicaPorts.length === 1)).toBe(true);
      for (const replica of replicas) {
        const role = await cluster.command(replica.port, 'ROLE');
        const range = map.find((r) => r.replicaPorts[0] === replica.port);
        expect(Array.isArray(role) && role[0] === 'slave' && role[2] === range?.masterPort).toBe(true);
        expect(await cluster.command(replica.port, 'INFO', 'replication')).toMatch(
          /^master_link_status:up\r$/m,
        );
      }
    } finally {
      await cluster.stop();
    }
    for (const node of cluster.nodes) expect(alive(node.process.pid)).toBe(false);
  }, 30_000);
});

describe('startRedisCluster without stop()', () => {
  it('leaves no server running once the test process exits', async () => {
    const run = await runBuiltPackage(
      new URL('..', import.meta.url),
      `import { startRedisCluster } from '@dlock/test-utils';
       const cluster = await startRedisCluster();
       console.log(JSON.stringify(cluster.nodes.map((n) => ({ pid: n.process.pid, dir: n.dir }))));`,
      { timeoutMs: 25_000 },
    );
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    const nodes = JSON.parse(run.stdout) as { pid: number; dir: string }[];
    expect(nodes).toHaveLength(3);
    for (const { pid, dir } of nodes) {
      expect(alive(pid)).toBe(false);
      expect(existsSync(dir)).toBe(false);
    }
  }, 30_000);
});

import { execFile } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { freePort, type ServerProcess, startProcess, tempDir } from './process.js';
import { redisPing } from './redis.js';
import { RedisReplyError, type RespArg, type RespReply, redisCommand, redisPipeline } from './resp.js';

export { RedisReplyError, type RespArg, type RespReply, redisCommand, redisPipeline } from './resp.js';

export const CLUSTER_SLOTS = 16_384;

/** CRC16/XMODEM (polynomial 0x1021, initial value 0, no reflection), the checksum Redis Cluster hashes keys with. */
const CRC16_TABLE = (() => {
  const table = new Uint16Array(256);
  for (let byte = 0; byte < 256; byte++) {
    let crc = byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1;
    table[byte] = crc & 0xffff;
  }
  return table;
})();

function crc16(bytes: Uint8Array): number {
  let crc = 0;
  for (const byte of bytes) crc = ((crc << 8) ^ (CRC16_TABLE[((crc >> 8) ^ byte) & 0xff] as number)) & 0xffff;
  return crc;
}

/**
 * The hash slot Redis Cluster puts `key` in. A string key is hashed as its UTF-8 bytes, as clients send it. Only
 * the part between the first `{` and the first `}` after it counts, when that part is not empty; otherwise the
 * whole key does.
 */
export function keySlot(key: string | Uint8Array): number {
  const bytes = typeof key === 'string' ? Buffer.from(key, 'utf8') : key;
  const open = bytes.indexOf(0x7b);
  if (open >= 0) {
    const close = bytes.indexOf(0x7d, open + 1);
    if (close > open + 1) return crc16(bytes.subarray(open + 1, close)) % CLUSTER_SLOTS;
  }
  return crc16(bytes) % CLUSTER_SLOTS;
}

export interface ClusterAddress {
  readonly host: string;
  readonly port: number;
}

export interface RedisClusterNode extends ClusterAddress {
  /** `redis://127.0.0.1:<port>`. */
  readonly url: string;
  /** The node's cluster id; it keeps it for its whole life. */
  readonly id: string;
  /** The role `redis-cli --cluster create` gave it; a failover can change the role later. */
  readonly createdAs: 'master' | 'replica';
  /** Its working directory (nodes.conf lives there); deleted once the node has exited. */
  readonly dir: string;
  readonly process: ServerProcess;
}

export interface RedisCluster {
  /** Every node, the masters first (ordered by their first slot), then the replicas in the same order. */
  readonly nodes: readonly RedisClusterNode[];
  /**
   * Every node as a seed, fit for node-redis `createCluster({ rootNodes })` (it reads `url`) and ioredis
   * `new Cluster(rootNodes)` (it reads `host` and `port`).
   */
  readonly rootNodes: readonly { readonly host: string; readonly port: number; readonly url: string }[];
  /** The master that owns `key`'s slot, as the first node that answers (`CLUSTER KEYSLOT`, `CLUSTER SLOTS`) says. */
  masterOf(key: string): Promise<ClusterAddress>;
  /**
   * Moves one slot, keys included, from its master to master `to` the way a resharding does (IMPORTING/MIGRATING,
   * MIGRATE in batches, SETSLOT NODE on every master), then waits until every live node agrees. No-op when `to`
   * owns it already.
   */
  migrateSlot(slot: number, to: ClusterAddress): Promise<void>;
  /**
   * Waits until every live node reports `cluster_state:ok` and all of them return the same `CLUSTER SLOTS`,
   * covering all 16384 slots (for instance after a failover). Rejects after `timeoutMs` (default 20 s).
   */
  waitForAgreement(timeoutMs?: number): Promise<void>;
  /** One command to the node on `port`; an error reply rejects with RedisReplyError. */
  command(port: number, ...args: RespArg[]): Promise<RespReply>;
  /** SIGKILL to the node on `port` (a crash); resolved once the process is gone. */
  killNode(port: number): Promise<void>;
  /** Kills every node still running and deletes their directories. Safe to call more than once. */
  stop(): Promise<void>;
}

export interface StartRedisClusterOptions {
  /** At least 3 (what `redis-cli --cluster create` accepts). Default 3. */
  readonly masters?: number;
  /** Replicas per master. Default 0. */
  readonly replicas?: 0 | 1;
  /** Bound on creating the cluster and on every wait for agreement. Default 20 s. */
  readonly timeoutMs?: number;
}

const delay = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** One master's slot range as a node reports it: owner first, then its replicas. */
interface SlotRange {
  readonly start: number;
  readonly end: number;
  readonly master: { readonly host: string; readonly port: number; readonly id: string };
  readonly replicas: readonly { readonly host: string; readonly port: number; readonly id: string }[];
}

function asNodeEntry(value: RespReply | undefined): { host: string; port: number; id: string } {
  if (!Array.isArray(value)) throw new Error(`CLUSTER SLOTS: unexpected node entry ${String(value)}`);
  const [host, port, id] = value;
  if (typeof host !== 'string' || typeof port !== 'number' || typeof id !== 'string') {
    throw new Error(`CLUSTER SLOTS: unexpected node entry ${JSON.stringify(value)}`);
  }
  return { host, port, id };
}

function parseSlots(reply: RespReply | RedisReplyError | undefined): SlotRange[] {
  if (reply instanceof RedisReplyError) throw reply;
  if (!Array.isArray(reply)) throw new Error(`CLUSTER SLOTS: unexpected reply ${String(reply)}`);
  const ranges = reply.map((entry): SlotRange => {
    if (!Array.isArray(entry)) throw new Error(`CLUSTER SLOTS: unexpected range ${String(entry)}`);
    const [start, end, master, ...replicas] = entry;
    if (typeof start !== 'number' || typeof end !== 'number') {
      throw new Error(`CLUSTER SLOTS: unexpected range ${JSON.stringify(entry)}`);
    }
    return {
      start,
      end,
      master: asNodeEntry(master),
      // Sorted so that two nodes listing the same replicas in another order still count as agreeing.
      replicas: replicas.map(asNodeEntry).sort((a, b) => a.port - b.port),
    };
  });
  return ranges.sort((a, b) => a.start - b.start);
}

function ownerOf(ranges: readonly SlotRange[], slot: number): SlotRange | undefined {
  return ranges.find((range) => range.start <= slot && slot <= range.end);
}

function coversAllSlots(ranges: readonly SlotRange[]): boolean {
  let next = 0;
  for (const range of ranges) {
    if (range.start !== next) return false;
    next = range.end + 1;
  }
  return next === CLUSTER_SLOTS;
}

/** Runs `redis-cli --cluster ...`; rejects with its output when it fails. */
function redisCliCluster(args: readonly string[], timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('redis-cli', ['--cluster', ...args], { timeout: timeoutMs }, (error, stdout, stderr) => {
      if (error)
        reject(
          new Error(`redis-cli --cluster ${args.join(' ')} failed: ${error.message}\n${stdout}${stderr}`),
        );
      else resolve(stdout);
    });
  });
}

interface StartedNode {
  readonly port: number;
  readonly dir: string;
  readonly process: ServerProcess;
}

/** Distinct free ports: the kernel may hand the same one out twice, as each probe closes its listener at once. */
async function freePorts(count: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < count) ports.add(await freePort());
  return [...ports];
}

/** Data directories of nodes not stopped yet. */
const liveDirs = new Set<string>();
let dirHookInstalled = false;

/**
 * A test that never calls stop() still gets its nodes killed at exit (startProcess sees to it), but their exit
 * events never arrive to delete the directories, so they go here. Installed after the first startProcess, the
 * hook runs after the kills.
 */
function removeAtExit(dir: string): void {
  liveDirs.add(dir);
  if (dirHookInstalled) return;
  dirHookInstalled = true;
  process.once('exit', () => {
    for (const left of liveDirs) {
      try {
        rmSync(left, { recursive: true, force: true });
      } catch {
        // a node still dying may write into it; a leftover temp dir is all that costs
      }
    }
  });
}

async function startNode(port: number, busPort: number): Promise<StartedNode> {
  const dir = tempDir('dlock-redis-cluster');
  try {
    const process = await startProcess({
      name: `redis-cluster-${port}`,
      command: 'redis-server',
      // The bus port is chosen too: the default (port + 10000) can be taken or above 65535 for a kernel-picked port.
      args: [
        '--port',
        String(port),
        '--cluster-port',
        String(busPort),
        '--bind',
        '127.0.0.1',
        '--cluster-enabled',
        'yes',
        '--cluster-config-file',
        join(dir, 'nodes.conf'),
        '--cluster-node-timeout',
        '2000',
        '--save',
        '',
        '--appendonly',
        'no',
        '--daemonize',
        'no',
        // A replica's first sync would otherwise wait 5 s for more replicas to share the transfer.
        '--repl-diskless-sync-delay',
        '0',
        // CLUSTER SLOTS lists a replica only once its replication offset is above 0, which on an idle master takes
        // the first replication ping: 10 s by default.
        '--repl-ping-replica-period',
        '1',
        '--dir',
        dir,
      ],
      ready: () => redisPing(port),
      removeOnExit: [dir],
      timeoutMs: 10_000,
    });
    removeAtExit(dir);
    return { port, dir, process };
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
}

/** Starts `count` nodes; a port someone else took in the meantime costs one retry with new ports. */
async function startNodes(count: number): Promise<StartedNode[]> {
  for (let attempt = 1; ; attempt++) {
    const ports = await freePorts(count * 2);
    const results = await Promise.allSettled(
      Array.from({ length: count }, (_, i) => startNode(ports[i] as number, ports[count + i] as number)),
    );
    const started = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    const failure = results.find((r) => r.status === 'rejected');
    if (failure === undefined) return started;
    await Promise.all(started.map((node) => node.process.kill()));
    for (const node of started) {
      rmSync(node.dir, { recursive: true, force: true });
      liveDirs.delete(node.dir);
    }
    if (attempt >= 2) throw failure.reason;
  }
}

/**
 * A Redis Cluster of private `redis-server` processes on loopback ports, keeping nothing on disk, created with
 * `redis-cli --cluster create` and returned once every node reports `cluster_state:ok` and all agree on the slot
 * map. Like every server test-utils starts, the nodes are killed when the test process exits, stop() or not.
 */
export async function startRedisCluster(options: StartRedisClusterOptions = {}): Promise<RedisCluster> {
  const { masters = 3, replicas = 0, timeoutMs = 20_000 } = options;
  for (const key of Object.keys(options)) {
    if (!['masters', 'replicas', 'timeoutMs'].includes(key))
      throw new Error(`startRedisCluster: unknown option ${key}`);
  }
  if (!Number.isInteger(masters) || masters < 3)
    throw new Error(`startRedisCluster: masters must be an integer >= 3`);
  if (replicas !== 0 && replicas !== 1) throw new Error(`startRedisCluster: replicas must be 0 or 1`);

  const started = await startNodes(masters * (1 + replicas));
  const alive = (): StartedNode[] => started.filter((node) => !node.process.exited);
  const byPort = (port: number): StartedNode => {
    const node = started.find((n) => n.port === port);
    if (node === undefined) throw new Error(`no cluster node on port ${port}`);
    return node;
  };

  /** The slot map of the first live node that answers. */
  const slotMap = async (): Promise<SlotRange[]> => {
    let last: unknown;
    for (const node of alive()) {
      try {
        return parseSlots(await redisCommand(node.port, ['CLUSTER', 'SLOTS']));
      } catch (error) {
        last = error;
      }
    }
    throw new Error(`no cluster node answered CLUSTER SLOTS: ${String(last)}`);
  };

  /** Undefined when all live nodes agree (and, if asked, every master has `replicasEach` replicas); else why not. */
  const disagreement = async (replicasEach: number | undefined): Promise<string | undefined> => {
    const nodes = alive();
    if (nodes.length === 0) return 'no node is running';
    let reference: string | undefined;
    for (const node of nodes) {
      const [info, slots] = await redisPipeline(node.port, [
        ['CLUSTER', 'INFO'],
        ['CLUSTER', 'SLOTS'],
      ]);
      if (typeof info !== 'string' || !/^cluster_state:ok\r?$/m.test(info)) {
        return `node ${node.port}: ${typeof info === 'string' ? (/^cluster_state:.*$/m.exec(info)?.[0] ?? info) : String(info)}`;
      }
      const ranges = parseSlots(slots);
      if (!coversAllSlots(ranges)) return `node ${node.port}: CLUSTER SLOTS does not cover all slots`;
      if (replicasEach !== undefined && ranges.some((r) => r.replicas.length !== replicasEach)) {
        return `node ${node.port}: not every master lists ${replicasEach} replica(s) yet`;
      }
      const text = JSON.stringify(ranges);
      reference ??= text;
      if (text !== reference) return `node ${node.port} sees another slot map than node ${nodes[0]?.port}`;
    }
    return undefined;
  };

  const waitUntil = async (
    what: string,
    check: () => Promise<string | undefined>,
    ms: number,
  ): Promise<void> => {
    const deadline = Date.now() + ms;
    let reason: string | undefined = 'not checked yet';
    for (;;) {
      reason = await check().catch((error: unknown) =>
        error instanceof Error ? error.message : String(error),
      );
      if (reason === undefined) return;
      if (Date.now() > deadline)
        throw new Error(`Redis Cluster: ${what} not reached within ${ms} ms; last: ${reason}`);
      await delay(100);
    }
  };

  const waitForAgreement = (ms = timeoutMs): Promise<void> =>
    waitUntil('agreement of every node', () => disagreement(undefined), ms);

  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      await Promise.all(started.map((node) => node.process.kill()));
      for (const node of started) {
        rmSync(node.dir, { recursive: true, force: true });
        liveDirs.delete(node.dir);
      }
    })();
    return stopping;
  };

  const ids = new Map<number, string>();
  let ranges: SlotRange[];
  try {
    await redisCliCluster(
      [
        'create',
        ...started.map((n) => `127.0.0.1:${n.port}`),
        '--cluster-replicas',
        String(replicas),
        '--cluster-yes',
      ],
      timeoutMs,
    );
    // Replication links too: a test on a cluster with replicas expects WAIT and failover to work from the start.
    await waitUntil(
      'cluster_state:ok with one slot map on every node',
      async () =>
        (await disagreement(replicas)) ??
        (replicas === 0 ? undefined : await replicationPending(alive().map((n) => n.port))),
      timeoutMs,
    );
    for (const node of started) {
      const id = await redisCommand(node.port, ['CLUSTER', 'MYID']);
      if (typeof id !== 'string') throw new Error(`CLUSTER MYID on ${node.port}: unexpected reply`);
      ids.set(node.port, id);
    }
    ranges = await slotMap();
  } catch (error) {
    await stop();
    throw error;
  }

  const masterPorts = [...new Set(ranges.map((r) => r.master.port))];
  const replicaPorts = masterPorts.flatMap((port) =>
    [
      ...new Set(ranges.filter((r) => r.master.port === port).flatMap((r) => r.replicas.map((x) => x.port))),
    ].sort((a, b) => a - b),
  );
  const nodes: RedisClusterNode[] = [...masterPorts, ...replicaPorts].map((port) => ({
    host: '127.0.0.1',
    port,
    url: `redis://127.0.0.1:${port}`,
    id: ids.get(port) as string,
    createdAs: masterPorts.includes(port) ? 'master' : 'replica',
    dir: byPort(port).dir,
    process: byPort(port).process,
  }));

  const migrateSlot = async (slot: number, to: ClusterAddress): Promise<void> => {
    if (!Number.isInteger(slot) || slot < 0 || slot >= CLUSTER_SLOTS)
      throw new Error(`migrateSlot: bad slot ${slot}`);
    const target = byPort(to.port);
    const targetId = ids.get(target.port) as string;
    const role = await redisCommand(target.port, ['ROLE']);
    if (!Array.isArray(role) || role[0] !== 'master')
      throw new Error(`migrateSlot: node ${to.port} is not a master`);
    const owner = ownerOf(await slotMap(), slot);
    if (owner === undefined) throw new Error(`migrateSlot: slot ${slot} has no owner`);
    if (owner.master.port === target.port) return;
    const source = owner.master;

    await redisCommand(target.port, ['CLUSTER', 'SETSLOT', slot, 'IMPORTING', source.id]);
    await redisCommand(source.port, ['CLUSTER', 'SETSLOT', slot, 'MIGRATING', targetId]);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      // Keys as bytes: they go back to the server verbatim, and a key need not be valid UTF-8.
      const keys = await redisCommand(source.port, ['CLUSTER', 'GETKEYSINSLOT', slot, 100], { bytes: true });
      if (!Array.isArray(keys)) throw new Error('migrateSlot: unexpected CLUSTER GETKEYSINSLOT reply');
      if (keys.length === 0) break;
      if (Date.now() > deadline) throw new Error(`migrateSlot: keys of slot ${slot} still on ${source.port}`);
      await redisCommand(
        source.port,
        ['MIGRATE', '127.0.0.1', target.port, '', 0, 5_000, 'KEYS', ...(keys as Buffer[])],
        { timeoutMs: 10_000 },
      );
    }
    // The new owner first, so that it claims the slot with a new epoch before the old one lets go of it.
    await redisCommand(target.port, ['CLUSTER', 'SETSLOT', slot, 'NODE', targetId]);
    await redisCommand(source.port, ['CLUSTER', 'SETSLOT', slot, 'NODE', targetId]);
    for (const port of new Set((await slotMap()).map((r) => r.master.port))) {
      if (port === target.port || port === source.port) continue;
      await redisCommand(port, ['CLUSTER', 'SETSLOT', slot, 'NODE', targetId]);
    }
    await waitUntil(
      `slot ${slot} owned by ${target.port} on every node`,
      async () =>
        (await disagreement(undefined)) ??
        (ownerOf(await slotMap(), slot)?.master.port === target.port ? undefined : 'old owner still listed'),
      timeoutMs,
    );
  };

  return {
    nodes,
    rootNodes: nodes.map(({ host, port, url }) => ({ host, port, url })),
    masterOf: async (key) => {
      let slot: RespReply | undefined;
      for (const node of alive()) {
        slot = await redisCommand(node.port, ['CLUSTER', 'KEYSLOT', key]).catch(() => undefined);
        if (slot !== undefined) break;
      }
      if (typeof slot !== 'number') throw new Error('masterOf: no cluster node answered CLUSTER KEYSLOT');
      const owner = ownerOf(await slotMap(), slot);
      if (owner === undefined) throw new Error(`masterOf: slot ${slot} has no owner`);
      return { host: owner.master.host, port: owner.master.port };
    },
    migrateSlot,
    waitForAgreement,
    command: (port, ...args) => redisCommand(port, args),
    killNode: (port) => byPort(port).process.kill(),
    stop,
  };
}

/** Undefined when every replica among `ports` has its replication link up; else the first that has not. */
async function replicationPending(ports: readonly number[]): Promise<string | undefined> {
  for (const port of ports) {
    const info = await redisCommand(port, ['INFO', 'replication']);
    if (typeof info !== 'string') return `node ${port}: unexpected INFO reply`;
    if (/^role:slave\r?$/m.test(info) && !/^master_link_status:up\r?$/m.test(info)) {
      return `replica ${port}: replication link not up yet`;
    }
  }
  return undefined;
}

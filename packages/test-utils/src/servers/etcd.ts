import { execFile } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { freePort, type ServerProcess, startProcess, tempDir } from './process.js';

export interface EtcdMember {
  readonly name: string;
  /** `http://127.0.0.1:<client port>`. */
  readonly endpoint: string;
  readonly clientPort: number;
  readonly peerPort: number;
  readonly process: ServerProcess;
}

export interface EtcdCluster {
  readonly members: readonly EtcdMember[];
  /** Every member's client endpoint, for `new Etcd3({ hosts })`. */
  readonly endpoints: readonly string[];
  /** The member that currently leads, asked of the live members; undefined while there is none. */
  leader(): Promise<EtcdMember | undefined>;
  /** Waits (polling) until some live member leads; rejects after `timeoutMs`. */
  waitForLeader(timeoutMs?: number): Promise<EtcdMember>;
  /** Stops every member still running and deletes the data directories. */
  stop(): Promise<void>;
}

export interface StartEtcdClusterOptions {
  /** 1 or 3 members. Default 1. */
  readonly size?: 1 | 3;
  /** Raft heartbeat in ms. Default 100 (etcd's default). */
  readonly heartbeatMs?: number;
  /** Election timeout in ms. Default 1000 (etcd's default); with it the server's minimum lease TTL is 2 s. */
  readonly electionMs?: number;
}

/**
 * Runs `etcdctl` (API 3) with hard timeouts. Resolves stdout, or undefined when it failed or timed out; with
 * `partial`, whatever it printed even if it failed (`endpoint status` fails when one endpoint is down, yet prints
 * the others).
 */
export function etcdctl(
  args: readonly string[],
  timeoutMs = 3_000,
  partial = false,
): Promise<string | undefined> {
  return new Promise((resolve) => {
    execFile(
      'etcdctl',
      ['--dial-timeout=1s', `--command-timeout=${Math.max(1, Math.floor(timeoutMs / 1000))}s`, ...args],
      { env: { ...process.env, ETCDCTL_API: '3' }, timeout: timeoutMs + 1_000 },
      (error, stdout) => resolve(error && !partial ? undefined : stdout),
    );
  });
}

async function healthy(endpoint: string): Promise<boolean> {
  return (await etcdctl([`--endpoints=${endpoint}`, 'endpoint', 'health'], 2_000)) !== undefined;
}

/**
 * The client endpoint of the member that leads, from `etcdctl endpoint status -w json`. Member ids are uint64,
 * beyond what JSON numbers hold exactly, so they are compared as digit strings taken from the raw text.
 */
export async function etcdLeaderEndpoint(endpoints: readonly string[]): Promise<string | undefined> {
  const out = await etcdctl(
    [`--endpoints=${endpoints.join(',')}`, 'endpoint', 'status', '-w', 'json'],
    2_000,
    true,
  );
  if (out === undefined) return undefined;
  // One object per endpoint that answered: {"Endpoint":"…","Status":{"header":{…"member_id":N…},…"leader":N,…}}
  for (const part of out.split('{"Endpoint":').slice(1)) {
    const endpoint = /^"([^"]+)"/.exec(part)?.[1];
    const member = /"member_id":(\d+)/.exec(part)?.[1];
    const leader = /"leader":(\d+)/.exec(part)?.[1];
    if (endpoint && member && member === leader) return endpoint;
  }
  return undefined;
}

const delay = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A private etcd cluster (1 or 3 members) on free loopback ports, with its data in a fresh temp directory, for tests
 * that pause, kill or partition a member. Resolves once every member reports healthy (a leader exists).
 *
 * ```ts
 * const cluster = await startEtcdCluster({ size: 3 });
 * const client = new Etcd3({ hosts: [...cluster.endpoints] });
 * (await cluster.waitForLeader()).process.kill();
 * await cluster.stop();
 * ```
 */
export async function startEtcdCluster(options: StartEtcdClusterOptions = {}): Promise<EtcdCluster> {
  const size = options.size ?? 1;
  const heartbeatMs = options.heartbeatMs ?? 100;
  const electionMs = options.electionMs ?? 1_000;
  const dir = tempDir('dlock-etcd');
  const token = `dlock-${process.pid}-${Date.now().toString(36)}`;
  const specs: { name: string; clientPort: number; peerPort: number }[] = [];
  for (let i = 1; i <= size; i++) {
    specs.push({ name: `m${i}`, clientPort: await freePort(), peerPort: await freePort() });
  }
  const initialCluster = specs.map((s) => `${s.name}=http://127.0.0.1:${s.peerPort}`).join(',');
  // The members of a new cluster wait for one another, so they start together; one failing stops the others.
  const started = await Promise.allSettled(
    specs.map((spec) => {
      const client = `http://127.0.0.1:${spec.clientPort}`;
      const peer = `http://127.0.0.1:${spec.peerPort}`;
      return startProcess({
        name: `etcd-${spec.name}-${spec.clientPort}`,
        command: 'etcd',
        args: [
          '--name',
          spec.name,
          '--data-dir',
          join(dir, spec.name),
          '--listen-client-urls',
          client,
          '--advertise-client-urls',
          client,
          '--listen-peer-urls',
          peer,
          '--initial-advertise-peer-urls',
          peer,
          '--initial-cluster',
          initialCluster,
          '--initial-cluster-state',
          'new',
          '--initial-cluster-token',
          token,
          '--heartbeat-interval',
          String(heartbeatMs),
          '--election-timeout',
          String(electionMs),
          '--logger',
          'zap',
          '--log-level',
          'warn',
        ],
        ready: () => healthy(client),
        timeoutMs: 30_000,
      }).then((process): EtcdMember => ({ ...spec, endpoint: client, process }));
    }),
  );
  const members = started.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  const stop = async (): Promise<void> => {
    await Promise.all(members.map((m) => m.process.stop()));
    rmSync(dir, { recursive: true, force: true });
  };
  const failed = started.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) {
    await stop();
    throw failed.reason;
  }
  const endpoints = members.map((m) => m.endpoint);
  const leader = async (): Promise<EtcdMember | undefined> => {
    const live = members.filter((m) => !m.process.exited);
    const endpoint = await etcdLeaderEndpoint(live.map((m) => m.endpoint));
    return members.find((m) => endpoint?.endsWith(`:${m.clientPort}`));
  };
  return {
    members,
    endpoints,
    leader,
    waitForLeader: async (timeoutMs = 15_000) => {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const found = await leader();
        if (found) return found;
        if (Date.now() > deadline) throw new Error(`no etcd leader within ${timeoutMs} ms`);
        await delay(100);
      }
    },
    stop,
  };
}

import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { etcdctl, freePort, type ServerProcess, startProcess, tempDir } from '@dlock/test-utils';

/** A one-member etcd on free loopback ports whose process can be killed and started again on its own data. */
export interface RestartableEtcd {
  readonly endpoint: string;
  /** SIGKILL (nothing flushed beyond what etcd's WAL already has), resolved once the process is gone. */
  kill(): Promise<void>;
  /** Starts the member again on the same ports and data directory; resolves once it answers. */
  start(): Promise<void>;
  /** Stops the member if it runs and deletes its data. */
  stop(): Promise<void>;
}

/**
 * `startEtcdCluster` (test-utils) makes members that cannot be brought back; a restart needs the same data
 * directory and ports, which this keeps. `extraArgs` are passed to etcd as they are (`--auth-token-ttl 2`).
 */
export async function startRestartableEtcd(extraArgs: readonly string[] = []): Promise<RestartableEtcd> {
  const dir = tempDir('dlock-etcd-restart');
  const clientPort = await freePort();
  const peerPort = await freePort();
  const endpoint = `http://127.0.0.1:${clientPort}`;
  const peer = `http://127.0.0.1:${peerPort}`;
  const args = [
    '--name',
    'solo',
    '--data-dir',
    join(dir, 'data'),
    '--listen-client-urls',
    endpoint,
    '--advertise-client-urls',
    endpoint,
    '--listen-peer-urls',
    peer,
    '--initial-advertise-peer-urls',
    peer,
    '--initial-cluster',
    `solo=${peer}`,
    '--initial-cluster-state',
    'new',
    '--logger',
    'zap',
    '--log-level',
    'warn',
    ...extraArgs,
  ];
  let process: ServerProcess | undefined;
  const start = async (): Promise<void> => {
    process = await startProcess({
      name: `etcd-restartable-${clientPort}`,
      command: 'etcd',
      args,
      ready: async () =>
        (await etcdctl([`--endpoints=${endpoint}`, 'endpoint', 'health'], 2_000)) !== undefined,
      timeoutMs: 30_000,
    });
  };
  await start();
  return {
    endpoint,
    kill: async () => {
      await process?.kill();
    },
    start,
    stop: async () => {
      await process?.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

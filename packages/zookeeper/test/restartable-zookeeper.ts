import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { freePort, type ServerProcess, startProcess, tempDir, zkMode } from '@dlock/test-utils';

const ZOOKEEPER_JAR = '/usr/share/java/zookeeper.jar';
const SLF4J_SIMPLE_JAR = '/usr/share/java/slf4j-simple.jar';

/**
 * A private standalone ZooKeeper that can be killed and started again on the same port with the same data: what
 * `@dlock/test-utils`' servers (which delete their data on stop) do not offer. A killed server comes back with its
 * sessions (each with a fresh timeout) and their ephemeral nodes, and with a higher zxid epoch.
 */
export interface RestartableZooKeeper {
  readonly connectString: string;
  readonly process: ServerProcess;
  /** SIGKILL: a crash. */
  kill(): Promise<void>;
  /** Starts it again on the same port and data directory; resolves once it serves. */
  start(): Promise<void>;
  /** Stops it and deletes its data. */
  stop(): Promise<void>;
}

export async function startRestartableZooKeeper(tickTimeMs: number): Promise<RestartableZooKeeper> {
  if (!existsSync(ZOOKEEPER_JAR)) throw new Error(`${ZOOKEEPER_JAR} is missing`);
  const dir = tempDir('dlock-zookeeper-restartable');
  const dataDir = join(dir, 'data');
  mkdirSync(dataDir, { recursive: true });
  const port = await freePort();
  const config = join(dir, 'zoo.cfg');
  writeFileSync(
    config,
    [
      `tickTime=${tickTimeMs}`,
      `dataDir=${dataDir}`,
      `clientPort=${port}`,
      'clientPortAddress=127.0.0.1',
      'maxClientCnxns=0',
      'admin.enableServer=false',
      '4lw.commands.whitelist=srvr',
      // The data must survive a SIGKILL of the process only (the page cache keeps it), not of the machine.
      'forceSync=no',
      '',
    ].join('\n'),
  );
  const classpath = [dir, ZOOKEEPER_JAR, ...(existsSync(SLF4J_SIMPLE_JAR) ? [SLF4J_SIMPLE_JAR] : [])];
  const launch = (): Promise<ServerProcess> =>
    startProcess({
      name: `zookeeper-restartable-${port}`,
      command: 'java',
      args: [
        '-Xms32m',
        '-Xmx256m',
        '-XX:+UseSerialGC',
        '-XX:TieredStopAtLevel=1',
        '-Djava.net.preferIPv4Stack=true',
        '-Dorg.slf4j.simpleLogger.defaultLogLevel=warn',
        '-cp',
        classpath.join(':'),
        'org.apache.zookeeper.server.quorum.QuorumPeerMain',
        config,
      ],
      ready: async () => (await zkMode(port, 500)) !== undefined,
      timeoutMs: 30_000,
    });
  let current = await launch();
  return {
    connectString: `127.0.0.1:${port}`,
    get process() {
      return current;
    },
    kill: () => current.kill(),
    async start() {
      current = await launch();
    },
    async stop() {
      await current.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

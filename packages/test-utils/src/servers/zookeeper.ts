import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { Socket } from 'node:net';
import { join } from 'node:path';
import { freePort, type ServerProcess, startProcess, tempDir } from './process.js';

const ZOOKEEPER_JAR = '/usr/share/java/zookeeper.jar';
const SLF4J_SIMPLE_JAR = '/usr/share/java/slf4j-simple.jar';

/**
 * Sends a four-letter command (`ruok`, `srvr`, `mntr`…) and returns the whole reply, or '' if none came in time.
 * `printf`, not `echo`, in shell terms: no trailing newline, which can make the kernel reset the connection and
 * drop the reply.
 */
export function zkFourLetter(port: number, command: string, timeoutMs = 1_000): Promise<string> {
  return new Promise((resolve) => {
    const socket = new Socket();
    let reply = '';
    let done = false;
    const finish = (): void => {
      if (done) return;
      done = true;
      socket.destroy();
      resolve(reply);
    };
    socket.setTimeout(timeoutMs, finish);
    socket.once('error', finish);
    socket.on('data', (chunk) => {
      reply += chunk.toString('latin1');
    });
    socket.once('end', finish);
    socket.connect(port, '127.0.0.1', () => socket.write(command));
  });
}

/** The `Mode:` line of `srvr`: `standalone`, `leader` or `follower`; undefined while not serving. */
export async function zkMode(port: number, timeoutMs = 1_000): Promise<string | undefined> {
  const match = /^Mode: (\w+)/m.exec(await zkFourLetter(port, 'srvr', timeoutMs));
  return match?.[1];
}

export interface ZooKeeperMember {
  readonly id: number;
  readonly clientPort: number;
  readonly process: ServerProcess;
  mode(): Promise<string | undefined>;
}

export interface ZooKeeperServer extends ZooKeeperMember {
  /** `127.0.0.1:<port>` */
  readonly connectString: string;
  stop(): Promise<void>;
}

export interface ZooKeeperEnsemble {
  readonly members: readonly ZooKeeperMember[];
  /** Every member: `127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3`. */
  readonly connectString: string;
  /** The member whose `srvr` says `Mode: leader`, polled until one does or `timeoutMs` passes. */
  leader(timeoutMs?: number): Promise<ZooKeeperMember | undefined>;
  stop(): Promise<void>;
}

export interface ZooKeeperServerOptions {
  /**
   * ZooKeeper's tick, in ms. Session timeouts are clamped to [2, 20] ticks, so the default 200 allows 400 ms to
   * 4 s: short enough for expiry tests.
   */
  readonly tickTimeMs?: number;
}

interface MemberPlan {
  readonly root: string;
  readonly id: number;
  readonly clientPort: number;
  readonly peerPort: number;
  readonly electionPort: number;
  readonly dir: string;
}

function writeConfig(plan: MemberPlan, tickTimeMs: number, peers: readonly MemberPlan[]): string {
  const dataDir = join(plan.dir, 'data');
  mkdirSync(dataDir, { recursive: true });
  const lines = [
    `tickTime=${tickTimeMs}`,
    'initLimit=10',
    'syncLimit=5',
    `dataDir=${dataDir}`,
    `clientPort=${plan.clientPort}`,
    'clientPortAddress=127.0.0.1',
    'maxClientCnxns=0',
    'admin.enableServer=false',
    '4lw.commands.whitelist=ruok,srvr,stat,mntr,cons,wchs',
    // Tests restart nothing from disk; skipping fsync keeps three JVMs on two cores responsive.
    'forceSync=no',
  ];
  if (peers.length > 1) {
    writeFileSync(join(dataDir, 'myid'), `${plan.id}\n`);
    for (const peer of peers) lines.push(`server.${peer.id}=127.0.0.1:${peer.peerPort}:${peer.electionPort}`);
  }
  const file = join(plan.dir, 'zoo.cfg');
  writeFileSync(file, `${lines.join('\n')}\n`);
  return file;
}

function startMember(plan: MemberPlan, config: string, timeoutMs: number): Promise<ServerProcess> {
  if (!existsSync(ZOOKEEPER_JAR)) {
    throw new Error(`${ZOOKEEPER_JAR} is missing: run scripts/services.sh start zookeeper first`);
  }
  const classpath = [plan.dir, ZOOKEEPER_JAR, ...(existsSync(SLF4J_SIMPLE_JAR) ? [SLF4J_SIMPLE_JAR] : [])];
  return startProcess({
    name: `zookeeper-${plan.clientPort}`,
    command: 'java',
    args: [
      '-Xms32m',
      '-Xmx256m',
      '-XX:+UseSerialGC',
      '-XX:TieredStopAtLevel=1',
      '-Djava.net.preferIPv4Stack=true',
      '-Dzookeeper.jmx.log4j.disable=true',
      '-Dorg.slf4j.simpleLogger.defaultLogLevel=warn',
      '-cp',
      classpath.join(':'),
      'org.apache.zookeeper.server.quorum.QuorumPeerMain',
      config,
    ],
    // Serving, not merely listening: in an ensemble a member answers srvr with a mode only once a quorum formed.
    ready: async () => (await zkMode(plan.clientPort, 500)) !== undefined,
    timeoutMs,
  });
}

function member(plan: MemberPlan, process: ServerProcess): ZooKeeperMember {
  return { id: plan.id, clientPort: plan.clientPort, process, mode: () => zkMode(plan.clientPort) };
}

async function plans(count: number): Promise<MemberPlan[]> {
  const root = tempDir('dlock-zookeeper');
  const out: MemberPlan[] = [];
  for (let id = 1; id <= count; id++) {
    out.push({
      root,
      id,
      clientPort: await freePort(),
      peerPort: await freePort(),
      electionPort: await freePort(),
      dir: join(root, `member-${id}`),
    });
  }
  for (const plan of out) mkdirSync(plan.dir, { recursive: true });
  return out;
}

/** A private standalone ZooKeeper on a free loopback port, for tests that pause or kill it. Stop it when done. */
export async function startZooKeeperServer(options: ZooKeeperServerOptions = {}): Promise<ZooKeeperServer> {
  const [plan] = await plans(1);
  if (!plan) throw new Error('no member planned');
  const config = writeConfig(plan, options.tickTimeMs ?? 200, [plan]);
  const process = await startMember(plan, config, 30_000);
  return {
    ...member(plan, process),
    connectString: `127.0.0.1:${plan.clientPort}`,
    stop: async () => {
      await process.stop();
      rmSync(plan.root, { recursive: true, force: true });
    },
  };
}

/**
 * A private ensemble on loopback (three members by default), started together because no member serves before a
 * quorum exists. Each JVM gets at most 256 MB. Stop it when done.
 */
export async function startZooKeeperEnsemble(
  options: ZooKeeperServerOptions & { readonly size?: number } = {},
): Promise<ZooKeeperEnsemble> {
  const all = await plans(options.size ?? 3);
  const tick = options.tickTimeMs ?? 200;
  const started = await Promise.allSettled(
    all.map((plan) => startMember(plan, writeConfig(plan, tick, all), 60_000)),
  );
  const processes = started.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
  if (processes.length !== all.length) {
    await Promise.allSettled(processes.map((p) => p.stop()));
    if (all[0]) rmSync(all[0].root, { recursive: true, force: true });
    const failure = started.find((result) => result.status === 'rejected');
    throw failure?.status === 'rejected' ? failure.reason : new Error('ensemble did not start');
  }
  const members = all.map((plan, i) => member(plan, processes[i] as ServerProcess));
  return {
    members,
    connectString: members.map((m) => `127.0.0.1:${m.clientPort}`).join(','),
    async leader(timeoutMs = 15_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        for (const m of members) {
          if (!m.process.exited && (await m.mode()) === 'leader') return m;
        }
        if (Date.now() > deadline) return undefined;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    },
    stop: async () => {
      await Promise.allSettled(members.map((m) => m.process.stop()));
      if (all[0]) rmSync(all[0].root, { recursive: true, force: true });
    },
  };
}

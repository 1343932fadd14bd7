import { type RedisServer, startRedisServer } from '@dlock/test-utils';
import { createClient } from 'redis';
import { createClient as createClient6 } from 'redis6';

export type Redis = ReturnType<typeof createClient>;
export type Redis6 = Awaited<ReturnType<typeof connect6>>;

/** The node-redis majors the package supports (its `redis` peer range), to run suites against each. */
export const NODE_REDIS = [
  { major: 5, connect: (url: string): Promise<Redis | Redis6> => connect(url) },
  { major: 6, connect: (url: string): Promise<Redis | Redis6> => connect6(url) },
] as const;

/** `connect` with a node-redis 6 client (RESP3 by default, unlike 5). */
export async function connect6(url: string) {
  const client = createClient6({
    url,
    socket: { reconnectStrategy: (retries) => Math.min(20 * 2 ** retries, 200), connectTimeout: 2_000 },
  });
  client.on('error', () => {});
  await client.connect();
  return client;
}

/** The pid of the redis-server answering on `port`. */
async function serverPid(port: number): Promise<number | undefined> {
  const probe = createClient({ url: `redis://127.0.0.1:${port}`, socket: { reconnectStrategy: false } });
  probe.on('error', () => {});
  try {
    await within(probe.connect(), 2_000, undefined);
    const info = await within(probe.info('server'), 2_000, '');
    return Number(/process_id:(\d+)/.exec(info)?.[1]) || undefined;
  } finally {
    if (probe.isOpen) probe.destroy();
  }
}

/**
 * A connected node-redis client that reconnects quickly (tests restart servers) and never crashes the run on a
 * dropped connection.
 */
export async function connect(url: string): Promise<Redis> {
  const client = createClient({
    url,
    socket: { reconnectStrategy: (retries) => Math.min(20 * 2 ** retries, 200), connectTimeout: 2_000 },
  });
  client.on('error', () => {});
  await client.connect();
  return client;
}

/** Closes a client whatever state it is in (the server may be gone). */
export async function disconnect(client: Redis | Redis6): Promise<void> {
  if (!client.isOpen) return;
  await Promise.race([client.close(), new Promise((resolve) => setTimeout(resolve, 1_000))]).catch(() => {});
  if (client.isOpen) client.destroy();
}

/** A private redis-server that a test may pause, kill and restart empty on the same port. */
export class SideRedis {
  #server: RedisServer;

  private constructor(server: RedisServer) {
    this.#server = server;
  }

  static async start(): Promise<SideRedis> {
    return new SideRedis(await startRedisServer());
  }

  get url(): string {
    return this.#server.url;
  }

  get port(): number {
    return this.#server.port;
  }

  pause(): void {
    this.#server.process.pause();
  }

  resume(): void {
    this.#server.process.resume();
  }

  /** SIGKILL and start again on the same port: every key is gone (no persistence). */
  async restartEmpty(): Promise<void> {
    await this.#server.process.kill();
    const server = await startRedisServer({ port: this.#server.port });
    this.#server = server;
    // Another suite on this machine may have taken the port meanwhile; its server would answer our PING.
    const pid = await serverPid(server.port);
    if (pid !== server.process.pid) {
      throw new Error(`port ${server.port} was taken by process ${pid} while redis-server restarted`);
    }
  }

  async kill(): Promise<void> {
    await this.#server.process.kill();
  }

  async stop(): Promise<void> {
    await this.#server.process.stop();
  }
}

/** Calls per command since the last `CONFIG RESETSTAT`, from `INFO commandstats` (scripts' inner calls included). */
export async function commandCalls(client: Redis): Promise<Record<string, number>> {
  const info = (await client.sendCommand(['INFO', 'commandstats'])) as string;
  const calls: Record<string, number> = {};
  for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    calls[match[1] as string] = Number(match[2]);
  }
  return calls;
}

/**
 * Whether a test's client is connected and ready to send, whichever family it comes from: node-redis says so in
 * `isReady`, ioredis in `status`.
 */
export function clientReady(client: object): boolean {
  if ('isReady' in client) return client.isReady === true;
  return 'status' in client && client.status === 'ready';
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** `promise`, or `fallback` after `ms`: a probe of a server that may be frozen must not hang the test. */
export function within<T>(promise: Promise<T>, ms: number, fallback: T): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise.catch(() => fallback),
    new Promise<T>((resolve) => {
      timer = setTimeout(() => resolve(fallback), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** Polls `predicate` every 10 ms for up to `maxMs`; each probe may take at most a second. */
export async function eventually(
  predicate: () => boolean | Promise<boolean>,
  maxMs: number,
): Promise<boolean> {
  const until = performance.now() + maxMs;
  for (;;) {
    if (await within(Promise.resolve().then(predicate), 1_000, false)) return true;
    if (performance.now() > until) return false;
    await sleep(10);
  }
}

import { createServer, type Server, Socket } from 'node:net';

/**
 * `pass` forwards both ways. `blackhole` keeps every socket open and forwards nothing (a dead network that TCP does
 * not notice: only the client's own deadlines can). `refuse` resets each new connection at once (server down).
 * `stall` stops reading from the clients, so what they send piles up in their sockets until writes need draining
 * (a stalled peer), while replies already on their way still reach them; leaving it reads on, in order.
 */
export type ProxyMode = 'pass' | 'blackhole' | 'refuse' | 'stall';

export interface TcpProxy {
  readonly port: number;
  mode: ProxyMode;
  /** Sends RST on every live connection, both sides, as `ss -K` would. */
  resetAll(): void;
  /** While on, requests still reach the server but its replies are swallowed: the caller cannot know the outcome. */
  dropReplies(on: boolean): void;
  /**
   * Holds every chunk this long in each direction while passing, so a round trip costs about twice as much more
   * (the kernel here has no netem). Chunks keep their order: timers of one duration fire in the order they were set.
   * 0 (the default) forwards at once.
   */
  delayMs: number;
  readonly connections: number;
  close(): Promise<void>;
}

interface Pair {
  readonly client: Socket;
  readonly upstream: Socket;
}

/**
 * A protocol-agnostic loopback proxy for fault tests: the kernel here has no netem, so delaying, dropping and
 * partitioning traffic happens in this process instead. Bytes that arrive while blackholed are discarded, not
 * queued, as a real partition would lose them.
 */
export async function startTcpProxy(options: {
  targetPort: number;
  targetHost?: string;
  delayMs?: number;
}): Promise<TcpProxy> {
  const host = options.targetHost ?? '127.0.0.1';
  const pairs = new Set<Pair>();
  let mode: ProxyMode = 'pass';
  let dropping = false;
  let delayMs = options.delayMs ?? 0;
  const send = (to: Socket, chunk: Buffer): void => {
    if (delayMs <= 0) to.write(chunk);
    else
      setTimeout(() => {
        if (!to.destroyed) to.write(chunk);
      }, delayMs);
  };

  const server: Server = createServer((client) => {
    if (mode === 'refuse') {
      client.resetAndDestroy();
      return;
    }
    const upstream = new Socket();
    const pair = { client, upstream };
    pairs.add(pair);
    const close = (): void => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', close).on('close', close);
    upstream.on('error', close).on('close', close);
    client.on('data', (chunk: Buffer) => {
      if (mode === 'pass') send(upstream, chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if ((mode === 'pass' || mode === 'stall') && !dropping) send(client, chunk);
    });
    if (mode === 'stall') client.pause();
    upstream.connect(options.targetPort, host);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const address = server.address();
  if (typeof address !== 'object' || address === null) throw new Error('proxy did not bind');

  const resetAll = (): void => {
    for (const { client, upstream } of pairs) {
      client.resetAndDestroy();
      upstream.resetAndDestroy();
    }
    pairs.clear();
  };

  return {
    port: address.port,
    get mode() {
      return mode;
    },
    set mode(next: ProxyMode) {
      mode = next;
      for (const { client } of pairs) {
        if (next === 'stall') client.pause();
        else client.resume();
      }
    },
    resetAll,
    dropReplies: (on) => {
      dropping = on;
    },
    get delayMs() {
      return delayMs;
    },
    set delayMs(ms: number) {
      delayMs = ms;
    },
    get connections() {
      return pairs.size;
    },
    close: () =>
      new Promise<void>((resolve) => {
        resetAll();
        server.close(() => resolve());
      }),
  };
}

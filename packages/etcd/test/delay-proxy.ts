import { createServer, type Server, Socket } from 'node:net';

export interface DelayProxy {
  readonly port: number;
  close(): Promise<void>;
}

/**
 * A loopback TCP proxy that holds every chunk for `delayMs` in each direction, so a round trip costs about
 * `2 × delayMs` more (the kernel here has no netem). Chunks keep their order: timers of one duration fire in the
 * order they were set.
 */
export async function startDelayProxy(options: { targetPort: number; delayMs: number }): Promise<DelayProxy> {
  const sockets = new Set<Socket>();
  const forward = (from: Socket, to: Socket): void => {
    from.on('data', (chunk) => {
      setTimeout(() => {
        if (!to.destroyed) to.write(chunk);
      }, options.delayMs);
    });
  };
  const server: Server = createServer((client) => {
    const upstream = new Socket();
    sockets.add(client).add(upstream);
    const close = (): void => {
      sockets.delete(client);
      sockets.delete(upstream);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', close).on('close', close);
    upstream.on('error', close).on('close', close);
    forward(client, upstream);
    forward(upstream, client);
    upstream.connect(options.targetPort, '127.0.0.1');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const address = server.address();
  if (typeof address !== 'object' || address === null) throw new Error('proxy did not bind');
  return {
    port: address.port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        sockets.clear();
        server.close(() => resolve());
      }),
  };
}

import { Socket } from 'node:net';
import { freePort, type ServerProcess, startProcess, tempDir } from './process.js';

export interface RedisServer {
  readonly port: number;
  readonly url: string;
  readonly process: ServerProcess;
}

/** One PING over a raw socket: true once the server answers +PONG (not merely accepts connections). */
export function redisPing(port: number, timeoutMs = 1_000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = new Socket();
    let reply = '';
    const done = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('error', () => done(false));
    socket.on('data', (chunk) => {
      reply += chunk.toString('latin1');
      if (reply.includes('\r\n')) done(reply.startsWith('+PONG'));
    });
    socket.connect(port, '127.0.0.1', () => socket.write('PING\r\n'));
  });
}

/**
 * A private `redis-server` on a loopback port, keeping nothing on disk, so a test can pause, kill or restart it
 * (restarting on the same port gives an empty server: the fault the fencing counter must survive).
 */
export async function startRedisServer(options: { port?: number } = {}): Promise<RedisServer> {
  const port = options.port ?? (await freePort());
  const dir = tempDir('dlock-redis');
  const process = await startProcess({
    name: `redis-${port}`,
    command: 'redis-server',
    args: ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir],
    ready: () => redisPing(port),
    removeOnExit: [dir],
    timeoutMs: 10_000,
  });
  return { port, url: `redis://127.0.0.1:${port}`, process };
}

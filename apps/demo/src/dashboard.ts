import { readFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Demo, DemoUpdate } from './demo.js';

const PUBLIC = new URL('../public/', import.meta.url);
const FILES: Readonly<Record<string, { file: string; type: string }>> = {
  '/': { file: 'index.html', type: 'text/html; charset=utf-8' },
  '/dashboard.js': { file: 'dashboard.js', type: 'text/javascript; charset=utf-8' },
  '/dashboard.css': { file: 'dashboard.css', type: 'text/css; charset=utf-8' },
};

/**
 * The web dashboard: one static page, and a server-sent event stream of everything the demo reports (the
 * workers' LockClient events and the database's verdicts), replayed from the start of the current scenario for
 * a page that connects late. Two buttons post back: pause a worker, rerun. Loopback only.
 */
export class Dashboard {
  readonly #server: Server;
  #demo: Demo | undefined;
  readonly #clients = new Set<ServerResponse>();
  readonly #keepAlive: NodeJS.Timeout;
  #onIdle: (() => void) | undefined;
  #port = 0;
  /** Called when a request starts a scenario, so the command line can report its failure. */
  onRun: (run: Promise<unknown>) => void = (run) => {
    run.catch(() => {});
  };

  private constructor() {
    this.#server = createServer((req, res) => {
      this.#handle(req, res).catch((error: unknown) => {
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
        res.end(String(error));
      });
    });
    this.#keepAlive = setInterval(() => {
      for (const client of this.#clients) client.write(': keep-alive\n\n');
    }, 15_000).unref();
  }

  /**
   * Listens on 127.0.0.1:`port`. With `fallback`, a port in use falls back to any free one; without it, a busy
   * port is an error. It answers 503 until {@link attach} gives it the demo.
   */
  static async start(port: number, fallback: boolean): Promise<Dashboard> {
    const dashboard = new Dashboard();
    try {
      await dashboard.#listen(port);
    } catch (error) {
      if (!fallback || (error as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw error;
      await dashboard.#listen(0);
    }
    return dashboard;
  }

  attach(demo: Demo): void {
    this.#demo = demo;
    demo.subscribe((update) => this.#broadcast(update));
  }

  get url(): string {
    return `http://127.0.0.1:${this.#port}/`;
  }

  /** Browsers showing the dashboard now. */
  get viewers(): number {
    return this.#clients.size;
  }

  /** `fn` runs whenever the last browser disconnects. */
  onIdle(fn: () => void): void {
    this.#onIdle = fn;
  }

  async close(): Promise<void> {
    clearInterval(this.#keepAlive);
    for (const client of this.#clients) client.end();
    this.#clients.clear();
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #listen(port: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const onError = (error: Error): void => reject(error);
      this.#server.once('error', onError);
      this.#server.listen(port, '127.0.0.1', () => {
        this.#server.off('error', onError);
        this.#port = (this.#server.address() as AddressInfo).port;
        resolve();
      });
    });
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // Only pages served from this address may drive the demo (no DNS rebinding through another host name).
    const host = req.headers.host ?? '';
    if (host !== `127.0.0.1:${this.#port}` && host !== `localhost:${this.#port}`) {
      res.writeHead(403, { 'content-type': 'text/plain' }).end('forbidden host');
      return;
    }
    const url = new URL(req.url ?? '/', 'http://127.0.0.1');
    const demo = this.#demo;
    if (url.pathname === '/events' || url.pathname.startsWith('/api/')) {
      if (!demo) {
        res.writeHead(503, { 'content-type': 'text/plain', 'retry-after': '1' }).end('starting');
        return;
      }
      if (req.method === 'GET' && url.pathname === '/events') return this.#stream(demo, res);
      if (req.method === 'POST' && url.pathname === '/api/pause') {
        return this.#pause(demo, Number(url.searchParams.get('worker')), res);
      }
      if (req.method === 'POST' && url.pathname === '/api/rerun') return this.#rerun(demo, res);
    }
    const asset = FILES[url.pathname];
    if (req.method === 'GET' && asset) {
      const body = await readFile(new URL(asset.file, PUBLIC));
      res.writeHead(200, { 'content-type': asset.type, 'cache-control': 'no-store' }).end(body);
      return;
    }
    res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
  }

  #stream(demo: Demo, res: ServerResponse): void {
    res.writeHead(200, {
      'content-type': 'text/event-stream',
      'cache-control': 'no-store',
      connection: 'keep-alive',
    });
    res.write('retry: 1000\n\n');
    for (const update of demo.history) res.write(frame(update));
    this.#clients.add(res);
    res.on('close', () => {
      this.#clients.delete(res);
      if (this.#clients.size === 0) this.#onIdle?.();
    });
  }

  #pause(demo: Demo, worker: number, res: ServerResponse): void {
    if (!Number.isInteger(worker) || worker < 1 || worker > demo.settings.workers) {
      json(res, 400, { error: `worker must be 1 to ${demo.settings.workers}` });
      return;
    }
    if (demo.pause(worker)) {
      json(res, 200, { action: 'paused', worker });
      return;
    }
    // Nothing running: start a scenario in which this worker is the one frozen.
    this.onRun(demo.run({ pauseWorker: worker }));
    json(res, 202, { action: 'started', worker });
  }

  #rerun(demo: Demo, res: ServerResponse): void {
    if (demo.running) {
      json(res, 409, { error: 'a scenario is running' });
      return;
    }
    this.onRun(demo.run());
    json(res, 202, { action: 'started' });
  }

  #broadcast(update: DemoUpdate): void {
    const data = frame(update);
    for (const client of this.#clients) client.write(data);
  }
}

function frame(update: DemoUpdate): string {
  return `data: ${JSON.stringify(update)}\n\n`;
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}

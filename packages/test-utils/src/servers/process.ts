import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { createServer, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A server process a test started and must stop. Signals go to the server's pid only. */
export interface ServerProcess {
  readonly name: string;
  readonly pid: number;
  readonly exited: boolean;
  /** SIGSTOP: the server keeps its sockets open but answers nothing, like a long GC or VM pause. */
  pause(): void;
  /** SIGCONT. */
  resume(): void;
  /** SIGKILL, resolved once the process is gone (a crash: nothing flushed). */
  kill(): Promise<void>;
  /** SIGCONT then SIGTERM, SIGKILL after 10 s; resolved once the process is gone. */
  stop(): Promise<void>;
}

export interface StartProcessOptions {
  readonly name: string;
  readonly command: string;
  readonly args: readonly string[];
  /** Polled every 50 ms until it resolves true. */
  readonly ready: () => Promise<boolean>;
  /** Default 30 s. */
  readonly timeoutMs?: number;
  readonly cwd?: string;
  readonly env?: NodeJS.ProcessEnv;
  /** Directories (the server's data) to delete once the process has exited. */
  readonly removeOnExit?: readonly string[];
}

const live = new Set<ChildProcess>();
let exitHookInstalled = false;

/** A test runner that dies mid-suite must not leave servers behind on the machine. */
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once('exit', () => {
    for (const child of live) {
      try {
        child.kill('SIGCONT');
        child.kill('SIGKILL');
      } catch {
        // already gone
      }
    }
  });
}

export function tempDir(prefix: string): string {
  return mkdtempSync(join(tmpdir(), `${prefix}-`));
}

const delay = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export async function startProcess(options: StartProcessOptions): Promise<ServerProcess> {
  installExitHook();
  const logDir = tempDir(`dlock-${options.name}`);
  const logFile = join(logDir, 'server.log');
  const fd = openSync(logFile, 'a');
  const child = spawn(options.command, [...options.args], {
    cwd: options.cwd,
    env: options.env ?? process.env,
    stdio: ['ignore', fd, fd],
  });
  closeSync(fd);
  const pid = child.pid;
  if (pid === undefined) throw new Error(`${options.name}: could not start ${options.command}`);
  live.add(child);
  let exited = false;
  const exit = new Promise<void>((resolve) => {
    child.once('exit', () => {
      exited = true;
      live.delete(child);
      resolve();
    });
  });
  // The log matters only while the server runs (it explains a failed start); gone with the server, it goes too.
  void exit.then(() => {
    for (const dir of options.removeOnExit ?? []) rmSync(dir, { recursive: true, force: true });
    if (ready) rmSync(logDir, { recursive: true, force: true });
  });
  // The child must not hold the test process open, but it is still stopped on exit (above).
  child.unref();

  const waitExit = async (ms: number): Promise<boolean> => {
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), ms);
    });
    const done = await Promise.race([exit.then(() => true), timedOut]);
    clearTimeout(timer);
    return done;
  };
  const signal = (name: NodeJS.Signals): void => {
    if (!exited) child.kill(name);
  };
  // Unref'd children do not keep the loop alive, so a caller awaiting the exit would otherwise be abandoned.
  const awaitExit = async (): Promise<void> => {
    child.ref();
    await exit;
  };
  const handle: ServerProcess = {
    name: options.name,
    pid,
    get exited() {
      return exited;
    },
    pause: () => signal('SIGSTOP'),
    resume: () => signal('SIGCONT'),
    kill: async () => {
      signal('SIGKILL');
      await awaitExit();
    },
    stop: async () => {
      signal('SIGCONT');
      signal('SIGTERM');
      child.ref();
      if (!(await waitExit(10_000))) {
        signal('SIGKILL');
        await awaitExit();
      }
    },
  };

  let ready = false;
  const deadline = Date.now() + (options.timeoutMs ?? 30_000);
  for (;;) {
    if (exited) break;
    if (await options.ready().catch(() => false)) {
      ready = true;
      return handle;
    }
    if (Date.now() > deadline) break;
    await delay(50);
  }
  await handle.kill();
  const log = readFileSync(logFile, 'utf8').split('\n').slice(-30).join('\n');
  throw new Error(
    `${options.name} did not become ready (${exited ? 'it exited' : 'timed out'}). Log tail:\n${log}`,
  );
}

/** A loopback port nothing listens on right now (the kernel picks it). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => (port > 0 ? resolve(port) : reject(new Error('no port'))));
    });
  });
}

export function portOpen(port: number, host = '127.0.0.1', timeoutMs = 1_000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = new Socket();
    const done = (open: boolean): void => {
      socket.destroy();
      resolve(open);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
    socket.connect(port, host);
  });
}

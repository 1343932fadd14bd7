import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { sleep } from './helpers.js';

/** A message a fixture sends over IPC: a `type` and whatever it reports with it. */
export interface ChildMessage {
  readonly type: string;
  readonly [key: string]: unknown;
}

export interface Child {
  readonly process: ChildProcess;
  /** Every message received so far, in order. */
  readonly messages: readonly ChildMessage[];
  /** The first message of `type` at or after index `from`; rejects on an `error` message, an exit, or after `ms`. */
  next(type: string, ms: number, from?: number): Promise<ChildMessage>;
  send(message: unknown): void;
  /** Lets it close and exit, or kills it; resolves once it is gone. */
  stop(): Promise<void>;
}

/**
 * Runs `fixtures/<script>` in its own Node process, which imports the BUILT packages (as users get them): something
 * a test can freeze or kill with the whole process.
 */
export function forkFixture(script: string, args: readonly string[]): Child {
  const child = fork(fileURLToPath(new URL(`./fixtures/${script}`, import.meta.url)), [...args], {
    execArgv: [],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const messages: ChildMessage[] = [];
  child.on('message', (m: ChildMessage) => messages.push(m));
  const gone = (): boolean => child.exitCode !== null || child.signalCode !== null;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return {
    process: child,
    messages,
    async next(type, ms, from = 0) {
      const end = Date.now() + ms;
      for (;;) {
        const found = messages.slice(from).find((m) => m.type === type || m.type === 'error');
        if (found?.type === 'error' && type !== 'error') {
          throw new Error(`${script} failed: ${JSON.stringify(found)}`);
        }
        if (found) return found;
        if (Date.now() > end || gone()) throw new Error(`no "${type}" from ${script} within ${ms} ms`);
        await sleep(10);
      }
    },
    send(message) {
      if (child.connected) child.send(message as object);
    },
    async stop() {
      if (gone()) return;
      child.kill('SIGCONT');
      if (child.connected) child.send('exit');
      await Promise.race([exited, sleep(5_000)]);
      if (!gone()) child.kill('SIGKILL');
      await exited;
    },
  };
}

/**
 * The suite's side of leader-child.mjs: fork one, wait for it, ask it to lead, kill it.
 *
 *   const leader = forkLeader(backend, ttlMs);
 *   await leader.ready;                       // connected (rejects if its setup failed)
 *   const keys = await leader.lead(names, value);
 *   leader.kill();                            // SIGKILL, by its pid; `leader.exited` settles when it is gone
 *   await leader.close();                     // asks it to exit, SIGKILL after 5 s
 *
 * Every child still alive when this process exits, however it exits, is SIGKILLed by its pid.
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { withTimeout } from '../lib/index.mjs';

const CHILD = fileURLToPath(new URL('./leader-child.mjs', import.meta.url));
const alive = new Set();

process.on('exit', () => {
  for (const child of alive) child.kill('SIGKILL');
});

export function forkLeader(backend, ttlMs) {
  const child = fork(CHILD, [backend, String(ttlMs)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  alive.add(child);
  const waiting = new Set();
  let gone;
  const exited = new Promise((resolve) => {
    child.once('exit', (code, signal) => {
      alive.delete(child);
      gone = new Error(`leader process ${child.pid} exited (${signal ?? `code ${code}`})`);
      for (const w of waiting) w.reject(gone);
      resolve({ code, signal });
    });
  });
  child.on('message', (message) => {
    for (const w of [...waiting]) {
      if (message?.type === 'error') w.reject(new Error(message.message));
      else if (message?.type === w.type) w.resolve(message);
      else continue;
      waiting.delete(w);
    }
  });
  child.on('error', () => {});

  const next = (type) =>
    new Promise((resolve, reject) => {
      if (gone) return reject(gone);
      waiting.add({ type, resolve, reject });
    });

  const ready = withTimeout(next('ready'), 30_000, 'leader process start');
  ready.catch(() => {});
  return {
    pid: child.pid,
    ready,
    exited,
    async lead(names, value) {
      const leading = next('leading');
      child.send({ type: 'lead', names, value });
      return (await withTimeout(leading, 15_000, 'leader process campaign')).keys;
    },
    kill() {
      if (!gone) child.kill('SIGKILL');
    },
    async close() {
      if (gone) return;
      child.send({ type: 'close' }, () => {});
      await withTimeout(exited, 5000, 'leader process exit').catch(() => {
        child.kill('SIGKILL');
        return exited;
      });
    },
  };
}

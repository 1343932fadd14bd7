import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { newPool, PG_URL, usePrivateSchema } from './helpers.js';

const pool = newPool(2);
const tables = usePrivateSchema(pool);

const fixture = fileURLToPath(new URL('./fixtures/idle-exit.mjs', import.meta.url));

/** Runs the fixture; resolves with its exit code and output, or kills it (by pid) after `maxMs`. */
function run(mode: string, maxMs: number): Promise<{ code: number | null; out: string; ms: number }> {
  return new Promise((resolve) => {
    const started = performance.now();
    const child = spawn(process.execPath, [fixture, PG_URL, tables.name, mode], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (chunk) => {
      out += String(chunk);
    });
    child.stderr.on('data', (chunk) => {
      out += String(chunk);
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), maxMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, out, ms: performance.now() - started });
    });
  });
}

describe('nothing keeps the process alive', () => {
  it('after close(), a process that used locks, a queue and a semaphore exits by itself', async () => {
    const { code, out } = await run('close', 15_000);
    expect(out.trim()).toBe('done');
    expect(code).toBe(0);
  });

  it('without close(), the listening connection goes back once nobody waits, and the process exits', async () => {
    const { code, out } = await run('no-close', 15_000);
    expect(out.trim()).toBe('done');
    expect(code).toBe(0);
  });
});

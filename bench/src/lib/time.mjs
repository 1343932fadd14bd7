/**
 * Clocks and bounded waiting for the bench. All times are milliseconds as floats from `performance.now()`.
 *
 *   now()                          monotonic ms
 *   sleep(ms, signal?)             resolves after ms (or at once, quietly, when `signal` aborts)
 *   withTimeout(promise, ms, what) rejects with BenchTimeoutError after ms; clears its timer on settle
 *   uniqueName(prefix)             `dlock-bench:<prefix>:<random>`, so repeated runs never meet stale keys
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';

export const now = () => performance.now();

export function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, Math.max(0, ms));
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

export class BenchTimeoutError extends Error {
  constructor(what, ms) {
    super(`${what} did not finish within ${ms} ms`);
    this.name = 'BenchTimeoutError';
  }
}

export function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new BenchTimeoutError(what, ms)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

export function uniqueName(prefix) {
  return `dlock-bench:${prefix}:${randomBytes(4).toString('hex')}`;
}

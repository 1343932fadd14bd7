import { runBuiltPackage } from '@dlock/test-utils';
import { describe, expect, it } from 'vitest';

// These run the BUILT package in a child process (Node resolves '@dlock/core' to this package's own exports map),
// so they check the published entry point, its types-free runtime, and real timer behaviour.
const run = (script: string) => runBuiltPackage(new URL('..', import.meta.url), script);

describe('the built package in a real process', () => {
  it('an idle client holding a renewed lock does not keep the process alive', async () => {
    const result = await run(`
      import { LockClient, MemoryLockService } from '@dlock/core';
      const client = new LockClient(new MemoryLockService());
      const handle = await client.acquire('job', { ttlMs: 60_000 });
      console.log('held', handle.fencingToken.toString(), handle.isHeld());
    `);
    expect(result.stderr).toBe('');
    expect(result.stdout.trim()).toBe('held 1 true');
    expect(result.code).toBe(0);
    expect(result.ms).toBeLessThan(5_000);
  });

  it('a pending acquire wait keeps the process alive until it settles', async () => {
    const result = await run(`
      import { LockClient, MemoryLockService } from '@dlock/core';
      const service = new MemoryLockService();
      await new LockClient(service).acquire('job', { ttlMs: 60_000 });
      try {
        await new LockClient(service).acquire('job', { ttlMs: 1_000, waitMs: 300 });
      } catch (error) {
        console.log(error.code);
      }
    `);
    expect(result.stdout.trim()).toBe('ACQUIRE_TIMEOUT');
    expect(result.code).toBe(0);
  });

  // A service that never answers and holds nothing open (a node-redis client never connected, a fault proxy's
  // blackhole inside one process): the client's own reference must keep the process alive until the call settles.
  const hungService = `
    const hung = () => new Promise(() => {});
    const service = { acquire: hung, renew: hung, release: hung, watch: () => () => {} };
  `;

  it('an acquire on a service that never answers settles (TransportError) instead of the process exiting silently', async () => {
    const result = await run(`
      import { LockClient } from '@dlock/core';
      ${hungService}
      const client = new LockClient(service, { operationTimeoutMs: 300 });
      const started = performance.now();
      try {
        await client.acquire('job', { ttlMs: 1_000, waitMs: 200 });
        console.log('acquired?!');
      } catch (error) {
        console.log(error.code, Math.round(performance.now() - started));
      }
    `);
    expect(result.stderr).toBe('');
    const [code, ms] = result.stdout.trim().split(' ');
    expect(code).toBe('TRANSPORT');
    // Within waitMs + operationTimeoutMs (500 ms), and not before: plus slack for a loaded machine's timers.
    expect(Number(ms)).toBeGreaterThanOrEqual(450);
    expect(Number(ms)).toBeLessThan(500 + 400);
    expect(result.code).toBe(0);
  });

  it('a release on a service that never answers settles too, and close() lets the process exit', async () => {
    const result = await run(`
      import { LockClient, MemoryLockService } from '@dlock/core';
      ${hungService}
      const memory = new MemoryLockService();
      let hang = false;
      const client = new LockClient(
        {
          acquire: (r) => memory.acquire(r),
          renew: (r) => memory.renew(r),
          release: (lease) => (hang ? new Promise(() => {}) : memory.release(lease)),
          watch: () => () => {},
        },
        { operationTimeoutMs: 300 },
      );
      const handle = await client.acquire('job', { ttlMs: 60_000 });
      hang = true;
      try {
        await handle.release();
        console.log('released?!');
      } catch (error) {
        console.log(error.code);
      }
      await client.close();
      console.log('closed');
    `);
    expect(result.stderr).toBe('');
    expect(result.stdout.trim().split('\n')).toEqual(['TRANSPORT', 'closed']);
    expect(result.code).toBe(0);
    expect(result.ms).toBeLessThan(5_000);
  });
});

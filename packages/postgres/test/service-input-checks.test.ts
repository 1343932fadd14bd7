import { PostgresLockService } from '@dlock/postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newPool, uniqueName, usePrivateSchema } from './helpers.js';

// The contract suite (contract.test.ts) checks that names and metadata core would refuse are an InvalidArgumentError
// from the service called directly. What is PostgreSQL's own: that no statement was sent for them, and a name past
// the index-row limit, which failed as if the server were unreachable (TransportError) while inspect said it was free.

const pool = newPool(4);
const tables = usePrivateSchema(pool);
let service: PostgresLockService;
const signal = new AbortController().signal;

/** Text PostgreSQL cannot compress much, so a long value keeps its length in an index row. */
function incompressible(length: number): string {
  let x = 1;
  let text = '';
  for (let i = 0; i < length; i++) {
    x = (x * 48_271) % 2_147_483_647;
    text += String.fromCharCode(33 + (x % 94));
  }
  return text;
}

beforeAll(() => {
  service = new PostgresLockService({ pool, schema: tables.name, listen: false });
});

// Registered after usePrivateSchema's, so it runs before the pool is ended.
afterAll(async () => {
  await service.close();
});

describe('refused input sends no statement', () => {
  it("names core would refuse, one past PostgreSQL's index-row limit, and metadata over 1 MB", async () => {
    const before = service.statements;
    for (const name of ['', 'a\ud800', 'x'.repeat(1_025), incompressible(10_000)]) {
      const request = { name, ownerId: 'owner', ttlMs: 10_000, waitMs: 0, signal };
      const calls = [
        () => service.acquire(request),
        () => service.acquirePermit({ ...request, permits: 2 }),
        () => service.availablePermits(name, 2),
        () => service.inspectPermits(name, 2),
        () => service.inspect(name),
      ];
      for (const call of calls) await expect.soft(call()).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    }
    const name = uniqueName('metadata');
    for (const metadata of ['é'.repeat(513), 'a\ud800', 'm'.repeat(1_100_000)]) {
      const request = { name, ownerId: 'owner', ttlMs: 10_000, waitMs: 0, signal, metadata };
      await expect.soft(service.acquire(request)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      await expect
        .soft(service.acquirePermit({ ...request, permits: 2 }))
        .rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    }
    expect(service.statements).toBe(before);
  });
});

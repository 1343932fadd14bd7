// Compiled against the packed packages with plain tsc (NodeNext) and run with plain node: proves that the exports
// maps, the type declarations and the runtime entry points work for a user outside this workspace.
import { isDLockError, LockClient, MemoryLockService } from '@dlock/core';
import { FakeClock, FencedStore } from '@dlock/testing';

const clock = new FakeClock();
const client = new LockClient(new MemoryLockService({ clock }), { clock });
const store = new FencedStore<string>();
const lock = await client.acquire('smoke', { ttlMs: 1_000 });
const token: bigint = lock.fencingToken;
if (!store.write('smoke', token, 'ok').accepted) throw new Error('write rejected');
await lock.release();
const error = await client.acquire('', { ttlMs: 1_000 }).catch((e: unknown) => e);
if (!isDLockError(error) || error.code !== 'INVALID_ARGUMENT') throw new Error('expected INVALID_ARGUMENT');
await client.close();
console.log('pack-check: @dlock/core and @dlock/testing install and work on their own');

// A first look at dlock, on the in-memory backend (no servers): two clients take turns on one lock, the first is
// hit by a stop-the-world pause longer than its TTL, and the resource's fencing check rejects its stale write.
import { LockClient, MemoryLockService } from '@dlock/core';
import { FencedStore } from '@dlock/testing';

const service = new MemoryLockService();
const ledger = new FencedStore(); // stands in for a database behind @dlock/fencing-pg or @dlock/fencing-kysely
const alice = new LockClient(service);
const bob = new LockClient(service);
const log = (who, message) => console.log(`${who.padEnd(6)} ${message}`);

const a = await alice.acquire('account:42', {
  ttlMs: 500,
  onLost: (handle, reason) => log('alice', `onLost fired: token ${handle.fencingToken} lost (${reason})`),
});
log('alice', `acquired, fencing token ${a.fencingToken}`);
log(
  'alice',
  `write balance=100 with token ${a.fencingToken}: ${verdict(ledger.write('account:42', a.fencingToken, 100))}`,
);

log('alice', 'stop-the-world pause of 800 ms (GC, VM freeze): her renewals stop too');
Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 800);

const b = await bob.acquire('account:42', { ttlMs: 500, waitMs: 1_000 });
log('bob', `acquired after alice's lease expired, fencing token ${b.fencingToken}`);
log(
  'bob',
  `write balance=70 with token ${b.fencingToken}: ${verdict(ledger.write('account:42', b.fencingToken, 70))}`,
);

log('alice', `wakes up; isHeld() = ${a.isHeld()} (advisory), writes anyway as a stale client would`);
log(
  'alice',
  `write balance=150 with token ${a.fencingToken}: ${verdict(ledger.write('account:42', a.fencingToken, 150))}`,
);

await new Promise((resolve) => setTimeout(resolve, 10)); // let alice's renewal path run
log(
  'ledger',
  `final balance ${ledger.read('account:42')}, high-water mark ${ledger.highWaterMark('account:42')}`,
);
await b.release();
await Promise.all([alice.close(), bob.close()]);

function verdict(result) {
  return result.accepted ? 'accepted' : `REJECTED (stale: high-water mark is ${result.highWaterMark})`;
}

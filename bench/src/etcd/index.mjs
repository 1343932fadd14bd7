/**
 * The etcd suite: a raw two-transaction floor, @dlock/etcd (a lease per lock, session mode, session mode with a
 * longer session lease) and etcd3's own lock(), side by side against one etcd (DLOCK_BENCH_ETCD_ENDPOINT, default
 * http://127.0.0.1:2379). Run through `node src/run.mjs etcd` (or `pnpm bench`); flags in ../lib/suite.mjs.
 */
import { runSuite } from '../lib/index.mjs';
import { ETCD_ENDPOINT, serverVersion } from './client.mjs';
import { dlockSubject } from './dlock.mjs';
import { etcd3LockSubject } from './etcd3-lock.mjs';
import { rawSubject } from './raw.mjs';

const notes = [
  '*requests*: gRPC messages this process sent, counted by a client interceptor: each unary call and each message ' +
    'written on a stream (a keep-alive, a watch create or cancel) is one. *client CPU*: `process.cpuUsage()`.',
  'Session mode with `session: true` makes the session lease exactly as long as the lock TTL, so before a lock ' +
    'joins it the session is refreshed by a keep-alive sent alongside the write (3 requests, still 2 round ' +
    'trips); with `session: { ttlMs: 15000 }` most acquires skip it (2 requests). (C) is not run for that row: its ' +
    'locks would live 15 s, not 3 s.',
];

await runSuite({
  backend: 'etcd',
  title: 'etcd',
  server: { name: 'etcd', version: await serverVersion(), address: ETCD_ENDPOINT },
  subjects: [
    rawSubject(),
    dlockSubject({ label: 'session', session: true, notes }),
    { ...dlockSubject({ label: 'session 15 s', session: { ttlMs: 15_000 }, notes }), hold: undefined },
    dlockSubject({ label: 'lease per lock', session: false, notes }),
    etcd3LockSubject(),
  ],
  // Many short alternating rounds: on a shared 2-core machine, load comes in bursts that long rounds would pin on one subject.
  uncontended: { iterations: 4000, rounds: 40 },
  contended: { workers: [8, 64], holdMs: 2, durationMs: 5000 },
  held: { locks: 1000, ttlMs: 3000, durationMs: 10_000 },
  notes,
});

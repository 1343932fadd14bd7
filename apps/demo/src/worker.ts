/**
 * One worker of the ledger, in its own thread: for each of its deposits it takes the account's lock, reads the
 * balance, works a little, writes `balance + amount` and releases. When told to, it freezes its whole thread with
 * `Atomics.wait` while it holds the lock — a real stop-the-world pause: its event loop, its lease renewals and its
 * connection all stop, as in a long GC pause or a VM freeze.
 */
import { performance } from 'node:perf_hooks';
import { parentPort, workerData } from 'node:worker_threads';
import { LockClient, type LockHandle } from '@dlock/core';
import { connectLockService } from './lock-services.js';
import type { DepositRef, TimelineEvent } from './timeline.js';
import type { MainMessage, WorkerMessage, WorkerSetup } from './worker-protocol.js';

const setup = workerData as WorkerSetup;
const port = parentPort;
if (!port) throw new Error('worker.js must run in a worker thread');

/** Scenario time of a monotonic instant of this thread; the main thread computes the same on its own clock. */
let epoch = performance.timeOrigin + performance.now();
const toT = (monotonic: number): number => performance.timeOrigin + monotonic - epoch;
const now = (): number => toT(performance.now());

type DbReply = Extract<MainMessage, { kind: 'reply' }>;
const pending = new Map<number, { resolve: (r: DbReply) => void; reject: (e: Error) => void }>();
let nextId = 1;
let pauseRequested = false;
let go: () => void = () => {};
const started = new Promise<void>((resolve) => {
  go = resolve;
});

const onMessage = (message: MainMessage): void => {
  if (message.kind === 'pause-next') {
    pauseRequested = true;
    return;
  }
  if (message.kind === 'go') {
    epoch = message.epoch;
    go();
    return;
  }
  const call = pending.get(message.id);
  if (!call) return;
  pending.delete(message.id);
  if (message.kind === 'reply') call.resolve(message);
  else call.reject(new Error(message.message));
};
port.on('message', onMessage);

function send(message: WorkerMessage): void {
  port?.postMessage(message);
}

function emit(event: DistributiveOmit<TimelineEvent, 'run' | 'worker' | 't'> & { t?: number }): void {
  send({
    kind: 'event',
    event: { run: setup.run, worker: setup.worker, t: now(), ...event } as TimelineEvent,
  });
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/** The database lives in the main thread; this is the worker's connection to it. */
function database(
  message: DistributiveOmit<Extract<WorkerMessage, { kind: 'read' | 'write' }>, 'id' | 'sentAt'>,
) {
  const id = nextId++;
  return new Promise<DbReply>((resolve, reject) => {
    pending.set(id, { resolve, reject });
    send({ ...message, id, sentAt: now() } as WorkerMessage);
  });
}

function freeze(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Resolves when the handle's signal fires (onLost), or after `ms` if it never does. */
function lossNoticed(handle: LockHandle, ms: number): Promise<void> {
  if (handle.signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    handle.signal.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });
}

async function main(): Promise<void> {
  const connected = await connectLockService(setup.lock, setup.ttlMs, setup.servicePort);
  const client = new LockClient(connected.service, { operationTimeoutMs: 3_000 });
  // The client's own event stream, forwarded as is: the dashboard draws what the library reports.
  client.events.on('acquired', (e) =>
    emit({
      type: 'acquired',
      t: toT(e.at),
      token: String(e.fencingToken),
      ttlMs: e.ttlMs,
      expiresAt: toT(e.expiresAt),
    }),
  );
  client.events.on('renewed', (e) =>
    emit({ type: 'renewed', t: toT(e.at), token: String(e.fencingToken), expiresAt: toT(e.expiresAt) }),
  );
  client.events.on('renew-failed', (e) =>
    emit({ type: 'renew-failed', t: toT(e.at), token: String(e.fencingToken), failures: e.failures }),
  );
  client.events.on('lost', (e) =>
    emit({ type: 'lost', t: toT(e.at), token: String(e.fencingToken), reason: e.reason }),
  );
  client.events.on('released', (e) =>
    emit({ type: 'released', t: toT(e.at), token: String(e.fencingToken) }),
  );

  try {
    send({ kind: 'ready' });
    await started;
    let frozen = false;
    for (const [index, plan] of setup.deposits.entries()) {
      const deposit: DepositRef = { worker: setup.worker, iteration: index + 1, amount: plan.amount };
      for (let tries = 1; ; tries++) {
        emit({ type: 'waiting', iteration: deposit.iteration });
        const handle = await client.acquire(setup.lockName, { ttlMs: setup.ttlMs, waitMs: setup.waitMs });
        try {
          const read = await database({ kind: 'read', token: handle.fencingToken });
          if (!read.accepted) {
            await lossNoticed(handle, setup.ttlMs + 2_000);
            continue;
          }
          const freezeNow = setup.pauseAt === deposit.iteration && !frozen;
          await sleep(freezeNow ? setup.workBeforeFreezeMs : plan.workMs);
          // The check careful code makes before writing. It passes — and a pause can still fall right after it.
          if (handle.signal.aborted) continue;
          if (pauseRequested || freezeNow) {
            pauseRequested = false;
            frozen = true;
            emit({ type: 'pause-start', token: String(handle.fencingToken), ms: setup.pauseMs });
            const frozenAt = performance.now();
            freeze(setup.pauseMs);
            emit({ type: 'pause-end', token: String(handle.fencingToken), ms: performance.now() - frozenAt });
          }
          // Awake, and still holding the handle as far as this code knows: it writes at once.
          const write = await database({
            kind: 'write',
            token: handle.fencingToken,
            version: read.version,
            from: read.balance,
            deposit,
          });
          if (write.accepted) {
            emit({ type: 'deposited', iteration: deposit.iteration, amount: deposit.amount, tries });
            break;
          }
          // The gate refused the token: the lock is gone. The client reports it too (onLost, signal); then the
          // deposit starts over under a new lock, from a fresh read.
          await lossNoticed(handle, setup.ttlMs + 2_000);
        } finally {
          await handle.release().catch(() => {});
        }
      }
    }
    emit({ type: 'worker-done' });
    send({ kind: 'done' });
  } finally {
    // close() rejects when a release could not get through (that lock then runs out by its TTL): reported as the
    // worker's failure below, after its connection is closed all the same.
    try {
      await client.close();
    } finally {
      await connected.close().catch(() => {});
      port?.off('message', onMessage);
    }
  }
}

main().catch((error: unknown) => {
  send({ kind: 'failed', message: error instanceof Error ? error.message : String(error) });
  port?.off('message', onMessage);
});

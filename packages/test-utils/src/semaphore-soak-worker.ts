// One process of a semaphore soak: `workers` loops of acquire → hold a random while, watching the permit's signal →
// release, on the client a backend's fixture module makes. Writes one JSON line per event to stdout (see SoakLine)
// and exits by itself once its duration is over, whatever state the backend is in.
//   node semaphore-soak-worker.js '<SoakWorkerSpec as JSON>'
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import type { HoldRecord } from './semaphore-history.js';
import {
  machineMs,
  type SoakBackendFactory,
  type SoakLine,
  type SoakPermit,
  type SoakSemaphore,
  type SoakWorkerSpec,
} from './semaphore-soak-types.js';

/** Time left after the duration to let go of permits and close, before the process exits regardless. */
const CLOSE_GRACE_MS = 3_000;

const spec = JSON.parse(process.argv[2] ?? '{}') as SoakWorkerSpec;
const emit = (line: SoakLine): void => {
  process.stdout.write(`${JSON.stringify(line)}\n`);
};
const exit = (code: number): void => {
  process.stdout.write('', () => process.exit(code));
};
/** How long the test waits for a process to say it is ready; a process not ready by then is given up anyway. */
const START_GRACE_MS = 20_000;
// A backend that hangs a close, or a pause that ran past the end, must not keep the process: it ends on its own.
// The run's own bound starts at 'ready': on a loaded machine starting up took 8–14 s, and counted against the close
// grace it ended healthy processes with code 3 before they wrote their summary.
const lastResort = (ms: number): NodeJS.Timeout => setTimeout(() => exit(3), ms).unref();
let guard = lastResort(START_GRACE_MS + spec.durationMs + spec.waitMs + CLOSE_GRACE_MS);

const errorKey = (error: unknown): string => {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string') return code;
  return error instanceof Error ? error.name : String(error);
};
const count = (counts: Record<string, number>, error: unknown): void => {
  const key = errorKey(error);
  counts[key] = (counts[key] ?? 0) + 1;
};
/** A client's monotonic instant (performance.now()) on the machine clock: both run on CLOCK_MONOTONIC. */
const onMachineClock = (monotonic: number): number => machineMs() - performance.now() + monotonic;

/** Resolves after `ms`, or as soon as `signal` aborts; never rejects. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) {
      resolve();
      return;
    }
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}

const errors: Record<string, number> = {};
const releaseErrors: Record<string, number> = {};
let holds = 0;

/** One hold, from the resolved acquire to the moment the worker stopped relying on it. */
async function hold(worker: number, permit: SoakPermit, stop: AbortSignal): Promise<void> {
  const start = machineMs();
  const token = String(permit.fencingToken);
  emit({ type: 'acquired', process: spec.label, worker, slot: permit.slot, token, at: start });
  let lostAt: number | undefined;
  const onLost = (): void => {
    lostAt = machineMs();
  };
  if (permit.signal.aborted) onLost();
  else permit.signal.addEventListener('abort', onLost, { once: true });
  const ms = spec.holdMinMs + Math.random() * (spec.holdMaxMs - spec.holdMinMs);
  await pause(ms, AbortSignal.any([permit.signal, stop]));

  let end: number;
  let outcome: HoldRecord['outcome'];
  if (lostAt !== undefined) {
    end = lostAt;
    outcome = 'lost';
    // Lost already: release() rejects with the loss, and still sends the owner-checked delete.
    await permit.release().catch(() => {});
  } else {
    // The work is over once release is called: the service may hand the slot on before its reply gets here.
    end = machineMs();
    try {
      await permit.release();
      outcome = 'released';
    } catch (error) {
      count(releaseErrors, error);
      // A window that closed before the call is a loss; a release the service may not have heard of (transport)
      // still ended the hold at the call, and the lease runs out on the server by its TTL.
      outcome = errorKey(error) === 'LOCK_LOST' ? 'lost' : 'released';
    }
  }
  permit.signal.removeEventListener('abort', onLost);
  holds += 1;
  const validUntil = onMachineClock(permit.expiresAt);
  emit({
    type: 'hold',
    process: spec.label,
    worker,
    slot: permit.slot,
    token,
    start,
    end,
    validUntil,
    outcome,
  });
}

async function run(
  semaphore: SoakSemaphore,
  worker: number,
  stop: AbortSignal,
  deadline: number,
): Promise<void> {
  while (!stop.aborted) {
    let permit: SoakPermit;
    try {
      const waitMs = Math.max(1, Math.min(spec.waitMs, Math.ceil(deadline - machineMs())));
      permit = await semaphore.acquire({ waitMs, signal: stop });
    } catch (error) {
      if (stop.aborted) break;
      count(errors, error);
      // A closed or unreachable service answers at once: no busy loop against it.
      await pause(20, stop);
      continue;
    }
    await hold(worker, permit, stop);
  }
}

try {
  const factory = (
    await import(spec.factory.startsWith('file:') ? spec.factory : pathToFileURL(spec.factory).href)
  ).default as SoakBackendFactory;
  const backend = await factory(spec.config);
  const semaphore = backend.client.semaphore(spec.name, { permits: spec.permits, ttlMs: spec.ttlMs });
  clearTimeout(guard);
  guard = lastResort(spec.durationMs + spec.waitMs + CLOSE_GRACE_MS);
  emit({ type: 'ready', process: spec.label, pid: process.pid });
  const deadline = machineMs() + spec.durationMs;
  const stop = new AbortController();
  setTimeout(() => stop.abort(), spec.durationMs);
  // The test may end a process early: it lets go of its permits and exits as at the end of its duration.
  process.once('SIGTERM', () => stop.abort());
  await Promise.all(
    Array.from({ length: spec.workers }, (_, worker) => run(semaphore, worker, stop.signal, deadline)),
  );
  await backend.close().catch(() => {});
  emit({ type: 'summary', process: spec.label, holds, errors, releaseErrors });
  exit(0);
} catch (error) {
  emit({ type: 'fatal', process: spec.label, message: String((error as Error)?.stack ?? error) });
  exit(2);
}

/**
 * One measured window of the semaphores suite: every worker of one subject loops acquire (waiting as long as it
 * takes) → hold → release on one semaphore until the window ends, and the window checks the limit as it goes.
 *
 *   const w = await runWindow({ workers, name, permits, ttlMs, holdMs, durationMs, counters });
 *   → { grants, inWindow, perWorker, gaps, requests, commands, cpuSeconds, maxHolders, overLimit,
 *       slotOverlaps, tokenRegressions, timeouts, errors, firstError, unfinished }
 *
 * A worker is `{ acquire(name, { permits, ttlMs, waitMs, signal }) → Promise<{ slot?, token?, release() } | null> }`.
 * The window ends by aborting `signal`, which every subject honours by giving up its wait.
 *
 * Holders are counted from the moment a grant resolves here to the moment its holder calls release(): a grant can
 * only follow a release the server has already handled, so a grant seen while `permits` others are still counted
 * is a real breach (`overLimit`), never an artefact of reply order. Where a subject names slots, two holders on one
 * slot (`slotOverlaps`) and a slot's token not rising (`tokenRegressions`) are breaches too.
 *
 * The handoff gap pairs each grant with the oldest release not yet followed by a grant: release → next grant, in
 * time order. The first `permits` grants of a window (free permits, nobody released) have no gap.
 */
import { setMaxListeners } from 'node:events';
import { cpuSeconds, now, sleep } from '../lib/index.mjs';

const describe = (error) => (error instanceof Error ? error.message : String(error));

/** Snapshot of a counter that may be missing (NaN) or reset under us (NaN too: no figure rather than a wrong one). */
async function reading(count) {
  if (typeof count !== 'function') return Number.NaN;
  try {
    return await count();
  } catch {
    return Number.NaN;
  }
}

/**
 * @param {object} o
 * @param {object[]} o.workers
 * @param {string} o.name
 * @param {number} o.permits
 * @param {number} o.ttlMs
 * @param {number} o.holdMs
 * @param {number} o.durationMs
 * @param {{ requests?: () => Promise<number>, commands?: () => Promise<number> }} o.counters
 * @param {number} [o.graceMs]   how long stragglers may take to finish after the window
 */
export async function runWindow({
  workers,
  name,
  permits,
  ttlMs,
  holdMs,
  durationMs,
  counters,
  graceMs = 5000,
}) {
  const controller = new AbortController();
  const { signal } = controller;
  // Every worker's pending acquire listens on this one signal.
  setMaxListeners(0, signal);

  /** Grants and releases in the order they happened (one event loop, a monotonic clock: push order is time order). */
  const events = [];
  const perWorker = new Array(workers.length).fill(0);
  const slotHolder = new Map();
  const lastToken = new Map();
  let holders = 0;
  let maxHolders = 0;
  let overLimit = 0;
  let slotOverlaps = 0;
  let tokenRegressions = 0;
  let grants = 0;
  let inWindow = 0;
  let timeouts = 0;
  let errors = 0;
  let firstError;

  const requests0 = await reading(counters.requests);
  const commands0 = await reading(counters.commands);
  const cpu0 = process.cpuUsage();
  const start = now();
  const end = start + durationMs;
  const stop = setTimeout(() => controller.abort(), durationMs);

  const loop = async (w) => {
    const worker = workers[w];
    while (!signal.aborted) {
      let permit;
      try {
        permit = await worker.acquire(name, { permits, ttlMs, waitMs: durationMs + graceMs, signal });
      } catch (error) {
        if (signal.aborted) return;
        errors += 1;
        firstError ??= describe(error);
        await sleep(10, signal); // a failing backend must not turn this loop into a busy spin
        continue;
      }
      if (!permit) {
        if (signal.aborted) return;
        timeouts += 1;
        continue;
      }
      const grantedAt = now();
      grants += 1;
      if (holders >= permits) overLimit += 1;
      holders += 1;
      maxHolders = Math.max(maxHolders, holders);
      const { slot, token } = permit;
      if (slot !== undefined) {
        if (slotHolder.has(slot)) slotOverlaps += 1;
        slotHolder.set(slot, w);
        if (token !== undefined) {
          const last = lastToken.get(slot);
          if (last !== undefined && token <= last) tokenRegressions += 1;
          lastToken.set(slot, token);
        }
      }
      events.push({ grant: true, at: grantedAt, worker: w });
      if (grantedAt < end) {
        inWindow += 1;
        perWorker[w] += 1;
      }
      await sleep(holdMs);
      holders -= 1;
      if (slot !== undefined && slotHolder.get(slot) === w) slotHolder.delete(slot);
      events.push({ grant: false, at: now(), worker: w });
      try {
        await permit.release();
      } catch (error) {
        errors += 1;
        firstError ??= describe(error);
      }
    }
  };

  const done = Promise.all(workers.map((_, w) => loop(w)));
  const finished = await Promise.race([done.then(() => true), sleep(durationMs + graceMs).then(() => false)]);
  clearTimeout(stop);
  controller.abort();
  const cpu = cpuSeconds(cpu0);
  const requests1 = await reading(counters.requests);
  const commands1 = await reading(counters.commands);
  const delta = (after, before) => (after >= before ? after - before : Number.NaN);

  const gaps = [];
  const released = [];
  let next = 0;
  for (const e of events) {
    if (!e.grant) released.push(e.at);
    else if (next < released.length) gaps.push(e.at - released[next++]);
  }

  return {
    durationMs,
    grants,
    inWindow,
    perWorker,
    gaps,
    requests: delta(requests1, requests0),
    commands: delta(commands1, commands0),
    cpuSeconds: cpu,
    maxHolders,
    overLimit,
    slotOverlaps,
    tokenRegressions,
    timeouts,
    errors,
    firstError,
    unfinished: !finished,
  };
}

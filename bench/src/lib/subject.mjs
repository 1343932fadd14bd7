/**
 * The subject interface: one lock implementation under test (a raw baseline, an @dlock adapter or a peer library).
 * The scenario runners only ever call these members; everything library-specific lives in the subject.
 *
 * @typedef {object} Held            one granted lock
 * @property {() => Promise<void>} release
 *
 * @typedef {object} AcquireOptions
 * @property {number} ttlMs          lease length asked of the server
 * @property {number} waitMs         how long to keep trying; 0 = one attempt. Must stay bounded by this.
 * @property {AbortSignal} [signal]  aborts a pending wait when a scenario's time cap is hit (honour it if you can)
 *
 * @typedef {object} HoldOptions
 * @property {number} ttlMs          lease length; the subject keeps it alive by its own renewal until release
 * @property {() => void} onLost     call when the library reports the lock lost
 *
 * @typedef {object} Subject
 * @property {string} name           row label, e.g. 'redlock'
 * @property {string} version        exact installed version (see env.mjs packageVersion)
 * @property {boolean} [baseline]    true for the raw floor every other row is compared with (one per suite)
 * @property {string} [config]       one line on how it is configured (retry delays, …), printed under the tables
 * @property {() => Promise<void>} setup                connect; throw to drop the subject from the run
 * @property {(name: string, o: AcquireOptions) => Promise<Held | null>} acquire   null = not granted within waitMs
 * @property {(name: string, o: HoldOptions) => Promise<Held>} [hold]   acquire with auto-renewal (scenario C)
 * @property {() => Promise<number>} [countRequests]    cumulative requests this process has sent to the server
 *                                                      (round-trip commands, pipelined ones each counted; not
 *                                                      its own measuring probes); scenarios use deltas
 * @property {() => Promise<number>} [countCommands]    optional second view: cumulative work the server reports
 *                                                      (e.g. Redis INFO commandstats, including commands run inside
 *                                                      scripts; server-wide, so only meaningful on a quiet server)
 * @property {() => Promise<void>} close                release connections; must not hang
 */

const REQUIRED = ['setup', 'acquire', 'close'];

/** Throws a TypeError naming the first missing member; returns the subject. */
export function checkSubject(subject) {
  if (typeof subject?.name !== 'string' || typeof subject.version !== 'string') {
    throw new TypeError('a subject needs string `name` and `version`');
  }
  for (const m of REQUIRED) {
    if (typeof subject[m] !== 'function') throw new TypeError(`subject ${subject.name}: missing ${m}()`);
  }
  return subject;
}

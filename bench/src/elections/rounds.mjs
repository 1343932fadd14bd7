/**
 * The two measurements of the elections suite. Times are `performance.now()` in the suite's process, each taken
 * in the callback that sees the event (a campaign resolving, an observer yielding), not by polling for it.
 *
 *   crashRounds(o)    a leader process per round holds one election per subject; the suite's standbys campaign
 *                     and its observers watch; one SIGKILL ends every leader at the same instant. Per subject:
 *                     kill → the standby's campaign resolves, and kill → an observer yields the standby.
 *   resignRounds(o)   leader, standby and observer are three instances in this process (connections of their
 *                     own): resign() → the standby's campaign resolves, resign() → the observer yields the
 *                     standby, and proclaim() → the observer yields the new value.
 */
import { now, sleep, uniqueName, withTimeout } from '../lib/index.mjs';
import { forkLeader } from './leader-process.mjs';

/** Longest wait for a standby to take over after a crash: several of the longest leases any backend grants. */
const TAKEOVER_CAP_MS = 20_000;
const STEP_CAP_MS = 10_000;

const describe = (error) => (error instanceof Error ? error.message : String(error));

function tally() {
  return { samples: {}, failures: 0, firstError: undefined };
}

function sample(t, what, ms) {
  t.samples[what] ??= [];
  t.samples[what].push(ms);
}

function fail(t, error) {
  t.failures += 1;
  t.firstError ??= describe(error);
}

/** Resolves once `test()` holds, checking every few ms; rejects after `ms`. */
async function until(test, ms, what) {
  const deadline = now() + ms;
  while (!test()) {
    if (now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(5);
  }
}

/** An observer's callbacks with their times, and the first time it yielded `key`. */
function watchLog(instance, name) {
  const seen = [];
  const stop = instance.observe(name, (key) => seen.push({ at: now(), key }));
  const firstAt = (key) => seen.find((e) => e.key === key)?.at;
  return { stop, firstAt, saw: (key) => firstAt(key) !== undefined };
}

/** A campaign whose `elected` carries the time it resolved at (the first callback attached to it). */
function campaignTimed(instance, name, value) {
  const candidate = instance.campaign(name, value);
  const elected = candidate.elected.then((result) => ({ ...result, at: now() }));
  elected.catch(() => {});
  return { ...candidate, elected };
}

/**
 * @param {object} o
 * @param {string} o.backend
 * @param {object[]} o.subjects
 * @param {Map<string, object>} o.standbys   subject key → instance
 * @param {Map<string, object>} o.observers  subject key → instance
 * @param {number} o.rounds
 * @param {number} o.ttlMs
 * @param {(msg: string) => void} o.log
 */
export async function crashRounds({ backend, subjects, standbys, observers, rounds, ttlMs, log }) {
  const results = new Map(subjects.map((s) => [s.key, tally()]));
  const grantedTtl = new Map();
  let leader = forkLeader(backend, ttlMs);
  try {
    for (let round = 0; round < rounds; round++) {
      await leader.ready;
      const names = Object.fromEntries(subjects.map((s) => [s.key, uniqueName(`crash-${s.key}`)]));
      let keys;
      try {
        keys = await leader.lead(names, `leader-${round}`);
      } catch (error) {
        for (const t of results.values()) fail(t, error);
        leader.kill();
        await leader.exited;
        leader = forkLeader(backend, ttlMs);
        continue;
      }
      // The next leader starts now, while this round settles, so that its start-up is done before the takeover.
      const next = round + 1 < rounds ? forkLeader(backend, ttlMs) : undefined;
      const parts = subjects.map((subject) => ({
        subject,
        watch: watchLog(observers.get(subject.key), names[subject.key]),
        standby: undefined,
      }));
      try {
        await Promise.all(
          parts.map(async (p) => {
            await until(() => p.watch.saw(keys[p.subject.key]), STEP_CAP_MS, 'observer sees the leader');
            // A polling observer and a polling standby started together would poll in step; in life they do not.
            await sleep(Math.random() * (p.subject.retryMs ?? 0));
            p.standby = campaignTimed(standbys.get(p.subject.key), names[p.subject.key], `standby-${round}`);
          }),
        );
        // A crash lands anywhere in the leader's renewal cycle (a third of the TTL).
        await sleep(250 + Math.random() * (ttlMs / 3));
        const killedAt = now();
        leader.kill();
        await Promise.all(
          parts.map(async ({ subject, watch, standby }) => {
            const t = results.get(subject.key);
            try {
              const won = await withTimeout(standby.elected, TAKEOVER_CAP_MS, `${subject.name} takeover`);
              sample(t, 'takeover', won.at - killedAt);
              if (won.ttlMs)
                grantedTtl.set(subject.key, Math.max(grantedTtl.get(subject.key) ?? 0, won.ttlMs));
              await until(() => watch.saw(won.key), STEP_CAP_MS, `${subject.name} observer`);
              sample(t, 'observed', watch.firstAt(won.key) - killedAt);
            } catch (error) {
              fail(t, error);
            }
          }),
        );
      } catch (error) {
        for (const t of results.values()) fail(t, error);
        leader.kill();
      } finally {
        for (const { standby, watch } of parts) {
          if (standby) await withTimeout(standby.resign(), STEP_CAP_MS, 'standby resign').catch(() => {});
          await withTimeout(watch.stop(), STEP_CAP_MS, 'observer stop').catch(() => {});
        }
      }
      await leader.exited;
      const takeovers = subjects.map((s) => results.get(s.key).samples.takeover?.at(-1)?.toFixed(0) ?? '—');
      log(`crash ${round + 1}/${rounds}: takeover ${takeovers.join(' / ')} ms`);
      leader = next;
    }
  } finally {
    leader?.kill();
    await leader?.exited;
  }
  return { results, grantedTtl };
}

/**
 * @param {object} o
 * @param {object[]} o.subjects
 * @param {Map<string, object>} o.leaders
 * @param {Map<string, object>} o.standbys
 * @param {Map<string, object>} o.observers
 * @param {number} o.rounds
 * @param {(msg: string) => void} o.log
 */
export async function resignRounds({ subjects, leaders, standbys, observers, rounds, log }) {
  const results = new Map(subjects.map((s) => [s.key, tally()]));
  for (let round = 0; round < rounds; round++) {
    // Rotate the order so that drift of the machine does not fall on one subject.
    const order = subjects.map((_, i) => subjects[(i + round) % subjects.length]);
    for (const subject of order) {
      const t = results.get(subject.key);
      const name = uniqueName(`resign-${subject.key}`);
      let leader;
      let standby;
      let watch;
      try {
        leader = campaignTimed(leaders.get(subject.key), name, `a-${round}`);
        const led = await withTimeout(leader.elected, STEP_CAP_MS, 'leader campaign');
        watch = watchLog(observers.get(subject.key), name);
        await until(() => watch.saw(led.key), STEP_CAP_MS, 'observer sees the leader');
        // Random phases between the observer's polls, the standby's and the resign: only pollers need them.
        const jitterMs = subject.retryMs ?? 0;
        await sleep(Math.random() * jitterMs);
        standby = campaignTimed(standbys.get(subject.key), name, `b-${round}`);
        await sleep(100 + Math.random() * jitterMs);
        const resignedAt = now();
        await leader.resign();
        const won = await withTimeout(standby.elected, STEP_CAP_MS, 'takeover');
        sample(t, 'takeover', won.at - resignedAt);
        await until(() => watch.saw(won.key), STEP_CAP_MS, 'observer sees the new leader');
        sample(t, 'observed', watch.firstAt(won.key) - resignedAt);
        if (standby.proclaim) {
          const value = `b2-${round}`;
          const proclaimedAt = now();
          await standby.proclaim(value);
          await until(() => watch.saw(value), STEP_CAP_MS, 'observer sees the proclaimed value');
          sample(t, 'proclaimed', watch.firstAt(value) - proclaimedAt);
        }
      } catch (error) {
        fail(t, error);
      } finally {
        for (const c of [standby, leader]) {
          if (c) await withTimeout(c.resign(), STEP_CAP_MS, 'resign').catch(() => {});
        }
        if (watch) await withTimeout(watch.stop(), STEP_CAP_MS, 'observer stop').catch(() => {});
      }
    }
    if ((round + 1) % 5 === 0 || round + 1 === rounds) log(`resign ${round + 1}/${rounds}`);
  }
  return { results };
}

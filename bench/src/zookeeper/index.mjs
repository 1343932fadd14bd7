/**
 * The ZooKeeper suite: the lock recipe written by hand on node-zookeeper-client (the floor) and @dlock/zookeeper,
 * side by side against one ZooKeeper (DLOCK_BENCH_ZK_CONNECT, default 127.0.0.1:2181). Run through
 * `node src/run.mjs zookeeper` (or `pnpm bench`); flags in ../lib/suite.mjs.
 *
 * Beyond the shared tables, (B) is checked for what the recipe promises: grants in arrival order (each grant's
 * node is newer than the previous grant's) and one watch notification per release (no herd).
 */
import { fmt, parseFlags, runSuite } from '../lib/index.mjs';
import { serverVersion, ZK_CONNECT } from './client.mjs';
import { dlockSubject } from './dlock.mjs';
import { rawSubject } from './raw.mjs';

const flags = parseFlags(process.argv.slice(2));
const CONTENDED_MS = flags.quick ? 1500 : 5000;
const notes = [
  '*requests*: ZooKeeper requests this process sent through the subject’s client (pings excluded). *client CPU*: ' +
    '`process.cpuUsage()`. The raw recipe sends its requests one after the other; @dlock/zookeeper lists the ' +
    'children in the same round trip as the create and takes the fencing token (the czxid) from the create’s reply.',
  'In (C), @dlock/zookeeper grants carry the session timeout (10 s) as their TTL whatever TTL was asked for, and ' +
    'renews with one `multi` of existence checks per 100 locks; the raw recipe’s locks simply live with the session.',
];

/** Per subject: when each contended name was first asked for, its grants in order and its releases. */
function tally(parentOf) {
  const names = new Map();
  const entry = (name) => {
    let e = names.get(name);
    if (!e) {
      e = { start: performance.now(), grants: [], releases: [] };
      names.set(name, e);
    }
    return e;
  };
  return {
    /** Called as each acquire begins: the window of a contended run starts with its first call. */
    started: (name) => void entry(name),
    granted: (name, token) => entry(name).grants.push({ at: performance.now(), token }),
    released: (name) => entry(name).releases.push(performance.now()),
    /** One line per contended name (`dlock-bench:b<workers>-…`). */
    summarize(subject, notifications) {
      const lines = [];
      for (const [name, e] of names) {
        const workers = /^dlock-bench:b(\d+)-/.exec(name)?.[1];
        if (!workers) continue;
        const end = e.start + CONTENDED_MS;
        const grants = e.grants.filter((g) => g.at < end);
        let outOfOrder = 0;
        for (let i = 1; i < grants.length; i++) if (grants[i].token <= grants[i - 1].token) outOfOrder += 1;
        // When the window closes, every waiter's budget runs out together and each leaves the queue, which also
        // notifies its successor without being a release: count up to 100 ms before that.
        const cut = end - 100;
        const releases = e.releases.filter((at) => at < cut).length;
        const wakeups = (notifications.get(parentOf(name)) ?? []).filter(
          (at) => at >= e.start && at < cut,
        ).length;
        lines.push(
          `${subject}, ${workers} workers: ${fmt(grants.length)} grants, ${outOfOrder} out of arrival order; ` +
            `${fmt(wakeups)} watch notifications for ${fmt(releases)} releases (until 0.1 s before the window closed) ` +
            `(${fmt(releases ? wakeups / releases : Number.NaN, 3)} per release).`,
        );
      }
      return lines;
    },
  };
}

function withSummary(make, label, parentOf) {
  const t = tally(parentOf);
  const subject = make({ tally: t });
  const close = subject.close;
  return {
    ...subject,
    async close() {
      // runSuite builds its report after closing the subjects, so these lines still make it in.
      if (subject.notifications) notes.push(...t.summarize(label, subject.notifications()));
      await close();
    },
  };
}

const raw = withSummary(rawSubject, 'raw recipe', (name) => `/dlock-bench/raw/${name}`);
const dlock = withSummary(dlockSubject, '@dlock/zookeeper', (name) => `/dlock-bench/dlock/${name}`);

await runSuite({
  backend: 'zookeeper',
  title: 'ZooKeeper',
  server: { name: 'ZooKeeper', version: await serverVersion(), address: ZK_CONNECT },
  subjects: [raw, dlock],
  uncontended: { iterations: 3000, rounds: 10 },
  contended: { workers: [8, 64], holdMs: 2, durationMs: CONTENDED_MS },
  held: { locks: 1000, ttlMs: 3000, durationMs: 10_000 },
  notes,
});

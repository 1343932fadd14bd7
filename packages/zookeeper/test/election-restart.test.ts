import { type Leadership, LockClient } from '@dlock/core';
import { uniqueName } from '@dlock/test-utils';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ZooKeeperLockService } from '../src/index.js';
import { sleep, waitFor } from './helpers.js';
import { type RestartableZooKeeper, startRestartableZooKeeper } from './restartable-zookeeper.js';

// The server is killed and restarted (quickly: the sessions live on; slowly: the candidates give them up), and
// stopped past the session timeout (every session expires), while three candidates campaign again after every loss.
// Every candidate's belief is sampled every few ms: never two leaders whose windows are open, epochs never go back,
// and a leader again after each fault. tickTime 500 allows a 5 s session, which a JVM restart fits into.
const ROOT = '/dlock-test/election-restart';
const SESSION_MS = 5_000;

interface Term {
  readonly candidate: number;
  readonly leadership: Leadership;
  /** When this process first and last saw `isLeader()` true (performance.now()). */
  first: number;
  last: number;
}

let server: RestartableZooKeeper;

beforeAll(async () => {
  server = await startRestartableZooKeeper(500);
}, 60_000);

afterAll(() => server?.stop());

describe('elections across server restarts and session expiry', () => {
  it('never two leaders with open windows, epochs never go back, a leader again after each fault', {
    timeout: 180_000,
  }, async () => {
    const name = uniqueName('restart');
    const stop = new AbortController();
    const terms: Term[] = [];
    const services: ZooKeeperLockService[] = [];
    const clients: LockClient[] = [];
    let overlaps = 0;

    const runCandidate = async (index: number): Promise<void> => {
      const service = new ZooKeeperLockService({
        connectionString: server.connectString,
        sessionTimeoutMs: SESSION_MS,
        keyPrefix: ROOT,
      });
      const client = new LockClient(service, { operationTimeoutMs: 5_000 });
      services.push(service);
      clients.push(client);
      const election = client.election(name, { ttlMs: SESSION_MS });
      while (!stop.signal.aborted) {
        let leadership: Leadership;
        try {
          leadership = await election.campaign({
            value: `c${index}`,
            waitMs: Number.POSITIVE_INFINITY,
            signal: stop.signal,
          });
        } catch {
          // The server is away (a campaign's calls are bounded), or the test is over: stand again.
          await sleep(50);
          continue;
        }
        const now = performance.now();
        terms.push({ candidate: index, leadership, first: now, last: now });
        // Lead until the leadership ends (lost to a fault, or the test ends).
        await new Promise<void>((resolve) => {
          if (leadership.signal.aborted || stop.signal.aborted) return resolve();
          leadership.signal.addEventListener('abort', () => resolve(), { once: true });
          stop.signal.addEventListener('abort', () => resolve(), { once: true });
        });
      }
    };

    const sampling = (async () => {
      while (!stop.signal.aborted) {
        const now = performance.now();
        let leading = 0;
        for (const term of terms) {
          if (!term.leadership.isLeader()) continue;
          leading += 1;
          term.last = now;
        }
        if (leading > 1) overlaps += 1;
        await sleep(5);
      }
    })();

    const candidates = [0, 1, 2].map(runCandidate);
    const leaderNow = (): Term | undefined => terms.find((t) => t.leadership.isLeader());
    const termsBefore = (): number => terms.length;

    // Somebody leads.
    expect(await waitFor(() => leaderNow() !== undefined, 20_000)).toBe(true);

    // 1. Killed and restarted within the session timeout: the sessions live on in the server's data.
    let before = termsBefore();
    await server.kill();
    const killedAt = performance.now();
    await server.start();
    const restartMs = performance.now() - killedAt;
    expect(await waitFor(() => leaderNow() !== undefined, 30_000)).toBe(true);
    const afterQuickRestart = terms.length - before;
    // Back well within the session timeout, the leader's session and node lived on: it still leads, having checked
    // its node on the server at the reconnect.
    if (restartMs < SESSION_MS / 2) expect(afterQuickRestart).toBe(0);

    // 2. Stopped past the session timeout: the candidates give their sessions up, the server expires them on resume.
    before = termsBefore();
    server.process.pause();
    await sleep(SESSION_MS + 3_000);
    server.process.resume();
    expect(await waitFor(() => terms.length > before && leaderNow() !== undefined, 40_000)).toBe(true);

    // 3. Killed and down past the session timeout: the server keeps the sessions, the candidates gave them up; the
    // old leader's node goes only when the server expires its session, a timeout after it is back.
    before = termsBefore();
    await server.kill();
    await sleep(SESSION_MS + 2_000);
    await server.start();
    expect(await waitFor(() => terms.length > before && leaderNow() !== undefined, 40_000)).toBe(true);

    // 4. The last leader resigns: the next one takes over.
    const last = leaderNow() as Term;
    before = termsBefore();
    await last.leadership.resign();
    expect(await waitFor(() => terms.length > before && leaderNow() !== undefined, 20_000)).toBe(true);

    stop.abort();
    await sampling;
    await Promise.all(candidates);
    await Promise.all(clients.map((c) => c.close()));
    await Promise.all(services.map((s) => s.close()));

    console.log(
      `[zookeeper election restart] ${terms.length} terms; quick restart took ${restartMs.toFixed(0)} ms and ` +
        `${afterQuickRestart === 0 ? 'kept the leader' : `made ${afterQuickRestart} new leader(s)`}; ` +
        terms.map((t) => `c${t.candidate}@${t.leadership.epoch}`).join(' '),
    );
    expect(overlaps).toBe(0);
    // Terms in the order they began: each one's window closed before the next one's opened, epochs rising.
    for (let i = 1; i < terms.length; i++) {
      const previous = terms[i - 1] as Term;
      const term = terms[i] as Term;
      expect(term.leadership.epoch).toBeGreaterThan(previous.leadership.epoch);
      expect(term.first).toBeGreaterThanOrEqual(previous.last);
    }
    expect(terms.length).toBeGreaterThanOrEqual(4);
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Demo } from '../dist/demo.js';
import { checkFenced, checkUnfenced, DEFAULTS, runOn } from './helpers.js';

describe('the scenario on the embedded default (in-memory locks over MessagePorts, PGlite)', () => {
  let demo: Demo;
  beforeAll(async () => {
    demo = await Demo.open({ kind: 'memory' }, { kind: 'pglite' }, DEFAULTS);
  });
  afterAll(() => demo?.close());

  it('a holder frozen past its TTL loses deposits without the gate; through the gate it is refused and redoes its deposit', async () => {
    const outcome = await runOn(demo);
    const unfenced = checkUnfenced(outcome);
    const fenced = checkFenced(outcome);

    // The freeze is real and overlaps a takeover in both runs (others start once the frozen worker holds the lock).
    for (const r of [unfenced, fenced]) {
      expect(r.pauses).toHaveLength(1);
      const [pause] = r.pauses;
      expect(pause?.worker).toBe(2);
      expect(pause?.overlappedTakeover).toBe(true);
      expect(pause?.takeoverTokens.length).toBeGreaterThan(0);
      expect((pause?.endedAt ?? 0) - (pause?.startedAt ?? 0)).toBeGreaterThanOrEqual(3_400);
      expect(r.lostEvents).toBeGreaterThanOrEqual(1);
    }
    // Without the gate the stale write landed and the balance is short by exactly the erased deposits.
    expect(unfenced.staleWritesLanded).toBe(1);
    expect(unfenced.lostAmount).toBeGreaterThan(0);
    expect(unfenced.finalBalance).toBe(unfenced.expectedBalance - unfenced.lostAmount);
    // Through the gate the stale write was refused once and the deposit redone: the balance is exact.
    expect(fenced.writesRejected).toBe(1);
    expect(fenced.redone).toBe(1);
    expect(fenced.finalBalance).toBe(fenced.expectedBalance);
    // Timeline events carry the LockClient's stream: acquisitions, renewals, releases, the loss.
    const types = new Set(outcome.events.fenced.map((e) => e.type));
    for (const type of [
      'acquired',
      'renewed',
      'released',
      'lost',
      'pause-start',
      'pause-end',
      'read',
      'write',
    ]) {
      expect(types).toContain(type);
    }
  });

  it('a freeze shorter than the TTL overlaps no takeover, and neither run loses anything', async () => {
    const outcome = await runOn(demo, { pauseMs: 300, iterations: 2, seed: 7 });
    const unfenced = checkUnfenced(outcome);
    const fenced = checkFenced(outcome);
    for (const r of [unfenced, fenced]) {
      expect(r.pauses).toHaveLength(1);
      expect(r.pauses[0]?.overlappedTakeover).toBe(false);
      expect(r.lostEvents).toBe(0);
      expect(r.finalBalance).toBe(r.expectedBalance);
    }
    expect(fenced.writesRejected).toBe(0);
  });

  it('a pause requested while the scenario runs (the dashboard button) freezes that worker in both runs', async () => {
    let requested = false;
    const outcome = await runOn(demo, { pauseWorker: null, iterations: 6, seed: 3 }, (running, update) => {
      // After worker 1's first deposit, everyone still has deposits left: a takeover is all but certain.
      if (
        !requested &&
        update.type === 'event' &&
        update.event.type === 'deposited' &&
        update.event.worker === 1
      ) {
        requested = true;
        expect(running.pause(1)).toBe(true);
      }
    });
    expect(requested).toBe(true);
    const unfenced = checkUnfenced(outcome);
    const fenced = checkFenced(outcome);
    for (const r of [unfenced, fenced]) {
      expect(r.pauses.map((p) => p.worker)).toEqual([1]);
    }
  });
});

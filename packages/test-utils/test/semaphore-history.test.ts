import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  checkSemaphoreHistory,
  describeViolation,
  type HoldRecord,
  openWindow,
  VIOLATIONS_KEPT,
} from '../src/semaphore-history.js';

const hold = (slot: number, token: number, start: number, end: number, extra: Partial<HoldRecord> = {}) => ({
  process: 'p0',
  worker: 0,
  slot,
  token: String(token),
  start,
  end,
  validUntil: end + 1_000,
  outcome: 'released' as const,
  ...extra,
});

const kinds = (records: readonly HoldRecord[], permits: number) =>
  [...new Set(checkSemaphoreHistory(records, permits).violations.map((v) => v.kind))].sort();

describe('checkSemaphoreHistory', () => {
  it('passes hand-overs at one instant and counts what it saw', () => {
    const records = [hold(0, 1, 0, 10), hold(0, 2, 10, 20), hold(1, 1, 5, 15, { outcome: 'lost' })];
    const report = checkSemaphoreHistory(records, 2);
    expect(report).toMatchObject({ holds: 3, maxOpen: 2, perSlot: [2, 1], lost: 1, violations: [] });
  });

  it('ends a window at validUntil when the holder noticed late (a pause past the TTL)', () => {
    const paused = hold(0, 1, 0, 5_000, { validUntil: 1_000, outcome: 'lost' });
    expect(checkSemaphoreHistory([paused, hold(0, 2, 1_200, 1_300)], 1).violations).toEqual([]);
    // Still valid when the successor got it: two holders of one slot.
    expect(kinds([{ ...paused, validUntil: 1_250 }, hold(0, 2, 1_200, 1_300)], 1)).toEqual([
      'slot-overlap',
      'too-many-open',
    ]);
  });

  it('catches an overlap with an earlier, longer window, not only with the one just before', () => {
    const records = [hold(0, 1, 0, 100), hold(0, 2, 10, 10), hold(0, 3, 50, 60)];
    const report = checkSemaphoreHistory(records, 3);
    expect(report.violations.map((v) => v.kind)).toEqual(['slot-overlap']);
    expect(report.violations[0]?.records.map((r) => r.token)).toEqual(['1', '3']);
  });

  it('catches more windows than permits across slots', () => {
    const records = [hold(0, 1, 0, 10), hold(1, 1, 0, 10), hold(1, 2, 5, 20)];
    const report = checkSemaphoreHistory(records, 2);
    expect(report.maxOpen).toBe(3);
    expect(kinds(records, 2)).toEqual(['slot-overlap', 'too-many-open']);
  });

  it('catches tokens that do not rise in order of start, and ties', () => {
    expect(kinds([hold(0, 5, 0, 10), hold(0, 4, 20, 30)], 1)).toEqual(['token-order']);
    expect(kinds([hold(0, 5, 0, 10), hold(0, 5, 20, 30)], 1)).toEqual(['token-order']);
    // Tokens are per slot: another slot's lower token is fine.
    expect(kinds([hold(0, 5, 0, 10), hold(1, 4, 20, 30)], 2)).toEqual([]);
    // Bigger than a double can hold exactly.
    const big = '1796137333143016000001';
    expect(
      kinds([hold(0, 0, 0, 1, { token: big }), hold(0, 0, 2, 3, { token: `${big.slice(0, -1)}2` })], 1),
    ).toEqual([]);
  });

  it('gives no place in the token order to a window that closed before its acquire resolved (a frozen process)', () => {
    // Seen in an etcd soak: granted with token 281, its process frozen past the lease before it read the clock;
    // 306 was granted, held and released meanwhile.
    const frozen = hold(0, 281, 1_600, 1_604, { validUntil: 900, outcome: 'lost' });
    expect(checkSemaphoreHistory([hold(0, 306, 1_000, 1_500), frozen], 1).violations).toEqual([]);
    // With a window still open when it resolved, the same tokens are out of order.
    expect(kinds([hold(0, 306, 1_000, 1_500), { ...frozen, validUntil: 1_700 }], 1)).toEqual(['token-order']);
  });

  it('refuses malformed records instead of judging them', () => {
    const report = checkSemaphoreHistory(
      [hold(3, 1, 0, 1), hold(0, 1, 5, 1), hold(0, 1, 0, 1, { token: '1.5' }), hold(1, 1, Number.NaN, 1)],
      3,
    );
    expect(report.violations.map((v) => v.message)).toEqual([
      'slot 3 is outside 0..2',
      'it ends before it starts',
      'token "1.5" is not an integer',
      'start is not a finite number',
    ]);
  });

  it('keeps a few examples of each kind', () => {
    const records = Array.from({ length: 50 }, (_, i) => hold(0, 50 - i, i, i + 10));
    const report = checkSemaphoreHistory(records, 1);
    for (const kind of ['slot-overlap', 'too-many-open', 'token-order'] as const) {
      expect(report.violations.filter((v) => v.kind === kind)).toHaveLength(VIOLATIONS_KEPT);
    }
    expect(describeViolation(report.violations[0] as never)).toMatch(/^\w[\w-]+: .*\n {2}\{"process":"p0"/);
  });
});

/** A history a correct semaphore could produce: per slot, windows one after another and tokens rising. */
const validHistory = fc.integer({ min: 1, max: 5 }).chain((permits) =>
  fc.record({
    permits: fc.constant(permits),
    records: fc
      .array(
        fc.array(
          fc.record({
            gap: fc.integer({ min: 0, max: 50 }),
            // At least 1 ms: two holds of one slot starting at one instant would carry no order to check tokens by.
            length: fc.integer({ min: 1, max: 50 }),
            // The holder may notice the loss late (a pause): its end then lies past its window.
            late: fc.integer({ min: 0, max: 100 }),
            lost: fc.boolean(),
            tokenStep: fc.bigInt({ min: 1n, max: 1n << 70n }),
            worker: fc.integer({ min: 0, max: 11 }),
          }),
          { maxLength: 15 },
        ),
        { minLength: permits, maxLength: permits },
      )
      .map((slots) =>
        slots.flatMap((steps, slot) => {
          let at = 0;
          let token = 0n;
          return steps.map((step): HoldRecord => {
            const start = at + step.gap;
            at = start + step.length;
            token += step.tokenStep;
            return {
              process: `p${step.worker % 4}`,
              worker: step.worker,
              slot,
              token: String(token),
              start,
              end: step.lost ? at + step.late : at,
              validUntil: step.lost ? at : at + step.late,
              outcome: step.lost ? 'lost' : 'released',
            };
          });
        }),
      ),
  }),
);

describe('checkSemaphoreHistory (properties)', () => {
  it('passes every history a correct semaphore could produce, in any record order', () => {
    fc.assert(
      fc.property(validHistory, fc.func(fc.integer()), ({ permits, records }, key) => {
        const shuffled = [...records].sort((a, b) => key(a) - key(b));
        const report = checkSemaphoreHistory(shuffled, permits);
        expect(report.violations).toEqual([]);
        expect(report.maxOpen).toBeLessThanOrEqual(permits);
        expect(report.holds).toBe(records.length);
      }),
    );
  });

  it('catches a hold injected inside another window of its slot', () => {
    fc.assert(
      fc.property(
        validHistory.filter(({ records }) => records.some((r) => openWindow(r).to - openWindow(r).from >= 2)),
        fc.nat(),
        fc.double({ min: 0, max: 1, noNaN: true }),
        ({ permits, records }, pick, where) => {
          const open = records.filter((r) => openWindow(r).to - openWindow(r).from >= 2);
          const victim = open[pick % open.length] as HoldRecord;
          const { from, to } = openWindow(victim);
          const start = from + Math.floor(where * (to - from - 1));
          // A higher token than any on the slot, so only the overlap is wrong.
          const intruder: HoldRecord = {
            ...victim,
            process: 'intruder',
            token: String(BigInt(victim.token) << 80n),
            start,
            end: start + 1,
            validUntil: start + 1,
          };
          const report = checkSemaphoreHistory([...records, intruder], permits);
          expect(
            report.violations.some((v) => v.kind === 'slot-overlap' && v.records.includes(intruder)),
          ).toBe(true);
        },
      ),
    );
  });

  it('catches tokens swapped between two holds of one slot', () => {
    fc.assert(
      fc.property(
        validHistory.filter(({ records }) =>
          records.some((r, i) => records.some((s, j) => j > i && s.slot === r.slot)),
        ),
        ({ permits, records }) => {
          const slot = records.find((r, i) => records.some((s, j) => j > i && s.slot === r.slot))?.slot;
          const mine = records.filter((r) => r.slot === slot);
          const [first, second] = [mine[0] as HoldRecord, mine[mine.length - 1] as HoldRecord];
          const swapped = records.map((r) =>
            r === first ? { ...r, token: second.token } : r === second ? { ...r, token: first.token } : r,
          );
          expect(kinds(swapped, permits)).toEqual(['token-order']);
        },
      ),
    );
  });

  it('sees more open windows than permits when judged against a smaller limit', () => {
    fc.assert(
      fc.property(validHistory, ({ permits, records }) => {
        const report = checkSemaphoreHistory(records, permits);
        // Relabel every slot as 0 of a 1-permit semaphore: exactly the histories that had two windows open at once
        // now break both rules.
        const merged = records.map((r, i) => ({ ...r, slot: 0, token: String(i) }));
        const ordered = [...merged]
          .sort((a, b) => a.start - b.start)
          .map((r, i) => ({ ...r, token: String(i) }));
        const single = checkSemaphoreHistory(ordered, 1);
        expect(single.maxOpen).toBe(report.maxOpen);
        expect(single.violations.some((v) => v.kind === 'too-many-open')).toBe(report.maxOpen > 1);
        expect(single.violations.some((v) => v.kind === 'slot-overlap')).toBe(report.maxOpen > 1);
      }),
    );
  });
});

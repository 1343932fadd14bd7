/**
 * One hold of a semaphore permit as a soak worker saw it. Times are milliseconds on one clock that every process of
 * the run shares (the soak worker uses the machine's monotonic clock, which SIGSTOP does not stop).
 */
export interface HoldRecord {
  /** Which process held it (any label unique per process). */
  readonly process: string;
  /** Which worker of that process. */
  readonly worker: number;
  readonly slot: number;
  /** The permit's fencing token, a bigint in decimal. */
  readonly token: string;
  /** When `acquire` resolved. */
  readonly start: number;
  /** When the holder stopped relying on it: it called `release()`, or saw the permit lost. */
  readonly end: number;
  /** The last known end of the permit's validity window (its `expiresAt`). */
  readonly validUntil: number;
  readonly outcome: 'released' | 'lost';
}

export type ViolationKind = 'bad-record' | 'too-many-open' | 'slot-overlap' | 'token-order';

export interface HistoryViolation {
  readonly kind: ViolationKind;
  readonly message: string;
  /** The records that break the rule, as the worker wrote them. */
  readonly records: readonly HoldRecord[];
}

export interface HistoryReport {
  readonly holds: number;
  /** Most windows open at one instant. */
  readonly maxOpen: number;
  /** Holds per slot (index = slot). */
  readonly perSlot: readonly number[];
  readonly lost: number;
  /** Every violation found (each kind capped, see `VIOLATIONS_KEPT`). */
  readonly violations: readonly HistoryViolation[];
}

/** A broken run can break one rule thousands of times; a few examples of each say all there is to say. */
export const VIOLATIONS_KEPT = 10;

/** When a hold could be relied on: from the grant until the holder let go or its validity ran out. */
export function openWindow(record: HoldRecord): { readonly from: number; readonly to: number } {
  return { from: record.start, to: Math.min(record.end, record.validUntil) };
}

function malformed(record: HoldRecord, permits: number): string | undefined {
  if (!Number.isInteger(record.slot) || record.slot < 0 || record.slot >= permits) {
    return `slot ${record.slot} is outside 0..${permits - 1}`;
  }
  if (!/^-?\d+$/.test(record.token)) return `token "${record.token}" is not an integer`;
  for (const key of ['start', 'end', 'validUntil'] as const) {
    if (!Number.isFinite(record[key])) return `${key} is not a finite number`;
  }
  if (record.end < record.start) return 'it ends before it starts';
  return undefined;
}

/**
 * Judges a semaphore history by its open validity windows `[start, min(end, validUntil))` (half-open: one window
 * closing at the instant another opens is a hand-over, not an overlap; empty windows never overlap anything):
 * never more than `permits` open at once, never two open on one slot, and on each slot the tokens rise strictly in
 * the order the holds started. FIFO order cannot be judged from holds alone.
 */
export function checkSemaphoreHistory(records: readonly HoldRecord[], permits: number): HistoryReport {
  const violations: HistoryViolation[] = [];
  const kept = new Map<ViolationKind, number>();
  const report = (kind: ViolationKind, message: string, involved: readonly HoldRecord[]): void => {
    const count = kept.get(kind) ?? 0;
    kept.set(kind, count + 1);
    if (count < VIOLATIONS_KEPT) violations.push({ kind, message, records: involved });
  };

  const valid: HoldRecord[] = [];
  for (const record of records) {
    const problem = malformed(record, permits);
    if (problem) report('bad-record', problem, [record]);
    else valid.push(record);
  }

  const maxOpen = sweepOpenWindows(valid, permits, report);
  const perSlot = Array.from({ length: permits }, () => 0);
  const bySlot = new Map<number, HoldRecord[]>();
  for (const record of valid) {
    perSlot[record.slot] = (perSlot[record.slot] ?? 0) + 1;
    const list = bySlot.get(record.slot) ?? [];
    list.push(record);
    bySlot.set(record.slot, list);
  }
  for (const [slot, list] of bySlot) checkSlot(slot, list, report);

  return {
    holds: records.length,
    maxOpen,
    perSlot,
    lost: records.filter((r) => r.outcome === 'lost').length,
    violations,
  };
}

type Report = (kind: ViolationKind, message: string, involved: readonly HoldRecord[]) => void;

/** Sweeps the windows in time order; returns the most open at once and reports each opening past `permits`. */
function sweepOpenWindows(records: readonly HoldRecord[], permits: number, report: Report): number {
  const events: { at: number; delta: 1 | -1; record: HoldRecord }[] = [];
  for (const record of records) {
    const { from, to } = openWindow(record);
    if (to <= from) continue;
    events.push({ at: from, delta: 1, record }, { at: to, delta: -1, record });
  }
  // Closings first at one instant: half-open windows.
  events.sort((a, b) => a.at - b.at || a.delta - b.delta);
  const open = new Set<HoldRecord>();
  let maxOpen = 0;
  for (const event of events) {
    if (event.delta === -1) {
      open.delete(event.record);
      continue;
    }
    open.add(event.record);
    maxOpen = Math.max(maxOpen, open.size);
    if (open.size > permits) {
      report('too-many-open', `${open.size} windows open at ${event.at} with ${permits} permits`, [...open]);
    }
  }
  return maxOpen;
}

/** One slot's holds: no two windows overlap, and tokens rise strictly in order of start. */
function checkSlot(slot: number, records: readonly HoldRecord[], report: Report): void {
  // Holds that started at one instant give no order of their own: the tokens' order is taken for theirs.
  const sorted = [...records].sort(
    (a, b) =>
      a.start - b.start ||
      (BigInt(a.token) < BigInt(b.token) ? -1 : BigInt(a.token) > BigInt(b.token) ? 1 : 0),
  );
  // The open window reaching furthest so far: any later window starting before it closes overlaps it.
  let reach: HoldRecord | undefined;
  let previous: HoldRecord | undefined;
  for (const record of sorted) {
    const { from, to } = openWindow(record);
    if (reach !== undefined && to > from && openWindow(reach).to > from) {
      report('slot-overlap', `two windows open on slot ${slot} at ${from}`, [reach, record]);
    }
    if (to > from && (reach === undefined || to > openWindow(reach).to)) reach = record;
    // A window that closed before its acquire resolved (the process was frozen between the grant and reading the
    // clock) was never a hold its caller could act on, and its start says nothing of when it was granted: it takes
    // no place in the order, as it takes none in the overlap check.
    if (to <= from) continue;
    if (previous !== undefined && BigInt(record.token) <= BigInt(previous.token)) {
      report(
        'token-order',
        `slot ${slot}: token ${record.token} does not rise above ${previous.token} of the hold before it`,
        [previous, record],
      );
    }
    previous = record;
  }
}

/** A violation as the lines to paste into a bug report: the rule, then each record as the worker wrote it. */
export function describeViolation(violation: HistoryViolation): string {
  return [
    `${violation.kind}: ${violation.message}`,
    ...violation.records.map((r) => `  ${JSON.stringify(r)}`),
  ].join('\n');
}

import type { Counter, Histogram, Meter, UpDownCounter } from '@opentelemetry/api';
import { METRICS } from './names.js';

/** Waits: most are a few ms, a contended one lasts as long as someone else's hold. */
const WAIT_BUCKETS_MS = [0, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000];
/** Holds: from a quick critical section to a leader that keeps its leadership for hours. */
const HOLD_BUCKETS_MS = [
  1, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000, 900_000, 3_600_000,
];

export interface Instruments {
  readonly acquireWait: Histogram;
  readonly holdDuration: Histogram;
  readonly held: UpDownCounter;
  readonly losses: Counter;
  readonly renewals: Counter;
  readonly renewalFailures: Counter;
}

export function createInstruments(meter: Meter): Instruments {
  return {
    acquireWait: meter.createHistogram(METRICS.acquireWait, {
      description: 'Time from an acquire call to its end (a handle, a timeout, an abort or an error).',
      unit: 'ms',
      advice: { explicitBucketBoundaries: WAIT_BUCKETS_MS },
    }),
    holdDuration: meter.createHistogram(METRICS.holdDuration, {
      description: 'Time a handle was held: from the grant to release() or to the loss being noticed.',
      unit: 'ms',
      advice: { explicitBucketBoundaries: HOLD_BUCKETS_MS },
    }),
    held: meter.createUpDownCounter(METRICS.held, {
      description: 'Locks and permits held right now.',
      unit: '{hold}',
    }),
    losses: meter.createCounter(METRICS.losses, {
      description:
        'Locks and permits lost before release (the work under them may have overlapped another owner).',
      unit: '{hold}',
    }),
    renewals: meter.createCounter(METRICS.renewals, {
      description: 'Renewals the service confirmed.',
      unit: '{renewal}',
    }),
    renewalFailures: meter.createCounter(METRICS.renewalFailures, {
      description: 'Renewals that failed; the client retries within the validity window.',
      unit: '{renewal}',
    }),
  };
}

import type { Counter, Histogram, Meter, UpDownCounter } from '@opentelemetry/api';
import { METRICS } from './names.js';

// Durations are recorded in seconds, the unit OpenTelemetry's semantic conventions ask of every duration metric
// (http.server.request.duration, db.client.connection.wait_time): dashboards and exporters that mix this package's
// histograms with other instrumentations' need not convert, and a Prometheus exporter names them `_seconds`.

/** Waits, in seconds: most are a few ms, a contended one lasts as long as someone else's hold. */
const WAIT_BUCKETS_S = [0, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
/** Holds, in seconds: from a quick critical section to a leader that keeps its leadership for hours. */
const HOLD_BUCKETS_S = [
  0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3_600,
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
      unit: 's',
      advice: { explicitBucketBoundaries: WAIT_BUCKETS_S },
    }),
    holdDuration: meter.createHistogram(METRICS.holdDuration, {
      description: 'Time a handle was held: from the grant to release() or to the loss being noticed.',
      unit: 's',
      advice: { explicitBucketBoundaries: HOLD_BUCKETS_S },
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

/**
 * The first instrument that cannot record (`record()` on a histogram, `add()` on a counter), as `name.method()`;
 * `undefined` when all can. A meter that hands out such instruments fails every record with a TypeError.
 */
export function brokenInstrument(instruments: Instruments): string | undefined {
  const needs: [keyof Instruments, string, 'record' | 'add'][] = [
    ['acquireWait', METRICS.acquireWait, 'record'],
    ['holdDuration', METRICS.holdDuration, 'record'],
    ['held', METRICS.held, 'add'],
    ['losses', METRICS.losses, 'add'],
    ['renewals', METRICS.renewals, 'add'],
    ['renewalFailures', METRICS.renewalFailures, 'add'],
  ];
  for (const [key, name, method] of needs) {
    const instrument: unknown = instruments[key];
    if (typeof instrument !== 'object' || instrument === null) return `${name} (${typeof instrument})`;
    let recorder: unknown;
    try {
      recorder = (instrument as Record<string, unknown>)[method];
    } catch {
      // A getter or a Proxy's trap that throws would throw at every record too.
      return `${name}.${method}() (reading it threw)`;
    }
    if (typeof recorder !== 'function') return `${name}.${method}()`;
  }
  return undefined;
}

import { InvalidArgumentError, systemClock } from '@dlock/core';
import { rejectUnknownKeys, textOf } from '@dlock/core/adapter';
import type { MeterProvider, TracerProvider } from '@opentelemetry/api';
import { trace } from '@opentelemetry/api';

/** Options of {@link instrument}; every one is optional. */
export interface InstrumentOptions {
  /**
   * Where the metrics go. Default: the global provider (`metrics.getMeterProvider()`), looked up when a metric is
   * recorded until an SDK has registered one (so an SDK registered after `instrument()` still gets them), then kept.
   */
  readonly meterProvider?: MeterProvider;
  /** Where the spans go. Default: the global provider (`trace.getTracerProvider()`). */
  readonly tracerProvider?: TracerProvider;
  /**
   * Lock names are user data, and a name per job or per record would make a new time series each: by default no
   * attribute carries the name. Given, it maps a name to the `dlock.name` attribute (e.g. `invoice:42` →
   * `invoice`), or to `undefined` to leave it out for that name. Keep its range small. To record raw names, pass
   * `(name) => name` and own the cardinality.
   */
  readonly nameAttribute?: (name: string) => string | undefined;
  /**
   * The wall clock for span timestamps (`now()`, epoch ms): the same clock the client was given, so a span's length
   * is exactly the event's `waitedMs` or `releaseMs`. Default: the system clock.
   */
  readonly clock?: {
    /** The wall-clock time, ms since the epoch. */
    now(): number;
  };
}

export interface ResolvedOptions {
  /** Absent: the global provider, read when a metric is recorded until an SDK registered one (see `instrument`). */
  readonly meterProvider: MeterProvider | undefined;
  readonly tracerProvider: TracerProvider;
  readonly nameAttribute: ((name: string) => string | undefined) | undefined;
  readonly now: () => number;
}

const KEYS = ['meterProvider', 'tracerProvider', 'nameAttribute', 'clock'];

function hasMethod(value: unknown, method: string): boolean {
  if (typeof value !== 'object' || value === null) return false;
  try {
    return typeof (value as Record<string, unknown>)[method] === 'function';
  } catch {
    // A getter (or a Proxy's trap) that throws: no method to call, and its error would not say which option.
    return false;
  }
}

export function resolveOptions(options: InstrumentOptions | undefined): ResolvedOptions {
  if (options === undefined) options = {};
  if (typeof options !== 'object' || options === null) {
    throw new InvalidArgumentError('options', 'must be an object');
  }
  rejectUnknownKeys(options, 'options', KEYS);
  const { meterProvider, tracerProvider, nameAttribute, clock } = options;
  if (meterProvider !== undefined && !hasMethod(meterProvider, 'getMeter')) {
    throw new InvalidArgumentError('options.meterProvider', 'must be a MeterProvider (getMeter)');
  }
  if (tracerProvider !== undefined && !hasMethod(tracerProvider, 'getTracer')) {
    throw new InvalidArgumentError('options.tracerProvider', 'must be a TracerProvider (getTracer)');
  }
  if (nameAttribute !== undefined && typeof nameAttribute !== 'function') {
    throw new InvalidArgumentError(
      'options.nameAttribute',
      'must be a function from a lock name to an attribute value (or undefined); raw names are opt-in: (name) => name',
    );
  }
  if (clock !== undefined && !hasMethod(clock, 'now')) {
    throw new InvalidArgumentError('options.clock', 'must have now() (epoch ms)');
  }
  if (clock !== undefined) checkClock(clock);
  return {
    meterProvider,
    tracerProvider: tracerProvider ?? trace.getTracerProvider(),
    nameAttribute,
    now: clock === undefined ? () => systemClock.now() : () => clock.now(),
  };
}

/**
 * A clock asked once, now: one whose `now()` throws or answers anything but a finite number would put NaN into
 * every span's times, found out only in a trace viewer. One that turns to junk later costs its spans (see
 * `instrument`).
 */
function checkClock(clock: { now(): unknown }): void {
  let now: unknown;
  try {
    now = clock.now();
  } catch (error) {
    throw new InvalidArgumentError('options.clock', `now() threw: ${textOf(error).slice(0, 200)}`);
  }
  if (!isTime(now)) {
    const got = typeof now === 'number' ? String(now) : typeof now;
    throw new InvalidArgumentError(
      'options.clock',
      `now() must return epoch ms, a finite number (got ${got})`,
    );
  }
}

/** A time or a duration in ms the telemetry can carry: a finite number. */
export function isTime(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value);
}

import type {
  AcquireFailure,
  DLockErrorCode,
  LockEventListener,
  LockEventMap,
  LockEventType,
  LockKind,
} from '@dlock/core';
import { InvalidArgumentError } from '@dlock/core';
import { textOf } from '@dlock/core/adapter';
import {
  type Attributes,
  context,
  createNoopMeter,
  diag,
  type Meter,
  type MeterProvider,
  metrics,
  type Span,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  type TracerProvider,
  type UpDownCounter,
} from '@opentelemetry/api';
import { attributesFor } from './attributes.js';
import { eventsOf, type InstrumentableClient } from './client-like.js';
import { brokenInstrument, createInstruments, type Instruments } from './instruments.js';
import { nameRedactor } from './name-redaction.js';
import { ATTRIBUTES, SPANS } from './names.js';
import { type InstrumentOptions, isTime, resolveOptions } from './options.js';
import { type Redact, redactorCache } from './redactor-cache.js';

/** Stops the instrumentation: a function, also usable with `using`. */
export interface Uninstrument extends Disposable {
  (): void;
}

const SCOPE = '@dlock/opentelemetry';

/**
 * How a hold ended: `unknown` when the release's answer cannot tell a release from a loss (a `not-found` from
 * `close()`'s retry after a try that went unanswered: that try may have deleted the lock, or someone took it first).
 */
type HoldEnd = 'released' | 'lost' | 'unknown';

/** Metrics know four outcomes: `close()` ending a wait is an abort like the caller's own signal. */
const OUTCOMES: Record<AcquireFailure, 'timeout' | 'aborted' | 'error'> = {
  timeout: 'timeout',
  aborted: 'aborted',
  closed: 'aborted',
  error: 'error',
};

/**
 * Records the client's locks and permits as OpenTelemetry metrics and spans, from its event stream (no wrapping,
 * no I/O, no timers). Returns the function that stops it: listeners removed, and the handles it counted as held
 * taken off `dlock.held`, so a client instrumented again does not count them twice.
 *
 * @example
 * ```ts
 * const stop = instrument(client, { meterProvider, nameAttribute: (name) => name.split(':')[0] });
 * ```
 */
export function instrument(client: InstrumentableClient, options?: InstrumentOptions): Uninstrument {
  const events = eventsOf(client);
  if (events === undefined) {
    throw new InvalidArgumentError('client', 'must be a LockClient (with an events stream)');
  }
  const { meterProvider, tracerProvider, nameAttribute, now } = resolveOptions(options);
  const instruments = meterInstruments(meterProvider);
  const tracer = tracerOf(tracerProvider);
  const attributes = (kind: LockKind, name: string, slot: number | undefined): Attributes =>
    attributesFor(nameAttribute, kind, name, slot);
  const redactors = redactorCache(nameRedactor);
  /** A redactor for `name` in error text; none when the mapping recorded the name whole (the caller's decision). */
  const redactor = (name: string, base: Attributes): Redact =>
    name.length === 0 || base[ATTRIBUTES.name] === name ? keep : redactors(name);
  /**
   * Handles this instrumentation counted in `dlock.held`, with the attributes they were counted under and the
   * counter that took them (the global provider may have changed since): each is taken off where it was added.
   */
  const held = new Map<string, { attributes: Attributes; counter: UpDownCounter }>();

  const endHold = (
    event: { kind: LockKind; name: string; slot?: number; fencingToken: bigint },
    heldMs: number,
    end: HoldEnd,
  ): Attributes => {
    const key = holdKey(event.kind, event.name, event.slot, event.fencingToken);
    const counted = held.get(key);
    const base = counted?.attributes ?? attributes(event.kind, event.name, event.slot);
    if (counted) {
      held.delete(key);
      safely(() => counted.counter.add(-1, counted.attributes));
    }
    safely(() => instruments().holdDuration.record(seconds(heldMs), { ...base, [ATTRIBUTES.holdEnd]: end }));
    return base;
  };

  let active = true;
  const listeners: Array<() => void> = [];
  const stop = (): void => {
    if (!active) return;
    active = false;
    for (const off of listeners) {
      // One unsubscribe that throws must not keep the others, or the holds, in place; its listener is inert now.
      try {
        off();
      } catch (error) {
        diag.error('@dlock/opentelemetry: removing a listener from the client failed', error);
      }
    }
    for (const counted of held.values()) safely(() => counted.counter.add(-1, counted.attributes));
    held.clear();
  };
  /**
   * Listens for `type` on the client's stream. A stream that does not hand back the unsubscribe (core's always
   * does) is refused: what was subscribed is removed, and a listener that cannot be is inert once `active` is off.
   */
  const listen = <K extends LockEventType>(type: K, listener: LockEventListener<K>): void => {
    let off: unknown;
    try {
      off = events.on(type, (event) => {
        // Nothing a listener does may throw into the emitter: a stream other than core's may hand it anything.
        if (active) safely(() => listener(event));
      });
    } catch (error) {
      stop();
      throw new InvalidArgumentError(
        'client.events.on',
        `threw for '${type}': ${textOf(error).slice(0, 200)}`,
      );
    }
    if (typeof off !== 'function') {
      stop();
      throw new InvalidArgumentError(
        'client.events.on',
        `must return the function that removes the listener (got ${off === null ? 'null' : typeof off} for '${type}')`,
      );
    }
    listeners.push(off as () => void);
  };

  listen('acquired', (event: LockEventMap['acquired']) => {
    const base = attributes(event.kind, event.name, event.slot);
    safely(() =>
      instruments().acquireWait.record(seconds(event.waitedMs), {
        ...base,
        [ATTRIBUTES.outcome]: 'acquired',
      }),
    );
    // Counted only once the counter took it: stopping takes off exactly what was added.
    if (!event.reentered) {
      const counter = safely(() => {
        const taker = instruments().held;
        taker.add(1, base);
        return taker;
      });
      if (counter)
        held.set(holdKey(event.kind, event.name, event.slot, event.fencingToken), {
          attributes: base,
          counter,
        });
    }
    const spanAttributes: Attributes = {
      ...base,
      [ATTRIBUTES.outcome]: 'acquired',
      [ATTRIBUTES.waitMs]: event.waitedMs,
      [ATTRIBUTES.attempts]: event.attempts,
      [ATTRIBUTES.fencingToken]: event.fencingToken.toString(),
      [ATTRIBUTES.ttlMs]: event.ttlMs,
    };
    if (event.reentered) spanAttributes[ATTRIBUTES.reentered] = true;
    safely(() => {
      const end = spanEnd(now);
      pastSpan(tracer, SPANS.acquire, end, event.waitedMs, spanAttributes).end(end);
    });
  });
  listen('acquire-failed', (event: LockEventMap['acquire-failed']) => {
    const base = attributes(event.kind, event.name, undefined);
    const outcome = OUTCOMES[event.outcome];
    safely(() =>
      instruments().acquireWait.record(seconds(event.waitedMs), { ...base, [ATTRIBUTES.outcome]: outcome }),
    );
    const spanAttributes: Attributes = {
      ...base,
      [ATTRIBUTES.outcome]: outcome,
      [ATTRIBUTES.waitMs]: event.waitedMs,
      [ATTRIBUTES.attempts]: event.attempts,
    };
    if (event.reason !== undefined) spanAttributes[ATTRIBUTES.reason] = event.reason;
    safely(() => {
      const end = spanEnd(now);
      const span = pastSpan(tracer, SPANS.acquire, end, event.waitedMs, spanAttributes);
      try {
        if (outcome === 'error') failed(span, event.error, redactor(event.name, base));
      } finally {
        span.end(end);
      }
    });
  });
  listen('released', (event: LockEventMap['released']) => {
    // A not-found after a try of close()'s release went unanswered may be that try's own delete, or a loss before
    // it: neither is known, so the hold ends `unknown` and no loss is counted.
    const unanswered = event.result === 'not-found' && event.afterUnansweredTry === true;
    const lost = event.result === 'not-found' && !unanswered;
    // A result core never sends (from a stream other than core's) tells nothing of how the hold ended either.
    const known = event.result === 'deleted' || event.result === 'failed' || event.result === 'not-found';
    const base = endHold(event, event.heldMs, unanswered || !known ? 'unknown' : lost ? 'lost' : 'released');
    // The service had nothing of this grant left: the lock was taken from it before the release (release()
    // rejects with a LockLostError, reason `rejected`), and the core emits no `lost` event for it.
    if (lost) safely(() => instruments().losses.add(1, { ...base, [ATTRIBUTES.reason]: 'rejected' }));
    safely(() => {
      const end = spanEnd(now);
      const span = pastSpan(tracer, SPANS.release, end, event.releaseMs, {
        ...base,
        [ATTRIBUTES.fencingToken]: event.fencingToken.toString(),
        [ATTRIBUTES.heldMs]: event.heldMs,
        [ATTRIBUTES.releaseResult]: event.result,
      });
      try {
        if (event.result === 'failed') failed(span, event.error, redactor(event.name, base));
      } finally {
        span.end(end);
      }
    });
  });
  listen('lost', (event: LockEventMap['lost']) => {
    const base = endHold(event, event.heldMs, 'lost');
    safely(() => instruments().losses.add(1, { ...base, [ATTRIBUTES.reason]: event.reason }));
  });
  listen('renewed', (event: LockEventMap['renewed']) => {
    safely(() => instruments().renewals.add(1, attributes(event.kind, event.name, event.slot)));
  });
  listen('renew-failed', (event: LockEventMap['renew-failed']) => {
    safely(() => instruments().renewalFailures.add(1, attributes(event.kind, event.name, event.slot)));
  });

  return Object.assign(stop, { [Symbol.dispose]: stop });
}

/**
 * Runs one export (a metric point, a span) and reports what it throws to OpenTelemetry's diagnostic logger, as
 * instrumentation does: thrown into the client's event stream, it would skip this event's other exports and come
 * back as a `callback-error` event, or a process warning, that names the lock. Returns whether it ran through.
 */
function safely<T>(record: () => T): T | undefined {
  try {
    return record();
  } catch (error) {
    diag.error('@dlock/opentelemetry: recording a lock event failed', error);
    return undefined;
  }
}

/**
 * The instruments of `provider`; without one, of the global provider. The metrics API has no proxy provider (the
 * trace API has): instruments taken from it before an SDK registers are no-ops for good, so an `instrument()` called
 * before the SDK started would record nothing, silently. Until a provider other than the API's no-op is registered,
 * each record looks the global provider up again; the first real one is then kept, as the trace API's proxy keeps
 * its delegate, and no later record looks it up.
 */
function meterInstruments(provider: MeterProvider | undefined): () => Instruments {
  if (provider !== undefined) {
    let fixed: Instruments;
    try {
      fixed = createInstruments(provider.getMeter(SCOPE));
    } catch (error) {
      // A provider the caller passed failed before any lock event: their mistake, told as such, not a TypeError.
      throw new InvalidArgumentError(
        'options.meterProvider',
        `getMeter() must return a Meter (creating the instruments failed: ${textOf(error).slice(0, 200)})`,
      );
    }
    const broken = brokenInstrument(fixed);
    if (broken !== undefined) {
      throw new InvalidArgumentError(
        'options.meterProvider',
        `getMeter() must return a Meter whose instruments record (${broken} is missing)`,
      );
    }
    return () => fixed;
  }
  let registered: Instruments | undefined;
  let noop: { provider: MeterProvider; instruments: Instruments } | undefined;
  return () => {
    if (registered !== undefined) return registered;
    const global = metrics.getMeterProvider();
    if (noop?.provider === global) return noop.instruments;
    let meter: unknown;
    let instruments: Instruments | undefined;
    let broken: string | undefined;
    try {
      meter = global.getMeter(SCOPE);
      instruments = createInstruments(meter as Meter);
      broken = brokenInstrument(instruments);
      if (broken !== undefined) broken = `${broken} is missing`;
    } catch (error) {
      // A getMeter() that throws, or a meter that cannot make the instruments, fails the same way at every event.
      broken = `getMeter() gave no meter that makes the instruments (${textOf(error).slice(0, 200)})`;
    }
    if (broken !== undefined || instruments === undefined) {
      // Registered after instrument() looked, so only diag can be told: once per provider, not at every event.
      diag.error(`@dlock/opentelemetry: the global MeterProvider's ${broken}; no metric is recorded`);
      instruments = createInstruments(createNoopMeter());
      noop = { provider: global, instruments };
    } else if (meter instanceof NoopMeter) noop = { provider: global, instruments };
    else registered = instruments;
    return instruments;
  };
}

/** The tracer spans are started on, from a provider checked now rather than at every event. */
function tracerOf(provider: TracerProvider): Tracer {
  let tracer: unknown;
  try {
    tracer = provider.getTracer(SCOPE);
  } catch (error) {
    throw new InvalidArgumentError(
      'options.tracerProvider',
      `getTracer() threw: ${textOf(error).slice(0, 200)}`,
    );
  }
  let startSpan: unknown;
  try {
    startSpan = typeof tracer === 'object' && tracer !== null ? (tracer as Tracer).startSpan : undefined;
  } catch {
    // A getter (or a Proxy's trap) that throws: no startSpan to call, and its error would not name the option.
    startSpan = undefined;
  }
  if (typeof startSpan !== 'function') {
    throw new InvalidArgumentError('options.tracerProvider', 'getTracer() must return a Tracer (startSpan)');
  }
  return tracer as Tracer;
}

/** The redactor of a name the attributes carry whole: nothing to hide. */
const keep: Redact = (text) => text;

/** The class of the API's no-op meter: what the global provider hands out while no SDK is registered. */
const NoopMeter = createNoopMeter().constructor;

/**
 * The events' milliseconds as the histograms' seconds. A stream other than core's may hand NaN or a string:
 * throwing here (inside `safely`) skips that point rather than record NaN, which would poison the histogram's sum.
 */
function seconds(ms: number): number {
  if (!isTime(ms)) throw new TypeError(`a duration of ${junkText(ms)} ms is not recorded`);
  return ms / 1_000;
}

/** What a junk time or duration was, for diag: its value when a number, else its type. */
function junkText(value: unknown): string {
  return typeof value === 'number' ? String(value) : typeof value;
}

/** The clock's time for a span's end; a clock turned to junk since `instrument()` costs the span, never NaN. */
function spanEnd(now: () => number): number {
  const end: unknown = now();
  if (!isTime(end)) throw new TypeError(`clock.now() answered ${junkText(end)}: span not recorded`);
  return end;
}

/** One grant: a fencing token is unique per lock name, and per slot for a permit. */
function holdKey(kind: LockKind, name: string, slot: number | undefined, fencingToken: bigint): string {
  return `${kind}\u0000${slot ?? ''}\u0000${fencingToken}\u0000${name}`;
}

/**
 * A span for something that just ended and lasted `durationMs` (end it at `endTime`): events arrive at the end and
 * say how long it took. It is a child of the context active where the event was emitted: the acquiring or
 * releasing caller's.
 */
function pastSpan(
  tracer: Tracer,
  name: string,
  endTime: number,
  durationMs: number,
  attributes: Attributes,
): Span {
  if (!isTime(durationMs)) throw new TypeError(`a duration of ${junkText(durationMs)} ms: span not recorded`);
  // The event's other numbers (held_ms, ttl_ms, attempts) come from the stream too: NaN would be exported as is.
  for (const [key, value] of Object.entries(attributes)) {
    if (typeof value === 'number' && !Number.isFinite(value)) {
      throw new TypeError(`${key} of ${value}: span not recorded`);
    }
  }
  return tracer.startSpan(
    name,
    { kind: SpanKind.INTERNAL, startTime: endTime - durationMs, attributes },
    context.active(),
  );
}

/**
 * The codes of dlock's error hierarchy: exported as they are. The errors a call ends with carry one of these unless
 * a service (a user's own, say) threw a dlock error of its own making, whose code may be anything: one per call or
 * per lock would be a new exception type each, and one built from the name would carry it. Such a code is `other`.
 */
const DLOCK_CODES: ReadonlySet<string> = new Set(
  Object.keys({
    INVALID_ARGUMENT: true,
    ACQUIRE_TIMEOUT: true,
    LOCK_LOST: true,
    LOCK_RELEASED: true,
    TRANSPORT: true,
    CLIENT_CLOSED: true,
    UNSUPPORTED: true,
    PERMITS_MISMATCH: true,
  } satisfies Record<DLockErrorCode, true>),
);

/**
 * An error's name as exported (`exception.type` when it has no code): a class name (an identifier, as dlock's and
 * the adapters' are) that does not hold the lock name; anything else is `Error`.
 */
function exportedName(name: unknown, redact: (text: string) => string): string {
  const text = textOf(name);
  return /^[A-Za-z_$][A-Za-z0-9_$]{0,63}$/.test(text) && redact(text) === text ? text : 'Error';
}

/**
 * The most of an error's message, and of its stack, a span gets. Redaction costs time in proportion to the text's
 * length times the name's, and a service may fail with megabytes of text: 2.7 MB with a 900-character name held
 * the event loop for 25 s. A name the cut splits is redacted as a name cut short.
 */
const MESSAGE_MAX = 4_096;
const STACK_MAX = 8_192;

/** `text` redacted, cut to `max` characters first (with `…` after the cut); a surrogate pair is never split. */
function exportedText(text: string, max: number, redact: (text: string) => string): string {
  if (text.length <= max) return redact(text);
  const end = /[\uD800-\uDBFF]/.test(text.charAt(max - 1)) ? max - 1 : max;
  return `${redact(text.slice(0, end))}…`;
}

/** Marks a span failed with the error the call ended with, its text passed through `redact`. */
function failed(span: Span, error: unknown, redact: (text: string) => string): void {
  let message: string;
  if (error instanceof Error) {
    message = exportedText(textOf(error.message), MESSAGE_MAX, redact);
    const code = (error as { code?: unknown }).code;
    const exception: { name: string; message: string; code?: string; stack?: string } = {
      name: exportedName(error.name, redact),
      message,
    };
    if (code !== undefined && code !== null && code !== '')
      exception.code = typeof code === 'string' && DLOCK_CODES.has(code) ? code : 'other';
    if (typeof error.stack === 'string') exception.stack = exportedText(error.stack, STACK_MAX, redact);
    span.recordException(exception);
  } else {
    message = exportedText(textOf(error), MESSAGE_MAX, redact);
  }
  span.setStatus({ code: SpanStatusCode.ERROR, message });
}

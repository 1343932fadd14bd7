import {
  InvalidArgumentError,
  LockClient,
  type LockEventListener,
  type LockEventType,
  MemoryLockService,
} from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import {
  type DiagLogger,
  DiagLogLevel,
  diag,
  type Meter,
  type MeterProvider,
  metrics,
  type Tracer,
} from '@opentelemetry/api';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { instrument, METRICS as M, SPANS } from '../src/index.js';
import { fakeEventStream, setup } from './otel.js';

const TTL = 3_000;
const EVENTS = ['acquired', 'acquire-failed', 'renewed', 'renew-failed', 'lost', 'released'] as const;

describe('uninstrument', () => {
  it('removes every listener and stops recording', async () => {
    const { client, clock, uninstrument, metrics, spans } = setup();
    for (const type of EVENTS) expect(client.events.listens(type)).toBe(true);
    const before = await client.acquire('a', { ttlMs: TTL });
    await before.release();
    const recorded = async () =>
      JSON.stringify(
        [...(await metrics()).values()].map((m) => m.dataPoints.map((p) => [p.attributes, p.value])),
      );
    const snapshot = await recorded();
    const spanCount = spans().length;
    uninstrument();
    for (const type of EVENTS) expect(client.events.listens(type)).toBe(false);
    const handle = await client.acquire('a', { ttlMs: TTL });
    await clock.advance(TTL);
    await handle.release();
    expect(await client.tryAcquire('a', { ttlMs: TTL })).not.toBeNull();
    expect(await recorded()).toBe(snapshot);
    expect(spans()).toHaveLength(spanCount);
    expect(spans(SPANS.release)).toHaveLength(1);
  });

  it('takes the holds it counted off dlock.held, once; Symbol.dispose does the same', async () => {
    const { client, uninstrument, points } = setup();
    await client.acquire('a', { ttlMs: TTL });
    await client.acquire('b', { ttlMs: TTL });
    expect((await points(M.held))[0]?.value).toBe(2);
    uninstrument[Symbol.dispose]();
    uninstrument();
    expect((await points(M.held))[0]?.value).toBe(0);
  });

  it('a client instrumented while it already holds a lock counts only what it saw granted', async () => {
    const clock = new FakeClock();
    const client = new LockClient(new MemoryLockService({ clock }), { clock });
    const early = await client.acquire('early', { ttlMs: TTL });
    const { points, meterProvider } = setupOn(client);
    const late = await client.acquire('late', { ttlMs: TTL });
    await early.release();
    await late.release();
    expect((await points(M.held))[0]?.value).toBe(0);
    await meterProvider.shutdown();
  });
});

describe('input', () => {
  it('rejects a client without events, unknown options, and a nameAttribute that is not a function', () => {
    const { client } = setup();
    expect(() => instrument({} as never)).toThrow(InvalidArgumentError);
    expect(() => instrument(client, { nameAtribute: () => 'x' } as never)).toThrow(
      /did you mean "nameAttribute"/,
    );
    expect(() => instrument(client, { nameAttribute: true } as never)).toThrow(InvalidArgumentError);
    expect(() => instrument(client, { meterProvider: {} } as never)).toThrow(/meterProvider/);
    expect(() => instrument(client, { tracerProvider: 1 } as never)).toThrow(/tracerProvider/);
  });

  it('refuses a client whose events.on does not return the unsubscribe, leaving nothing listening or recording', async () => {
    // It used to be accepted, and the stop() it returned threw "off is not a function" at the first listener.
    const { client, uninstrument, meterProvider, tracerProvider, points, spans } = setup();
    uninstrument();
    const answers: [string, (type: string, off: () => void) => unknown][] = [
      ['nothing', () => undefined],
      ['a string', () => 'off'],
      ['the unsubscribe for all but lost', (type, off) => (type === 'lost' ? null : off)],
      [
        'a throw at the third',
        (type, off) => {
          if (type === 'released') throw new Error('no more listeners');
          return off;
        },
      ],
    ];
    for (const [label, answer] of answers) {
      const junk = {
        events: {
          on: <K extends LockEventType>(type: K, listener: LockEventListener<K>) =>
            answer(type, client.events.on(type, listener)),
        },
      };
      let error: unknown;
      try {
        instrument(junk as never, { meterProvider, tracerProvider });
      } catch (e) {
        error = e;
      }
      expect(error, label).toBeInstanceOf(InvalidArgumentError);
      expect(error, label).toMatchObject({ field: 'client.events.on' });
    }
    // Whatever could be unsubscribed was; what could not records nothing.
    expect(client.events.listens('acquired')).toBe(true);
    const handle = await client.acquire('a', { ttlMs: TTL });
    await handle.release();
    expect(await points(M.held)).toEqual([]);
    expect(spans()).toEqual([]);
  });

  it('a client whose unsubscribe throws: stop() removes every other listener and takes its holds off', async () => {
    const { client, uninstrument, meterProvider, points } = setup();
    uninstrument();
    const junk = {
      events: {
        on: <K extends LockEventType>(type: K, listener: LockEventListener<K>) => {
          const off = client.events.on(type, listener);
          return type === 'acquired'
            ? () => {
                throw new Error('cannot unsubscribe');
              }
            : off;
        },
      },
    };
    const errors = vi.spyOn(diag, 'error').mockImplementation(() => undefined);
    try {
      const stop = instrument(junk as never, { meterProvider });
      await client.acquire('a', { ttlMs: TTL });
      expect((await points(M.held))[0]?.value).toBe(1);
      expect(() => stop()).not.toThrow();
      expect(errors).toHaveBeenCalledTimes(1);
      for (const type of EVENTS) expect(client.events.listens(type), type).toBe(type === 'acquired');
      expect((await points(M.held))[0]?.value).toBe(0);
      // The listener left behind records nothing more.
      await client.acquire('b', { ttlMs: TTL });
      expect((await points(M.held))[0]?.value).toBe(0);
    } finally {
      errors.mockRestore();
    }
  });

  it('refuses a provider whose getMeter or getTracer throws or answers with no meter or tracer', () => {
    // getMeter() answering undefined used to throw "Cannot read properties of undefined" out of instrument().
    const { client, uninstrument } = setup();
    uninstrument();
    const fail = () => {
      throw new Error('provider shut down');
    };
    const bad: [object, string][] = [
      [{ meterProvider: { getMeter: () => undefined } }, 'options.meterProvider'],
      [{ meterProvider: { getMeter: () => ({}) } }, 'options.meterProvider'],
      [{ meterProvider: { getMeter: fail } }, 'options.meterProvider'],
      [{ tracerProvider: { getTracer: () => null } }, 'options.tracerProvider'],
      [{ tracerProvider: { getTracer: () => ({ startSpan: 1 }) } }, 'options.tracerProvider'],
      [{ tracerProvider: { getTracer: fail } }, 'options.tracerProvider'],
    ];
    for (const [options, field] of bad) {
      let error: unknown;
      try {
        instrument(client, options as never);
      } catch (e) {
        error = e;
      }
      expect(error, field).toBeInstanceOf(InvalidArgumentError);
      expect(error).toMatchObject({ field });
      for (const type of EVENTS) expect(client.events.listens(type)).toBe(false);
    }
  });

  it('an event shaped wrongly costs a diag error, never a throw into the emitter', () => {
    // A stream that is not core's can hand a listener anything; thrown back from a timer, it would end the process.
    const { listeners, stream } = fakeEventStream();
    const errors = vi.spyOn(diag, 'error').mockImplementation(() => undefined);
    try {
      const stop = instrument(stream as never, { meterProvider: setup().meterProvider });
      expect([...listeners.keys()].sort()).toEqual([...EVENTS].sort());
      for (const [type, listener] of listeners) {
        for (const event of [undefined, null, {}, { kind: 'lock', name: 'a', fencingToken: null }]) {
          expect(() => listener(event), type).not.toThrow();
        }
      }
      expect(errors).toHaveBeenCalled();
      stop();
      expect(listeners.size).toBe(0);
    } finally {
      errors.mockRestore();
    }
  });

  it('reads client.events once, and refuses a client whose events getter throws', () => {
    const { client, uninstrument, meterProvider } = setup();
    uninstrument();
    let reads = 0;
    const once = {
      get events() {
        reads++;
        return reads === 1 ? client.events : undefined;
      },
    };
    const stop = instrument(once as never, { meterProvider });
    expect(reads).toBe(1);
    stop();
    const throwing = {
      get events(): never {
        throw new Error('getter');
      },
    };
    expect(() => instrument(throwing as never)).toThrow(InvalidArgumentError);
    const trap = new Proxy(
      {},
      {
        get() {
          throw new Error('trap');
        },
      },
    );
    expect(() => instrument(trap as never)).toThrow(InvalidArgumentError);
  });

  it('the global MeterProvider is read when metrics are recorded: an SDK started after instrument() gets them', async () => {
    const harness = setup();
    harness.uninstrument();
    const { client, clock, points, meterProvider } = harness;
    const stop = instrument(client, { clock });
    const before = await client.acquire('before', { ttlMs: TTL });
    metrics.setGlobalMeterProvider(meterProvider);
    try {
      const after = await client.acquire('after', { ttlMs: TTL });
      expect(await points(M.held)).toEqual([{ attributes: { 'dlock.kind': 'lock' }, value: 1 }]);
      // The hold counted before the SDK came is taken off where it was counted, not off the SDK's counter.
      await before.release();
      expect((await points(M.held))[0]?.value).toBe(1);
      await after.release();
      expect((await points(M.held))[0]?.value).toBe(0);
      expect((await points(M.holdDuration)).map((p) => p.attributes)).toHaveLength(1);
      stop();
    } finally {
      metrics.disable();
    }
  });

  it('the global MeterProvider is looked up only until an SDK has registered one', async () => {
    const harness = setup();
    harness.uninstrument();
    const { client, clock, points, meterProvider } = harness;
    const lookups = vi.spyOn(metrics, 'getMeterProvider');
    try {
      const stop = instrument(client, { clock });
      await (await client.acquire('before', { ttlMs: TTL })).release();
      // No SDK yet: each record looks again, or an SDK registered later would never get a point.
      expect(lookups.mock.calls.length).toBeGreaterThan(0);
      metrics.setGlobalMeterProvider(meterProvider);
      await (await client.acquire('first', { ttlMs: TTL })).release();
      lookups.mockClear();
      for (let i = 0; i < 10; i++) await (await client.acquire(`after-${i}`, { ttlMs: TTL })).release();
      expect(lookups).not.toHaveBeenCalled();
      expect(await histogramCount(points, M.holdDuration)).toBe(11);
      stop();
    } finally {
      lookups.mockRestore();
      metrics.disable();
    }
  });

  it('defaults to the global providers (no-op until an SDK registers them)', async () => {
    const { client } = setup();
    const stop = instrument(client);
    await (await client.acquire('a', { ttlMs: TTL })).release();
    stop();
  });
});

describe('a meter or tracer that throws', () => {
  /** What OpenTelemetry's diagnostic logger was told at level error. */
  function diagErrors(): unknown[][] {
    const seen: unknown[][] = [];
    const record = (...args: unknown[]) => void seen.push(args);
    const logger: DiagLogger = {
      error: record,
      warn: () => {},
      info: () => {},
      debug: () => {},
      verbose: () => {},
    };
    diag.setLogger(logger, { logLevel: DiagLogLevel.ERROR, suppressOverrideMessage: true });
    return seen;
  }
  afterEach(() => diag.disable());

  it('a meter that throws: the lock calls and the spans go on; no callback error names the lock', async () => {
    const clock = new FakeClock({ seed: 2 });
    const client = new LockClient(new MemoryLockService({ clock }), { clock });
    const callbackErrors: string[] = [];
    client.events.on('callback-error', (e) => callbackErrors.push(`${e.source} ${e.name}`));
    const broken = {
      record: () => {
        throw new Error('view misconfigured');
      },
      add: () => {
        throw new Error('view misconfigured');
      },
    };
    const meter = {
      createHistogram: () => broken,
      createCounter: () => broken,
      createUpDownCounter: () => broken,
    };
    const meterProvider: MeterProvider = { getMeter: () => meter as unknown as Meter };
    const exporter = new InMemorySpanExporter();
    const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
    const errors = diagErrors();
    instrument(client, { meterProvider, tracerProvider, clock });
    const handle = await client.acquire('invoice:42', { ttlMs: TTL });
    await handle.release();
    expect(exporter.getFinishedSpans().map((s) => s.name)).toEqual([SPANS.acquire, SPANS.release]);
    expect(callbackErrors).toEqual([]);
    expect(errors.length).toBeGreaterThan(0);
    expect(JSON.stringify(errors.map((args) => String(args[0])))).not.toContain('invoice:42');
  });

  it('a tracer that throws: the lock calls and the metrics go on; no callback error', async () => {
    const harness = setup();
    harness.uninstrument();
    const { client, clock, points, meterProvider } = harness;
    const callbackErrors: string[] = [];
    client.events.on('callback-error', (e) => callbackErrors.push(e.source));
    const tracer = {
      startSpan: () => {
        throw new Error('tracer down');
      },
    };
    const errors = diagErrors();
    instrument(client, {
      meterProvider,
      tracerProvider: { getTracer: () => tracer as unknown as Tracer },
      clock,
    });
    const handle = await client.acquire('a', { ttlMs: TTL });
    expect((await points(M.held))[0]?.value).toBe(1);
    await handle.release();
    expect((await points(M.held))[0]?.value).toBe(0);
    expect(await points(M.holdDuration)).toHaveLength(1);
    expect(callbackErrors).toEqual([]);
    expect(errors.length).toBeGreaterThan(0);
  });
});

/** Instruments a client made outside `setup`, with the same in-memory SDK. */
function setupOn(client: LockClient) {
  const harness = setup();
  harness.uninstrument();
  const stop = instrument(client, { meterProvider: harness.meterProvider });
  return { ...harness, stop };
}

/** How many values a histogram recorded, over all its data points. */
async function histogramCount(
  points: <V>(name: string) => Promise<{ value: V }[]>,
  name: string,
): Promise<number> {
  const recorded = await points<{ count: number }>(name);
  return recorded.reduce((sum, p) => sum + p.value.count, 0);
}

import { InvalidArgumentError } from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import { diag, type Meter, type MeterProvider, metrics } from '@opentelemetry/api';
import { describe, expect, it, vi } from 'vitest';
import { instrument, METRICS as M } from '../src/index.js';
import { fakeEventStream, setup } from './otel.js';

const TTL = 3_000;
const EVENTS = ['acquired', 'acquire-failed', 'renewed', 'renew-failed', 'lost', 'released'] as const;

/** What `instrument(client, options)` threw, if anything. */
function thrownBy(run: () => unknown): unknown {
  try {
    run();
  } catch (error) {
    return error;
  }
  return undefined;
}

describe('a clock that answers junk', () => {
  it('instrument() refuses a clock whose now() is not epoch ms, leaving nothing listening', () => {
    const { client, uninstrument, meterProvider, tracerProvider } = setup();
    uninstrument();
    const answers: [string, () => unknown][] = [
      ['NaN', () => Number.NaN],
      ['a string', () => '1700000000000'],
      ['undefined', () => undefined],
      ['Infinity', () => Number.POSITIVE_INFINITY],
      ['a bigint', () => 1_700_000_000_000n],
      [
        'a throw',
        () => {
          throw new Error('clock broke');
        },
      ],
    ];
    for (const [label, now] of answers) {
      const error = thrownBy(() =>
        instrument(client, { meterProvider, tracerProvider, clock: { now } as never }),
      );
      expect(error, label).toBeInstanceOf(InvalidArgumentError);
      expect(error, label).toMatchObject({ field: 'options.clock' });
      for (const type of EVENTS) expect(client.events.listens(type), `${label} ${type}`).toBe(false);
    }
  });

  it('a clock that turns to junk later: no span gets a NaN time, metrics go on, nothing throws', async () => {
    const harness = setup();
    harness.uninstrument();
    const { client, clock, points, spans, meterProvider, tracerProvider } = harness;
    const callbackErrors: string[] = [];
    client.events.on('callback-error', (e) => callbackErrors.push(e.source));
    let junk: unknown = Number.NaN;
    let calls = 0;
    // Sound when instrument() looks, junk at every event after.
    const turning = { now: () => (calls++ === 0 ? clock.now() : junk) as number };
    const errors = vi.spyOn(diag, 'error').mockImplementation(() => undefined);
    try {
      instrument(client, { meterProvider, tracerProvider, clock: turning });
      for (const answer of [Number.NaN, 'soon', undefined]) {
        junk = answer;
        const handle = await client.acquire('a', { ttlMs: TTL });
        await handle.release();
      }
      // Before, each got a span timed NaN; a span without its times is not worth recording.
      expect(spans()).toEqual([]);
      expect(errors).toHaveBeenCalled();
      expect(callbackErrors).toEqual([]);
      const [hold] = await points<{ count: number; sum: number }>(M.holdDuration);
      expect(hold?.value.count).toBe(3);
    } finally {
      errors.mockRestore();
    }
  });
});

describe('a meter whose instruments cannot record', () => {
  const meterWith = (histogram: unknown, counter: unknown): MeterProvider => ({
    getMeter: () =>
      ({
        createHistogram: () => histogram,
        createCounter: () => counter,
        createUpDownCounter: () => counter,
      }) as unknown as Meter,
  });

  it('instrument() refuses it as options.meterProvider, leaving nothing listening', () => {
    const { client, uninstrument, tracerProvider } = setup();
    uninstrument();
    const record = () => undefined;
    const add = () => undefined;
    const meters: [string, MeterProvider][] = [
      ['histograms without record', meterWith({}, { add })],
      ['counters without add', meterWith({ record }, {})],
      ['record not a function', meterWith({ record: 1 }, { add })],
      ['instruments undefined', meterWith(undefined, undefined)],
      [
        'record a getter that throws',
        meterWith(
          Object.defineProperty({}, 'record', {
            get() {
              throw new Error('getter broke');
            },
          }),
          { add },
        ),
      ],
      [
        'instruments behind a Proxy that throws',
        meterWith(
          new Proxy(
            {},
            {
              get() {
                throw new Error('trap broke');
              },
            },
          ),
          { add },
        ),
      ],
    ];
    for (const [label, meterProvider] of meters) {
      const error = thrownBy(() => instrument(client, { meterProvider, tracerProvider }));
      expect(error, label).toBeInstanceOf(InvalidArgumentError);
      expect(error, label).toMatchObject({ field: 'options.meterProvider' });
      for (const type of EVENTS) expect(client.events.listens(type), `${label} ${type}`).toBe(false);
    }
  });

  it("options whose getMeter, getTracer, a tracer's startSpan or now is a getter that throws are refused as such", () => {
    const { client, uninstrument, meterProvider, tracerProvider, clock } = setup();
    uninstrument();
    const throwing = (method: string) =>
      Object.defineProperty({}, method, {
        get() {
          throw new Error(`${method} getter broke`);
        },
      });
    const cases: [string, Record<string, unknown>][] = [
      ['options.meterProvider', { meterProvider: throwing('getMeter'), tracerProvider, clock }],
      ['options.tracerProvider', { meterProvider, tracerProvider: throwing('getTracer'), clock }],
      ['options.clock', { meterProvider, tracerProvider, clock: throwing('now') }],
      [
        'options.tracerProvider',
        { meterProvider, tracerProvider: { getTracer: () => throwing('startSpan') }, clock },
      ],
    ];
    for (const [field, options] of cases) {
      const error = thrownBy(() => instrument(client, options as never));
      expect(error, field).toBeInstanceOf(InvalidArgumentError);
      expect(error, field).toMatchObject({ field });
      for (const type of EVENTS) expect(client.events.listens(type), `${field} ${type}`).toBe(false);
    }
  });

  it('as the global provider (unknown at instrument()): one diag error saying so, nothing thrown', async () => {
    const harness = setup();
    harness.uninstrument();
    const { client, tracerProvider } = harness;
    const callbackErrors: string[] = [];
    client.events.on('callback-error', (e) => callbackErrors.push(e.source));
    const errors = vi.spyOn(diag, 'error').mockImplementation(() => undefined);
    metrics.setGlobalMeterProvider(meterWith({}, {}));
    try {
      instrument(client, { tracerProvider });
      for (let i = 0; i < 3; i++) await (await client.acquire('a', { ttlMs: TTL })).release();
      expect(errors.mock.calls.map((args) => String(args[0]))).toEqual([
        expect.stringMatching(/global MeterProvider.*dlock\.acquire\.wait.*record\(\)/),
      ]);
      expect(callbackErrors).toEqual([]);
    } finally {
      metrics.disable();
      errors.mockRestore();
    }
  });
});

describe('a global provider that yields no meter', () => {
  const providers: [string, MeterProvider][] = [
    [
      'a getMeter that throws',
      {
        getMeter: () => {
          throw new Error('no meter');
        },
      },
    ],
    ['a meter without createHistogram', { getMeter: () => ({}) as Meter }],
    ['getMeter answering undefined', { getMeter: () => undefined as unknown as Meter }],
  ];
  it.each(providers)('%s: one diag error saying so, not one per record', async (_, provider) => {
    const harness = setup();
    harness.uninstrument();
    const { client, tracerProvider } = harness;
    const errors = vi.spyOn(diag, 'error').mockImplementation(() => undefined);
    metrics.setGlobalMeterProvider(provider);
    try {
      instrument(client, { tracerProvider });
      for (let i = 0; i < 3; i++) await (await client.acquire('a', { ttlMs: TTL })).release();
      expect(errors.mock.calls.map((args) => String(args[0]))).toEqual([
        expect.stringMatching(/global MeterProvider/),
      ]);
    } finally {
      metrics.disable();
      errors.mockRestore();
    }
  });
});

describe('durations that are not numbers', () => {
  it('an event from a stream other than core whose durations are NaN records no NaN', async () => {
    const { listeners, stream } = fakeEventStream();
    const harness = setup();
    harness.uninstrument();
    const { points, spans, meterProvider, tracerProvider } = harness;
    const clock = new FakeClock({ seed: 1 });
    const errors = vi.spyOn(diag, 'error').mockImplementation(() => undefined);
    try {
      instrument(stream as never, { meterProvider, tracerProvider, clock });
      const grant = { kind: 'lock', name: 'a', fencingToken: 1n, attempts: 1, ttlMs: TTL, reentered: false };
      listeners.get('acquired')?.({ ...grant, waitedMs: Number.NaN });
      listeners.get('released')?.({ ...grant, heldMs: 'long', releaseMs: Number.NaN, result: 'deleted' });
      // Before, both histograms summed NaN and the spans started at NaN.
      expect(await points(M.acquireWait)).toEqual([]);
      expect(await points(M.holdDuration)).toEqual([]);
      expect(spans()).toEqual([]);
      // The hold was still counted and taken off again: only the points that had no number were dropped.
      expect(await points(M.held)).toEqual([{ attributes: { 'dlock.kind': 'lock' }, value: 0 }]);
      expect(errors).toHaveBeenCalled();
    } finally {
      errors.mockRestore();
    }
  });

  it('a number the spans or metrics carry that is not finite costs its span, and leaves no NaN attribute', async () => {
    const { listeners, stream } = fakeEventStream();
    const harness = setup();
    harness.uninstrument();
    const { metrics, spans, meterProvider, tracerProvider } = harness;
    const clock = new FakeClock({ seed: 1 });
    const errors = vi.spyOn(diag, 'error').mockImplementation(() => undefined);
    try {
      instrument(stream as never, { meterProvider, tracerProvider, clock, nameAttribute: (name) => name });
      const grant = { kind: 'lock', name: 'a', attempts: 1, ttlMs: TTL, reentered: false, waitedMs: 5 };
      const emit = (type: string, event: object) => listeners.get(type)?.(event);
      // Each event has sound durations for its points and span times; one other number is junk.
      emit('acquired', { ...grant, fencingToken: 1n, ttlMs: Number.NaN });
      emit('acquired', { ...grant, fencingToken: 2n, attempts: Number.POSITIVE_INFINITY });
      emit('acquired', { ...grant, kind: 'permit', slot: Number.NaN, fencingToken: 3n });
      emit('acquire-failed', {
        kind: 'lock',
        name: 'a',
        outcome: 'timeout',
        waitedMs: 5,
        attempts: Number.NaN,
      });
      emit('released', {
        ...grant,
        fencingToken: 1n,
        heldMs: Number.NaN,
        releaseMs: 5,
        result: 'deleted',
      });
      const numbers: unknown[] = [];
      for (const span of spans()) numbers.push(...Object.values(span.attributes));
      for (const metric of (await metrics()).values()) {
        for (const point of metric.dataPoints) numbers.push(...Object.values(point.attributes));
      }
      expect(numbers.filter((value) => typeof value === 'number' && !Number.isFinite(value))).toEqual([]);
      // The permit's slot goes: its span and points are recorded without it.
      expect(spans().map((span) => [span.attributes['dlock.kind'], span.attributes['dlock.slot']])).toEqual([
        ['permit', undefined],
      ]);
      expect(errors).toHaveBeenCalled();
    } finally {
      errors.mockRestore();
    }
  });
});

describe('a release whose result is not one core sends', () => {
  it('ends the hold unknown, counts no loss', async () => {
    const { listeners, stream } = fakeEventStream();
    const harness = setup();
    harness.uninstrument();
    const { points, meterProvider, tracerProvider } = harness;
    instrument(stream as never, { meterProvider, tracerProvider, clock: new FakeClock({ seed: 1 }) });
    const grant = { kind: 'lock', name: 'a', attempts: 1, ttlMs: TTL, reentered: false, waitedMs: 5 };
    const results = [undefined, 'gone', 'NOT-FOUND', 1];
    results.forEach((result, i) => {
      const fencingToken = BigInt(i + 1);
      listeners.get('acquired')?.({ ...grant, fencingToken });
      listeners.get('released')?.({ ...grant, fencingToken, heldMs: 10, releaseMs: 1, result });
    });
    expect(
      (await points<{ count: number }>(M.holdDuration)).map((p) => [p.attributes, p.value.count]),
    ).toEqual([[{ 'dlock.kind': 'lock', 'dlock.hold.end': 'unknown' }, 4]]);
    expect(await points(M.losses)).toEqual([]);
    expect(await points(M.held)).toEqual([{ attributes: { 'dlock.kind': 'lock' }, value: 0 }]);
  });
});

import { InvalidArgumentError, LockClient, MemoryLockService } from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import { instrument, METRICS as M, SPANS } from '../src/index.js';
import { setup } from './otel.js';

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

  it('defaults to the global providers (no-op until an SDK registers them)', async () => {
    const { client } = setup();
    const stop = instrument(client);
    await (await client.acquire('a', { ttlMs: TTL })).release();
    stop();
  });
});

/** Instruments a client made outside `setup`, with the same in-memory SDK. */
function setupOn(client: LockClient) {
  const harness = setup();
  harness.uninstrument();
  const stop = instrument(client, { meterProvider: harness.meterProvider });
  return { ...harness, stop };
}

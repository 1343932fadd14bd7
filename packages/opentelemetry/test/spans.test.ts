import { AcquireTimeoutError, TransportError } from '@dlock/core';
import { context, SpanStatusCode, trace } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { ATTRIBUTES as A, SPANS } from '../src/index.js';
import { TestContextManager } from './context-manager.js';
import { ms, outcome, setup } from './otel.js';

const TTL = 3_000;

describe('acquire spans', () => {
  it('span from the call to the grant, with the wait, the token as a string, the attempts and the outcome', async () => {
    const { client, other, clock, spans } = setup();
    const first = await other.acquire('a', { ttlMs: TTL });
    const calledAt = clock.now();
    const call = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 5_000 }));
    await clock.advance(400);
    await first.release();
    await clock.advance(0);
    const handle = call.value;
    expect(handle?.fencingToken).toBe(2n);
    const [span] = spans(SPANS.acquire);
    expect(span?.attributes).toEqual({
      [A.kind]: 'lock',
      [A.outcome]: 'acquired',
      [A.waitMs]: 400,
      [A.attempts]: expect.any(Number),
      [A.fencingToken]: '2',
      [A.ttlMs]: TTL,
    });
    expect(span?.attributes[A.attempts]).toBeGreaterThanOrEqual(2);
    expect(ms(span?.startTime ?? [0, 0])).toBe(calledAt);
    expect(ms(span?.duration ?? [0, 0])).toBe(400);
    expect(span?.status.code).toBe(SpanStatusCode.UNSET);
  });

  it('a timeout: outcome and reason on the span, no error status (the budget ran out, nothing broke)', async () => {
    const { client, other, clock, spans } = setup();
    await other.acquire('a', { ttlMs: 60_000 });
    const call = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 500 }));
    await clock.advance(500);
    expect(call.error).toBeInstanceOf(AcquireTimeoutError);
    const [span] = spans(SPANS.acquire);
    expect(span?.attributes).toMatchObject({
      [A.outcome]: 'timeout',
      [A.reason]: 'held-by-another-owner',
      [A.waitMs]: 500,
    });
    expect(span?.attributes).not.toHaveProperty(A.fencingToken);
    expect(ms(span?.duration ?? [0, 0])).toBe(500);
    expect(span?.status.code).toBe(SpanStatusCode.UNSET);
  });

  it('an abort: outcome aborted', async () => {
    const { client, other, clock, spans } = setup();
    await other.acquire('a', { ttlMs: 60_000 });
    const controller = new AbortController();
    const call = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 5_000, signal: controller.signal }));
    await clock.advance(70);
    controller.abort();
    await clock.advance(0);
    expect(call.done).toBe(true);
    expect(spans(SPANS.acquire)[0]?.attributes).toMatchObject({ [A.outcome]: 'aborted', [A.waitMs]: 70 });
  });

  it('an error: error status and the exception recorded', async () => {
    const { client, faulty, spans } = setup();
    faulty.partition('fail');
    await expect(client.acquire('a', { ttlMs: TTL })).rejects.toBeInstanceOf(TransportError);
    const [span] = spans(SPANS.acquire);
    expect(span?.attributes).toMatchObject({ [A.outcome]: 'error', [A.attempts]: 1 });
    expect(span?.status.code).toBe(SpanStatusCode.ERROR);
    expect(span?.status.message).toMatch(/partition/);
    expect(span?.events.map((e) => e.name)).toEqual(['exception']);
  });

  it('a reentrant acquire says so', async () => {
    const { client, spans } = setup();
    await client.acquire('a', { ttlMs: TTL, reentrant: true });
    await client.acquire('a', { ttlMs: TTL, reentrant: true });
    expect(spans(SPANS.acquire).map((s) => s.attributes[A.reentered])).toEqual([undefined, true]);
  });

  it('a permit: kind permit', async () => {
    const { client, spans } = setup();
    const permit = await client.semaphore('pool', { permits: 3, ttlMs: TTL }).acquire();
    await permit.release();
    expect(spans().map((s) => [s.name, s.attributes[A.kind]])).toEqual([
      [SPANS.acquire, 'permit'],
      [SPANS.release, 'permit'],
    ]);
    expect(spans()[0]?.attributes).not.toHaveProperty(A.slot);
  });
});

describe('release spans', () => {
  it('span over the service call, with the hold, the token and the result', async () => {
    const { client, faulty, clock, spans } = setup();
    const handle = await client.acquire('a', { ttlMs: TTL });
    await clock.advance(900);
    faulty.latency(40);
    const releasedAt = clock.now();
    const call = outcome(handle.release());
    await clock.advance(40);
    expect(call.done).toBe(true);
    const [span] = spans(SPANS.release);
    expect(span?.attributes).toEqual({
      [A.kind]: 'lock',
      [A.fencingToken]: '1',
      [A.heldMs]: 900,
      [A.releaseResult]: 'deleted',
    });
    expect(ms(span?.startTime ?? [0, 0])).toBe(releasedAt);
    expect(ms(span?.duration ?? [0, 0])).toBe(40);
    expect(span?.status.code).toBe(SpanStatusCode.UNSET);
  });

  it('a release the service could not hear of: result failed, error status', async () => {
    const { client, faulty, spans } = setup();
    const handle = await client.acquire('a', { ttlMs: TTL });
    faulty.failNext(1);
    await expect(handle.release()).rejects.toBeInstanceOf(TransportError);
    const [span] = spans(SPANS.release);
    expect(span?.attributes[A.releaseResult]).toBe('failed');
    expect(span?.status.code).toBe(SpanStatusCode.ERROR);
  });

  it('a loss makes no release span', async () => {
    const { client, faulty, clock, spans } = setup();
    await client.acquire('a', { ttlMs: TTL });
    faulty.partition('fail');
    await clock.advance(2 * TTL);
    expect(spans(SPANS.release)).toEqual([]);
  });
});

describe('context', () => {
  it("acquire and release spans are children of the caller's active span, also after a wait", async () => {
    const manager = new TestContextManager();
    context.setGlobalContextManager(manager);
    try {
      const { client, other, clock, spans, tracerProvider } = setup();
      const first = await other.acquire('a', { ttlMs: 60_000 });
      const parent = tracerProvider.getTracer('app').startSpan('job');
      const work = context.with(trace.setSpan(context.active(), parent), async () => {
        const handle = await client.acquire('a', { ttlMs: TTL, waitMs: 5_000 });
        await handle.release();
      });
      await clock.advance(300);
      await first.release();
      await clock.advance(0);
      await work;
      parent.end();
      const parentId = parent.spanContext().spanId;
      expect(spans(SPANS.acquire)[0]?.parentSpanContext?.spanId).toBe(parentId);
      expect(spans(SPANS.release)[0]?.parentSpanContext?.spanId).toBe(parentId);
    } finally {
      context.disable();
    }
  });
});

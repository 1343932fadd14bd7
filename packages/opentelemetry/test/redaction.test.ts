import { TransportError } from '@dlock/core';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { describe, expect, it } from 'vitest';
import { SPANS } from '../src/index.js';
import { outcome, setup } from './otel.js';

const TTL = 3_000;

/** Every string a span exports: attributes, status message, event names and event attributes. */
function exported(span: ReadableSpan | undefined): string {
  if (!span) return '';
  return JSON.stringify({
    name: span.name,
    attributes: span.attributes,
    status: span.status,
    events: span.events.map((e) => ({ name: e.name, attributes: e.attributes })),
  });
}

describe('lock names in errors', () => {
  it('a failed acquire (the service did not answer) records its error without the lock name', async () => {
    const { client, faulty, clock, spans } = setup();
    faulty.partition('hang');
    const call = outcome(client.acquire('invoice:4242', { ttlMs: TTL }));
    await clock.advance(1_000);
    expect(call.error).toBeInstanceOf(TransportError);
    expect((call.error as Error).message).toContain('invoice:4242');
    const [span] = spans(SPANS.acquire);
    expect(span?.events.map((e) => e.name)).toEqual(['exception']);
    expect(exported(span)).toContain('did not answer');
    expect(exported(span)).not.toContain('invoice:4242');
  });

  it('a release the service did not hear records its error without the lock name', async () => {
    const { client, faulty, clock, spans } = setup();
    const handle = await client.acquire('invoice:4242', { ttlMs: TTL });
    faulty.partition('hang');
    const call = outcome(handle.release());
    await clock.advance(1_000);
    expect(call.error).toBeInstanceOf(TransportError);
    const [span] = spans(SPANS.release);
    expect(exported(span)).toContain('did not answer');
    expect(exported(span)).not.toContain('invoice:4242');
  });

  it('mapped to a part: the raw name still stays out of the error text', async () => {
    const { client, faulty, clock, spans } = setup({ nameAttribute: (name) => name.split(':')[0] });
    faulty.partition('hang');
    const call = outcome(client.acquire('invoice:4242', { ttlMs: TTL }));
    await clock.advance(1_000);
    expect(call.done).toBe(true);
    const [span] = spans(SPANS.acquire);
    expect(exported(span)).not.toContain('invoice:4242');
    expect(span?.status.message).toBe('acquire "<lock>" did not answer within 1000 ms');
    expect(span?.events[0]?.attributes).toMatchObject({
      'exception.type': 'TRANSPORT',
      'exception.message': 'acquire "<lock>" did not answer within 1000 ms',
    });
  });

  it('names recorded whole by the mapping stay in the error text (the caller chose to record them)', async () => {
    const { client, faulty, clock, spans } = setup({ nameAttribute: (name) => name });
    faulty.partition('hang');
    const call = outcome(client.acquire('invoice:4242', { ttlMs: TTL }));
    await clock.advance(1_000);
    expect(call.done).toBe(true);
    expect(spans(SPANS.acquire)[0]?.status.message).toBe(
      'acquire "invoice:4242" did not answer within 1000 ms',
    );
  });

  it('a short name leaves the words of the message whole; a name with regex characters is found as it is', async () => {
    const { client, faulty, clock, spans } = setup();
    faulty.partition('hang');
    const short = outcome(client.acquire('a', { ttlMs: TTL }));
    const odd = outcome(client.acquire('(x)+.y*[ü]', { ttlMs: TTL }));
    await clock.advance(1_000);
    expect(short.done && odd.done).toBe(true);
    expect(spans(SPANS.acquire).map((s) => s.status.message)).toEqual([
      'acquire "<lock>" did not answer within 1000 ms',
      'acquire "<lock>" did not answer within 1000 ms',
    ]);
  });
});

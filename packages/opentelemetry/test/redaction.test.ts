import {
  type AcquireRequest,
  type AcquireResult,
  type Lease,
  LockClient,
  MemoryLockService,
  TransportError,
} from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import { SpanStatusCode } from '@opentelemetry/api';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { describe, expect, it } from 'vitest';
import { instrument, SPANS } from '../src/index.js';
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

/**
 * A service that fails each acquire and release with the error `errorFor(name)` builds: how an adapter's own error
 * text reaches the client's events. The texts are the adapters' formats, with a name in the form each adapter
 * writes it into its keys or paths.
 */
class FailingService extends MemoryLockService {
  failing = false;
  constructor(
    clock: FakeClock,
    private readonly errorFor: (name: string) => Error,
  ) {
    super({ clock });
  }
  override acquire(request: AcquireRequest): Promise<AcquireResult> {
    return this.failing ? Promise.reject(this.errorFor(request.name)) : super.acquire(request);
  }
  override release(lease: Lease): Promise<boolean> {
    return this.failing ? Promise.reject(this.errorFor(lease.name)) : super.release(lease);
  }
}

async function spansOfFailures(name: string, errorFor: (name: string) => Error): Promise<ReadableSpan[]> {
  const clock = new FakeClock({ seed: 5 });
  const service = new FailingService(clock, errorFor);
  const client = new LockClient(service, { clock });
  const exporter = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const stop = instrument(client, { tracerProvider, clock, nameAttribute: (n) => n.slice(0, 3) });
  const handle = await client.acquire(name, { ttlMs: TTL });
  service.failing = true;
  const release = outcome(handle.release());
  const acquire = outcome(client.acquire(name, { ttlMs: TTL }));
  await clock.advance(10);
  expect(release.error).toBeInstanceOf(TransportError);
  expect(acquire.error).toBeInstanceOf(TransportError);
  // The caller's error keeps the adapter's text.
  expect((acquire.error as Error).message).toBe(errorFor(name).message);
  stop();
  service.failing = false;
  await client.close();
  return exporter.getFinishedSpans().filter((s) => s.status.code === SpanStatusCode.ERROR);
}

describe('lock names as adapters write them into their errors', () => {
  // The acquire error is the exact text the ZooKeeper adapter gave on the real server (127.0.0.1:2181 behind a
  // blackholed proxy, requestTimeoutMs 500) for a lock named `inv {42}/ü %x`; the release's is its other format.
  it('ZooKeeper: the percent-encoded name in a node path is redacted', async () => {
    const name = 'inv {42}/ü %x';
    const failed = await spansOfFailures(name, (n) => {
      expect(n).toBe(name);
      return new TransportError(
        'ZooKeeper multi /dlock/inv%20%7B42%7D%2F%C3%BC%20%25x/_c_789e4ccbe7a2d4397eb0000000000002- did not answer within 500 ms',
      );
    });
    expect(failed.map((s) => s.name).sort()).toEqual([SPANS.acquire, SPANS.release]);
    for (const span of failed) {
      expect(span.status.message).toBe(
        'ZooKeeper multi /dlock/<lock>/_c_789e4ccbe7a2d4397eb0000000000002- did not answer within 500 ms',
      );
      expect(exported(span)).not.toContain('inv%20');
    }
  });

  it('ZooKeeper: a name encoded only in part, and a leading dot, are found too (lower-case hex as well)', async () => {
    const failed = await spansOfFailures(
      '.job:7 ü',
      () =>
        new TransportError(
          'ZooKeeper create /app/locks/%2Ejob:7%20%c3%bc failed: Exception: CONNECTION_LOSS[-4]',
        ),
    );
    for (const span of failed) {
      expect(span.status.message).toBe(
        'ZooKeeper create /app/locks/<lock> failed: Exception: CONNECTION_LOSS[-4]',
      );
    }
  });

  it('Redis: the name escaped inside the hash tag of its keys is redacted', async () => {
    // redis/src/keys.ts: `${prefix}{${encodeLockName(name)}}:lock`, `%`, `{`, `}` escaped; the message is
    // renew-batches.ts's (a Redis Cluster renewal; on the real server acquire and release errors name no key).
    const failed = await spansOfFailures(
      'a{b}%c',
      () => new TransportError('renew: dlock:{a%7Bb%7D%25c}:lock is not served where its slot points'),
    );
    for (const span of failed) {
      expect(span.status.message).toBe('renew: dlock:{<lock>}:lock is not served where its slot points');
    }
  });

  it('etcd: the name with `/` and `%` escaped in a key is redacted', async () => {
    // etcd/src/keys.ts: `${prefix}${escapeName(name)}/`, only `%` and `/` escaped. No etcd adapter error quotes a
    // key today (on the real server a lost answer reads `etcd acquire did not answer within 500 ms`); this one is a
    // driver's message that would.
    const failed = await spansOfFailures(
      'tenant/7%/job',
      () =>
        new TransportError('etcd acquire failed: key dlock/tenant%2F7%25%2Fjob/0a1b2c3d4e5f6071_0 is busy'),
    );
    for (const span of failed) {
      expect(span.status.message).toBe('etcd acquire failed: key dlock/<lock>/0a1b2c3d4e5f6071_0 is busy');
    }
  });

  it('PostgreSQL: the name inside a JSON-quoted row is redacted', async () => {
    // postgres/src/errors.ts: `PostgreSQL ${what}: unexpected result ${JSON.stringify(row)}` (its rows carry no
    // name today; redis/src/errors.ts shows an unexpected reply the same way).
    const name = 'say "hi"\\now';
    const failed = await spansOfFailures(
      name,
      (n) =>
        new TransportError(
          `PostgreSQL acquire: unexpected result ${JSON.stringify({ name: n, token: '7' })}`,
        ),
    );
    for (const span of failed) {
      expect(span.status.message).toBe('PostgreSQL acquire: unexpected result {"name":"<lock>","token":"7"}');
    }
  });
});

describe('lock names cut short in error text', () => {
  /** redis/src/errors.ts's unexpectedReply: the reply as JSON, cut at 200 characters. */
  const unexpectedReply = (what: string, reply: unknown) =>
    new TransportError(`${what}: unexpected reply from Redis: ${JSON.stringify(reply).slice(0, 200)}`);
  /** redis/src/keys.ts's escape of a name inside the hash tag. */
  const tagged = (name: string) =>
    `dlock:{${name.replace(/[%{}]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)}}:lock`;

  it('Redis: a name cut off where an unexpected reply is shortened is redacted', async () => {
    // No dlock script answers with a key; a proxy or a server that is not Redis may echo one back, and the adapter
    // shows the reply cut at 200 characters, inside the name when the name is long.
    const name = `tenant "ü"/{${'order-'.repeat(40)}}`;
    const failed = await spansOfFailures(name, (n) => unexpectedReply('acquire', ['ERR', tagged(n)]));
    expect(failed).toHaveLength(2);
    for (const span of failed) {
      expect(span.status.message).toBe('acquire: unexpected reply from Redis: ["ERR","dlock:{<lock>');
      expect(exported(span)).not.toContain('order-order');
      expect(exported(span)).not.toContain('tenant');
    }
  });

  it('a cut that splits an escape, or a stack line that ends in the cut name, is redacted too', async () => {
    const name = `quarterly report {q3} ${'x'.repeat(300)}`;
    // The cut falls between the two hex digits of the escaped brace: `…report %7`.
    const failed = await spansOfFailures(name, (n) => {
      const key = tagged(n);
      return new TransportError(
        `renew: unexpected reply from Redis: ${key.slice(0, key.indexOf('%7B') + 2)}`,
      );
    });
    for (const span of failed) {
      expect(span.status.message).toBe('renew: unexpected reply from Redis: dlock:{<lock>');
      expect(exported(span)).not.toContain('quarterly');
    }
  });

  it('a short prefix at the end of a line, or a long one inside a line, stays: only a cut is taken for the name', async () => {
    const text = 'renew did not answer within 500 ms\nrenew did not answer within 500 ms';
    const short = await spansOfFailures('ms-report-2026', () => new TransportError(text));
    expect(short.map((s) => s.status.message)).toEqual([text, text]);
    const inside = await spansOfFailures(
      'quarterly-report-2026',
      () => new TransportError('quarterly-report done'),
    );
    expect(inside.map((s) => s.status.message)).toEqual(['quarterly-report done', 'quarterly-report done']);
  });
});

describe('long names cut short', () => {
  it('a cut anywhere past the first 128 characters of a long name is redacted, with the rest of its line', async () => {
    // Past 128 characters the cut is not matched character by character (a pattern as deep as a long name backtracks
    // for seconds on a hostile message): 128 of the name's characters are taken for the name, to the line's end.
    const name = `${'ledger-'.repeat(40)}end`;
    const texts = [
      `acquire: unexpected reply from Redis: ${name.slice(0, 250)}\nat line 2`,
      `acquire: unexpected reply from Redis: ${name.slice(0, 130)} and more text\nat line 2`,
      `acquire: unexpected reply from Redis: ${name.slice(0, 100)}\nat line 2`,
    ];
    for (const text of texts) {
      const failed = await spansOfFailures(name, () => new TransportError(text));
      expect(failed.map((s) => s.status.message)).toEqual([
        'acquire: unexpected reply from Redis: <lock>\nat line 2',
        'acquire: unexpected reply from Redis: <lock>\nat line 2',
      ]);
    }
  });
});

describe('long error text', () => {
  it('a message of megabytes is exported cut short, redacted up to the cut', async () => {
    // The whole text went to the span (2,694,019 characters here); and looking for a cut name at every line end of
    // it, the redactor held the event loop for 25 s with a 900-character name made of the text's words.
    const name = 'a b'.repeat(300);
    const text = `${'a b'.repeat(299)} `.repeat(3_000);
    const failed = await spansOfFailures(name, () => new TransportError(`store said: ${name} ${text}`));
    for (const span of failed) {
      const message = span.status.message ?? '';
      expect(message.length).toBeLessThanOrEqual(4_097);
      // The text's words are 897-character prefixes of the name: taken for the name, cut short (see below).
      expect(message).toBe('store said: <lock> <lock>…');
      expect(message.endsWith('…')).toBe(true);
      const attributes = span.events[0]?.attributes ?? {};
      expect(attributes['exception.message']).toBe(message);
      expect(String(attributes['exception.stacktrace']).length).toBeLessThanOrEqual(8_193);
    }
  });
});

describe("an error's name and code", () => {
  /** An error of a user's own service, a dlock TransportError to the client, with its own name and code. */
  class CustomError extends TransportError {
    override readonly code: 'TRANSPORT';
    constructor(message: string, name: string, code: string) {
      super(message);
      this.name = name;
      // A user's subclass can set any code at run time; the type only says what core's subclasses set.
      this.code = code as 'TRANSPORT';
    }
  }

  it("a name or code that carries the lock name, or any code outside dlock's, is not exported as it is", async () => {
    const failed = await spansOfFailures(
      'invoice:4242',
      (n) => new CustomError('store down', `StoreError(${n})`, `E_STORE_${n}`),
    );
    expect(failed).toHaveLength(2);
    for (const span of failed) {
      expect(exported(span)).not.toContain('4242');
      expect(span.events[0]?.attributes).toMatchObject({
        'exception.type': 'other',
        'exception.message': 'store down',
      });
    }
  });

  it('a code per call (unbounded) is exported as other', async () => {
    let calls = 0;
    const failed = await spansOfFailures('a', () => new CustomError('down', 'StoreError', `E${calls++}`));
    expect(failed.map((s) => s.events[0]?.attributes?.['exception.type'])).toEqual(['other', 'other']);
  });

  it('without a code, a name that holds the lock name or is no class name is exported as Error', async () => {
    // A dlock error (core passes those on as they are) whose code was taken off: the name is the exception type.
    const branded = (name: string) => {
      const error = new TransportError('down');
      error.name = name;
      return Object.defineProperty(error, 'code', { value: undefined });
    };
    for (const [name, type] of [
      ['invoice:4242', 'Error'],
      ['Failed for invoice:4242 at 10:31', 'Error'],
      ['StoreError', 'StoreError'],
    ] as const) {
      const failed = await spansOfFailures('invoice:4242', () => branded(name));
      expect(failed.map((s) => s.events[0]?.attributes?.['exception.type'])).toEqual([type, type]);
    }
  });

  it("dlock's own codes are exported as they are", async () => {
    const failed = await spansOfFailures('a', () => new TransportError('down'));
    expect(failed.map((s) => s.events[0]?.attributes?.['exception.type'])).toEqual([
      'TRANSPORT',
      'TRANSPORT',
    ]);
  });
});

import { TransportError } from '@dlock/core';
import { describe, expect, it, vi } from 'vitest';
import { SPANS } from '../src/index.js';
import { nameRedactor } from '../src/name-redaction.js';
import { outcome, setup } from './otel.js';

// Counts the pattern builds instrument() asks for: the builder is the costly part (about 4 ms for a
// 1,024-character name), so a name that keeps failing must not rebuild it at every event.
vi.mock('../src/name-redaction.js', async (importOriginal) => {
  const actual = await importOriginal<typeof import('../src/name-redaction.js')>();
  return { ...actual, nameRedactor: vi.fn(actual.nameRedactor) };
});

const TTL = 3_000;

/** Fails an acquire of `name` on a service that does not answer; returns the span's status message. */
async function failOnce(harness: ReturnType<typeof setup>, name: string): Promise<string | undefined> {
  const call = outcome(harness.client.acquire(name, { ttlMs: TTL }));
  await harness.clock.advance(1_000);
  expect(call.error).toBeInstanceOf(TransportError);
  return harness.spans(SPANS.acquire).at(-1)?.status.message;
}

describe('redaction patterns are built once per name', () => {
  it('five failures of one long name build its pattern once, each span still redacted', async () => {
    const built = vi.mocked(nameRedactor);
    built.mockClear();
    const harness = setup();
    harness.faulty.partition('hang');
    const name = `job:${'x'.repeat(1_020)}`;
    for (let i = 0; i < 5; i++) {
      expect(await failOnce(harness, name)).toBe('acquire "<lock>" did not answer within 1000 ms');
    }
    expect(built.mock.calls.map(([n]) => n)).toEqual([name]);
  });

  it('names taking turns keep their own patterns; the cache is bounded and drops the least recently used', async () => {
    const built = vi.mocked(nameRedactor);
    built.mockClear();
    const harness = setup();
    harness.faulty.partition('hang');
    for (let round = 0; round < 3; round++) {
      for (const name of ['invoice:1', 'invoice:2']) {
        expect(await failOnce(harness, name)).toBe('acquire "<lock>" did not answer within 1000 ms');
      }
    }
    expect(built.mock.calls.map(([n]) => n)).toEqual(['invoice:1', 'invoice:2']);
    // Past the bound, the oldest name goes first and is built again when it fails again.
    for (let i = 0; i < 40; i++) await failOnce(harness, `batch:${i}`);
    built.mockClear();
    expect(await failOnce(harness, 'invoice:1')).toBe('acquire "<lock>" did not answer within 1000 ms');
    expect(await failOnce(harness, 'batch:39')).toBe('acquire "<lock>" did not answer within 1000 ms');
    expect(built.mock.calls.map(([n]) => n)).toEqual(['invoice:1']);
  });

  it('a name used again is kept past names older than its last use, not dropped by when it was first built', async () => {
    const built = vi.mocked(nameRedactor);
    const harness = setup();
    harness.faulty.partition('hang');
    await failOnce(harness, 'keep');
    for (let i = 1; i <= 31; i++) await failOnce(harness, `batch:${i}`);
    // The cache is full, 'keep' the first built; used now, it is the most recent.
    await failOnce(harness, 'keep');
    await failOnce(harness, 'batch:32');
    built.mockClear();
    expect(await failOnce(harness, 'keep')).toBe('acquire "<lock>" did not answer within 1000 ms');
    expect(await failOnce(harness, 'batch:1')).toBe('acquire "<lock>" did not answer within 1000 ms');
    expect(built.mock.calls.map(([n]) => n)).toEqual(['batch:1']);
  });
});

import { MAX_NAME_BYTES, MAX_PERMITS } from '@dlock/core';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { limitOf, lockDirectory, prefixRangeEnd, semaphoreLayout, slotKey, slotOf } from './keys.js';
import { decodePermitRecord, encodePermitRecord } from './values.js';

const utf8Bytes = (s: string): number => Buffer.byteLength(s, 'utf8');

/** Names as core accepts them, biased towards the escaped characters and the semaphore marker. */
const name = fc
  .oneof(
    fc.string({ unit: 'binary', minLength: 1, maxLength: 200 }),
    fc.string({ unit: fc.constantFrom('%', '/', '2', '5', 'F', 's', 'e', 'm', 'a', '🔒'), minLength: 1 }),
  )
  .filter((n) => utf8Bytes(n) <= MAX_NAME_BYTES);
const permits = fc.integer({ min: 1, max: MAX_PERMITS });

const inRange = (key: Buffer, start: Buffer, end: Buffer): boolean =>
  Buffer.compare(key, start) >= 0 && Buffer.compare(key, end) < 0;

describe('semaphore key layout', () => {
  it("never puts a semaphore's key in a lock's directory, whatever both are named", () => {
    fc.assert(
      fc.property(name, name, permits, fc.nat({ max: MAX_PERMITS - 1 }), (semaphore, lock, p, slot) => {
        const layout = semaphoreLayout('dlock/', semaphore, p);
        const directory = lockDirectory('dlock/', lock);
        const end = prefixRangeEnd(directory);
        expect(inRange(slotKey(layout, slot % p), directory, end)).toBe(false);
        expect(inRange(layout.queue, directory, end)).toBe(false);
      }),
      { numRuns: 2_000 },
    );
  });

  it("keeps two semaphores' keys apart, and each limit's keys inside its own range only", () => {
    fc.assert(
      fc.property(name, name, permits, permits, (a, b, p, q) => {
        fc.pre(a !== b || p !== q);
        const la = semaphoreLayout('', a, p);
        const lb = semaphoreLayout('', b, q);
        const key = slotKey(la, p - 1);
        expect(inRange(key, la.slots, la.slotsEnd)).toBe(true);
        expect(inRange(key, la.limitDirectory, la.limitEnd)).toBe(true);
        expect(inRange(key, lb.limitDirectory, lb.limitEnd)).toBe(false);
        // Same semaphore, another limit: the key lies in one of the two ranges the other limit compares as empty.
        if (a === b) {
          const outside =
            inRange(key, lb.directory, lb.limitDirectory) || inRange(key, lb.limitEnd, lb.directoryEnd);
          expect(outside).toBe(true);
          expect(limitOf(lb, key)).toBe(p);
        } else {
          expect(inRange(key, lb.directory, lb.directoryEnd)).toBe(false);
        }
        expect(slotOf(la, key)).toBe(p - 1);
        expect(slotOf(la, Buffer.concat([la.queue, Buffer.from('x')]))).toBeUndefined();
      }),
      { numRuns: 2_000 },
    );
  });

  it('round-trips the value record, and refuses what it did not write', () => {
    const record = { permits: 4, owner: 'host:1:abc', attempt: 'a-b', metadata: 'job 7' };
    expect(decodePermitRecord(encodePermitRecord(record))).toEqual(record);
    expect(decodePermitRecord(Buffer.from('not json'))).toBeUndefined();
    expect(decodePermitRecord(Buffer.from('{"permits":"4"}'))).toBeUndefined();
  });
});

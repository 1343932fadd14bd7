import { InvalidArgumentError } from '@dlock/core';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DEFAULT_KEY_PREFIX, encodeLockName, hashTagOf, lockKeys, validateKeyPrefix } from './keys.js';

/** Redis Cluster's key slot: CRC16-CCITT (XModem) of the hash tag, mod 16384. */
function keySlot(key: string): number {
  let crc = 0;
  for (const byte of Buffer.from(hashTagOf(key))) {
    crc ^= byte << 8;
    for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % 16384;
}

/** Inverse of the mapping, written independently of it: proves that no two names share a key. */
function nameOfLockKey(prefix: string, key: string): string {
  expect(key.startsWith(`${prefix}{`)).toBe(true);
  expect(key.endsWith('}:lock')).toBe(true);
  const encoded = key.slice(prefix.length + 1, -'}:lock'.length);
  expect(encoded).not.toMatch(/[{}]/);
  return encoded.replace(/%(25|7B|7D)/g, (_, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)));
}

// Names as users write them: any unicode, with the characters the encoding cares about made frequent.
const names = fc.oneof(
  fc.string({ unit: 'grapheme', minLength: 1, maxLength: 40 }),
  fc.string({
    unit: fc.constantFrom('{', '}', '%', '7', 'B', 'D', '2', '5', ' ', 'é', '🔒', ':'),
    minLength: 1,
  }),
);
const prefixes = fc.oneof(
  fc.constant(DEFAULT_KEY_PREFIX),
  fc.string({ maxLength: 12 }).filter((p) => !/[{}]/.test(p)),
);

describe('lock key mapping', () => {
  it('is injective: the lock key gives back the name', () => {
    fc.assert(
      fc.property(prefixes, names, (prefix, name) => {
        expect(nameOfLockKey(prefix, lockKeys(prefix, name).lock)).toBe(name);
      }),
      { numRuns: 2_000 },
    );
  });

  it('never maps two different names to one key', () => {
    fc.assert(
      fc.property(prefixes, fc.uniqueArray(names, { minLength: 2, maxLength: 30 }), (prefix, list) => {
        const keys = new Set(list.map((name) => lockKeys(prefix, name).lock));
        expect(keys.size).toBe(list.length);
      }),
    );
  });

  it('puts every key of one lock in one cluster slot, tagged by the whole name', () => {
    fc.assert(
      fc.property(prefixes, names, (prefix, name) => {
        const keys = lockKeys(prefix, name);
        const all = [keys.lock, keys.fence, keys.queue, keys.waiters, keys.released];
        for (const key of all) expect(hashTagOf(key)).toBe(encodeLockName(name));
        expect(new Set(all.map(keySlot)).size).toBe(1);
      }),
      { numRuns: 2_000 },
    );
  });

  it('keeps the five keys of a lock distinct and derives the release channel from the lock key', () => {
    const keys = lockKeys('app:', 'a}b{c%7D');
    expect(keys).toEqual({
      lock: 'app:{a%7Db%7Bc%257D}:lock',
      fence: 'app:{a%7Db%7Bc%257D}:fence',
      queue: 'app:{a%7Db%7Bc%257D}:queue',
      waiters: 'app:{a%7Db%7Bc%257D}:waiters',
      released: 'app:{a%7Db%7Bc%257D}:released',
    });
    // The scripts find the channel by replacing the trailing "lock" of KEYS[1].
    expect(`${keys.lock.slice(0, -4)}released`).toBe(keys.released);
  });

  it('handles a 1,024-byte name of multi-byte characters', () => {
    const name = '名'.repeat(341); // 1,023 bytes
    const keys = lockKeys(DEFAULT_KEY_PREFIX, name);
    expect(nameOfLockKey(DEFAULT_KEY_PREFIX, keys.lock)).toBe(name);
    expect(hashTagOf(keys.fence)).toBe(name);
  });

  it('computes the slot Redis documents for a known tag', () => {
    // Redis Cluster spec: the key "123456789" hashes to CRC16 0x31C3 = 12739.
    expect(keySlot('123456789')).toBe(12739);
    expect(keySlot('{123456789}:anything')).toBe(12739);
  });

  it('refuses prefixes with braces, which would move the hash tag', () => {
    for (const bad of ['{', '}', 'a{b', 'x}', '{tag}:']) {
      expect(() => validateKeyPrefix(bad)).toThrow(InvalidArgumentError);
    }
    expect(() => validateKeyPrefix(42)).toThrow(InvalidArgumentError);
    expect(() => validateKeyPrefix('x'.repeat(257))).toThrow(InvalidArgumentError);
    expect(validateKeyPrefix('')).toBe('');
    expect(validateKeyPrefix('my app:')).toBe('my app:');
  });
});

import { MAX_METADATA_BYTES } from '@dlock/core';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeMetadata, decodeOwnerId, encodeValue } from './values.js';

/** Metadata as core passes it: well-formed Unicode up to the byte limit, including the empty string. */
const metadata = fc
  .string({ unit: 'binary', maxLength: 400 })
  .filter((value) => !/\p{Cs}/u.test(value) && Buffer.byteLength(value, 'utf8') <= MAX_METADATA_BYTES);

describe('key values', () => {
  it('give back exactly the metadata written, the empty string included', () => {
    fc.assert(
      fc.property(metadata, fc.string(), (value, ownerId) => {
        expect(decodeMetadata(encodeValue(value, ownerId))).toBe(value);
      }),
    );
  });

  it('hold metadata as its bare UTF-8 bytes (what Go’s Election and etcdctl elect read)', () => {
    fc.assert(
      fc.property(metadata, fc.string(), (value, ownerId) => {
        expect(encodeValue(value, ownerId).equals(Buffer.from(value, 'utf8'))).toBe(true);
      }),
    );
  });

  it('give back the owner id of a grant written without metadata, and none for one written with', () => {
    fc.assert(
      fc.property(fc.string(), metadata, (ownerId, value) => {
        if (/\p{Cs}/u.test(ownerId)) return;
        expect(decodeOwnerId(encodeValue(undefined, ownerId))).toBe(ownerId);
        expect(decodeOwnerId(encodeValue(value, ownerId))).toBeUndefined();
      }),
    );
  });

  it('never report metadata for a grant written without, whatever the owner id', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary' }), (ownerId) => {
        const value = encodeValue(undefined, ownerId);
        expect(decodeMetadata(value)).toBeUndefined();
        expect(value.subarray(1).toString('utf8')).toBe(ownerId);
      }),
    );
    expect(decodeMetadata(undefined)).toBeUndefined();
  });
});

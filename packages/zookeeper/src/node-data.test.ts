import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeMetadata, decodeOwnerId, encodeNodeData } from './node-data.js';

describe('node data', () => {
  it('without metadata is the owner id, as before, and reads as no metadata', () => {
    expect(encodeNodeData('host:1:abc', undefined).toString('utf8')).toBe('host:1:abc');
    expect(decodeMetadata(encodeNodeData('host:1:abc', undefined))).toBeUndefined();
    expect(decodeMetadata(Buffer.alloc(0))).toBeUndefined();
    expect(decodeMetadata(undefined)).toBeUndefined();
  });

  it('with metadata gives it back, the empty string included', () => {
    expect(decodeMetadata(encodeNodeData('o', 'host-a:4100 ✓'))).toBe('host-a:4100 ✓');
    expect(decodeMetadata(encodeNodeData('o', ''))).toBe('');
    expect(decodeMetadata(encodeNodeData('', 'v'))).toBe('v');
  });

  it('reads data in neither layout as no metadata', () => {
    expect(decodeMetadata(Buffer.of(0xff, 0x61))).toBeUndefined(); // no second mark
    expect(decodeMetadata(Buffer.of(0xff, 0xff, 0xc3))).toBeUndefined(); // metadata not UTF-8
  });

  it('gives back the owner id from either layout, and none from data in neither', () => {
    expect(decodeOwnerId(encodeNodeData('host:1:abc', undefined))).toBe('host:1:abc');
    expect(decodeOwnerId(encodeNodeData('host:1:abc', 'job ✓'))).toBe('host:1:abc');
    expect(decodeOwnerId(Buffer.of(0xff, 0x61))).toBeUndefined();
    expect(decodeOwnerId(Buffer.of(0xc3))).toBeUndefined();
    expect(decodeOwnerId(Buffer.alloc(0))).toBeUndefined();
    fc.assert(
      fc.property(
        fc.string({ unit: 'grapheme', minLength: 1 }),
        fc.option(fc.string({ unit: 'grapheme' })),
        (owner, meta) => {
          expect(decodeOwnerId(encodeNodeData(owner, meta ?? undefined))).toBe(owner);
        },
      ),
    );
  });

  it('round-trips any owner id and metadata; an old-layout node never reads as one with metadata', () => {
    fc.assert(
      fc.property(
        fc.string({ unit: 'grapheme' }),
        fc.option(fc.string({ unit: 'grapheme' })),
        (owner, meta) => {
          const metadata = meta ?? undefined;
          expect(decodeMetadata(encodeNodeData(owner, metadata))).toBe(metadata);
        },
      ),
    );
    fc.assert(
      fc.property(fc.string(), (owner) => {
        expect(decodeMetadata(Buffer.from(owner, 'utf8'))).toBeUndefined();
      }),
    );
  });
});

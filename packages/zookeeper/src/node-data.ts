/**
 * What a queue node's data holds. It is written once, by the create, so a grant carries its metadata from the first
 * moment another process can see it as the holder, whichever way it became first (at once, or as a waiter the queue
 * reached later); `updateMetadata` rewrites it on the holder's own node.
 *
 * - Without metadata: the owner id as UTF-8, as every earlier version of this package wrote it.
 * - With metadata: `0xFF`, the owner id as UTF-8, `0xFF`, the metadata as UTF-8.
 *
 * `0xFF` never occurs in UTF-8, so the two layouts cannot be mistaken for each other, whatever the owner id or the
 * metadata contain, and a node written by an earlier version never reads as one with metadata.
 */

const MARK = 0xff;
const MARK_BYTE = Buffer.of(MARK);
const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

export function encodeNodeData(ownerId: string, metadata: string | undefined): Buffer {
  const owner = Buffer.from(ownerId, 'utf8');
  if (metadata === undefined) return owner;
  return Buffer.concat([MARK_BYTE, owner, MARK_BYTE, Buffer.from(metadata, 'utf8')]);
}

/**
 * The metadata in a node's data, or undefined when it has none (or the data is not in either layout: a node some
 * other tool wrote is reported without metadata rather than with a made-up one).
 */
export function decodeMetadata(data: Buffer | null | undefined): string | undefined {
  if (!data || data.length === 0 || data[0] !== MARK) return undefined;
  const end = data.indexOf(MARK, 1);
  if (end < 0) return undefined;
  try {
    return strictUtf8.decode(data.subarray(end + 1));
  } catch {
    return undefined;
  }
}

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
 * A lock queue node's data, as its create writes it: it names the owner, for people looking at the tree, and carries
 * the grant's metadata, there whichever way the node becomes the holder. Without metadata, the owner's bytes are
 * made once and reused while the owner stays the same.
 */
export class QueueNodeData {
  #last: { readonly ownerId: string; readonly data: Buffer } | undefined;

  of({ ownerId, metadata }: { readonly ownerId: string; readonly metadata?: string | undefined }): Buffer {
    if (metadata !== undefined) return encodeNodeData(ownerId, metadata);
    if (this.#last?.ownerId !== ownerId) this.#last = { ownerId, data: encodeNodeData(ownerId, undefined) };
    return this.#last.data;
  }
}

/**
 * The owner id in a lock queue node's data (either layout), or undefined for data in neither (a node some other tool
 * wrote, bytes that are not UTF-8).
 */
export function decodeOwnerId(data: Buffer | null | undefined): string | undefined {
  if (!data || data.length === 0) return undefined;
  let owner = data;
  if (data[0] === MARK) {
    const end = data.indexOf(MARK, 1);
    if (end < 0) return undefined;
    owner = data.subarray(1, end);
  }
  try {
    return strictUtf8.decode(owner);
  } catch {
    return undefined;
  }
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

/**
 * What a semaphore's queue and slot nodes hold: a JSON object, so that a record can grow (a weight, later) without a
 * new layout, and a person reading the tree sees what each node is.
 *
 * - `permits`: the limit the holder or waiter was admitted with (also in its parent's name);
 * - `owner`: the owner id; `attempt`: the acquire attempt's id, which finds a slot node whose create went unanswered;
 * - `metadata`, when the permit has some.
 */
export interface PermitNodeData {
  readonly permits: number;
  readonly owner: string;
  readonly attempt: string;
  readonly metadata?: string;
}

export function encodePermitData(record: PermitNodeData): Buffer {
  return Buffer.from(JSON.stringify(record), 'utf8');
}

/** The record in a semaphore node's data; undefined for data in any other form. */
export function decodePermitData(data: Buffer | null | undefined): PermitNodeData | undefined {
  if (!data || data.length === 0) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(strictUtf8.decode(data));
  } catch {
    return undefined;
  }
  if (typeof parsed !== 'object' || parsed === null) return undefined;
  const { permits, owner, attempt, metadata } = parsed as Record<string, unknown>;
  if (typeof permits !== 'number' || typeof owner !== 'string' || typeof attempt !== 'string')
    return undefined;
  if (metadata !== undefined && typeof metadata !== 'string') return undefined;
  return metadata === undefined ? { permits, owner, attempt } : { permits, owner, attempt, metadata };
}

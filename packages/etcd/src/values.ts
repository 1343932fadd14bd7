/**
 * What a contender key's value holds. With metadata (an election's proclaimed value), the value is that text as
 * UTF-8 and nothing else, as etcd's Go `concurrency.Election` stores it, so `etcdctl elect -l` and Go's
 * `Election.Leader` read it as it is. Without, it is the owner id after one 0xFF byte, for a reader of
 * `etcdctl get`: no UTF-8 text contains 0xFF and core passes only well-formed metadata, so the two never mix and a
 * lock taken without metadata is never reported as having some.
 */
const NO_METADATA = 0xff;

export function encodeValue(metadata: string | undefined, ownerId: string): Buffer {
  if (metadata !== undefined) return Buffer.from(metadata, 'utf8');
  return Buffer.concat([Buffer.of(NO_METADATA), Buffer.from(ownerId, 'utf8')]);
}

/**
 * The owner id a key's value holds: only a value written without metadata has one (with metadata, the value is the
 * metadata alone, for Go's `Election`).
 */
export function decodeOwnerId(value: Buffer | undefined): string | undefined {
  if (value === undefined || value[0] !== NO_METADATA) return undefined;
  return value.toString('utf8', 1);
}

/** The metadata a key's value holds, or undefined when it was written without. */
export function decodeMetadata(value: Buffer | undefined): string | undefined {
  if (value === undefined || value[0] === NO_METADATA) return undefined;
  return value.toString('utf8');
}

/**
 * A semaphore key's value: a small JSON record with the limit the holder or waiter was admitted with, its owner id,
 * a random id of the acquire attempt (what a delete compares against when the key's create revision is unknown) and
 * the metadata, if any. JSON so that `etcdctl get` shows it and a field (a weight) can be added later.
 */
export interface PermitRecord {
  readonly permits: number;
  readonly owner: string;
  readonly attempt: string;
  readonly metadata?: string;
}

export function encodePermitRecord(record: PermitRecord): Buffer {
  return Buffer.from(JSON.stringify(record), 'utf8');
}

/** The record of a semaphore key's value, or undefined for one this package did not write. */
export function decodePermitRecord(value: Buffer | undefined): PermitRecord | undefined {
  if (value === undefined) return undefined;
  try {
    const parsed: unknown = JSON.parse(value.toString('utf8'));
    if (typeof parsed !== 'object' || parsed === null) return undefined;
    const { permits, owner, attempt } = parsed as Record<string, unknown>;
    if (typeof permits !== 'number' || typeof owner !== 'string' || typeof attempt !== 'string')
      return undefined;
    return parsed as PermitRecord;
  } catch {
    return undefined;
  }
}

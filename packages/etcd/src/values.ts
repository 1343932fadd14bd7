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

/** The metadata a key's value holds, or undefined when it was written without. */
export function decodeMetadata(value: Buffer | undefined): string | undefined {
  if (value === undefined || value[0] === NO_METADATA) return undefined;
  return value.toString('utf8');
}

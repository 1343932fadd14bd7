import type { GrantRecord } from './grants.js';
import { ownerOf, type Session } from './zookeeper-session.js';

/** A `multi` of checks stays well under ZooKeeper's 1 MB packet limit, even with 3 KB paths. */
const CHECK_CHUNK_OPS = 100;
const CHECK_CHUNK_BYTES = 200_000;

/**
 * Existence checks of many lock grants in one `multi` each, instead of one request per grant. A check sees only that
 * the node exists, which is enough: no other session can own a node whose name holds an attempt id only this
 * process used, and each grant is bound to the session that made it.
 */

/** Splits grants into batches that keep a `multi` of checks well under ZooKeeper's packet limit. */
export function checkBatches<T>(items: readonly T[], recordOf: (item: T) => GrantRecord): T[][] {
  const chunks: T[][] = [];
  let chunk: T[] = [];
  let bytes = 0;
  for (const item of items) {
    chunk.push(item);
    bytes += recordOf(item).path.length;
    if (chunk.length >= CHECK_CHUNK_OPS || bytes >= CHECK_CHUNK_BYTES) {
      chunks.push(chunk);
      chunk = [];
      bytes = 0;
    }
  }
  if (chunk.length > 0) chunks.push(chunk);
  return chunks;
}

/** Whether each grant's node exists in its session: one `multi` of checks, or one `exists` each if some failed. */
export async function allExist(
  session: Session,
  records: readonly GrantRecord[],
): Promise<readonly boolean[]> {
  const outcome = await session.checkAll(records.map((record) => record.path));
  if (outcome.ok) return records.map(() => true);
  // Some node is gone; a failed multi does not say reliably which others exist, so ask each.
  const stats = await Promise.all(records.map((record) => session.exists(record.path)));
  return stats.map((stat) => stat != null && ownerOf(stat) === session.id);
}

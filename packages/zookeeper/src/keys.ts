/**
 * Where locks live in the ZooKeeper tree:
 *
 *   <keyPrefix>/<encoded lock name>/_c_<attempt id>-<sequence>
 *
 * The parent node of a lock is persistent (the 1.1.3 client cannot create container nodes); each contender adds an
 * ephemeral sequential child. The attempt id in the child's name is what lets a create retried after a connection
 * loss find the node it may already have made (ZOOKEEPER-1262; Curator calls it protected mode).
 */

/** Prefix of every queue node; Curator uses the same one, so tools that know its layout read ours too. */
export const CHILD_PREFIX = '_c_';

const ATTEMPT_ID = /^[0-9a-f]{32}$/;
/** `_c_<32 hex>-<10 digits>`: the sequence suffix is ZooKeeper's `%010d` of a non-negative int32. */
const CHILD = /^_c_([0-9a-f]{32})-(\d{10})$/;

/** Bytes kept as they are: unreserved URI characters plus `:` and `@`, which are common in lock names. */
const PLAIN = /^[A-Za-z0-9\-_~:@][A-Za-z0-9\-_.~:@]*$/;
const KEEP = new Uint8Array(128);
for (const c of 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~:@')
  KEEP[c.charCodeAt(0)] = 1;
const HEX = '0123456789ABCDEF';
const utf8 = new TextEncoder();

/**
 * Encodes a lock name as one znode name. Every UTF-8 byte outside a small safe set becomes `%XX`, and so does a
 * leading `.`, so the result never contains `/`, control or private-use characters (which ZooKeeper rejects) and is
 * never `.` or `..`. Decoding gives the name back, so two names never share a node.
 */
export function encodeLockName(name: string): string {
  if (PLAIN.test(name)) return name;
  let out = '';
  const bytes = utf8.encode(name);
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i] as number;
    if (b < 128 && KEEP[b] === 1 && !(i === 0 && b === 0x2e)) out += String.fromCharCode(b);
    else out += `%${HEX[b >> 4]}${HEX[b & 15]}`;
  }
  return out;
}

/** The inverse of {@link encodeLockName}; for diagnostics (which lock does this node belong to?). */
export function decodeLockName(encoded: string): string {
  if (!encoded.includes('%')) return encoded;
  const bytes: number[] = [];
  for (let i = 0; i < encoded.length; i++) {
    if (encoded[i] === '%') {
      bytes.push(Number.parseInt(encoded.slice(i + 1, i + 3), 16));
      i += 2;
    } else {
      bytes.push(encoded.charCodeAt(i));
    }
  }
  return new TextDecoder('utf-8', { fatal: true }).decode(Uint8Array.from(bytes));
}

/** The persistent node under which the contenders for `name` queue. */
export function lockParentPath(root: string, name: string): string {
  return `${root}/${encodeLockName(name)}`;
}

/** The path given to `create` for one attempt; ZooKeeper appends the sequence number. */
export function attemptPrefix(parent: string, attemptId: string): string {
  return `${parent}/${CHILD_PREFIX}${attemptId}-`;
}

export function isAttemptId(value: string): boolean {
  return ATTEMPT_ID.test(value);
}

/** True if `child` is a queue node (of any contender); other children of a lock's parent are ignored. */
export function isQueueNode(child: string): boolean {
  return CHILD.test(child);
}

/** True if `child` is the node one attempt created. */
export function isNodeOfAttempt(child: string, attemptId: string): boolean {
  return child.length === CHILD_PREFIX.length + 32 + 11 && child.startsWith(`${CHILD_PREFIX}${attemptId}-`);
}

function sequenceOf(child: string): number {
  return Number(child.slice(-10));
}

/**
 * The queue in grant order: queue nodes sorted by sequence number. Sequence numbers are assigned by the parent in
 * creation order, so this is arrival order, and the first entry holds the lock.
 */
export function queueOrder(children: readonly string[]): string[] {
  return children.filter(isQueueNode).sort((a, b) => sequenceOf(a) - sequenceOf(b));
}

/** Characters ZooKeeper's PathUtils rejects in a path (as UTF-16 code units). */
// biome-ignore lint/suspicious/noControlCharactersInRegex: these are exactly the characters ZooKeeper rejects
const REJECTED = /[\u0000-\u001f\u007f-\u009f\ud800-\uf8ff\ufff0-\uffff]/;

/**
 * Validates the `keyPrefix` option (the root node of the locks): an absolute path of valid segments, not `/` itself
 * and not inside ZooKeeper's own `/zookeeper` subtree.
 */
export function validRoot(root: string): boolean {
  if (!root.startsWith('/') || root === '/' || root.endsWith('/')) return false;
  const segments = root.slice(1).split('/');
  if (segments[0] === 'zookeeper') return false;
  return segments.every((s) => s.length > 0 && s !== '.' && s !== '..' && !REJECTED.test(s));
}

/**
 * Where semaphores live, apart from locks: `<keyPrefix>/.semaphores/<encoded name>`. No lock parent can have this
 * name (an encoded lock name never starts with `.`), so a lock and a semaphore of the same name never share a node.
 */
export const SEMAPHORES_NODE = '.semaphores';

export function semaphoresRootPath(root: string): string {
  return `${root}/${SEMAPHORES_NODE}`;
}

/** The persistent node of one semaphore; its two children carry the limit in their names (see below). */
export function semaphorePath(root: string, name: string): string {
  return `${semaphoresRootPath(root)}/${encodeLockName(name)}`;
}

/** The waiters' parent of a semaphore run with `permits` slots: ephemeral sequential queue nodes, as for locks. */
export function permitQueuePath(semaphore: string, permits: number): string {
  return `${semaphore}/queue-${permits}`;
}

/** The holders' parent of a semaphore run with `permits` slots: one ephemeral node per held slot, named `0 … permits − 1`. */
export function permitSlotsPath(semaphore: string, permits: number): string {
  return `${semaphore}/slots-${permits}`;
}

const LIMIT_NODE = /^(queue|slots)-([1-9]\d{0,4})$/;

/** The limit a child of a semaphore's node is for (`queue-4`, `slots-4`), or undefined for any other child. */
export function limitOf(child: string): number | undefined {
  const match = LIMIT_NODE.exec(child);
  return match ? Number(match[2]) : undefined;
}

const SLOT_NODE = /^(0|[1-9]\d{0,4})$/;

/** The slot a child of the holders' parent holds, if it is a slot node below `permits`. */
export function slotOf(child: string, permits: number): number | undefined {
  if (!SLOT_NODE.test(child)) return undefined;
  const slot = Number(child);
  return slot < permits ? slot : undefined;
}

/** The lowest slot no node holds, or undefined when all `permits` are held. */
export function freeSlot(children: readonly string[], permits: number): number | undefined {
  if (children.length === 0) return 0;
  const held = new Set<number>();
  for (const child of children) {
    const slot = slotOf(child, permits);
    if (slot !== undefined) held.add(slot);
  }
  if (held.size >= permits) return undefined;
  for (let slot = 0; slot < permits; slot++) if (!held.has(slot)) return slot;
  return undefined;
}

/** How many of the `permits` slots a listing of the holders' parent shows held. */
export function heldSlots(children: readonly string[], permits: number): number {
  let held = 0;
  for (const child of children) if (slotOf(child, permits) !== undefined) held += 1;
  return held;
}

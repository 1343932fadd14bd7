import type { Clock } from '@dlock/core';
import type { ZooKeeperStatLike } from './client-like.js';
import { decodeLockName, encodeLockName } from './keys.js';
import { removePlainParent } from './node-ops.js';
import type { Session } from './zookeeper-session.js';

/** Parents looked at per pass: a root with many lock names is covered over several passes, not in one burst. */
export const SWEEP_PROBES = 200;
/** However short `idleParentMs` is, the root is listed no more often than this. */
export const MIN_SWEEP_INTERVAL_MS = 1_000;

export interface ParentSweepDeps {
  readonly clock: Clock;
  readonly root: string;
  readonly idleMs: number;
  /** The live session, if one is open: a sweep never opens one. */
  readonly session: () => Session | undefined;
  /** True for a parent this service uses, or will delete itself once idle. */
  readonly known: (parent: string) => boolean;
  /** Aborts when the service closes. */
  readonly closing: AbortSignal;
  /**
   * Another kind of parent than a lock's (a semaphore's node, with its own children): a stamp of the parent's
   * state when it is idle and empty, which must stay the same for `idleMs` before the parent is deleted; undefined
   * when it is in use or not of that kind. Default: a lock parent's (see `emptyLockParent`).
   */
  readonly idleStamp?: (session: Session, parent: string, name: string) => Promise<string | undefined>;
  /**
   * Deletes a parent found idle; failures (NotEmpty, NoNode) are fine. Resolves 'kept' for a parent someone gave
   * data or another ACL, which is then never probed again while it is listed. Default: a lock parent's
   * `removePlainParent` (read, then deleted alone at the version read, only if it has no data and the open ACL).
   */
  readonly remove?: (session: Session, parent: string) => Promise<'kept' | undefined>;
}

/** An empty parent as one pass saw it: its pzxid changes with every child created or deleted under it. */
interface Seen {
  readonly pzxid: string;
  readonly at: number;
}

/** The only form a lock's parent ever has: a name that encodes a lock name, and a stat with no children or data. */
function emptyLockParent(name: string, stat: ZooKeeperStatLike): string | undefined {
  const { numChildren, dataLength, pzxid } = stat;
  if (numChildren !== 0 || dataLength !== 0 || pzxid === undefined) return undefined;
  if (stat.ephemeralOwner.some((byte) => byte !== 0)) return undefined;
  try {
    if (encodeLockName(decodeLockName(name)) !== name) return undefined;
  } catch {
    return undefined;
  }
  return pzxid.toString('hex');
}

async function lockParentStamp(session: Session, parent: string, name: string): Promise<string | undefined> {
  const stat = await session.exists(parent);
  return stat ? emptyLockParent(name, stat) : undefined;
}

/**
 * Deletes lock parents that every process left behind. A service deletes the parents it used once idle, but one
 * that dies (or closes a session it cannot reach) leaves them, and the 1.1.3 client cannot make container nodes
 * that ZooKeeper would delete by itself. So every service with an open session lists the root every 1 to 1.5 times
 * `idleParentMs` (but no more often than every second) and looks at up to 200 parents it does not use, carrying on
 * where it stopped the time before. A parent it finds empty, with no data, twice with the same pzxid (no child came or went
 * in between) at least `idleParentMs` apart has been idle that long and is deleted, if it has the open ACL too (another is
 * someone's to keep). Deleting never breaks anyone: a contender whose create finds its parent gone re-creates it, and a
 * parent someone queued in meanwhile is NotEmpty.
 */
export class ParentSweep {
  readonly #deps: ParentSweepDeps;
  readonly #emptySince = new Map<string, Seen>();
  /**
   * Parents read with data or another ACL when found idle: someone's to keep, so not read again on every pass. Only
   * while listed: one deleted and made again is looked at anew (at most one listing's worth of names).
   */
  readonly #kept = new Set<string>();
  /** The last name looked at: the next pass starts after it. */
  #cursor = '';
  #started = false;

  constructor(deps: ParentSweepDeps) {
    this.#deps = deps;
  }

  /** Starts the passes (idempotent); they stop when the service closes. The timer never keeps a process alive. */
  start(): void {
    if (this.#started || this.#deps.closing.aborted) return;
    this.#started = true;
    void this.#loop();
  }

  async #pass(): Promise<void> {
    const session = this.#deps.session();
    if (!session) return;
    const { root } = this.#deps;
    let names: string[];
    try {
      names = await session.getChildren(root);
    } catch {
      return; // no root yet, or no answer: the next pass tries again
    }
    const listed = new Set(names);
    for (const name of this.#emptySince.keys()) if (!listed.has(name)) this.#emptySince.delete(name);
    for (const name of this.#kept) if (!listed.has(name)) this.#kept.delete(name);
    const probes = this.#nextProbes(names.sort());
    await Promise.all(probes.map((name) => this.#probe(session, name)));
  }

  async #loop(): Promise<void> {
    const { clock, idleMs, closing } = this.#deps;
    const intervalMs = Math.max(idleMs, MIN_SWEEP_INTERVAL_MS);
    try {
      for (;;) {
        // Spread out, so that services started together do not list the root together; never shorter than the
        // idle time, so that a parent seen empty on one pass is deleted on the next.
        await clock.sleep(Math.round(intervalMs * (1 + 0.5 * clock.random())), closing, { unref: true });
        await this.#pass();
      }
    } catch {
      // the service closed
    }
  }

  #nextProbes(sorted: readonly string[]): string[] {
    const start = sorted.findIndex((name) => name > this.#cursor);
    const from = Math.max(start, 0);
    const picked: string[] = [];
    for (let i = 0; i < sorted.length && picked.length < SWEEP_PROBES; i++) {
      const name = sorted[(from + i) % sorted.length] as string;
      if (!this.#kept.has(name) && !this.#deps.known(`${this.#deps.root}/${name}`)) picked.push(name);
    }
    this.#cursor = picked.at(-1) ?? '';
    return picked;
  }

  async #probe(session: Session, name: string): Promise<void> {
    const parent = `${this.#deps.root}/${name}`;
    const at = this.#deps.clock.monotonic();
    let pzxid: string | undefined;
    try {
      pzxid = await (this.#deps.idleStamp ?? lockParentStamp)(session, parent, name);
    } catch {
      return;
    }
    const seen = this.#emptySince.get(name);
    if (pzxid === undefined) {
      this.#emptySince.delete(name);
    } else if (seen?.pzxid !== pzxid) {
      this.#emptySince.set(name, { pzxid, at });
    } else if (at - seen.at >= this.#deps.idleMs && !this.#deps.known(parent)) {
      this.#emptySince.delete(name);
      // NotEmpty (someone queued since) and NoNode (someone else deleted it) are both fine. A lock parent is read
      // first and deleted at the version read only with no data and the open ACL: another ACL is someone's to keep.
      const removed = await (this.#deps.remove ?? removePlainParent)(session, parent).catch(() => undefined);
      if (removed === 'kept') this.#kept.add(name);
    }
  }
}

import { TransportError } from '@dlock/core';
import type { ZooKeeperStatLike } from './client-like.js';
import { czxidOf, ownerOf, type Session } from './zookeeper-session.js';

/**
 * A grant's fencing token is its node's czxid: ensemble-wide, restart-safe, rising. A create's (or multi's) reply
 * zxid is that czxid on this server, as ZooKeeper's FinalRequestProcessor makes it: checked against a read of the
 * node on the first grant, then trusted (or, if it ever differed, never used). One per driver.
 */
export class FencingTokens {
  #replyTrusted: boolean | undefined;
  /** What the nodes are, for errors: `queue`, `slot`. */
  readonly #nodes: string;
  readonly #warn: boolean;

  /** `warn`: say so (once) when a reply's zxid differed from the czxid. */
  constructor(options: { readonly nodes: string; readonly warn: boolean }) {
    this.#nodes = options.nodes;
    this.#warn = options.warn;
  }

  /** The reply's zxid when it is known to be the czxid: no read needed. */
  fromReply(replyZxid: bigint | undefined): bigint | undefined {
    return replyZxid !== undefined && this.#replyTrusted === true ? replyZxid : undefined;
  }

  /**
   * The czxid of a node this session made, from a read of it. CURATOR-604: a node found after a connection loss is
   * a grant only if this very session owns it, never one left by an earlier session.
   */
  fromStat(
    stat: ZooKeeperStatLike | null,
    session: Session,
    path: string,
    replyZxid: bigint | undefined,
  ): bigint {
    if (stat === null || ownerOf(stat) !== session.id) {
      throw new TransportError(`the ${this.#nodes} node ${path} does not belong to this session`);
    }
    const czxid = czxidOf(stat);
    if (replyZxid !== undefined && this.#replyTrusted === undefined) {
      this.#replyTrusted = replyZxid === czxid;
      if (!this.#replyTrusted && this.#warn) {
        process.emitWarning(
          '@dlock/zookeeper: a create reply zxid differed from the node czxid; reading czxid with exists from now on',
          'DLockWarning',
        );
      }
    }
    return czxid;
  }
}

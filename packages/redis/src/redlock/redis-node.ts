import { TransportError } from '@dlock/core';
import type { RedisConnection } from '../clients/connection.js';
import { redlockKeys } from '../keys.js';
import type { LuaScript, RunOptions } from '../lua-script.js';
import {
  type NodeAcquire,
  type NodeAcquireReply,
  type NodeConfirm,
  type NodeMint,
  NodeNotConnectedError,
  type NodeRelease,
  type NodeReleaseReply,
  type NodeRenew,
  type NodeRenewReply,
  type RedlockNode,
} from './node.js';
import { ACQUIRE, CONFIRM, MINT, RELEASE, RENEW } from './scripts.js';

const SCRIPTS: readonly LuaScript[] = [ACQUIRE, MINT, RENEW, RELEASE, CONFIRM];

/** A counter as the scripts return it: a decimal string of at most 16 digits (below 2^53, exact in Lua). */
const COUNTER = /^\d{1,16}$/;

function parseCounter(value: unknown, label: string): bigint {
  const text = typeof value === 'string' ? value : Buffer.isBuffer(value) ? value.toString() : undefined;
  if (text === undefined || !COUNTER.test(text)) {
    throw new TransportError(`${label}: unexpected fencing counter ${String(value).slice(0, 40)}`);
  }
  return BigInt(text);
}

/** An integer reply, also from a client whose type mapping turns numbers into strings or bigints. */
function int(value: unknown): number {
  if (typeof value === 'number') return value;
  if (typeof value === 'string' || typeof value === 'bigint') return Number(value);
  return Number.NaN;
}

/**
 * A script call's options within a round: abandoned once the round's signal aborts. A class with the getter on its
 * prototype, not an object literal with a getter: a literal's getter is a new closure per call, which gives every
 * call's options a hidden class of its own (made in the old generation, where it keeps young objects alive).
 */
class RoundRun implements RunOptions {
  readonly #signal: AbortSignal;
  declare readonly retryArgs?: readonly string[];
  readonly onNoScript: () => void;

  constructor(signal: AbortSignal, retryArgs: readonly string[] | undefined, onNoScript: () => void) {
    this.#signal = signal;
    if (retryArgs !== undefined) (this as { retryArgs?: readonly string[] }).retryArgs = retryArgs;
    this.onNoScript = onNoScript;
  }

  get abandoned(): boolean {
    return this.#signal.aborted;
  }
}

/** One Redlock node on a node-redis or ioredis client: each operation is one Lua script, so it is atomic on that node. */
export class RedisRedlockNode implements RedlockNode {
  readonly label: string;
  readonly #client: RedisConnection;
  readonly #prefix: string;
  readonly #retention: string;

  constructor(client: RedisConnection, options: { prefix: string; fenceRetentionMs: number; label: string }) {
    this.#client = client;
    this.#prefix = options.prefix;
    this.#retention = String(options.fenceRetentionMs);
    this.label = options.label;
  }

  async acquire(request: NodeAcquire, signal: AbortSignal): Promise<NodeAcquireReply> {
    const keys = redlockKeys(this.#prefix, request.name);
    const reply = await this.#eval(
      ACQUIRE,
      [keys.lock, keys.fence],
      [request.ownershipToken, String(request.ttlMs), this.#retention],
      signal,
    );
    if (Array.isArray(reply) && reply.length === 2) {
      const [flag, value] = reply as [unknown, unknown];
      if (int(flag) === 1) return { granted: true, counter: parseCounter(value, this.label) };
      if (int(flag) === 0 && Number.isFinite(int(value))) return { granted: false, holderTtlMs: int(value) };
    }
    throw new TransportError(`${this.label}: unexpected reply to acquire`);
  }

  async mint(request: NodeMint, signal: AbortSignal): Promise<boolean> {
    const keys = redlockKeys(this.#prefix, request.name);
    const reply = await this.#eval(
      MINT,
      [keys.lock, keys.fence],
      [request.ownershipToken, request.fencingToken.toString(), this.#retention],
      signal,
    );
    const raised = int(reply);
    if (raised === 1) return true;
    if (raised === 0) return false;
    throw new TransportError(`${this.label}: unexpected reply to mint`);
  }

  async renew(requests: readonly NodeRenew[], signal: AbortSignal): Promise<readonly NodeRenewReply[]> {
    const keys: string[] = [];
    const items: string[] = [];
    for (const request of requests) {
      const k = redlockKeys(this.#prefix, request.name);
      keys.push(k.lock, k.fence);
      items.push(String(request.ttlMs), request.ownershipToken, request.fencingToken.toString());
    }
    // A renewal that has to be re-sent (lost script cache) goes out after commands sent meanwhile, maybe after a
    // release of the same lease: that copy only extends, it must not re-take a key that was just deleted.
    const reply = await this.#eval(RENEW, keys, [this.#retention, '1', ...items], signal, [
      this.#retention,
      '0',
      ...items,
    ]);
    if (!Array.isArray(reply) || reply.length !== requests.length) {
      throw new TransportError(`${this.label}: unexpected reply to renew`);
    }
    return reply.map((value: unknown): NodeRenewReply => {
      const code = int(value);
      if (code === 1) return 'extended';
      if (code === 2) return 'retaken';
      if (code === 3) return 'missing';
      if (code === 0) return 'refused';
      throw new TransportError(`${this.label}: unexpected renew result ${String(value)}`);
    });
  }

  async release(request: NodeRelease, signal: AbortSignal): Promise<NodeReleaseReply> {
    const keys = redlockKeys(this.#prefix, request.name);
    const args = [request.ownershipToken, keys.released, request.notice ?? ''];
    const reply = request.cleanup
      ? await RELEASE.runWhole((command) => this.#send(command, signal), [keys.lock], args)
      : await this.#eval(RELEASE, [keys.lock], args, signal);
    const code = int(reply);
    if (code === 1) return 'deleted';
    if (code === 2) return 'retaken';
    if (code === 3) return 'absent';
    if (code === 0) return 'other';
    throw new TransportError(`${this.label}: unexpected reply to release`);
  }

  async confirm(requests: readonly NodeConfirm[], signal: AbortSignal): Promise<void> {
    const keys = requests.map((request) => redlockKeys(this.#prefix, request.name).lock);
    await this.#eval(
      CONFIRM,
      keys,
      requests.map((request) => request.ownershipToken),
      signal,
    );
  }

  /**
   * EVALSHA, then EVAL if the node lost its script cache (a restart), with `retryArgs` if given — unless the round
   * is over: nothing new may be sent for a round whose outcome is already decided.
   */
  #eval(
    script: LuaScript,
    keys: string[],
    args: string[],
    signal: AbortSignal,
    retryArgs?: string[],
  ): Promise<unknown> {
    return script.run(
      (command) => this.#send(command, signal),
      keys,
      args,
      new RoundRun(signal, retryArgs, this.#reloadScripts),
    );
  }

  /** The node lost its cache: load every script now, so the others (renewals above all) find it in place. */
  readonly #reloadScripts = (): void => {
    for (const each of SCRIPTS) this.#client.send(['SCRIPT', 'LOAD', each.source], undefined).catch(() => {});
  };

  async #send(command: string[], signal: AbortSignal): Promise<unknown> {
    // A client that is reconnecting would park the command in its offline queue until our deadline: say so now.
    if (!this.#client.isReady()) throw new NodeNotConnectedError(`${this.label} is not connected`);
    return this.#client.send(command, undefined, signal);
  }
}

import { type RenewRequest, type RenewResult, TransportError } from '@dlock/core';
import type { RedisConnection } from '../clients/connection.js';
import { keySlot } from '../clients/key-slot.js';
import { unexpectedReply } from '../errors.js';
import { leaseKey } from '../keys.js';
import { LuaScript, type SendCommand } from '../lua-script.js';
import { claimOf } from './claims.js';
import type { CallState, Deadlines } from './deadlines.js';

/**
 * Renewal batches on a Redis Cluster. A script's declared keys must share one slot, but a thousand locks spread over
 * every slot: one call per lock would cost a thousand requests per tick. Instead the locks are grouped by the master
 * that serves them (as the client last learned the slot map), and each group is one script call routed by its first
 * key; the other keys ride in ARGV, which `allow-cross-slot-keys` lets the script touch while they are on that node.
 * A key that moved meanwhile (a resharding, a failover) is answered -1 by that call and renewed on its own, routed by
 * its own key, so the client follows MOVED/ASK for it.
 *
 * ARGV: n, then n lock keys, n claims, n TTLs in ms. A claim holds its key when the value starts with the claim, a
 * space and the grant's expiry (see `scripts.ts`): the value is written again with the new expiry, one clock reading
 * for the batch, and the key expires then. Answers 1 (renewed), 0 (not held), -1 (not on this node).
 */
export const CLUSTER_RENEW = new LuaScript(`#!lua flags=allow-cross-slot-keys
local n = tonumber(ARGV[1])
local out = {}
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
for i = 1, n do
  local key, claim = ARGV[1 + i], ARGV[1 + n + i] .. ' '
  local value = redis.pcall('GET', key)
  if type(value) == 'table' and value.err then
    out[i] = -1
  elseif value and string.sub(value, 1, #claim) == claim and string.find(value, '^%d+ ', #claim + 1) then
    local expiry = string.format('%.0f', now + ARGV[1 + 2 * n + i])
    local rest = string.sub(value, (string.find(value, ' ', #claim + 1, true)))
    redis.call('SET', key, claim .. expiry .. rest, 'PXAT', expiry)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
`);

export interface RenewItem {
  readonly key: string;
  readonly claim: string;
  readonly ttlMs: number;
}

/** Groups items by the master serving each key's slot; keys whose master is unknown go one group per slot. */
export function groupByMaster<T extends RenewItem>(client: RedisConnection, items: readonly T[]): T[][] {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const slot = keySlot(item.key);
    const group = client.masterOf(slot) ?? `slot:${slot}`;
    let list = groups.get(group);
    if (!list) {
      list = [];
      groups.set(group, list);
    }
    list.push(item);
  }
  return [...groups.values()];
}

/** The command for one group: routed by its first key, which is declared; the rest are in ARGV. */
export function clusterRenewArgs(items: readonly RenewItem[]): { keys: string[]; args: string[] } {
  const args = [String(items.length)];
  for (const { key } of items) args.push(key);
  for (const { claim } of items) args.push(claim);
  for (const { ttlMs } of items) args.push(String(Math.ceil(ttlMs)));
  return { keys: [(items[0] as RenewItem).key], args };
}

/** A renewal in a batch, with its place in the caller's list. */
interface IndexedItem extends RenewItem {
  readonly index: number;
}

export interface ClusterRenewalParts {
  readonly client: RedisConnection;
  readonly send: SendCommand;
  readonly deadlines: Deadlines;
  readonly requestTimeoutMs: number;
  readonly keyPrefix: string;
}

/** The renew step on a cluster: one script call per master; keys that moved meanwhile are renewed one by one. */
export class ClusterRenewals {
  readonly #parts: ClusterRenewalParts;

  constructor(parts: ClusterRenewalParts) {
    this.#parts = parts;
  }

  async renew(requests: readonly RenewRequest[], signal?: () => AbortSignal): Promise<RenewResult[]> {
    const { client, keyPrefix } = this.#parts;
    const items = requests.map(({ lease, ttlMs }, index) => ({
      key: leaseKey(keyPrefix, lease),
      claim: claimOf(lease),
      ttlMs,
      index,
    }));
    // As long as the requests from the start: a group that fails leaves holes (no result for its locks alone). Grown
    // by assignment instead, it came out short whenever the failed group's locks were the last ones, and core, seeing
    // fewer results than leases, failed the whole batch: the healthy masters' locks too.
    const results = new Array<RenewResult>(requests.length);
    const renewGroup = async (group: readonly IndexedItem[], retry: boolean): Promise<void> => {
      const codes = await this.#renewGroup(group, signal);
      const moved: IndexedItem[] = [];
      codes.forEach((code, i) => {
        const item = group[i] as IndexedItem;
        if (code === -1 && !retry) moved.push(item);
        // Routed by its own key and still not on that node: nothing is known about it, so it is not "not held".
        else if (code === -1)
          throw new TransportError(`renew: ${item.key} is not served where its slot points`);
        else results[item.index] = { renewed: code === 1 };
      });
      await Promise.all(moved.map((item) => renewGroup([item], true)));
    };
    // Each master answers for its own locks: one that is slow or cut off must not fail the renewals the others
    // made (its locks get no result, which core counts as a transport error for those locks alone).
    const outcomes = await Promise.allSettled(
      groupByMaster(client, items).map((group) => renewGroup(group, false)),
    );
    const failed = outcomes.find((o): o is PromiseRejectedResult => o.status === 'rejected');
    if (failed && outcomes.every((o) => o.status === 'rejected')) throw failed.reason;
    return results;
  }

  async #renewGroup(items: readonly RenewItem[], signal?: () => AbortSignal): Promise<number[]> {
    const { send, deadlines, requestTimeoutMs } = this.#parts;
    const { keys, args } = clusterRenewArgs(items);
    const state: CallState = { abandoned: false };
    // Core waits for the whole batch, bounded by its own operationTimeoutMs (usually requestTimeoutMs or more): a
    // master that does not answer must fail its own group early enough that the others' answers still reach core,
    // and inside the leases' windows. So: three quarters of the request bound, and a third of the shortest lease.
    let shortest = Number.POSITIVE_INFINITY;
    for (const { ttlMs } of items) if (ttlMs < shortest) shortest = ttlMs;
    const reply = await deadlines.bound(
      CLUSTER_RENEW.run(send, keys, args, state),
      Math.max(1, Math.floor(Math.min(requestTimeoutMs * 0.75, shortest / 3))),
      `renew (${items.length})`,
      signal === undefined ? { state } : { state, signal },
    );
    if (
      !Array.isArray(reply) ||
      reply.length !== items.length ||
      !reply.every((c) => c === 1 || c === 0 || c === -1)
    ) {
      throw unexpectedReply('renew', reply);
    }
    return reply as number[];
  }
}

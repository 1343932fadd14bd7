import type { RedisConnection } from '../clients/connection.js';
import { keySlot } from '../clients/key-slot.js';
import { LuaScript } from '../lua-script.js';

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

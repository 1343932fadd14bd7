import { LuaScript } from '../lua-script.js';
import { LUA_CLOCK, LUA_ENTRIES, LUA_MINT, LUA_VALUES, luaSource } from './scripts.js';

/**
 * The semaphore's Lua scripts, each atomic on the server. Keys of one semaphore (see `keys.ts`), all under the hash
 * tag `{N}` and apart from the lock keys of the same name; every script takes the first four, in this order:
 *   KEYS[1] slots   sorted set: member "n" scored -permits (the limit), and the slots used since the semaphore was
 *                   last idle, "0" … "hw-1", each scored with its lease's end as last known (server ms; 0: free)
 *   KEYS[2] fence   the last token handed out on any slot: the lock scripts' fence key, minted by their `mint`
 *   KEYS[3] queue   list of waiting ownership tokens, oldest first
 *   KEYS[4] waiters hash ownership token -> "<deadline ms> <ttl ms>/<payload bytes> <notify channel><payload>" while
 *                   queued, "=<slot>" once a slot was handed to it (until its release: its grant is flagged q);
 *                   and "=<slot>" -> the ownership token of that slot's last hand-on (ownership tokens are base64url:
 *                   never "="), so that the next hand-on of the slot deletes the mark of a holder whose lease ran out
 *                   unreleased. Stale marks are thus at most one per slot, however long waiters keep the hash alive.
 * and slot i's key, KEYS[1] with "slots" replaced by "slot:<i>": a string valued "<who> <fence> <expiry ms> <flags>
 * <permits><payload>", a held lock key whose metadata is the limit it was granted under and the payload the holder's
 * owner id and metadata, for inspect (0xFF, the owner id, then 0xFF, or 0xFE and the metadata: neither byte occurs in
 * UTF-8; a value or entry of an older version has none) (flags "-", or "q": handed over from the queue), expiring
 * with the lease (PXAT). Renewals are thus the lock's own scripts, which keep what follows the
 * expiry, and a batch may mix locks and permits. (A weight can follow the limit later.)
 *
 * Slots. A slot key is the truth about its holder; the sorted set is an index that finds a slot in O(log N): the
 * lowest-scored member is a free slot (0) or the lease known to end first. Renewals do not touch the index, so a
 * known end may be early, never late: when no slot is known to be free, the leases that look over are checked on
 * their keys and indexed again with their real end (or 0: ran out), each renewed lease once per lease period. While
 * every used slot is held and fewer than permits are used, the next grant opens slot hw (ZCARD - 1). Nothing is
 * granted on the index's word alone: a fresh grant writes its slot key only if it is missing (NX), and a slot about
 * to be handed to a waiter is read first; a live lease found there is indexed again and another slot tried. So an
 * index that lost track never makes two holders of one slot.
 *
 * The index's life: the lease plus the fence retention past each grant, and at least the queue's. Renewals do not
 * extend it, so it can still go while leases live (a lease renewed past that with no grant meanwhile, a later grant
 * with a shorter lease, eviction). A script that finds no limit member rebuilds it from slot keys 0 … permits-1 (read
 * with MGET, O(permits), on that path only) and takes the limit from their values: what `available` counts and the
 * limit check stay true. (A caller with a smaller limit reads only its own slots.)
 *
 * The limit: member "n". While anyone holds or waits, a caller with another limit is refused ({"permits",
 * stored}); once nobody does, any limit is taken and the index starts afresh under it.
 *
 * Tokens: one counter for the whole semaphore, so strictly increasing per slot, minted as lock tokens are
 * (max(last + 1, server clock in µs), the fence key living the lease plus the fence retention past each grant: see
 * `scripts.ts`). A slot handed on by its holder's release (or leave) also takes max with that holder's token, as a
 * lock grant does with the lock key's: the fence key may be gone under a live lease.
 *
 * Waiting. A caller queues only when no slot is free (or others wait). A release hands its slot to the oldest live
 * waiter in the same script: the grant is written, then one message "<owner> <fence> <slot>" goes to that waiter's
 * process (an entry past its deadline, or whose process no longer listens, is skipped), so a release wakes exactly
 * one waiter and no message announces a grant Redis does not hold. A lease that runs out unreleased is noticed by
 * the head waiter, which looks again when the earliest known lease ends; the p-th waiter looks when the p-th lease to
 * end does (those ahead take the earlier ones), one further back than there are slots once a second; and any acquire
 * that finds a slot free while others wait hands it to the oldest of them first. A queued caller that is refused
 * learns a bound on every token minted so far: a hand-off message heard later with no higher token is for a grant
 * that is already over, and is ignored.
 *
 * Redis Cluster. The slot keys are not declared (a script finds its slot inside), so during a resharding one may
 * already be on the other node, and touching it fails the script where it stands, with no rollback. Every script
 * therefore reads each slot key it may write before it writes anything a caller is told about (the queue, a waiter's
 * entry, a message); only the fence key (a skipped token) and the index (a correction) may have been written before.
 */
const SEM_PRELUDE = `
local SLOT = string.sub(KEYS[1], 1, -6) .. 'slot:'
-- The limit a grant written by this script carries (set by each script before it grants).
local LIMIT
-- The caller's payload (the acquire script's): 0xFF, its owner id, then 0xFF, or 0xFE and its metadata.
local PAYLOAD

-- The next token. The first grant of a script writes the clock's token to the fence key reading the last one
-- (SET ... GET, as the lock's acquire does); mint then keeps the count from there, and writes again only when the
-- last token was not below the clock or another TTL follows. above: the token of the holder a hand-on follows on
-- its slot (or nil). The fence key can be gone while that holder still holds (evicted, or outlived by a lease
-- renewed past its life), and the clock alone may then be behind its token (a clock stepped back, a counter that
-- ran ahead of it), as the lock scripts take the lock key's token for the same reason.
local function token(ttl, above)
  if not F then
    local last = redis.call('SET', KEYS[2], num(now_us()), 'PX', num(ttl + RETENTION_MS), 'GET')
    F, FENCE, FENCE_TTL = tonumber(last or '') or 0, now_us(), tonumber(ttl)
  end
  above = tonumber(above or '')
  if above and above > F then F = above end
  return mint(ttl)
end

-- The limit a slot value's metadata (parse's rest) carries; nil in an older value without one.
local function limit_of(rest)
  return rest and tonumber(string.match(rest, '^ (%d+)'))
end

-- A slot value's lease while it is live: who, fence, expiry (ms), flags, rest; nil when free or run out.
local function live(value)
  if not value then return nil end
  local who, fence, expiry, flags, rest = parse(value)
  if not expiry or tonumber(expiry) <= now_ms() then return nil end
  return who, fence, tonumber(expiry), flags, rest
end

-- Slot \`slot\`'s lease while it is live (see live).
local function holder(slot)
  return live(redis.call('GET', SLOT .. slot))
end

-- Writes \`who\`'s grant of \`slot\` and indexes it; the index lives as long as the fence key. payload: the
-- holder's owner id and metadata (see the header), after the limit.
local function put(slot, who, fence, ttl, flags, payload)
  local expiry = num(now_ms() + ttl)
  local value = who .. ' ' .. fence .. ' ' .. expiry .. ' ' .. flags .. (LIMIT and ' ' .. LIMIT .. (payload or '') or '')
  redis.call('SET', SLOT .. slot, value, 'PXAT', expiry)
  redis.call('ZADD', KEYS[1], expiry, slot)
  redis.call('PEXPIRE', KEYS[1], num(ttl + RETENTION_MS))
end

-- A fresh grant of a slot the index says is free. Nil when its key says otherwise (the index had lost track of a
-- holder): the slot is indexed again with that lease's end.
local function take(slot, who, ttl)
  local fence = token(ttl)
  local expiry = num(now_ms() + ttl)
  local value = who .. ' ' .. fence .. ' ' .. expiry .. ' -' .. (LIMIT and ' ' .. LIMIT .. (PAYLOAD or '') or '')
  if redis.call('SET', SLOT .. slot, value, 'PXAT', expiry, 'NX') then
    redis.call('ZADD', KEYS[1], expiry, slot)
    redis.call('PEXPIRE', KEYS[1], num(ttl + RETENTION_MS))
    return fence
  end
  local _, _, held = holder(slot)
  if held then
    redis.call('ZADD', KEYS[1], held, slot)
    return nil
  end
  put(slot, who, fence, ttl, '-', PAYLOAD)
  return fence
end

-- Gives \`slot\` to the oldest waiter still there, telling only that waiter's process; the caller itself (skip) reads
-- its grant from the reply. The caller has read the slot's key in this script: free, or its own holder's, who lets
-- go. The grant is written before the message goes, and undone by the next one (or let_go) if nobody heard it.
-- above: the token of the holder that lets go (nil: none), which the new one's must exceed.
-- Returns the new holder and its token; or nil, nil, and whether a grant nobody heard was written.
local function hand_over(slot, skip, above)
  local written = false
  local mark = '=' .. slot
  while true do
    local head = redis.call('LPOP', KEYS[3])
    if not head then return nil, nil, written end
    local entry = redis.call('HGET', KEYS[4], head)
    local deadline, ttl, channel, payload = entry_of(entry)
    if deadline and tonumber(deadline) > now_ms() then
      local fence = token(ttl, above)
      put(slot, head, fence, tonumber(ttl), 'q', payload)
      if not written then
        -- The slot's last hand-on, if its holder never released or left (its lease ran out): nothing else would
        -- ever delete its mark, and a hash that waiters keep alive would collect one per such holder.
        local last = redis.call('HGET', KEYS[4], mark)
        if last and last ~= head and redis.call('HGET', KEYS[4], last) == mark then
          redis.call('HDEL', KEYS[4], last)
        end
      end
      redis.call('HSET', KEYS[4], head, mark, mark, head)
      written = true
      if head == skip or publish(channel, head .. ' ' .. fence .. ' ' .. slot) > 0 then return head, fence end
      redis.call('HDEL', KEYS[4], head, mark)
    elseif entry then
      redis.call('HDEL', KEYS[4], head)
    end
  end
end

-- \`slot\` is let go (released, or its lease ran out; read by the caller as for hand_over): to the oldest live
-- waiter, else free (\`deleted\`: its key is gone already; \`above\`: the token of the holder that let go, if any).
-- The index is only updated, never made here: one lost meanwhile is rebuilt whole (see above).
local function let_go(slot, skip, deleted, above)
  local head, fence, written = hand_over(slot, skip, above)
  if head then return head, fence end
  if written or not deleted then redis.call('DEL', SLOT .. slot) end
  redis.call('ZADD', KEYS[1], 'XX', 0, slot)
end

-- Whether anyone holds a live lease or waits with a live deadline (only when a caller asks for another limit).
local function in_use()
  for _, waiter in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
    local entry = redis.call('HGET', KEYS[4], waiter)
    local deadline = entry and string.match(entry, '^(%d+) ')
    if deadline and tonumber(deadline) > now_ms() then return true end
  end
  for _, slot in ipairs(redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', '(0')) do
    if holder(slot) then return true end
  end
  return false
end

-- Leases the index says are over are checked on their keys: one renewed meanwhile is indexed with its real end, one
-- that ran out is marked free (0). Returns whether there were any.
local function refresh()
  local over = redis.call('ZRANGEBYSCORE', KEYS[1], '(0', now_ms())
  for _, slot in ipairs(over) do
    local _, _, expiry = holder(slot)
    redis.call('ZADD', KEYS[1], expiry or 0, slot)
  end
  return #over > 0
end

-- The limit stored with the index, from its first members (ZRANGE 0 …): "n" comes first, scored -permits. Nil
-- when there is none (a semaphore not used since its keys ran out, or an index lost under its leases).
local function stored_limit(first)
  if first[1] == 'n' then return -tonumber(first[2]) end
  return nil
end

-- The live leases among slots 0 … permits-1, read from their keys (MGET, a thousand at a time; nothing written):
-- {slot, expiry} pairs, the limit their values carry (nil if none does), and the latest expiry (0: none).
local function live_slots(permits)
  local found, limit, latest = {}, nil, 0
  for from = 0, permits - 1, 1000 do
    local keys = {}
    for i = from, math.min(from + 999, permits - 1) do keys[#keys + 1] = SLOT .. i end
    local values = redis.call('MGET', unpack(keys))
    for j = 1, #keys do
      local _, _, expiry, _, rest = live(values[j] or nil)
      if expiry then
        found[#found + 1] = {from + j - 1, expiry}
        limit = limit or limit_of(rest)
        if expiry > latest then latest = expiry end
      end
    end
  end
  return found, limit, latest
end

-- The index made again under \`permits\` from the live leases \`found\` (live_slots): the limit, each slot up to the
-- highest live one with its lease's end or 0 (free), and a life covering the latest lease plus the fence retention
-- (ttl: at least this caller's lease). \`stale\`: an index without a limit is there (only grants written after it was
-- lost), and goes first.
local function rebuild(permits, found, latest, ttl, stale)
  if stale then redis.call('DEL', KEYS[1]) end
  local ends, top = {}, -1
  for _, pair in ipairs(found) do
    ends[pair[1]] = pair[2]
    if pair[1] > top then top = pair[1] end
  end
  local args = {-permits, 'n'}
  for slot = 0, top do
    args[#args + 1] = ends[slot] or 0
    args[#args + 1] = slot
    if #args >= 2000 then
      redis.call('ZADD', KEYS[1], unpack(args))
      args = {}
    end
  end
  if #args > 0 then redis.call('ZADD', KEYS[1], unpack(args)) end
  redis.call('PEXPIRE', KEYS[1], num(math.max(latest - now_ms(), ttl) + RETENTION_MS))
end
`;

/**
 * ARGV[1] ownership token, ARGV[2] ttl ms, ARGV[3] wait ms (0: do not queue), ARGV[4] notify channel ('' when not
 * queueing), ARGV[5] permits, ARGV[6] '1' when the claim looks again (it may have been handed a slot), ARGV[7] the
 * owner id and ARGV[8] the metadata (absent: none) to store with the grant.
 * Returns {fencing token, slot} for a grant made now, {fencing token, slot, PTTL} for one handed over earlier,
 * {"permits", stored limit} when the semaphore is in use with another limit; else the ms until the earliest known
 * lease ends for a caller that does not queue, and {ms, ceiling} for one that does: ms until the lease its turn
 * waits for ends (0: none known), and a bound on every token minted so far (a decimal string).
 */
const ACQUIRE = `
local owner, ttl, wait, permits = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[5])
local now = now_ms()
LIMIT = permits
PAYLOAD = ARGV[7] and '\\255' .. ARGV[7] .. (ARGV[8] and '\\254' .. ARGV[8] or '\\255')

if ARGV[6] == '1' then
  local entry = redis.call('HGET', KEYS[4], owner)
  local handed = entry and string.match(entry, '^=(%d+)$')
  if handed then
    local who, fence, expiry = holder(handed)
    if who == owner then return {fence, tonumber(handed), expiry - now} end
    -- Handed a slot whose lease ran out before the claim heard of it: it starts again, at the back. The slot's
    -- back-reference goes too unless a later hand-on owns it now.
    if redis.call('HGET', KEYS[4], '=' .. handed) == owner then
      redis.call('HDEL', KEYS[4], owner, '=' .. handed)
    else
      redis.call('HDEL', KEYS[4], owner)
    end
  end
end

local first = redis.call('ZRANGE', KEYS[1], 0, 1, 'WITHSCORES')
local stored = stored_limit(first)
if stored ~= permits then
  if stored then
    if in_use() then return {'permits', stored} end
    redis.call('DEL', KEYS[1])
    redis.call('ZADD', KEYS[1], -permits, 'n')
    redis.call('PEXPIRE', KEYS[1], num(ttl + RETENTION_MS))
    first = {}
  else
    -- No index (never used, idle past its life, or lost under live leases): made again from the slot keys.
    local found, limit, latest = live_slots(permits)
    if limit and limit ~= permits then return {'permits', limit} end
    rebuild(permits, found, latest, ttl, #first > 0)
    first = #found > 0 and redis.call('ZRANGE', KEYS[1], 0, 1, 'WITHSCORES') or {}
  end
end

-- A slot to grant, given the lowest-scored one: it if free, else (leases that look over checked first) one never
-- used while fewer than permits are. Nil and the earliest known end when every slot is held.
local function free_slot(slot, score)
  if slot and tonumber(score) > 0 and refresh() then
    local lowest = redis.call('ZRANGE', KEYS[1], 1, 1, 'WITHSCORES')
    slot, score = lowest[1], lowest[2]
  end
  if slot and tonumber(score) == 0 then return slot end
  local used = redis.call('ZCARD', KEYS[1]) - 1
  if used < permits then
    if not redis.call('ZSCORE', KEYS[1], used) then return tostring(used) end
    -- The index was rebuilt out of order (see the header): the lowest slot it lacks.
    for i = 0, permits - 1 do
      if not redis.call('ZSCORE', KEYS[1], i) then return tostring(i) end
    end
  end
  return nil, score and tonumber(score)
end

-- Waiters first: a slot free while anyone is queued (a lease ran out) goes to the oldest live one, which may be
-- the caller; a caller not queued never overtakes them.
local queued = redis.call('LLEN', KEYS[3]) > 0
local slot, earliest = first[3], first[4]
while true do
  slot, earliest = free_slot(slot, earliest)
  if not slot then break end
  if queued then
    -- Read before anyone is told: the index may have lost track of its holder (and on a cluster, a key no longer
    -- here fails the script now, before the queue is touched).
    local _, _, held = holder(slot)
    if held then
      redis.call('ZADD', KEYS[1], held, slot)
    else
      local head, fence = let_go(slot, owner)
      if head == owner then return {fence, tonumber(slot)} end
      -- Nobody took it: the queue held only entries that can no longer take a slot, and the slot is free now.
      if not head then queued = false end
    end
  else
    local fence = take(slot, owner, ttl)
    if fence then return {fence, tonumber(slot)} end
  end
  local lowest = redis.call('ZRANGE', KEYS[1], 1, 1, 'WITHSCORES')
  slot, earliest = lowest[1], lowest[2]
end

if wait == 0 then return earliest and math.max(earliest - now, 1) or 0 end
local position
local entry = num(now + wait) .. ' ' .. ARGV[2]
entry = PAYLOAD and entry .. '/' .. #PAYLOAD .. ' ' .. ARGV[4] .. PAYLOAD or entry .. ' ' .. ARGV[4]
if redis.call('HSETNX', KEYS[4], owner, entry) == 1 then
  position = redis.call('RPUSH', KEYS[3], owner)
  -- The queue outlives no entry (with a margin, so that a stream of waiters does not extend it on every arrival),
  -- and the index outlives the queue.
  if redis.call('PTTL', KEYS[3]) < wait then
    redis.call('PEXPIRE', KEYS[3], wait + QUEUE_MARGIN_MS)
    redis.call('PEXPIRE', KEYS[4], wait + QUEUE_MARGIN_MS)
    if redis.call('PTTL', KEYS[1]) < wait + QUEUE_MARGIN_MS then
      redis.call('PEXPIRE', KEYS[1], wait + QUEUE_MARGIN_MS)
    end
  end
else
  position = (redis.call('LPOS', KEYS[3], owner) or -1) + 1
end
-- The p-th waiter's turn comes by expiry when the p-th lease to end does, as far as the index knows (a release hands
-- over sooner); one further back than there are slots looks once a second.
local nth = position > 0 and redis.call('ZRANGE', KEYS[1], position, position, 'WITHSCORES')[2]
-- Every token minted so far is at most the fence key's (or, if it was lost, the clock's: see scripts.ts). A hand-off
-- this claim hears of later with no higher token was made before now, and is over: this claim does not hold it.
local ceiling = math.max(F or tonumber(redis.call('GET', KEYS[2]) or '') or 0, now_us())
return {nth and math.max(tonumber(nth) - now, 1) or 0, num(ceiling)}
`;

/**
 * KEYS[5] the slot's key; ARGV[1] the claim "<ownership token> <fencing token>", ARGV[2] the slot. Owner-checked:
 * the slot goes to the oldest live waiter, or is free. Returns 1 when the holder let go, 0 when it did not hold.
 * Deletes first, checks after (GETDEL): the common case needs the delete, and someone else's lease goes back as it
 * was, until its own expiry (a value in no known layout is free to any grant anyway, and stays deleted).
 */
const RELEASE = `
local value = redis.call('GETDEL', KEYS[5])
if not value then return 0 end
local claim = ARGV[1] .. ' '
local who, held, expiry, flags, rest = parse(value)
if not flags or string.sub(value, 1, #claim) ~= claim then
  if expiry then redis.call('SET', KEYS[5], value, 'PXAT', expiry) end
  return 0
end
if has(flags, 'q') then redis.call('HDEL', KEYS[4], who, '=' .. ARGV[2]) end
LIMIT = limit_of(rest)
let_go(ARGV[2], nil, true, held)
return 1
`;

/**
 * A claim leaves (ARGV[1] its ownership token): its queue entry goes, and a slot granted to it is kept (ARGV[2] =
 * '1': returns {fencing token, slot, PTTL}) or let go ('0'). A claim with no entry whose reply was lost may hold a
 * slot granted without one: it is looked for among the live leases (O(held slots), on this path only). Returns 0
 * when the claim holds nothing afterwards. Reads everything first (see the header on Redis Cluster).
 */
const LEAVE = `
local owner = ARGV[1]
local entry = redis.call('HGET', KEYS[4], owner)
local slot
if entry then
  slot = string.match(entry, '^=(%d+)$')
else
  for _, s in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(0', '+inf')) do
    if holder(s) == owner then
      slot = s
      break
    end
  end
end
local who, fence, expiry, rest, _
if slot then who, fence, expiry, _, rest = holder(slot) end
redis.call('LREM', KEYS[3], 0, owner)
if entry and slot and who == owner then
  redis.call('HDEL', KEYS[4], owner, '=' .. slot)
elseif entry then
  redis.call('HDEL', KEYS[4], owner)
end
if who ~= owner then return 0 end
if ARGV[2] == '1' then return {fence, tonumber(slot), expiry - now_ms()} end
LIMIT = limit_of(rest)
let_go(slot, nil, false, fence)
return 0
`;

/**
 * ARGV[1] permits. Returns how many slots no live lease holds (leases that look over are checked on their keys),
 * or {"permits", stored limit} as the acquire script does. Writes nothing but the index's corrections; with no
 * index, counts the live slot keys (as the acquire script's rebuild reads them) and writes nothing.
 */
const AVAILABLE = `
local permits = tonumber(ARGV[1])
local stored = stored_limit(redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES'))
if not stored then
  local found, limit = live_slots(permits)
  if limit and limit ~= permits then return {'permits', limit} end
  return math.max(0, permits - #found)
end
if stored ~= permits then
  if in_use() then return {'permits', stored} end
  return permits
end
refresh()
return math.max(0, permits - redis.call('ZCOUNT', KEYS[1], '(' .. now_ms(), '+inf'))
`;

/**
 * ARGV[1] permits. The live leases, read from the slot keys (MGET, O(permits): the index may hold a renewed lease's
 * end as passed), and the queued callers whose deadline has not passed: {waiters, then per held slot: slot, fencing
 * token, PTTL, owner id or nil, metadata or nil}; or {"permits", stored limit} as the acquire script does. Writes
 * nothing. The payload is split here: its separators are not UTF-8, so they would not survive a client's decoding.
 */
const INSPECT = `
local permits = tonumber(ARGV[1])
local stored = stored_limit(redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES'))
if stored and stored ~= permits then
  if in_use() then return {'permits', stored} end
  return {0}
end
local now = now_ms()
local out = {0}
for _, entry in ipairs(redis.call('HVALS', KEYS[4])) do
  local deadline = string.match(entry, '^(%d+) ')
  if deadline and tonumber(deadline) > now then out[1] = out[1] + 1 end
end
for from = 0, permits - 1, 1000 do
  local keys = {}
  for i = from, math.min(from + 999, permits - 1) do keys[#keys + 1] = SLOT .. i end
  local values = redis.call('MGET', unpack(keys))
  for j = 1, #keys do
    local _, fence, expiry, _, rest = live(values[j] or nil)
    if expiry then
      local limit = limit_of(rest)
      if not stored and limit and limit ~= permits then return {'permits', limit} end
      local id, sep, meta = string.match(rest, '^ %d+\\255([^\\254\\255]*)([\\254\\255])(.*)$')
      out[#out + 1] = from + j - 1
      out[#out + 1] = fence
      out[#out + 1] = expiry - now
      out[#out + 1] = id or false
      out[#out + 1] = sep == '\\254' and meta
    end
  end
end
return out
`;

export interface SemaphoreScripts {
  readonly acquire: LuaScript;
  readonly release: LuaScript;
  readonly leave: LuaScript;
  readonly available: LuaScript;
  readonly inspect: LuaScript;
}

/** The semaphore scripts for one fence retention; `sharded`: publish with SPUBLISH (Redis Cluster). */
export function semaphoreScripts(fenceRetentionMs: number, sharded = false): SemaphoreScripts {
  const build = (body: string): LuaScript =>
    new LuaScript(
      luaSource(
        `local T\n${LUA_CLOCK}${LUA_VALUES}${LUA_MINT}${LUA_ENTRIES}${SEM_PRELUDE}${body}`,
        fenceRetentionMs,
        sharded,
      ),
    );
  return {
    acquire: build(ACQUIRE),
    release: build(RELEASE),
    leave: build(LEAVE),
    available: build(AVAILABLE),
    inspect: build(INSPECT),
  };
}

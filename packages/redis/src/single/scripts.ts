import { LuaScript } from '../lua-script.js';

/**
 * The Lua scripts. Each runs atomically on the server, so every decision below (who owns the lock, who is next in
 * line, which token comes next) is taken against one consistent state. Needs Redis >= 6.2.
 *
 * Keys of one lock (see `keys.ts`), all in one hash-tag slot:
 *   KEYS[1] lock    string "<ownership token> <fencing token>" (the claim), TTL = the lease
 *   KEYS[2] fence   last fencing token of the name, TTL = the fence retention (refreshed by every grant)
 *   KEYS[3] queue   list of waiting ownership tokens, oldest first
 *   KEYS[4] waiters hash ownership token -> "<deadline ms> <ttl ms> <notify channel>"
 * The name's release channel is KEYS[1] with "lock" replaced by "released" (channels are not keys).
 *
 * Fencing tokens: max(last token + 1, server clock in microseconds). While the counter key survives, tokens
 * grow by at least one per grant whatever the clock does. When it is lost (Redis restarted without persistence,
 * a failover lost the latest writes, the retention ran out) the next token comes from the clock, which is above
 * every earlier token as long as the server clock has not stepped back by more than the time since the last grant.
 * Tokens stay below 2^53 (exact in Lua's doubles and in JavaScript numbers) until the year 2255.
 */
const PRELUDE = `
-- The server clock, read once per script: {seconds, microseconds}.
local T
local function clock()
  if not T then T = redis.call('TIME') end
  return T
end

local function now_ms()
  local t = clock()
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function mint()
  local t = clock()
  -- Seconds and zero-padded microseconds joined as strings: string.format costs ~1 µs on this hot path.
  local us = t[2]
  local now = t[1] .. string.sub('000000', #us + 1) .. us
  local last = redis.call('SET', KEYS[2], now, 'PX', RETENTION_MS, 'GET')
  if last and tonumber(last) >= tonumber(now) then
    -- Counter not below the clock (a second grant in this script or microsecond, or the clock stepped back):
    -- count on from it.
    local next = string.format('%.0f', tonumber(last) + 1)
    redis.call('SET', KEYS[2], next, 'PX', RETENTION_MS)
    return next
  end
  return now
end

local function grant(owner, ttl)
  local fence = mint()
  redis.call('SET', KEYS[1], owner .. ' ' .. fence, 'PX', ttl)
  return fence
end

-- The fencing token of the current grant if \`owner\` holds the lock, else nil.
local function held_by(owner)
  local claim = redis.call('GET', KEYS[1])
  if claim and string.sub(claim, 1, #owner + 1) == owner .. ' ' then return string.sub(claim, #owner + 2) end
  return nil
end

-- Gives the free lock to the oldest waiter still there and tells only that waiter's process. Skipped for good:
-- entries past their deadline (the waiter gave up or died), and waiters whose process no longer listens (PUBLISH
-- reached nobody). The caller itself (skip) is granted without a message: it reads the grant from its reply.
local function promote(skip)
  while true do
    local head = redis.call('LPOP', KEYS[3])
    if not head then return nil end
    local entry = redis.call('HGET', KEYS[4], head)
    redis.call('HDEL', KEYS[4], head)
    if entry then
      local deadline, ttl, channel = string.match(entry, '^(%d+) (%d+) (.+)$')
      if deadline and tonumber(deadline) > now_ms() then
        local fence = grant(head, ttl)
        if head == skip then return head, fence end
        if redis.call('PUBLISH', channel, head .. ' ' .. fence) > 0 then return head, fence end
        redis.call('DEL', KEYS[1])
      end
    end
  end
end

-- The lock was just deleted: hand it on, or, with nobody queued, tell the name's watchers it is free.
local function hand_over()
  if not promote(nil) then redis.call('PUBLISH', string.sub(KEYS[1], 1, -5) .. 'released', '') end
end
`;

/**
 * ARGV[1] ownership token, ARGV[2] ttl ms, ARGV[3] wait ms (0: do not queue), ARGV[4] the caller's notify channel.
 * Returns the fencing token (a string) when this call granted the lock to the caller, {fencing token, PTTL} when
 * the caller already held it (granted earlier by a hand-off), else the holder's PTTL (an integer).
 * A free lock goes to the oldest live waiter, so a caller that is not queued never overtakes the queue.
 */
const ACQUIRE = `
local owner = ARGV[1]
if redis.call('LLEN', KEYS[3]) == 0 then
  -- Nobody queued: the plain SET NX. A token minted for a busy lock is simply never used (tokens need only grow).
  local fence = mint()
  if redis.call('SET', KEYS[1], owner .. ' ' .. fence, 'NX', 'PX', ARGV[2]) then return fence end
end
local claim = redis.call('GET', KEYS[1])
if not claim then
  -- Free, but others queue (an expiry nobody has acted on yet): the oldest live waiter goes first.
  local head, fence = promote(owner)
  if not head then return grant(owner, ARGV[2]) end
  if head == owner then return fence end
elseif string.sub(claim, 1, #owner + 1) == owner .. ' ' then
  -- Already ours: a hand-off this waiter has not heard about yet, or a retry of a call whose reply was lost. The
  -- lease started before this call, so its remaining time comes along.
  return {string.sub(claim, #owner + 2), redis.call('PTTL', KEYS[1])}
end
local wait = tonumber(ARGV[3])
if wait > 0 and redis.call('HSETNX', KEYS[4], owner, string.format('%.0f', now_ms() + wait) .. ' ' .. ARGV[2] .. ' ' .. ARGV[4]) == 1 then
  redis.call('RPUSH', KEYS[3], owner)
  -- The queue outlives no entry: once every waiter's deadline passed, the keys go away by themselves. Extended
  -- with a margin, so that a stream of waiters does not extend it on every arrival.
  if redis.call('PTTL', KEYS[3]) < wait then
    redis.call('PEXPIRE', KEYS[3], wait + QUEUE_MARGIN_MS)
    redis.call('PEXPIRE', KEYS[4], wait + QUEUE_MARGIN_MS)
  end
end
return redis.call('PTTL', KEYS[1])
`;

/** ARGV[1] is the claim "<ownership token> <fencing token>". Returns 1 when it was deleted, 0 when not held. */
const RELEASE = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
hand_over()
return 1
`;

/**
 * A waiter leaves (ARGV[1] its ownership token): its queue entry goes, and if the lock was already handed to it,
 * ARGV[2] = '1' keeps the grant (returns {fencing token, PTTL}) while '0' gives it up at once (the owner-checked delete
 * after an abandoned or ambiguous acquire). Returns 0 when the caller does not hold the lock afterwards.
 */
const LEAVE = `
redis.call('LREM', KEYS[3], 0, ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
local fence = held_by(ARGV[1])
if not fence then return 0 end
if ARGV[2] == '1' then return {fence, redis.call('PTTL', KEYS[1])} end
redis.call('DEL', KEYS[1])
hand_over()
return 0
`;

/**
 * KEYS[1..n] lock keys, ARGV[1..n] claims, ARGV[n+1..2n] ttl ms. One call renews a whole batch: holding a thousand
 * locks costs one round trip per renewal tick, not a thousand. Returns 1/0 per lock, in order.
 */
const RENEW = `
local n = #KEYS
local out = {}
for i = 1, n do
  if redis.call('GET', KEYS[i]) == ARGV[i] then
    redis.call('PEXPIRE', KEYS[i], ARGV[n + i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
`;

export interface LockScripts {
  readonly acquire: LuaScript;
  readonly release: LuaScript;
  readonly leave: LuaScript;
  readonly renew: LuaScript;
}

/** Waiters' queue keys live this much longer than the latest deadline in them. */
const QUEUE_MARGIN_MS = 60_000;

/** The scripts for one fence retention (built into the source: one argument less on every call). */
export function lockScripts(fenceRetentionMs: number): LockScripts {
  const build = (body: string): LuaScript =>
    new LuaScript(
      (PRELUDE + body)
        .replaceAll('RETENTION_MS', String(Math.trunc(fenceRetentionMs)))
        .replaceAll('QUEUE_MARGIN_MS', String(QUEUE_MARGIN_MS)),
    );
  return {
    acquire: build(ACQUIRE),
    release: build(RELEASE),
    leave: build(LEAVE),
    renew: new LuaScript(RENEW),
  };
}

import { LuaScript } from '../lua-script.js';

/**
 * The Lua scripts. Each runs atomically on the server, so every decision below (who owns the lock, who is next in
 * line, which token comes next) is taken against one consistent state. Needs Redis >= 6.2 (SET ... GET, PXAT).
 *
 * Keys of one lock (see `keys.ts`), all in one hash-tag slot; every script takes all four, in this order:
 *   KEYS[1] lock    string "<who> <fence> <ceiling> <anchor> <flags>[ <metadata>]", in one of two states:
 *                     held       who = the holder's ownership token, fence = its fencing token, TTL = the lease;
 *                                metadata = what the grant was given to store (an election's leader value), if any;
 *                     tombstone  who = "~": free, with nobody queued; fence = the last token; expires at the anchor;
 *                                never any metadata.
 *                   (and, briefly, who = "!": held by nobody known, standing in for a lease that a restart may have
 *                   lost, for an election's first grant on a server up for less than its TTL: see the acquire script)
 *                   ceiling = the value of the fence key; anchor = server time (ms) after which no tombstone is kept;
 *                   flags = "-", or some of q (someone may be queued behind the holder), w (someone may watch) and
 *                   o (someone may observe: elections), always in that order.
 *   KEYS[2] fence   the ceiling: no token above it was handed out. Expires RETENTION_MS after the anchor.
 *   KEYS[3] queue   list of waiting ownership tokens, oldest first
 *   KEYS[4] waiters hash ownership token -> "<deadline ms> <ttl ms> <notify channel>", or, for a waiter whose grant
 *                   carries metadata, "<deadline ms> <ttl ms>/<metadata bytes> <notify channel><metadata>" (channels
 *                   and metadata may both hold spaces: the byte count is what tells them apart)
 * The name's release channel is KEYS[1] with "lock" replaced by "released", its change channel the same with
 * "changed": not keys, but in the same hash tag, as a sharded channel must be. Hand-off channels come from the
 * waiters' entries, as their services wrote them.
 *
 * Metadata sits at the end of the value, after the flags, so that a lock without it stores and parses exactly what
 * it did before, a renewal (PEXPIRE) keeps it, and a release drops it with the grant. Every pattern below that reads
 * the flags allows for it (parse's sixth capture, `rest`: "" or " <metadata>"); the fast paths never see it (a
 * tombstone has none, and a release fast-paths only a value that ends in the flags "-").
 * o: while a name is marked observed, every grant, release and metadata update publishes on its change channel;
 * one that reached nobody unmarks it, and a grant that finds the lock key missing publishes anyway (marks are lost
 * with the key) and marks the name if someone heard.
 *
 * Why the tombstone: a release that deleted the key would lose the counter with it, and the next acquire would have
 * to read it back from elsewhere. So the uncontended cycle is seven commands: acquire = EVALSHA, GET (a tombstone),
 * TIME, SET; release = EVALSHA, GET, SET (the tombstone). The fence key is written when a grant's token passes the
 * ceiling (a block lasts TOKEN_BLOCK µs of the clock, which tokens follow: so once per grant for grants further apart
 * than that), when the lock key is missing, and when a grant finds the anchor passed. q and w keep the release from
 * looking for waiters and watchers that are not there: waiters queue only behind a holder, and mark it; a name's
 * first watcher marks it, and a release whose notice reached nobody unmarks it. A lock key that went missing lost
 * its marks, so the grant after it assumes a watcher.
 *
 * Fencing tokens (strictly increasing per name, minted here from the server's state and clock only). Every grant
 * takes max(last token + 1, server clock in µs):
 * - While the lock key exists, that is above the last token, whatever any clock does.
 * - The clock is there for a Redis that lost its latest writes but kept older ones (a failover to a replica that had
 *   not received them, a restart from a file that lacks them): the lock key may be back at an older tombstone, whose
 *   token + 1 may be one a lost grant already handed out, to a holder that may still be at work (two holders with
 *   one token, which no fencing gate can tell apart). The clock has moved on since that grant, so the new token is
 *   above it, as long as the clock of the server that now answers is not behind that grant's by more than the time
 *   since.
 * - Tokens are handed out from blocks reserved in the fence key beforehand, so when the lock key is gone (a lease ran
 *   out unreleased, a tombstone reached its anchor) the next token is max(ceiling + 1, server clock in µs): above
 *   every earlier token while the fence key exists, again whatever the clock does.
 * - The fence key lives at least RETENTION_MS past every grant: a grant from a tombstone happens before the anchor,
 *   every other grant first moves a passed anchor to now + RETENTION_MS, and the key expires RETENTION_MS after it.
 * - Only once the fence key is gone too — Redis lost its data (a restart without persistence, a failover that lost
 *   the latest writes, FLUSHALL, eviction), or the name's last grant is more than RETENTION_MS old (an idle name, or
 *   a lease renewed or granted for longer than that which then ran out unreleased) — does the next token come from
 *   the server clock alone. It is above every earlier token as long as the server clock has not stepped back by
 *   more than the time since that name's last grant.
 * Tokens are not dense: they follow the clock. A block's ceiling is at most TOKEN_BLOCK µs past the clock reading of
 * the grant that reserved it, and a lease lasts at least 1 ms, so the token after a lease that ran out is the clock's
 * too: every token is at most the clock reading of its grant, as the two clock cases above need, unless the clock
 * stepped back. (A bigger block, say a lease long, would spare writes, but a lock key removed before its lease ran
 * out would then leave tokens that far ahead of the clock.) Tokens stay below 2^53 (exact in Lua's doubles and in
 * JavaScript numbers) until the year 2255.
 */
const PRELUDE = `
-- The server clock, read once per script: {seconds, microseconds}. (T is declared before the fast paths, which may
-- have read it already.)
local function clock()
  if not T then T = redis.call('TIME') end
  return T
end

local function now_us()
  local t = clock()
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function now_ms() return math.floor(now_us() / 1000) end

-- Integers below 2^53 in full (tostring would switch to an exponent).
local function num(n) return string.format('%.0f', n) end

local function publish(channel, message) return redis.call('PUBLISH_COMMAND', channel, message) end

-- who, fence, ceiling, anchor, flags, and rest: "" or " <metadata>".
local function parse(value)
  return string.match(value, '^(%S+) (%d+) (%d+) (%d+) (%S+)(.*)$')
end

local function has(flags, flag) return string.find(flags, flag, 1, true) ~= nil end

-- Flags in their order: q, w, o (the acquire's fast path finds an o by the last byte alone).
local function flags_of(q, w, o)
  local f = (q and 'q' or '') .. (w and 'w' or '') .. (o and 'o' or '')
  return f == '' and '-' or f
end

-- flags with \`flag\` added.
local function with(flags, flag)
  return flags_of(flag == 'q' or has(flags, 'q'), flag == 'w' or has(flags, 'w'), flag == 'o' or has(flags, 'o'))
end

-- A value with its flags replaced (parse's flags and rest), keeping the metadata.
local function reflag(value, flags, rest, new)
  return string.sub(value, 1, #value - #flags - #rest) .. new .. rest
end

-- Tells the name's observers that the holder or its metadata changed, if it is marked observed (o). Answers
-- whether it stays marked: a notice that reached nobody unmarks it.
local function changed(o)
  return o and publish(string.sub(KEYS[1], 1, -5) .. 'changed', '') > 0
end

-- The name's counter: the last token handed out (F), the ceiling of its block (C) and the anchor (A), as numbers,
-- with C and A also as the strings the lock key holds (formatted again only when they change).
local F, C, A, Cs, As

local function load(fence, ceiling, anchor)
  F, C, A, Cs, As = tonumber(fence), tonumber(ceiling), tonumber(anchor), ceiling, anchor
end

local function reserve()
  Cs, As = num(C), num(A)
  redis.call('SET', KEYS[2], Cs, 'PXAT', num(A + RETENTION_MS))
end

-- The next token: the last + 1, or the server clock in µs if that is higher (so that a counter rolled back with lost
-- writes does not hand out a token again). A new block is reserved in the fence key before the old one is exceeded,
-- and a passed anchor moves.
local function mint()
  local us = now_us()
  F = math.max(F + 1, us)
  local write = false
  if F > C then
    C = F + TOKEN_BLOCK
    write = true
  end
  local now = math.floor(us / 1000)
  if now >= A then
    A = now + RETENTION_MS
    write = true
  end
  if write then reserve() end
  return num(F)
end

-- The lock key is missing: the counter goes on from the fence key's ceiling, or from the clock if that is higher.
-- The new block is written first and the old ceiling read in the same command; the rare case of a ceiling above
-- the clock (the clock stepped back, or the last block was reserved less than TOKEN_BLOCK µs ago) writes again.
local function recover()
  local us = now_us()
  F, C, A = us - 1, us + TOKEN_BLOCK, math.floor(us / 1000) + RETENTION_MS
  Cs, As = num(C), num(A)
  local last = tonumber(redis.call('SET', KEYS[2], Cs, 'PXAT', num(A + RETENTION_MS), 'GET'))
  if last and last > F then
    F = last
    C = F + TOKEN_BLOCK
    reserve()
  end
  return last ~= nil
end

-- meta: the grant's metadata, or nil.
local function grant(owner, fence, ttl, q, w, o, meta)
  local value = owner .. ' ' .. fence .. ' ' .. Cs .. ' ' .. As .. ' ' .. flags_of(q, w, changed(o))
  if meta then value = value .. ' ' .. meta end
  redis.call('SET', KEYS[1], value, 'PX', ttl)
end

-- A waiter's entry: deadline, ttl, notify channel and metadata (nil when its grant carries none).
local function entry_of(entry)
  local deadline, ttl, bytes, rest = string.match(entry, '^(%d+) (%d+)/?(%d*) (.+)$')
  if not rest or bytes == '' then return deadline, ttl, rest, nil end
  local n = tonumber(bytes)
  if n >= #rest then return nil end
  return deadline, ttl, string.sub(rest, 1, #rest - n), string.sub(rest, #rest - n + 1)
end

-- Gives the free lock to the oldest waiter still there and tells only that waiter's process. Skipped for good:
-- entries past their deadline (the waiter gave up or died), and waiters whose process no longer listens (the
-- message reached nobody; the token minted for it is never used). The caller itself (skip) is granted without a
-- message: it reads the grant from its reply. The new holder is marked q: more may be queued behind it.
local function promote(skip, w, o)
  while true do
    local head = redis.call('LPOP', KEYS[3])
    if not head then return nil end
    local entry = redis.call('HGET', KEYS[4], head)
    redis.call('HDEL', KEYS[4], head)
    if entry then
      local deadline, ttl, channel, meta = entry_of(entry)
      if deadline and tonumber(deadline) > now_ms() then
        local fence = mint()
        if head == skip or publish(channel, head .. ' ' .. fence) > 0 then
          grant(head, fence, ttl, true, w, o, meta)
          return head, fence
        end
      end
    end
  end
end

-- The holder lets go (after load): the lock goes to the oldest live waiter if any may be queued; else it becomes a
-- tombstone (without the holder's metadata), after telling the name's watchers if any may listen. Observers hear of
-- either.
local function let_go(flags)
  local w, o = has(flags, 'w'), has(flags, 'o')
  if has(flags, 'q') and promote(nil, w, o) then return end
  if w and publish(string.sub(KEYS[1], 1, -5) .. 'released', '') == 0 then w = false end
  local tombstone = '~ ' .. num(F) .. ' ' .. Cs .. ' ' .. As .. ' ' .. flags_of(false, w, changed(o))
  redis.call('SET', KEYS[1], tombstone, 'PXAT', As)
end
`;

/**
 * ARGV[1] ownership token, ARGV[2] ttl ms, ARGV[3] wait ms (0: do not queue), ARGV[4] the caller's notify channel
 * ('' when not queueing), ARGV[5] the metadata to store with the grant (absent: none).
 * Returns the fencing token (a string) when this call granted the lock to the caller, {fencing token, PTTL} when
 * the caller already held it (granted earlier by a hand-off), else the holder's PTTL (an integer).
 * A free lock goes to the oldest live waiter, so a caller that is not queued never overtakes the queue.
 */
const ACQUIRE_FAST = `
local value = redis.call('GET', KEYS[1])
if value and string.byte(value, 1) == 126 and string.byte(value, -1) ~= 111 then
  -- A tombstone "~ <fence> <ceiling> <anchor> <flags>" on a name nobody observes (no o, which is last when set): the
  -- grant takes the token mint would, max(fence + 1, clock in µs), and keeps the anchor and flags as they are. A
  -- token past the ceiling reserves the next block first, as mint does; a passed anchor is left to the prelude.
  local find, sub = string.find, string.sub
  local p = find(value, ' ', 3, true)
  local q = p and find(value, ' ', p + 1, true)
  local r = q and find(value, ' ', q + 1, true)
  local last = r and tonumber(sub(value, 3, p - 1))
  local ceiling = last and tonumber(sub(value, p + 1, q - 1))
  local anchor = ceiling and tonumber(sub(value, q + 1, r - 1))
  if anchor then
    T = redis.call('TIME')
    local us = T[1] * 1000000 + T[2]
    if us < anchor * 1000 then
      local next = math.max(last + 1, us)
      local mine = string.format('%.0f', next)
      local rest = sub(value, q)
      if next > ceiling then
        local block = string.format('%.0f', next + TOKEN_BLOCK)
        redis.call('SET', KEYS[2], block, 'PXAT', string.format('%.0f', anchor + RETENTION_MS))
        rest = ' ' .. block .. rest
      else
        rest = sub(value, p)
      end
      local meta = ARGV[5]
      redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. mine .. rest .. (meta and ' ' .. meta or ''), 'PX', ARGV[2])
      return mine
    end
  end
end
`;

const ACQUIRE = `
local owner, meta = ARGV[1], ARGV[5]

-- The caller's queue entry (see the header): deadline, TTL, notify channel, and the metadata its grant will carry.
local function entry_for(wait)
  local head = string.format('%.0f', now_ms() + wait) .. ' ' .. ARGV[2]
  if meta then return head .. '/' .. #meta .. ' ' .. ARGV[4] .. meta end
  return head .. ' ' .. ARGV[4]
end

-- A grant with metadata (every election's) that finds no trace of its name, neither lock key nor fence key, on a
-- server up for less than the grant's TTL: the server may have restarted empty under a holder whose lease is still
-- open by that holder's clock. A stand-in holder "!" keeps the name until the server has been up for one TTL (whole
-- seconds of uptime, rounded down: never shorter), and callers queue behind it as behind a holder that died.
-- Returns its value, or nil when the server is older than that (or does not say).
local function stand_in(ttl)
  local info = redis.pcall('INFO', 'server')
  local up = type(info) == 'string' and tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
  if not up or ttl <= up * 1000 then return nil end
  local held = '! ' .. num(F) .. ' ' .. Cs .. ' ' .. As .. ' wo'
  redis.call('SET', KEYS[1], held, 'PX', ttl - up * 1000)
  return held
end

local who, fence, ceiling, anchor, flags, rest
if value then
  who, fence, ceiling, anchor, flags, rest = parse(value)
  if who == '~' then
    -- A tombstone: free, and nobody is queued (the queue was empty when it was written, and waiters queue only
    -- behind a holder). Its anchor has not passed, or it would be gone (but the clock may have passed it since the
    -- key was read). (The name is observed, or the clock passed the anchor, or the fast path above would have
    -- granted.)
    load(fence, ceiling, anchor)
    local mine = mint()
    grant(owner, mine, ARGV[2], false, has(flags, 'w'), has(flags, 'o'), meta)
    return mine
  end
  if who == owner then
    -- Already ours: a hand-off this waiter has not heard about yet, or a retry of a call whose reply was lost. The
    -- lease started before this call, so its remaining time comes along.
    return {fence, redis.call('PTTL', KEYS[1])}
  end
else
  -- Missing: never used, or lost. Waiters may be queued (the holder's lease ran out while they waited): the oldest
  -- live one goes first. Whether anyone watches or observes is unknown now, so the grant assumes so.
  if not recover() and meta then value = stand_in(tonumber(ARGV[2])) end
  if value then
    flags, rest = 'wo', ''
  else
    if redis.call('LLEN', KEYS[3]) == 0 then
      local mine = mint()
      grant(owner, mine, ARGV[2], false, true, true, meta)
      return mine
    end
    local head, handed = promote(owner, true, true)
    if head == owner then return handed end
    if not head then
      local mine = mint()
      grant(owner, mine, ARGV[2], false, true, true, meta)
      return mine
    end
    -- Handed to the head of the queue, marked q already.
    flags = 'qw'
  end
end
local wait = tonumber(ARGV[3])
if wait > 0 and redis.call('HSETNX', KEYS[4], owner, entry_for(wait)) == 1 then
  redis.call('RPUSH', KEYS[3], owner)
  -- The queue outlives no entry: once every waiter's deadline passed, the keys go away by themselves. Extended
  -- with a margin, so that a stream of waiters does not extend it on every arrival.
  if redis.call('PTTL', KEYS[3]) < wait then
    redis.call('PEXPIRE', KEYS[3], wait + QUEUE_MARGIN_MS)
    redis.call('PEXPIRE', KEYS[4], wait + QUEUE_MARGIN_MS)
  end
  -- The holder's release must look at the queue. (A value we cannot read is no grant of ours: its key runs out,
  -- and the acquire after that looks at the queue anyway.)
  if flags and not has(flags, 'q') then
    redis.call('SET', KEYS[1], reflag(value, flags, rest, with(flags, 'q')), 'KEEPTTL')
  end
end
return redis.call('PTTL', KEYS[1])
`;

/**
 * ARGV[1] is the claim "<ownership token> <fencing token>". Returns 1 when the holder let go (the lock handed over
 * or a tombstone left), 0 when not held.
 */
const RELEASE_FAST = `
local value = redis.call('GET', KEYS[1])
local claim = ARGV[1] .. ' '
if not value or string.sub(value, 1, #claim) ~= claim then return 0 end
do
  -- Nobody queued, watching or observing, and no metadata (the value ends in the flags "-"): the tombstone is the
  -- claim's fence and the rest of the value as it is.
  local find, sub = string.find, string.sub
  local p = find(value, ' ', #claim + 1, true)
  local q = p and find(value, ' ', p + 1, true)
  local s = find(ARGV[1], ' ', 1, true)
  if q and s and sub(value, q + 1) == '-' then
    redis.call('SET', KEYS[1], '~ ' .. sub(ARGV[1], s + 1) .. ' ' .. sub(value, #claim + 1), 'PXAT', sub(value, p + 1, q - 1))
    return 1
  end
end
`;

const RELEASE = `
local who, fence, ceiling, anchor, flags = parse(value)
if not fence or who .. ' ' .. fence ~= ARGV[1] then return 0 end
load(fence, ceiling, anchor)
let_go(flags)
return 1
`;

/**
 * A waiter leaves (ARGV[1] its ownership token): its queue entry goes, and if the lock was already handed to it,
 * ARGV[2] = '1' keeps the grant (returns {fencing token, PTTL}) while '0' gives it up at once (the owner-checked
 * undo after an abandoned or ambiguous acquire). Returns 0 when the caller does not hold the lock afterwards.
 */
const LEAVE = `
redis.call('LREM', KEYS[3], 0, ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
local value = redis.call('GET', KEYS[1])
if not value then return 0 end
local who, fence, ceiling, anchor, flags = parse(value)
if who ~= ARGV[1] then return 0 end
if ARGV[2] == '1' then return {fence, redis.call('PTTL', KEYS[1])} end
load(fence, ceiling, anchor)
let_go(flags)
return 0
`;

/**
 * Marks the name watched (ARGV[1] = 'w': releases publish on its release channel) or observed ('o': grants,
 * releases and metadata updates publish on its change channel). Returns 1 when the lock key carries the mark, 0 when
 * the key is missing: the next grant then assumes a watcher and an observer anyway.
 */
const WATCH = `
local flag = ARGV[1]
if flag ~= 'w' and flag ~= 'o' then return redis.error_reply('ERR dlock: unknown mark') end
local value = redis.call('GET', KEYS[1])
if not value then return 0 end
local _, _, _, _, flags, rest = parse(value)
if not flags then return 0 end
if not has(flags, flag) then
  redis.call('SET', KEYS[1], reflag(value, flags, rest, with(flags, flag)), 'KEEPTTL')
end
return 1
`;

/**
 * The lock as it stands: {waiters} when free (missing, or a tombstone), {waiters, fencing token, PTTL} when held,
 * and {waiters, fencing token, PTTL, metadata} when the grant carries metadata. waiters = the queue's length (it
 * may still count entries whose deadline passed). A lease that ran out reads as missing (GET expires the key).
 */
const INSPECT = `
local waiters = redis.call('LLEN', KEYS[3])
local value = redis.call('GET', KEYS[1])
if not value then return {waiters} end
local who, fence, _, _, _, rest = parse(value)
-- A tombstone, or the stand-in for a lease a restart may have lost (see the acquire script): no known holder.
if not fence or who == '~' or who == '!' then return {waiters} end
local pttl = redis.call('PTTL', KEYS[1])
if rest == '' then return {waiters, fence, pttl} end
return {waiters, fence, pttl, string.sub(rest, 2)}
`;

/**
 * ARGV[1] the claim "<ownership token> <fencing token>", ARGV[2] the new metadata. Replaces the metadata of the grant
 * the claim holds, keeping its token, marks and TTL, and tells the name's observers. Returns 1, or 0 when the claim
 * does not hold the lock.
 */
const UPDATE = `
local value = redis.call('GET', KEYS[1])
local claim = ARGV[1] .. ' '
if not value or string.sub(value, 1, #claim) ~= claim then return 0 end
local _, _, _, _, flags, rest = parse(value)
if not flags then return 0 end
local head = string.sub(value, 1, #value - #flags - #rest)
local o = changed(has(flags, 'o'))
redis.call('SET', KEYS[1], head .. flags_of(has(flags, 'q'), has(flags, 'w'), o) .. ' ' .. ARGV[2], 'KEEPTTL')
return 1
`;

/**
 * KEYS[1..n] lock keys, ARGV[1..n] claims "<ownership token> <fencing token>", ARGV[n+1..2n] ttl ms. One call renews
 * a whole batch: holding a thousand locks costs one round trip per renewal tick, not a thousand. Only the TTL
 * changes: the stored grant keeps its counter and marks. Returns 1/0 per lock, in order.
 */
const RENEW = `
local n = #KEYS
local out = {}
for i = 1, n do
  local value = redis.call('GET', KEYS[i])
  local claim = ARGV[i] .. ' '
  if value and string.sub(value, 1, #claim) == claim then
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
  readonly watch: LuaScript;
  readonly inspect: LuaScript;
  readonly update: LuaScript;
}

/** Waiters' queue keys live this much longer than the latest deadline in them. */
const QUEUE_MARGIN_MS = 60_000;

/**
 * Tokens reserved in the fence key at a time, in µs of the server clock that tokens follow. A lease that runs out
 * unreleased leaves a ceiling at most this far ahead of its grant, which the clock has passed by then (a lease lasts
 * 1 ms at least), so the token after it is the clock's, not ahead of it.
 */
export const TOKEN_BLOCK = 1_000;

/**
 * The scripts for one fence retention (built into the source: one argument less on every call). `sharded`: publish
 * with SPUBLISH (Redis >= 7.0; a standalone server takes it too), for a Redis Cluster where every channel a script
 * publishes on shares the lock's hash tag.
 */
export function lockScripts(fenceRetentionMs: number, sharded = false): LockScripts {
  // A fast path goes before the prelude: returning early, it never builds the prelude's closures. T (the server
  // clock) comes first, so that a fast path that read it leaves it to the prelude.
  const build = (body: string, fast = ''): LuaScript =>
    new LuaScript(
      `local T\n${fast}${PRELUDE}${body}`
        .replaceAll('RETENTION_MS', String(Math.trunc(fenceRetentionMs)))
        .replaceAll('QUEUE_MARGIN_MS', String(QUEUE_MARGIN_MS))
        .replaceAll('TOKEN_BLOCK', String(TOKEN_BLOCK))
        .replaceAll('PUBLISH_COMMAND', sharded ? 'SPUBLISH' : 'PUBLISH'),
    );
  return {
    acquire: build(ACQUIRE, ACQUIRE_FAST),
    release: build(RELEASE, RELEASE_FAST),
    leave: build(LEAVE),
    renew: new LuaScript(RENEW),
    watch: build(WATCH),
    inspect: build(INSPECT),
    update: build(UPDATE),
  };
}

import { LuaScript } from '../lua-script.js';

/**
 * The Lua scripts. Each runs atomically on the server, so every decision below (who owns the lock, who is next in
 * line, which token comes next) is taken against one consistent state. Needs Redis >= 6.2 (SET ... GET, PXAT).
 *
 * Keys of one lock (see `keys.ts`), all in one hash-tag slot; every script takes all four, in this order:
 *   KEYS[1] lock    string, in one of two states:
 *                     held       "<who> <fence> <expiry> <flags> <payload>": who = the holder's ownership token,
 *                                fence = its fencing token, expiry = server time (ms) at which the lease ends, the
 *                                key's own expiry (PXAT), stated so that a script that overwrote the value can put it
 *                                back as it was; payload = 0xFF <owner id> 0xFF or, when the grant was given
 *                                metadata to store (an election's leader value), 0xFF <owner id> 0xFE <metadata>
 *                                (neither byte occurs in UTF-8). A value written by an older version has " <metadata>" or
 *                                nothing after the flags, and no owner id;
 *                     tombstone  "~ <fence> <flags>": free, with nobody queued; fence = the name's last token;
 *                                expires RETENTION_MS after the release that wrote it.
 *                   (and, briefly, who = "!": held by nobody known, standing in for a lease that a restart may have
 *                   lost, for an election's first grant on a server up for less than its TTL: see the acquire script)
 *                   flags = "-", or some of q (someone may be queued behind the holder), w (someone may watch) and
 *                   o (someone may observe: elections), always in that order.
 *   KEYS[2] fence   the last token handed out (or a clock reading in µs above it: a refused acquire writes its own),
 *                   expiring the grant's lease plus RETENTION_MS after the grant.
 *   KEYS[3] queue   list of waiting ownership tokens, oldest first
 *   KEYS[4] waiters hash ownership token -> "<deadline ms> <ttl ms>/<payload bytes> <notify channel><payload>", the
 *                   payload its grant will carry (channels and payloads may both hold spaces: the byte count is what
 *                   tells them apart; an entry from an older version may have no payload)
 * The name's release channel is KEYS[1] with "lock" replaced by "released", its change channel the same with
 * "changed": not keys, but in the same hash tag, as a sharded channel must be. Hand-off channels come from the
 * waiters' entries, as their services wrote them.
 *
 * The payload (owner id, metadata) sits at the end of the value, after the flags, so that a renewal keeps it, a
 * release drops it with the grant, and values from before it (no owner id) still parse. Every pattern below that
 * reads the flags allows for it (parse's fifth result, `rest`: " <payload>", or from an older version "" or " <metadata>").
 * o: while a name is marked observed, every grant, release and metadata update publishes on its change channel;
 * one that reached nobody unmarks it, and a grant that finds the lock key missing publishes anyway (marks are lost
 * with the key) and marks the name if someone heard.
 *
 * Write first, check after. The uncontended cycle is six commands: acquire = EVALSHA, TIME, SET of the fence key
 * (the clock's token, reading the last one) and SET of the lock key (the grant, reading the tombstone); release =
 * EVALSHA and SET of the tombstone (reading the grant). Each SET ... GET both writes what the common case needs and
 * reads what was there, and the script, still atomic, puts right whatever it should not have written: a live grant
 * (a refused acquire, a stale release) goes back with its own expiry, a missing key takes the queue check, the fence
 * recovery and the elections' stand-in, a tombstone with marks or a counter ahead of the clock get a grant written
 * again, and a release that found no key deletes its tombstone (so that the next grant looks at the queue). A refused
 * acquire is thus a write and a restore; nothing outside the script ever sees the value in between.
 * Why the tombstone: a release that deleted the key would lose the counter with it. q and w keep the release from
 * looking for waiters and watchers that are not there: waiters queue only behind a holder, and mark it; a name's
 * first watcher marks it, and a release whose notice reached nobody unmarks it. A lock key that went missing lost
 * its marks, so the grant after it assumes a watcher.
 *
 * Fencing tokens (strictly increasing per name, minted here from the server's state and clock only). Every grant
 * takes max(fence key + 1, lock key's token + 1, server clock in µs):
 * - While either key exists, that is above the last token, whatever any clock does: every grant writes its token to
 *   the fence key before its holder can learn it, and a release keeps it in the tombstone.
 * - The clock is there for a Redis that lost its latest writes but kept older ones (a failover to a replica that had
 *   not received them, a restart from a file that lacks them): both keys may be back at an older state, whose
 *   token + 1 may be one a lost grant already handed out, to a holder that may still be at work (two holders with
 *   one token, which no fencing gate can tell apart). The clock has moved on since that grant, so the new token is
 *   above it, as long as the clock of the server that now answers is not behind that grant's by more than the time
 *   since.
 * - The fence key holds a token or a clock reading, never more: when the lock key is gone (a lease ran out
 *   unreleased, a tombstone ran out) the next token is max(fence + 1, clock), which is the clock's unless the clock
 *   stepped back. So every token is at most the clock reading of its grant, as the clock cases need.
 * - The fence key lives the lease plus RETENTION_MS past every grant, and a refused acquire extends it to the
 *   holder's expiry plus RETENTION_MS; a tombstone lives RETENTION_MS past its release. Only once both are gone —
 *   Redis lost its data (a restart without persistence, a failover that lost the latest writes, FLUSHALL,
 *   eviction), or the name's last grant is more than RETENTION_MS old (an idle name, or a lease renewed for longer
 *   than that which then ran out unreleased) — does the next token come from the server clock alone. It is above
 *   every earlier token as long as the server clock has not stepped back by more than the time since that name's
 *   last grant.
 * Tokens are not dense: they follow the clock. They stay below 2^53 (exact in Lua's doubles and in JavaScript
 * numbers) until the year 2255.
 */
/** The server clock (T, read once per script), and integers written in full. Shared with the semaphore scripts. */
export const LUA_CLOCK = `
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

`;

/** Publishing (plain or sharded: see `PUBLISH_COMMAND`), and the lock value's layout. Shared with the semaphore scripts. */
export const LUA_VALUES = `local function publish(channel, message) return redis.call('PUBLISH_COMMAND', channel, message) end

-- who, token, expiry (nil for a tombstone), flags, and rest: "" or " <metadata>". Nil for a value in no known
-- layout. Flags are never digits, so an older layout with more numbers does not pass for this one.
local function parse(value)
  local token, marks = string.match(value, '^~ (%d+) ([%-qwo]+)$')
  if token then return '~', token, nil, marks, '' end
  local who, fence, expiry, flags, rest = string.match(value, '^(%S+) (%d+) (%d+) ([%-qwo]+)(.*)$')
  if rest and rest ~= '' and string.byte(rest, 1) ~= 32 then return nil end
  return who, fence, expiry, flags, rest
end

local function has(flags, flag) return string.find(flags, flag, 1, true) ~= nil end

`;

const LUA_FLAGS = `-- Flags in their order: q, w, o.
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

-- Puts back a value this script's write replaced (SET ... GET) but had no right to: a grant until its own expiry,
-- a tombstone for the retention, and a value in no known layout (nobody's grant we can read) for the retention too,
-- rather than free a lock some other writer may hold.
local function restore(value, expiry)
  if expiry then
    redis.call('SET', KEYS[1], value, 'PXAT', expiry)
  else
    redis.call('SET', KEYS[1], value, 'PX', RETENTION_MS)
  end
end

`;

/**
 * Minting (see "Fencing tokens" above), on the fence key KEYS[2]. Shared with the semaphore scripts, whose fence key
 * is KEYS[2] too: one restart-safe source of tokens.
 */
export const LUA_MINT = `-- F: the highest token handed out so far as far as this script knows; FENCE: what the fence key holds now, and
-- FENCE_TTL the lease it was written for (nil: not written by this script).
local F, FENCE, FENCE_TTL

-- The next token, for a grant of ttl ms: the last + 1, or the server clock in µs if that is higher (so that a
-- counter rolled back with lost writes does not hand out a token again). The fence key holds it before any holder
-- learns it, and lives the lease and the retention past it.
local function mint(ttl)
  F = math.max(F + 1, now_us())
  if F ~= FENCE or tonumber(ttl) ~= FENCE_TTL then
    redis.call('SET', KEYS[2], num(F), 'PX', num(ttl + RETENTION_MS))
    FENCE, FENCE_TTL = F, tonumber(ttl)
  end
  return num(F)
end

`;

/**
 * A waiter's queue entry, as the lock and the semaphore scripts both write it. Shared with the semaphore scripts.
 */
export const LUA_ENTRIES = `-- A waiter's entry "<deadline> <ttl>/<payload bytes> <channel><payload>" (the byte count tells a channel with spaces
-- from its payload): deadline, ttl, notify channel and payload. An older version's "<deadline> <ttl> <channel>" has
-- no payload (nil). Nil for no entry, or anything else (a semaphore's hand-off mark "=<slot>").
local function entry_of(entry)
  if not entry then return nil end
  local deadline, ttl, bytes, rest = string.match(entry, '^(%d+) (%d+)/?(%d*) (.+)$')
  if not rest or bytes == '' then return deadline, ttl, rest, nil end
  local n = tonumber(bytes)
  if n >= #rest then return nil end
  return deadline, ttl, string.sub(rest, 1, #rest - n), string.sub(rest, #rest - n + 1)
end

`;

const LUA_QUEUE = `-- A grant of ttl ms; meta: its payload (owner id and metadata), or nil. The value states its expiry, so that a
-- script that overwrote it by mistake can put it back as it was.
local function grant(owner, fence, ttl, q, w, o, meta)
  local expiry = num(now_ms() + ttl)
  local value = owner .. ' ' .. fence .. ' ' .. expiry .. ' ' .. flags_of(q, w, changed(o))
  if meta then value = value .. ' ' .. meta end
  redis.call('SET', KEYS[1], value, 'PXAT', expiry)
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
        local fence = mint(ttl)
        if head == skip or publish(channel, head .. ' ' .. fence) > 0 then
          grant(head, fence, ttl, true, w, o, meta)
          return head, fence
        end
      end
    end
  end
end

-- The holder lets go (F = its token): the lock goes to the oldest live waiter if any may be queued; else it becomes
-- a tombstone (without the holder's metadata), after telling the name's watchers if any may listen. Observers hear
-- of either. written: the tombstone "~ <F> -" is in place already (the release writes it first).
local function let_go(flags, written)
  local w, o = has(flags, 'w'), has(flags, 'o')
  if has(flags, 'q') and promote(nil, w, o) then return end
  if w and publish(string.sub(KEYS[1], 1, -5) .. 'released', '') == 0 then w = false end
  local marks = flags_of(false, w, changed(o))
  if written and marks == '-' then return end
  redis.call('SET', KEYS[1], '~ ' .. num(F) .. ' ' .. marks, 'PX', RETENTION_MS)
end
`;

const PRELUDE = LUA_CLOCK + LUA_VALUES + LUA_FLAGS + LUA_MINT + LUA_ENTRIES + LUA_QUEUE;

/**
 * ARGV[1] ownership token, ARGV[2] ttl ms, ARGV[3] wait ms (0: do not queue), ARGV[4] the caller's notify channel
 * ('' when not queueing), ARGV[5] the owner id (AcquireRequest.ownerId) and ARGV[6] the metadata (absent: none) to
 * store with the grant.
 * Returns the fencing token (a string) when this call granted the lock to the caller, {fencing token, PTTL} when
 * the caller already held it (granted earlier by a hand-off), else {the holder's PTTL, ceiling}: an integer, and a
 * bound on every token minted so far (a decimal string).
 * A free lock goes to the oldest live waiter, so a caller that is not queued never overtakes the queue.
 */
const ACQUIRE_FAST = `
-- Written first, checked after: the clock's token goes to the fence key and the grant to the lock key, each SET
-- reading the value it replaced. Both old values fit the common case (a tombstone of an unobserved, unwatched name,
-- and a counter behind the clock) or the script below puts right what it wrote.
T = redis.call('TIME')
local US = T[1] * 1000000 + T[2]
local EXPIRY = string.format('%.0f', T[1] * 1000 + math.floor(T[2] / 1000) + ARGV[2])
local MINE = string.format('%.0f', US)
local LAST = redis.call('SET', KEYS[2], MINE, 'PX', string.format('%.0f', ARGV[2] + RETENTION_MS), 'GET')
local PAYLOAD = '\\255' .. ARGV[5] .. (ARGV[6] and '\\254' .. ARGV[6] or '\\255')
local OLD = redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. MINE .. ' ' .. EXPIRY .. ' - ' .. PAYLOAD, 'PXAT', EXPIRY, 'GET')
if OLD and (not LAST or tonumber(LAST) < US) then
  local last = string.match(OLD, '^~ (%d+) %-$')
  if last and tonumber(last) < US then return MINE end
end
`;

const ACQUIRE = `
-- meta: the grant's metadata (every election's), which only the stand-in below looks at; the grant stores PAYLOAD.
local owner, ttl, meta = ARGV[1], tonumber(ARGV[2]), ARGV[6]
local now = math.floor(US / 1000)
FENCE, FENCE_TTL = US, ttl

-- The caller's queue entry (see the header): deadline, TTL, notify channel, and the payload its grant will carry.
local function entry_for(wait)
  return num(now + wait) .. ' ' .. ARGV[2] .. '/' .. #PAYLOAD .. ' ' .. ARGV[4] .. PAYLOAD
end

-- A grant with metadata (every election's) that finds no trace of its name, neither lock key nor fence key, on a
-- server up for less than the grant's TTL: the server may have restarted empty under a holder whose lease is still
-- open by that holder's clock. A stand-in holder "!" keeps the name until the server has been up for one TTL (whole
-- seconds of uptime, rounded down: never shorter), and callers queue behind it as behind a holder that died.
-- Returns its value, its expiry, or nil when the server is older than that (or does not say).
local function stand_in()
  local info = redis.pcall('INFO', 'server')
  local up = type(info) == 'string' and tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
  if not up or ttl <= up * 1000 then return nil end
  local expiry = num(now + ttl - up * 1000)
  local held = '! ' .. mint(ttl) .. ' ' .. expiry .. ' wo'
  redis.call('SET', KEYS[1], held, 'PXAT', expiry)
  return held, expiry
end

local who, fence, expiry, flags, rest
if OLD then who, fence, expiry, flags, rest = parse(OLD) end
F = math.max(LAST and tonumber(LAST) or 0, fence and tonumber(fence) or 0)
-- A grant whose expiry the clock has passed (within the same millisecond, which Redis had not yet expired): gone.
if expiry and tonumber(expiry) <= now then OLD, who = nil, nil end
local value
if who == '~' then
  -- A tombstone: free, and nobody is queued (the queue was empty when it was written, and waiters queue only
  -- behind a holder). (The name is watched or observed, or a counter is ahead of the clock, or the fast path
  -- above would have granted.)
  local mine = mint(ttl)
  grant(owner, mine, ttl, false, has(flags, 'w'), has(flags, 'o'), PAYLOAD)
  return mine
elseif who then
  -- Held: the grant goes back as it was, and the fence key keeps the counter for as long as that grant needs it.
  local left = tonumber(expiry) - now
  if F > FENCE or left > ttl then
    FENCE, FENCE_TTL = math.max(F, FENCE), math.max(left, ttl)
    redis.call('SET', KEYS[2], num(FENCE), 'PX', num(FENCE_TTL + RETENTION_MS))
  end
  if who == owner then
    -- Already ours: a hand-off this waiter has not heard about yet, or a retry of a call whose reply was lost. The
    -- lease started before this call, so its remaining time comes along.
    restore(OLD, expiry)
    return {fence, left}
  end
  value = OLD
elseif OLD then
  -- Nobody's grant we can read: it goes back, and runs out by itself (callers may queue behind it, unmarked: the
  -- acquire after it looks at the queue anyway).
  if F > FENCE then redis.call('SET', KEYS[2], num(F), 'PX', num(ttl + RETENTION_MS)) end
  value = OLD
else
  -- Missing: never used, or lost. Waiters may be queued (the holder's lease ran out while they waited): the oldest
  -- live one goes first. Whether anyone watches or observes is unknown now, so the grant assumes so.
  if not LAST and meta then value, expiry = stand_in() end
  if value then
    flags, rest = 'wo', ''
  else
    if redis.call('LLEN', KEYS[3]) == 0 then
      local mine = mint(ttl)
      grant(owner, mine, ttl, false, true, true, PAYLOAD)
      return mine
    end
    local head, handed = promote(owner, true, true)
    if head == owner then return handed end
    if not head then
      local mine = mint(ttl)
      grant(owner, mine, ttl, false, true, true, PAYLOAD)
      return mine
    end
    -- Handed to the head of the queue, marked q already; the lock key holds its grant.
    flags, expiry = nil, nil
  end
end
-- What the write above replaced goes back (a missing key reads as false); the stand-in only if it gains the q mark.
local put = OLD and true or false
local wait = tonumber(ARGV[3])
if wait > 0 and redis.call('HSETNX', KEYS[4], owner, entry_for(wait)) == 1 then
  redis.call('RPUSH', KEYS[3], owner)
  -- The queue outlives no entry: once every waiter's deadline passed, the keys go away by themselves. Extended
  -- with a margin, so that a stream of waiters does not extend it on every arrival.
  if redis.call('PTTL', KEYS[3]) < wait then
    redis.call('PEXPIRE', KEYS[3], wait + QUEUE_MARGIN_MS)
    redis.call('PEXPIRE', KEYS[4], wait + QUEUE_MARGIN_MS)
  end
  -- The holder's release must look at the queue.
  if flags and not has(flags, 'q') then
    value = reflag(value, flags, rest, with(flags, 'q'))
    put = true
  end
end
if put then restore(value, expiry) end
-- Refused: with the holder's PTTL goes a bound on every token minted so far (F, or the clock when the counter was
-- lost: see "Fencing tokens"). A hand-off the caller hears of later with no higher token was made before now, and
-- is over: the caller does not hold it.
local ceiling = num(math.max(F, US))
if expiry then return {tonumber(expiry) - now, ceiling} end
return {redis.call('PTTL', KEYS[1]), ceiling}
`;

/**
 * ARGV[1] is the claim "<ownership token> <fencing token>". Returns 1 when the holder let go (the lock handed over
 * or a tombstone left), 0 when not held.
 */
const RELEASE_FAST = `
-- Written first, checked after: the tombstone of the claim's token, reading the value it replaced. When that was
-- the claim's grant with nobody queued, watching or observing ("<claim> <expiry> -[ <payload>]"), done.
local claim = ARGV[1] .. ' '
local s = string.find(ARGV[1], ' ', 1, true)
if not s then return 0 end
local OLD = redis.call('SET', KEYS[1], '~ ' .. string.sub(ARGV[1], s + 1) .. ' -', 'PX', RETENTION_MS, 'GET')
if OLD and string.sub(OLD, 1, #claim) == claim
  and (string.find(OLD, '^%d+ %- \\255', #claim + 1) or string.find(OLD, '^%d+ %-$', #claim + 1)) then
  return 1
end
`;

const RELEASE = `
if not OLD then
  -- Nothing held, nor a tombstone: a missing key stays missing, so that the next grant looks at the queue.
  redis.call('DEL', KEYS[1])
  return 0
end
local who, fence, expiry, flags = parse(OLD)
if not fence or who == '~' or who .. ' ' .. fence ~= ARGV[1] then
  restore(OLD, expiry)
  return 0
end
F = tonumber(fence)
let_go(flags, true)
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
local who, fence, _, flags = parse(value)
if not fence or who ~= ARGV[1] then return 0 end
if ARGV[2] == '1' then return {fence, redis.call('PTTL', KEYS[1])} end
F = tonumber(fence)
let_go(flags, false)
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
local _, _, _, flags, rest = parse(value)
if not flags then return 0 end
if not has(flags, flag) then
  redis.call('SET', KEYS[1], reflag(value, flags, rest, with(flags, flag)), 'KEEPTTL')
end
return 1
`;

/**
 * The lock as it stands: {waiters} when free (missing, or a tombstone), {waiters, fencing token, PTTL, metadata or
 * nil, owner id} when held, and for a grant written by an older version (no owner id) {waiters, fencing token, PTTL[,
 * metadata]}. waiters = the queued callers whose deadline has not passed. A lease that ran out
 * reads as missing (GET expires the key). The payload is split here: its separators are not UTF-8, so they would not
 * survive a client's decoding of the reply.
 */
const INSPECT = `
-- Waiters whose wait has not run out (an entry outlives a waiter that crashed, until its deadline).
local waiters = 0
local now = now_ms()
for _, entry in ipairs(redis.call('HVALS', KEYS[4])) do
  local deadline = tonumber(string.match(entry, '^(%d+) '))
  if deadline and deadline > now then waiters = waiters + 1 end
end
local value = redis.call('GET', KEYS[1])
if not value then return {waiters} end
local who, fence, _, _, rest = parse(value)
-- A tombstone, or the stand-in for a lease a restart may have lost (see the acquire script): no known holder.
if not fence or who == '~' or who == '!' then return {waiters} end
local pttl = redis.call('PTTL', KEYS[1])
local id, sep, meta = string.match(rest, '^ \\255([^\\254\\255]*)([\\254\\255])(.*)$')
if id then return {waiters, fence, pttl, sep == '\\254' and meta, id} end
if rest == '' then return {waiters, fence, pttl} end
return {waiters, fence, pttl, string.sub(rest, 2)}
`;

/**
 * ARGV[1] the claim "<ownership token> <fencing token>", ARGV[2] the new metadata. Replaces the metadata of the grant
 * the claim holds, keeping its token, expiry, marks and TTL, and tells the name's observers. Returns 1, or 0 when the
 * claim does not hold the lock.
 */
const UPDATE = `
local value = redis.call('GET', KEYS[1])
local claim = ARGV[1] .. ' '
if not value or string.sub(value, 1, #claim) ~= claim then return 0 end
local who, _, _, flags, rest = parse(value)
if not flags or who == '~' then return 0 end
local head = string.sub(value, 1, #value - #flags - #rest)
local o = changed(has(flags, 'o'))
-- The owner id stays (a grant from an older version has none).
local id = string.match(rest, '^ \\255([^\\254\\255]*)[\\254\\255]')
local payload = id and '\\255' .. id .. '\\254' .. ARGV[2] or ARGV[2]
redis.call('SET', KEYS[1], head .. flags_of(has(flags, 'q'), has(flags, 'w'), o) .. ' ' .. payload, 'KEEPTTL')
return 1
`;

/**
 * KEYS[1..n] lock keys, ARGV[1..n] claims "<ownership token> <fencing token>", ARGV[n+1..2n] ttl ms. One call renews
 * a whole batch: holding a thousand locks costs one round trip per renewal tick, not a thousand. The grant keeps its
 * token, marks and metadata; its value states the new expiry (one clock reading for the batch), which the key
 * expires at. Returns 1/0 per lock, in order.
 */
const RENEW = `
local n = #KEYS
local out = {}
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
for i = 1, n do
  local value = redis.call('GET', KEYS[i])
  local claim = ARGV[i] .. ' '
  local e = value and string.sub(value, 1, #claim) == claim and string.find(value, '^%d+ ', #claim + 1)
  if e then
    local expiry = string.format('%.0f', now + ARGV[n + i])
    local rest = string.sub(value, (string.find(value, ' ', #claim + 1, true)))
    redis.call('SET', KEYS[i], claim .. expiry .. rest, 'PXAT', expiry)
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
 * A script's source with its constants filled in: the fence retention (built into the source: one argument less on
 * every call), the queue margin, and the publish command. `sharded`: publish with SPUBLISH (Redis >= 7.0; a
 * standalone server takes it too), for a Redis Cluster where every channel a script publishes on shares the hash tag
 * of the keys it runs on. Shared with the semaphore scripts.
 */
export function luaSource(source: string, fenceRetentionMs: number, sharded: boolean): string {
  return source
    .replaceAll('RETENTION_MS', String(Math.trunc(fenceRetentionMs)))
    .replaceAll('QUEUE_MARGIN_MS', String(QUEUE_MARGIN_MS))
    .replaceAll('PUBLISH_COMMAND', sharded ? 'SPUBLISH' : 'PUBLISH');
}

/** The lock scripts for one fence retention; `sharded` as for {@link luaSource}. */
export function lockScripts(fenceRetentionMs: number, sharded = false): LockScripts {
  // A fast path goes before the prelude: returning early, it never builds the prelude's closures. T (the server
  // clock) comes first, so that a fast path that read it leaves it to the prelude.
  const build = (body: string, fast = ''): LuaScript =>
    new LuaScript(luaSource(`local T\n${fast}${PRELUDE}${body}`, fenceRetentionMs, sharded));
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

import { LuaScript } from '../lua-script.js';

/*
 * Every write of a fencing counter gives it the retention TTL (ARGV noted per script): a name nobody locks for that
 * long stops costing memory, and its next claim reseeds the counter like a restarted node would.
 * Fencing counters are decimal strings and never pass through Lua's `tostring`, which would print a large double in
 * exponent form: they are compared with `tonumber` (exact below 2^53) but stored and returned as the strings given.
 * A missing counter is seeded from the server's TIME in microseconds, `<seconds><6-digit micros>`.
 */
const SEED = `local function seed()
  local now = redis.call('TIME')
  return now[1] .. string.format('%06d', tonumber(now[2]))
end
`;

/**
 * Round 1. KEYS: lock, fence. ARGV: ownership token, ttl ms, counter retention ms.
 * Claims the lock only if it is free and reports this node's counter, or the holder's remaining PTTL.
 */
export const ACQUIRE = new LuaScript(`${SEED}
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.call('GET', KEYS[2])
  if not fence then
    fence = seed()
    redis.call('SET', KEYS[2], fence, 'PX', ARGV[3])
  end
  return {1, fence}
end
return {0, redis.call('PTTL', KEYS[1])}
`);

/**
 * Round 2. KEYS: lock, fence. ARGV: ownership token, new fencing token, counter retention ms.
 * Returns 1 if this node still holds the grant's key and its counter was below the token and is now raised to it;
 * 0 otherwise (the key is gone, or the counter is already at or past the token: someone else raised it).
 */
export const MINT = new LuaScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local fence = redis.call('GET', KEYS[2])
if fence and tonumber(fence) >= tonumber(ARGV[2]) then return 0 end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1
`);

/**
 * The value of a key a renewal set again: `<ownership token> r` (tokens have no spaces). It is the lease's (release
 * deletes it, renewal extends it) but proves nothing about the time it was missing, so renewals answer it as
 * `retaken` until a renewal confirmed by a majority of plain keys marks it plain again ({@link CONFIRM}). Stored as
 * the plain token, the next renewal counted it as `extended`: a renewal left undecided (its replies late) re-took the
 * keys a rival had held and let go, and the next one was confirmed by them.
 */
const RETAKEN = `owner .. ' r'`;

/**
 * Renews a batch. KEYS: lock and fence of each lease, in pairs. ARGV: counter retention ms, retake flag ('1' or
 * '0'), then the ttl ms, ownership token and fencing token of each lease, in threes. Per lease: 1 = extended (the
 * key was present and ours); 2 = retaken (the key was gone, e.g. the node restarted empty: set again, marked, counter
 * raised to the grant's token, so the grant's majority heals before a second node restarts, but it proves nothing
 * about the time between; or a marked key, extended); 3 = gone and not retaken (flag '0'); 0 = another owner holds it.
 */
export const RENEW = new LuaScript(`${SEED}
local out = {}
for i = 1, #KEYS / 2 do
  local lock, fence = KEYS[2 * i - 1], KEYS[2 * i]
  local ttl, owner, token = ARGV[3 * i], ARGV[3 * i + 1], ARGV[3 * i + 2]
  local current = redis.call('GET', lock)
  if current == owner or current == ${RETAKEN} then
    redis.call('PEXPIRE', lock, ttl)
    redis.call('PEXPIRE', fence, ARGV[1])
    out[i] = current == owner and 1 or 2
  elseif current then
    out[i] = 0
  elseif ARGV[2] == '1' then
    redis.call('SET', lock, ${RETAKEN}, 'PX', ttl)
    local value = redis.call('GET', fence) or seed()
    if tonumber(value) < tonumber(token) then value = token end
    redis.call('SET', fence, value, 'PX', ARGV[1])
    out[i] = 2
  else
    out[i] = 3
  end
end
return out
`);

/**
 * KEYS: lock. ARGV: ownership token, release channel, notice (the fencing token; empty: announce nothing).
 * Owner-checked delete, announced on the channel (never with the ownership token, which proves ownership). 1: the
 * lease's plain key was deleted; 2: its re-taken key (see {@link RETAKEN}) was, which proves nothing; 0: another
 * owner's key is there; 3: no key.
 */
export const RELEASE = new LuaScript(`
local owner = ARGV[1]
local current = redis.call('GET', KEYS[1])
if current == owner or current == ${RETAKEN} then
  redis.call('DEL', KEYS[1])
  if ARGV[3] ~= '' then redis.call('PUBLISH', ARGV[2], ARGV[3]) end
  return current == owner and 1 or 2
end
if current then return 0 end
return 3
`);

/**
 * KEYS: lock of each lease. ARGV: ownership token of each. Marks a re-taken key plain again, after a renewal that a
 * majority of plain keys confirmed: from that renewal on, the key has been the lease's without a gap.
 */
export const CONFIRM = new LuaScript(`
for i = 1, #KEYS do
  local owner = ARGV[i]
  if redis.call('GET', KEYS[i]) == ${RETAKEN} then redis.call('SET', KEYS[i], owner, 'KEEPTTL') end
end
return 0
`);

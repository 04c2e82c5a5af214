// The Lua scripts, running them (EVALSHA with a NOSCRIPT fallback), the key space, and the ACL check.
#include "redis_common.hpp"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cstring>

namespace dlock::redis_common {

std::string script::sha1() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return sha1_;
}

void script::learn_sha1(const std::string& sha) const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (sha1_known_.load(std::memory_order_relaxed)) return;  // a script's SHA1 never changes
    sha1_ = sha;
    sha1_known_.store(true, std::memory_order_release);
}

namespace {

// The grant of a free lock, shared by the acquire scripts: grant(before_set) checks and bumps the
// fence key (next_token, which the shared and permit scripts use alone), runs `before_set` (or
// nothing), then sets the lock key. KEYS[1] lock, KEYS[2] fence;
// ARGV[1] owner, ARGV[2] ttl ms.
// The lock key is written last, after every check passed, because a script's writes before an
// error are not undone: GET raises WRONGTYPE on a lock key of another type (an error, never
// "held"); the fence key must hold digits only (Lua's tonumber would also take "1.5", " 7" or
// "-3"), and INCR, run before the SET, refuses what is left (leading zeros, a value that would
// overflow) — so a lock is never set without its token. (The seed in grant() is the only earlier
// write; INCR cannot fail on it.)
// A missing fence key (a name's first lock, or a server that restarted without its data) is seeded
// with the server's TIME in microseconds before INCR: tokens then keep rising across a loss of
// the data, as long as the server's clock does not go back and fewer than one lock per microsecond
// was taken since the previous seed. Starting again at 1 would let a resource that saw the old
// tokens accept a stale holder's writes (docs/design/faults.md §6, restart delayed past the ttl).
const char* const grant_lua = R"lua(
local function corrupt_fence(key, why)
  return redis.error_reply('WRONGTYPE dlock fence key ' .. key .. ' does not hold a token (' .. why .. ')')
end
local function next_token(key)
  local fence = redis.call('GET', key)
  if fence then
    if not string.match(fence, '^%d+$') then return nil, 'not a decimal integer' end
  else
    local now = redis.call('TIME')
    redis.call('SET', key, now[1] .. string.format('%06d', tonumber(now[2])))
  end
  local token = redis.pcall('INCR', key)
  if type(token) == 'table' and token.err then return nil, token.err end
  return token
end
local function grant(before_set)
  local token, why = next_token(KEYS[2])
  if not token then return corrupt_fence(KEYS[2], why) end
  if before_set then before_set() end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, token}
end
)lua";

// The waiter queue of a lock: KEYS[3] maps each waiting owner token to its arrival (server time,
// µs), KEYS[4] to the server time (ms) its entry lapses unless the waiter renews it by retrying.
// drop_lapsed removes lapsed entries (a waiter that died or gave up without leaving): at most 100
// per call, so a script's cost stays bounded; true when it removed any. wake_next publishes on the first waiter's channel
// (prefix .. owner), and gives it claim_ms to take the lock before its entry lapses. A first
// waiter nobody hears on its channel (its client died and its connection with it) is dropped and
// the next one woken instead, up to 10 in one call — unless it queued less than claim_ms ago: a
// waiter subscribes only after its first attempt queued it, and retries once it has, so it is kept.
// A first waiter that is heard may still never come (a paused process keeps its connection, and
// redlock's per-thread channel stays subscribed after its wait), so the waiter after it, the
// standby, is told too (the message 'standby', redis_common.hpp standby_message): it retries when
// the first one's claim lapses unless woken before, and then takes over, its retry dropping the
// lapsed entry. (A live
// waiter dropped, its pub/sub connection being restored, queues again at the back with its next
// retry, which follows the restored subscription at once.) `caller` (or nil) is the waiter whose
// own script runs this: it is awake, and never published to.
// wake_first(n, …) does the same for the first n waiters (a semaphore's free permits; a reader
// at the head): each is woken with its claim, one nobody hears and older than a claim is dropped
// (at most 10), and the waiter after them is woken as their standby. With `only_unwoken` (a
// waiter's retry that found the first ones still asleep) it wakes only those whose entries lapse
// later than a claim from now — nobody woke them since they last retried — giving each its claim
// whether heard or not (a retry drops nobody: an entry nobody hears lapses after its claim), and
// wakes the standby only when it woke one.
// wake_sleeping_head: called by a waiter's retry that found the lock free to others queued first;
// wakes the first waiter with its claim (and hints its standby) unless it was woken and has not
// retried since (its entry lapses within a claim). It was made first without being woken: the
// entry before it lapsed, shared holders left (a shared release on redlock wakes nobody by name),
// or the holder's key expired.
const char* const queue_lua = R"lua(
local function server_time()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function drop_lapsed(now)
  local lapsed = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, 100)
  if #lapsed > 0 then
    redis.call('ZREM', KEYS[3], unpack(lapsed))
    redis.call('ZREM', KEYS[4], unpack(lapsed))
    return true
  end
  return false
end
-- Wakes `member` and gives it claim_ms: true when it is heard or young enough to be kept.
local function wake_member(member, arrival_us, now, now_us, claim_ms, prefix)
  local heard = redis.call('PUBLISH', prefix .. member, 'next') > 0
  if not heard and now_us - tonumber(arrival_us) >= claim_ms * 1000 then return false, false end
  local lapses = tonumber(redis.call('ZSCORE', KEYS[4], member))
  if lapses == nil or lapses > now + claim_ms then redis.call('ZADD', KEYS[4], now + claim_ms, member) end
  return true, heard
end
local function wake_standby(rank, prefix, caller)
  local standby = redis.call('ZRANGE', KEYS[3], rank, rank)[1]
  if standby and standby ~= caller then redis.call('PUBLISH', prefix .. standby, 'standby') end
end
local function wake_next(now, now_us, claim_ms, prefix, caller)
  for _ = 1, 10 do
    local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
    if #first == 0 or first[1] == caller then return end
    if wake_member(first[1], first[2], now, now_us, claim_ms, prefix) then
      wake_standby(1, prefix, caller)
      return
    end
    redis.call('ZREM', KEYS[3], first[1])
    redis.call('ZREM', KEYS[4], first[1])
  end
end
-- Queues member at score (keep_earlier_score: one already queued keeps its place), lapsing keep ms
-- from now; the queue's keys live at least that long.
local function queue_member(member, score, keep, now, keep_earlier_score)
  if keep_earlier_score then redis.call('ZADD', KEYS[3], 'NX', score, member) else redis.call('ZADD', KEYS[3], score, member) end
  redis.call('ZADD', KEYS[4], now + keep, member)
  if redis.call('PTTL', KEYS[4]) < keep then
    redis.call('PEXPIRE', KEYS[3], keep)
    redis.call('PEXPIRE', KEYS[4], keep)
  end
end
local function enqueue(member, now, now_us, wait_ms, grace_ms)
  queue_member(member, now_us, math.max(wait_ms, 0) + grace_ms, now, true)
end
-- ms until the soonest lapse among the first `count` (at most 100) waiters; 0 when none queue.
local function soonest_lapse_in(count, now)
  local soonest
  for _, m in ipairs(redis.call('ZRANGE', KEYS[3], 0, math.min(count, 100) - 1)) do
    local lapses = tonumber(redis.call('ZSCORE', KEYS[4], m))
    if lapses and (soonest == nil or lapses < soonest) then soonest = lapses end
  end
  return soonest and math.max(0, soonest - now) or 0
end
local function first_lapses_in(now)
  return soonest_lapse_in(1, now)
end
-- ms until the last waiter's entry lapses; -1 when nobody queues.
local function last_lapse_in(now)
  local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
  return last[2] and tonumber(last[2]) - now or -1
end
-- Publishes on `member`'s channel and gives it claim_ms, heard or not (its entry then lapses
-- within a claim, and the next retry of anyone drops it if it did not come).
local function nudge_member(member, now, claim_ms, prefix)
  redis.call('PUBLISH', prefix .. member, 'next')
  redis.call('ZADD', KEYS[4], now + claim_ms, member)
end
local function wake_first(n, now, now_us, claim_ms, prefix, caller, only_unwoken)
  if n <= 0 then return end
  local rank, dropped, woke = 0, 0, false
  n = math.min(n, 100)
  while rank < n and dropped < 10 do
    local entry = redis.call('ZRANGE', KEYS[3], rank, rank, 'WITHSCORES')
    if #entry == 0 then return end
    local lapses = only_unwoken and tonumber(redis.call('ZSCORE', KEYS[4], entry[1]))
    if entry[1] == caller or (lapses and lapses <= now + claim_ms) then
      rank = rank + 1
    elseif only_unwoken then
      nudge_member(entry[1], now, claim_ms, prefix)
      rank, woke = rank + 1, true
    else
      local kept, heard = wake_member(entry[1], entry[2], now, now_us, claim_ms, prefix)
      if kept then
        rank, woke = rank + 1, true
        if not heard then n = n + 1 end
      else
        redis.call('ZREM', KEYS[3], entry[1])
        redis.call('ZREM', KEYS[4], entry[1])
        dropped = dropped + 1
      end
    end
  end
  if woke or not only_unwoken then wake_standby(rank, prefix, caller) end
end
local function wake_sleeping_head(now, now_us, claim_ms, prefix, caller)
  local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if not first or first == caller then return end
  local lapses = tonumber(redis.call('ZSCORE', KEYS[4], first))
  if lapses == nil or lapses > now + claim_ms then
    nudge_member(first, now, claim_ms, prefix)
    wake_standby(1, prefix, caller)
  end
end
)lua";

// The lock key KEYS[1] holds the exclusive holder's owner token (a string), or the shared holders
// (a sorted set of "<owner>:<fencing token>" scored by the server time, ms, each lease ends); the
// key expires with its longest-lived holder. A shared holder is queued as "s:<owner>". GET on the
// set fails with WRONGTYPE: the exclusive scripts read the key with pcall, so the check they always
// made finds it held, at no extra command.
// A token goes into a member through string.format('%d'): Lua's own number-to-text keeps only 14
// significant digits, and tokens (seeded with the server time in µs) have 16.
// lock_holder(now): the owner token, true when live shared holders exist, false when free (a set
// of expired holders only is deleted). writer_ahead(member): an exclusive waiter queues before
// `member` (anywhere in the queue when `member` is not queued). It reads the entries before
// `member` from the head, 100 at a time, and at most 1 000 of them (a script's cost stays
// bounded): when 1 000 or more are before it, it answers true, so a reader that far back waits as
// if behind a writer until the queue before it is shorter — never overtaking one. (Entries of `member`'s own score
// that sort before it, by member, are before it too.)
// wake_reader_at_head: a shared waiter first in the queue is woken (it can join the holders).
const char* const shared_lua = R"lua(
local function lock_holder(now)
  local v = redis.pcall('GET', KEYS[1])
  if type(v) ~= 'table' then return v end
  if #redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'LIMIT', 0, 1) > 0 then return true end
  redis.call('DEL', KEYS[1])
  return false
end
local function writer_ahead(member)
  local mine = redis.call('ZSCORE', KEYS[3], member)
  for offset = 0, 900, 100 do
    local ahead
    if mine then
      ahead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. mine, 'LIMIT', offset, 100)
    else
      ahead = redis.call('ZRANGE', KEYS[3], offset, offset + 99)
    end
    for _, m in ipairs(ahead) do
      if string.sub(m, 1, 2) ~= 's:' then return true end
    end
    if #ahead < 100 then
      if mine then
        for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], mine, mine, 'LIMIT', 0, 100)) do
          if m < member and string.sub(m, 1, 2) ~= 's:' then return true end
        end
      end
      return false
    end
  end
  return true
end
local function wake_reader_at_head(now, now_us, claim_ms, prefix)
  local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if first and string.sub(first, 1, 2) == 's:' then wake_first(1, now, now_us, claim_ms, prefix) end
end
local function drop_expired_members(now)
  local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '(-inf', now, 'LIMIT', 0, 100)
  if #expired > 0 then redis.call('ZREM', KEYS[1], unpack(expired)) end
end
-- The key lives as long as its longest-lived member, and at least `floor_ms`; gone when nothing is left.
local function expire_with_members(now, floor_ms)
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  local keep = floor_ms
  if last[1] and string.sub(last[1], 1, 6) ~= 'limit:' then keep = math.max(keep, tonumber(last[2]) - now) end
  if keep > 0 and #last > 0 then redis.call('PEXPIRE', KEYS[1], math.ceil(keep))
  else redis.call('DEL', KEYS[1]) end
end
)lua";

// A semaphore's key KEYS[1] is a sorted set of its permits, "<owner>:<fencing token>" scored by the
// server time (ms) each lease ends, and of its limit, the member "limit:<N>" scored -inf (so the
// limit lives exactly as long as the set: while a permit or a waiter lasts). KEYS[2..5] are the
// semaphore's fence, waiter queue, queue lapses and channel, as a lock's.
const char* const semaphore_lua = R"lua(
local function stored_limit()
  local m = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '-inf', 'LIMIT', 0, 1)[1]
  return m and tonumber(string.sub(m, 7))
end
local function live_members(now)
  return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
end
local function permits_free(now)
  local limit = stored_limit()
  if not limit then return 0 end
  return limit - #live_members(now)
end
)lua";

}  // namespace

// A lock key holding shared holders (a sorted set: GET fails with WRONGTYPE) is held too: then
// the reply says so, {0, pttl, 1}. A key of any other type is not dlock's: ZCARD raises WRONGTYPE
// for it, so the caller hears "another type", never "held".
static const std::string acquire_source = std::string(grant_lua) + R"lua(
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' then
  redis.call('ZCARD', KEYS[1])
  return {0, redis.call('PTTL', KEYS[1]), 1}
elseif holder then
  return {0, redis.call('PTTL', KEYS[1])}
end
return grant(nil)
)lua";
const script acquire_script(acquire_source.c_str());

// ARGV[3] mode: 0 barging (the queue is ignored), 1 fair try (granted only when nobody queues or
// we are first), 2 fair wait (as 1, and when not granted, queue us or renew our entry, which then
// lapses ARGV[4] ms after the retry time returned). ARGV[5] claim_ms, ARGV[6] the waiters' channel
// prefix: a fair try that finds the lock free but others first wakes the first waiter if nobody
// did (wake_sleeping_head). Not granted: {0, ms until the holder's key expires (-1: it has no
// expiry), or until the first waiter's entry lapses when the lock is free, 1 when held | 0 when
// free but others queue first}.
// The queue's keys expire with their longest-lived entry, so a queue nobody visits again vanishes.
// The uncontended case (a free lock, nobody queued) is decided first, before the queue's functions
// are defined (defining them costs the server more than a command), and costs one ZRANGE more
// than acquire_script; the server time is read only when needed.
static const std::string queue_acquire_source = std::string(grant_lua) + R"lua(
local mode = tonumber(ARGV[3])
local first
if mode > 0 then first = redis.call('ZRANGE', KEYS[3], 0, 0)[1] end
local held = redis.pcall('GET', KEYS[1])
if not held and not first then return grant(nil) end
)lua" + queue_lua + shared_lua + R"lua(
local now, now_us
if first then
  now, now_us = server_time()
  if drop_lapsed(now) then first = redis.call('ZRANGE', KEYS[3], 0, 0)[1] end
end
if type(held) == 'table' then
  if not now then now, now_us = server_time() end
  held = lock_holder(now)
end
if not held and mode > 0 and first and first ~= ARGV[1] then
  wake_sleeping_head(now, now_us, tonumber(ARGV[5]), ARGV[6], ARGV[1])
  first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
end
if not held and (mode == 0 or first == nil or first == ARGV[1]) then
  return grant(function()
    if first == ARGV[1] then
      redis.call('ZREM', KEYS[3], ARGV[1])
      redis.call('ZREM', KEYS[4], ARGV[1])
    end
  end)
end
if not now then now, now_us = server_time() end
local wait_ms
if held then
  wait_ms = redis.call('PTTL', KEYS[1])
else
  wait_ms = first_lapses_in(now)
end
if mode == 2 then enqueue(ARGV[1], now, now_us, wait_ms, tonumber(ARGV[4])) end
return {0, wait_ms, held and 1 or 0}
)lua";
const script queue_acquire_script(queue_acquire_source.c_str());

// PUBLISH before DEL: if the user may not publish on the channel (an ACL changed after open), the
// script fails before it deleted anything, so the release is refused whole — never half done with
// the lock gone and the caller told it failed. Waiters woken by the message run after the script.
const script release_script(R"lua(
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('PUBLISH', KEYS[3], 'released')
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
)lua");

// As release_script (the broadcast channel, KEYS[5], still wakes barging waiters), and wakes the
// first queued waiter (wake_next). DEL last: see release_script.
// -> 1 released | 0 gone (no key) | -1 another holder's (a value, a set of shared holders) |
// -3 a break's tombstone. A retry of a release whose answer was lost says RELEASED for 0 and -1
// (the lost attempt may have deleted the key, and a waiter it woke taken the name); -3 proves the
// lost attempt did not run (a break found our key, or a later holder's).
// Nobody queued (the uncontended case): released before the queue's functions are defined.
static const std::string queue_release_source = R"lua(
local v = redis.pcall('GET', KEYS[1])  -- a set (shared holders) is an error reply: not ours either
if v ~= ARGV[1] then return v == ')lua" DLOCK_REDIS_BREAK_TOMBSTONE R"lua(' and -3 or v and -1 or 0 end
redis.call('PUBLISH', KEYS[5], 'released')
if redis.call('ZRANGE', KEYS[3], 0, 0)[1] == nil then
  redis.call('DEL', KEYS[1])
  return 1
end
)lua" + std::string(queue_lua) + R"lua(
local now, now_us = server_time()
drop_lapsed(now)
wake_next(now, now_us, tonumber(ARGV[2]), ARGV[3])
redis.call('DEL', KEYS[1])
return 1
)lua";
const script queue_release_script(queue_release_source.c_str());

// A queued waiter (ARGV[1] its queue entry) leaves without the lock; the waiters it held up are
// woken: of a lock, the first waiter when the lock is free, or a shared waiter now first while
// shared holders hold it; of a semaphore (ARGV[4] == 'semaphore'), as many as there are free
// permits, and the set's key then lives as long as its longest-lived permit or waiter (gone, with
// the limit, when neither is left). (The one leaving may have been woken for them.) -> 1 when
// the entry was there, else 0.
static const std::string leave_queue_source = std::string(queue_lua) + shared_lua + semaphore_lua + R"lua(
local removed = redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
local now, now_us = server_time()
local claim_ms = tonumber(ARGV[2])
if ARGV[4] == 'semaphore' then
  drop_lapsed(now)
  wake_first(permits_free(now), now, now_us, claim_ms, ARGV[3])
  expire_with_members(now, last_lapse_in(now))  -- the limit goes with the last waiter, if no permit is live
else
  local holder = lock_holder(now)
  if not holder then
    drop_lapsed(now)
    wake_next(now, now_us, claim_ms, ARGV[3])
  elseif holder == true then
    wake_reader_at_head(now, now_us, claim_ms, ARGV[3])
  end
end
return removed
)lua";
const script leave_queue_script(leave_queue_source.c_str());

// A shared hold of the lock. KEYS lock, fence, queue, queue_lapses; ARGV owner, ttl_ms, mode (as
// queue_acquire_script), entry_grace_ms, claim_ms, waiter_channel_prefix, and ARGV[7] 'untokened'
// (redlock: the member's token is 0 and the fence key is not touched). Granted when nobody
// holds the lock exclusively and (mode 0) or no exclusive waiter queues before this one (FIFO
// between shared and exclusive waiters: a queued writer stops new readers; readers in a row are
// admitted together, each granted one waking the next). A fair waiter refused while the lock is
// free, or held shared with a reader first, wakes the first waiter if nobody did
// (wake_sleeping_head; not on redlock, whose prefix is "": its queue holds only writers' marks;
// there a reader refused by marks while the lock is free shortens them, shorten_marks, and waits
// until the first one lapses: ARGV[5] is, on redlock, the time it shortens them to).
// -> {1, fence} | {0, ms to wait at most, 1 held | 0 free but others queue first}.
static const std::string shared_acquire_source = std::string(grant_lua) + queue_lua + shared_lua + R"lua(
-- Redlock (no waiter channels; the queue holds only waiting writers' marks): a reader kept from a
-- free lock by marks cuts the first 100 to keep_ms (ARGV[5]: a claim + 2 x command_timeout +
-- retry_delay, no less than a live writer's longest interval between two marks): each then lapses
-- within keep_ms unless its writer marks again, which a live one does with the round it runs on
-- hearing the same release (or at the latest when its sleep, shorter than its mark, ends). A paused
-- writer's mark thus stops readers from a free lock for keep_ms, not for its holders' ttl.
local function shorten_marks(now, keep_ms)
  for _, m in ipairs(redis.call('ZRANGE', KEYS[3], 0, 99)) do
    local lapses = tonumber(redis.call('ZSCORE', KEYS[4], m))
    if lapses and lapses > now + keep_ms then redis.call('ZADD', KEYS[4], now + keep_ms, m) end
  end
end
local mode = tonumber(ARGV[3])
local me = 's:' .. ARGV[1]
local ttl = tonumber(ARGV[2])
local now, now_us = server_time()
if mode > 0 then drop_lapsed(now) end
local holder = lock_holder(now)
local blocked = holder and holder ~= true
if not blocked and mode > 0 then
  blocked = writer_ahead(me)
  -- Others first may take a free lock (or join the shared holders, if a reader is first).
  if blocked and ARGV[6] ~= '' then
    local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if not holder or string.sub(first, 1, 2) == 's:' then wake_sleeping_head(now, now_us, tonumber(ARGV[5]), ARGV[6], me) end
  elseif blocked and not holder then
    shorten_marks(now, tonumber(ARGV[5]))  -- redlock: writers' marks keep this reader from a free lock
  end
end
if not blocked then
  local token, why = 0, nil
  if ARGV[7] ~= 'untokened' then token, why = next_token(KEYS[2]) end  -- redlock: no token, no INCR
  if not token then return corrupt_fence(KEYS[2], why) end
  if holder == true then drop_expired_members(now) end
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1] .. ':' .. string.format('%d', token))
  if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
  if redis.call('ZREM', KEYS[3], me) == 1 then
    redis.call('ZREM', KEYS[4], me)
    wake_reader_at_head(now, now_us, tonumber(ARGV[5]), ARGV[6])
  end
  return {1, token}
end
local wait_ms
if holder then wait_ms = redis.call('PTTL', KEYS[1]) else wait_ms = first_lapses_in(now) end
if mode == 2 then enqueue(me, now, now_us, wait_ms, tonumber(ARGV[4])) end
return {0, wait_ms, holder and 1 or 0}
)lua";
const script shared_acquire_script(shared_acquire_source.c_str());

// Redlock's waiter queue, one per node, whose order the nodes agree on: each waiter enqueues with
// the same score (its arrival time, chosen once by its client) and the same member on every node,
// and a sorted set orders equal scores by member, so every node that holds the same entries has the
// same first waiter. A free node grants only to its first waiter (or to anyone when nobody queues);
// a refused waiter (re-)enqueues wherever it is refused, so an entry missing on some nodes is back
// after that waiter's next round. Only the lock key's quorum decides who holds the lock: the queue
// orders the grants, it never grants by itself.
// KEYS lock, fence, queue, queue_lapses. ARGV value (the round's), ttl_ms, member, score, mode (0
// barging try, 1 fair try, 2 fair wait: queues us, 3 barging wait: grants whatever queues, queues
// us when refused), entry_grace_ms, claim_ms, the waiters' channel prefix.
// A fair round refused while the lock is free wakes the first waiter if nobody did
// (wake_sleeping_head: shared holders' releases wake nobody by name).
// -> {1, 0} | {0, ms until the holder's key expires (-1: no expiry) or, when the lock is free,
// until the first waiter's entry lapses, 1 held by shared holders | 0, 1 held | 0, the server's
// time in µs (the client keeps its scores on the nodes' clock with it)}.
// An empty queue and a free lock (the uncontended case) cost one ZRANGE more than acquire_script,
// and are granted before the queue's functions are defined (defining them costs the server more
// than a command).
// Redlock issues no fencing token (each node's counter counts only the grants that reached it, so a
// quorum's counters are not monotonic across holders): its grant sets the key and bumps no counter
// (KEYS[2] is read by no redlock script), answering the token 0.
static const std::string redlock_acquire_source = std::string(R"lua(
local function grant(before_set)
  if before_set then before_set() end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, 0}
end
local mode = tonumber(ARGV[5])
local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
local holder  -- nil until read
if not first then
  holder = redis.pcall('GET', KEYS[1])
  if not holder then return grant(nil) end
end
)lua") + queue_lua + shared_lua + R"lua(
local now, now_us = server_time()
if first then
  drop_lapsed(now)
  first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
end
if holder == nil then holder = redis.pcall('GET', KEYS[1]) end
if type(holder) == 'table' then holder = lock_holder(now) end
local fair = mode == 1 or mode == 2
if not holder and fair and first and first ~= ARGV[3] then
  wake_sleeping_head(now, now_us, tonumber(ARGV[7]), ARGV[8], ARGV[3])
  first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
end
if not holder and (not fair or first == nil or first == ARGV[3]) then
  return grant(function()
    if first and redis.call('ZREM', KEYS[3], ARGV[3]) == 1 then redis.call('ZREM', KEYS[4], ARGV[3]) end
  end)
end
local wait_ms
if holder then wait_ms = redis.call('PTTL', KEYS[1]) else wait_ms = first_lapses_in(now) end
if mode >= 2 then queue_member(ARGV[3], ARGV[4], math.max(wait_ms, 0) + tonumber(ARGV[6]), now, false) end
return {0, wait_ms, holder == true and 1 or 0, holder and 1 or 0, now_us}
)lua";
const script redlock_acquire_script(redlock_acquire_source.c_str());

// Redlock's release of an exclusive hold on one node, also used to give back what a failed round
// got. KEYS lock, fence, queue, queue_lapses, channel; ARGV value, claim_ms, waiter_channel_prefix,
// member, score, entry_grace_ms, 'release' | 'give back'.
// A holder's release ('release') removes the holder's entry where it is still queued with this
// acquisition's score: the nodes that refused its winning round queued it, and that stale entry
// would stand first there. A failed round's give-back ('give back') puts the waiter back in the
// queue with its own score (the grant removed its entry), so it keeps its place there. Then the
// first waiter is woken unless it is the one giving back, which retries anyway; the broadcast
// channel still wakes shared waiters. -> 1 released | 0 gone (no key) | -1 another holder's (a
// value, shared holders' set) | -3 a break's tombstone: as queue_release_script. DEL last: see release_script.
// Nobody queued (the uncontended case): released before the queue's functions are defined.
static const std::string redlock_release_source = R"lua(
local giving_back = ARGV[7] == 'give back'
local queued = redis.call('ZRANGE', KEYS[3], 0, 0)[1] ~= nil
if not queued and not giving_back then
  local v = redis.pcall('GET', KEYS[1])
  if v ~= ARGV[1] then return v == ')lua" DLOCK_REDIS_BREAK_TOMBSTONE R"lua(' and -3 or v and -1 or 0 end
  redis.call('PUBLISH', KEYS[5], 'released')
  redis.call('DEL', KEYS[1])
  return 1
end
)lua" + std::string(queue_lua) + R"lua(
if queued and not giving_back and ARGV[4] ~= '' and tonumber(redis.call('ZSCORE', KEYS[3], ARGV[4])) == tonumber(ARGV[5]) then
  redis.call('ZREM', KEYS[3], ARGV[4])
  redis.call('ZREM', KEYS[4], ARGV[4])
end
local v = redis.pcall('GET', KEYS[1])
if v ~= ARGV[1] then return v == ')lua" DLOCK_REDIS_BREAK_TOMBSTONE R"lua(' and -3 or v and -1 or 0 end
redis.call('PUBLISH', KEYS[5], 'released')
local now, now_us = server_time()
if giving_back and ARGV[4] ~= '' then queue_member(ARGV[4], ARGV[5], tonumber(ARGV[6]), now, false) end
drop_lapsed(now)
local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
if first and not (giving_back and first == ARGV[4]) then wake_next(now, now_us, tonumber(ARGV[2]), ARGV[3]) end
redis.call('DEL', KEYS[1])
return 1
)lua";
const script redlock_release_script(redlock_release_source.c_str());

// Redlock's writer preference without a queue of waiters: an exclusive waiter refused by the nodes
// marks itself waiting in each node's queue (a writer entry, ARGV[1], lapsing ARGV[2] ms from now
// unless marked again), which stops new shared holders there (shared_acquire_script in mode 1),
// and unmarks itself when it is done waiting. KEYS lock, fence, queue, queue_lapses.
static const std::string mark_waiting_writer_source = std::string(queue_lua) + R"lua(
local now, now_us = server_time()
drop_lapsed(now)
if ARGV[3] == 'unmark' then
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[4], ARGV[1])
else
  enqueue(ARGV[1], now, now_us, 0, tonumber(ARGV[2]))
end
return 1
)lua";
const script mark_waiting_writer_script(mark_waiting_writer_source.c_str());

// The member of a shared hold or a permit: ARGV[1] owner, ARGV[4] its fencing token, or "" when
// the grant's reply was lost (then found by owner among the members).
const char* const member_lua = R"lua(
local function find_member(owner, token)
  if token ~= '' then return owner .. ':' .. token end
  local all = redis.call('ZRANGE', KEYS[1], 0, -1)
  for _, m in ipairs(all) do
    if string.sub(m, 1, #owner + 1) == owner .. ':' then return m end
  end
  return nil
end
)lua";

// Releases a shared hold. KEYS lock, fence, queue, queue_lapses, channel; ARGV owner, claim_ms,
// waiter_channel_prefix ("": wake nobody), fencing token. -> 1 released | 0 gone (no key, or no
// member of ours in the set) | -1 another holder's (an exclusive holder's string at the key) |
// -2 our member present but expired (it is removed) | -3 a break's tombstone at the key. A retry of
// a release whose answer was lost says RELEASED for 0 and -1 (the lost attempt may have run, and a
// waiter it woke taken the name); -2 and -3 prove the lost attempt never ran. The last shared holder out wakes the first waiter.
static const std::string shared_release_source = std::string(queue_lua) + shared_lua + member_lua + R"lua(
local now, now_us = server_time()
local probe = redis.pcall('ZRANGE', KEYS[1], 0, 0)
if probe.err then return redis.call('GET', KEYS[1]) == ')lua" DLOCK_REDIS_BREAK_TOMBSTONE R"lua(' and -3 or -1 end  -- a string: a tombstone, or an exclusive holder's key
local member = find_member(ARGV[1], ARGV[4])
local score = member and redis.call('ZSCORE', KEYS[1], member)
if not score then return 0 end
redis.call('PUBLISH', KEYS[5], 'released')
redis.call('ZREM', KEYS[1], member)
if lock_holder(now) then
  expire_with_members(now, 0)
elseif ARGV[3] ~= '' then  -- '': no waiter listens on a channel of its own (redlock)
  drop_lapsed(now)
  wake_next(now, now_us, tonumber(ARGV[2]), ARGV[3])
end
return tonumber(score) > now and 1 or -2
)lua";
const script shared_release_script(shared_release_source.c_str());

// One permit of a semaphore. KEYS permits, fence, queue, queue_lapses; ARGV owner, ttl_ms, mode
// (as queue_acquire_script), entry_grace_ms, the limit N, claim_ms, waiters' channel prefix.
// Granted while fewer than N permits are live and (mode 0) or fewer waiters than free permits
// queue, or this one is among the first `free` of the queue. A fair waiter refused while permits
// are free wakes those of the first `free` waiters nobody woke (and their standby), and waits
// until the soonest of their claims lapses. -> {1, fence} | {0, ms to wait at most, 1 all permits
// held | 0 free ones go to waiters queued first} | {-1, the stored limit} when another limit
// stands. A stored limit that nobody holds or waits under any more (its permits expired, its
// waiters' entries lapsed or left) is no limit: the set is then dropped and this acquire's N stored.
static const std::string permit_acquire_source = std::string(grant_lua) + queue_lua + shared_lua + semaphore_lua + R"lua(
local mode = tonumber(ARGV[3])
local ttl = tonumber(ARGV[2])
local limit = tonumber(ARGV[5])
local now, now_us = server_time()
local stored = stored_limit()
if stored and stored ~= limit then
  drop_lapsed(now)
  if #live_members(now) > 0 or redis.call('ZRANGE', KEYS[3], 0, 0)[1] then return {-1, stored} end
  redis.call('DEL', KEYS[1])
end
drop_expired_members(now)
local free = limit - #live_members(now)
local ahead = {}
if mode > 0 then
  drop_lapsed(now)
  if free > 0 then
    ahead = redis.call('ZRANGE', KEYS[3], 0, free - 1)
    local mine = false
    for _, m in ipairs(ahead) do
      if m == ARGV[1] then mine = true end
    end
    if #ahead >= free and not mine then
      wake_first(free, now, now_us, tonumber(ARGV[6]), ARGV[7], ARGV[1], true)
      ahead = redis.call('ZRANGE', KEYS[3], 0, free - 1)
    end
  end
end
local admitted = free > 0 and (mode == 0 or #ahead < free)
if free > 0 and not admitted then
  for _, m in ipairs(ahead) do
    if m == ARGV[1] then admitted = true end
  end
end
if admitted then
  local token, why = next_token(KEYS[2])
  if not token then return corrupt_fence(KEYS[2], why) end
  redis.call('ZADD', KEYS[1], '-inf', 'limit:' .. limit)
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1] .. ':' .. string.format('%d', token))
  if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
  if redis.call('ZREM', KEYS[3], ARGV[1]) == 1 then redis.call('ZREM', KEYS[4], ARGV[1]) end
  return {1, token}
end
local wait_ms
if free <= 0 then
  local soonest = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  wait_ms = math.ceil(tonumber(soonest[2]) - now)
else
  wait_ms = soonest_lapse_in(free, now)
end
if mode == 2 then
  enqueue(ARGV[1], now, now_us, wait_ms, tonumber(ARGV[4]))
  redis.call('ZADD', KEYS[1], '-inf', 'limit:' .. limit)
  local keep = math.max(wait_ms, 0) + tonumber(ARGV[4])
  if redis.call('PTTL', KEYS[1]) < keep then redis.call('PEXPIRE', KEYS[1], keep) end
end
return {0, wait_ms, free <= 0 and 1 or 0}
)lua";
const script permit_acquire_script(permit_acquire_source.c_str());

// Releases a permit. KEYS permits, fence, queue, queue_lapses, channel; ARGV owner, claim_ms,
// waiter_channel_prefix, fencing token. -> 1 released | 0 gone (no set, or no member of ours:
// broken, or dropped once expired) | -2 our member present but expired (it is removed): as
// shared_release_script. Wakes as many waiters as permits are free.
static const std::string permit_release_source = std::string(queue_lua) + shared_lua + semaphore_lua + member_lua + R"lua(
local now, now_us = server_time()
local member = find_member(ARGV[1], ARGV[4])
local score = member and redis.call('ZSCORE', KEYS[1], member)
if not score then return 0 end
redis.call('PUBLISH', KEYS[5], 'released')
redis.call('ZREM', KEYS[1], member)
drop_lapsed(now)
wake_first(permits_free(now), now, now_us, tonumber(ARGV[2]), ARGV[3])
expire_with_members(now, last_lapse_in(now))
return tonumber(score) > now and 1 or -2
)lua";
const script permit_release_script(permit_release_source.c_str());

// Renews leases of every kind in one call. KEYS: each lease's key (a lock's or a semaphore's);
// ARGV per lease: kind ('x' exclusive: the owner token is the key's value; 's' shared or 'p'
// permit: the member is in the key's set), owner token or member (for 's' and 'p' an owner
// without ':' stands for its member, whatever its token on this server: redlock's case), ttl_ms. -> {1|0 ...}; a lease
// that ended (expired, broken, taken) is 0, and an expired member of ours is removed.
// The keys of one call belong to many names, so many hash slots: a Redis Cluster refuses such a
// script (CROSSSLOT). dlock has no cluster mode yet (issue 30): on a cluster the batch would have
// to be split by slot, one call per slot (docs/backends/redis.md, "Server requirements").
const script renew_holds_script(R"lua(
local now
local result = {}
for i, key in ipairs(KEYS) do
  local kind, member, ttl = ARGV[3 * i - 2], ARGV[3 * i - 1], tonumber(ARGV[3 * i])
  result[i] = 0
  if kind == 'x' then
    if redis.pcall('GET', key) == member then
      redis.call('PEXPIRE', key, ttl)
      result[i] = 1
    end
  else
    if not now then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    if not string.find(member, ':', 1, true) then  -- an owner (redlock's value): its member on this server
      local all = redis.pcall('ZRANGE', key, 0, -1)
      if not all.err then
        for _, m in ipairs(all) do
          if string.sub(m, 1, #member + 1) == member .. ':' then member = m end
        end
      end
    end
    local score = redis.pcall('ZSCORE', key, member)
    if type(score) == 'string' then
      if tonumber(score) > now then
        redis.call('ZADD', key, 'XX', now + ttl, member)
        if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
        result[i] = 1
      else
        redis.call('ZREM', key, member)
      end
    end
  end
end
return result
)lua");

// Every live holder of a lock (ARGV[1] 'lock': KEYS lock, fence) or of a semaphore ('semaphore':
// KEYS permits) -> a flat list of {kind 'x'|'s'|'p', owner, fencing token, ms left, limit} per holder.
static const std::string holders_source = std::string(queue_lua) + R"lua(
local now = server_time()
local kind = 'p'
if ARGV[1] == 'lock' then
  local v = redis.pcall('GET', KEYS[1])
  if type(v) == 'string' then
    return {'x', v, redis.call('GET', KEYS[2]) or '0', redis.call('PTTL', KEYS[1]), 0}
  elseif not v then
    return {}
  end
  kind = 's'
end
local out = {}
local limit = 0
local members = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #members, 2 do
  local m = members[i]
  if string.sub(m, 1, 6) == 'limit:' then
    limit = tonumber(string.sub(m, 7))
  elseif tonumber(members[i + 1]) > now then
    local owner, token = string.match(m, '^(.*):(%d+)$')
    if owner then
      for _, x in ipairs({kind, owner, token, math.floor(tonumber(members[i + 1]) - now), limit}) do table.insert(out, x) end
    end
  end
end
return out
)lua";
const script holders_script(holders_source.c_str());

// An administrator's break: removes every holder of a lock (ARGV[1] 'lock') or every permit of a
// semaphore ('semaphore'). KEYS key, fence, queue, queue_lapses, channel; ARGV what, claim_ms,
// waiter_channel_prefix, and ARGV[4] 'tombstone' for a lock without fencing tokens (redlock).
// Needs UNLINK on the key, a command dlock's tenants are not granted (see
// docs/backends/redis.md, "Listing and breaking locks"), and for a tombstone SET too: refused with
// NOPERM before any write — from Redis 7.0 by the redis.acl_check_cmd guard (both commands: a
// script's writes are not rolled back, so UNLINK done and SET refused would leave the name free
// beside the broken holder), before it by the UNLINK itself, which every
// branch runs before it writes to the key (a tenant without it may only run the waiter queue's
// upkeep, drop_lapsed, as its own acquires do).
// Fenced by construction: every grant INCRs the fence key, so the next one is above every broken
// holder's token. -> the number of holders removed.
// 'tombstone' (redlock, no tokens): fenced by time instead. The holders' key becomes the string
// break_tombstone, expiring when the longest-lived holder's lease would have (the exclusive key's
// PTTL; a shared set's highest live score), so every acquire script finds the name held until then
// and its waiters sleep on that PTTL, as on a holder's; renewals and releases find their value or
// member gone. Nothing is published and nobody is woken: nothing is free before the tombstone
// expires. A tombstone is no holder, and a break leaves one as it is (count 0).
static const std::string break_source = std::string(queue_lua) + shared_lua + semaphore_lua + R"lua(
if redis.acl_check_cmd and not redis.acl_check_cmd('UNLINK', KEYS[1]) then
  return redis.error_reply('NOPERM this user may not break dlock locks: it may not run UNLINK on ' .. KEYS[1])
end
if redis.acl_check_cmd and ARGV[4] == 'tombstone' and not redis.acl_check_cmd('SET', KEYS[1], 'x', 'PX', '1') then
  return redis.error_reply('NOPERM this user may not break dlock locks: it may not run SET on ' .. KEYS[1])
end
local now, now_us = server_time()
local count = 0
local limit
local v = redis.pcall('GET', KEYS[1])
if ARGV[4] == 'tombstone' then
  if not v or v == ')lua" DLOCK_REDIS_BREAK_TOMBSTONE R"lua(' then return 0 end
  local ends = -1
  if type(v) == 'string' then
    count = 1
    ends = redis.call('PTTL', KEYS[1])
  else
    local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
    count = #live / 2
    if count > 0 then ends = math.ceil(tonumber(live[#live]) - now) end
  end
  -- UNLINK first, although SET alone would replace the key: it is the permission check on servers
  -- before Redis 7.0, which have no redis.acl_check_cmd (the guard above is skipped there). Every
  -- tenant may SET dlock's keys but not UNLINK them, so a tombstone written by SET alone would let
  -- any tenant break any lock there; a refused UNLINK fails the script before anything is written.
  -- The script is atomic: nobody sees the name free between the two.
  redis.call('UNLINK', KEYS[1])
  if ends > 0 then redis.call('SET', KEYS[1], ')lua" DLOCK_REDIS_BREAK_TOMBSTONE R"lua(', 'PX', ends) end
  return count
end
if type(v) == 'string' then
  count = 1
elseif v then
  limit = stored_limit()
  count = #live_members(now)
end
if v then
  redis.call('PUBLISH', KEYS[5], 'released')
  redis.call('UNLINK', KEYS[1])
end
drop_lapsed(now)
if ARGV[1] == 'semaphore' then
  local queued = redis.call('PTTL', KEYS[3])
  if limit and queued > 0 then
    redis.call('ZADD', KEYS[1], '-inf', 'limit:' .. limit)
    redis.call('PEXPIRE', KEYS[1], queued)
    wake_first(limit, now, now_us, tonumber(ARGV[2]), ARGV[3])
  end
else
  wake_next(now, now_us, tonumber(ARGV[2]), ARGV[3])
end
return count
)lua";
const script break_script(break_source.c_str());

// A lock held shared reports its longest-lived shared holder.
const script inspect_script(R"lua(
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' then
  local last = redis.call('ZRANGE', KEYS[1], -1, -1)[1]
  holder = last and string.match(last, '^(.*):%d+$') or false
end
return {holder, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
)lua");

std::vector<std::string> script_command(const script& s, bool by_source, const std::vector<std::string>& keys,
                                        const std::vector<std::string>& args) {
    script_call call(keys, args);
    const command_line& line = call.command(s, by_source);
    std::vector<std::string> cmd;
    cmd.reserve(line.count());
    for (size_t i = 0; i < line.count(); ++i) cmd.emplace_back(line.argv()[i], line.lengths()[i]);
    return cmd;
}

script_call::script_call(const std::vector<std::string>& keys, const std::vector<std::string>& args) : script_call() {
    for (const auto& k : keys) key(k);
    for (const auto& a : args) arg(a);
}

script_call& script_call::key(std::string_view k) {
    line_.add(k);
    ++keys_;
    return *this;
}

script_call& script_call::arg(std::string_view a) {
    line_.add(a);
    return *this;
}

script_call& script_call::arg(int64_t n) {
    if (numbers_used_ < sizeof numbers_ / sizeof numbers_[0]) {
        char* text = numbers_[numbers_used_++];
        return arg(std::string_view(text, size_t(std::to_chars(text, text + sizeof numbers_[0], n).ptr - text)));
    }
    more_numbers_.push_back(std::to_string(n));
    return arg(more_numbers_.back());
}

const command_line& script_call::command(const script& s, bool by_source) {
    const std::string* sha = by_source ? nullptr : s.known_sha1();
    line_.set(0, sha ? "EVALSHA" : "EVAL");
    line_.set(1, sha ? std::string_view(*sha) : std::string_view(s.source()));
    line_.set(2, std::string_view(key_count_, size_t(std::to_chars(key_count_, key_count_ + sizeof key_count_, keys_).ptr - key_count_)));
    return line_;
}

reply_ptr run_script(connection& c, const script& s, script_call& call) {
    reply_ptr r = c.command(call.command(s, false));
    if (r->type == REDIS_REPLY_ERROR && std::strncmp(r->str, "NOSCRIPT", 8) == 0)
        r = c.command(call.command(s, true));  // the server lost its script cache
    if (r->type == REDIS_REPLY_ERROR) throw classify_error_reply(c.where().text(), std::string(r->str, r->len));
    return r;
}

reply_ptr run_script(connection& c, const script& s, const std::vector<std::string>& keys,
                     const std::vector<std::string>& args) {
    script_call call(keys, args);
    return run_script(c, s, call);
}

lock_keys keys_for(const std::string& prefix, const std::string& name) {
    std::string tag;
    tag.reserve(name.size());
    for (unsigned char c : name) {
        if (c == '{' || c == '}' || c == '%') tag += fmt::format("%{:02X}", c);
        else tag += char(c);
    }
    const std::string base = prefix + "{" + tag + "}";
    return {base + ":lock", base + ":fence", base + ":released", base + ":queue", base + ":queue-lapses", base + ":waiter:"};
}

lock_keys semaphore_keys_for(const std::string& prefix, const std::string& name) {
    const lock_keys lock = keys_for(prefix, name);
    const std::string base = lock.lock.substr(0, lock.lock.size() - std::strlen(":lock"));
    return {base + ":permits", base + ":permits-fence", base + ":permits-released", base + ":permits-queue",
            base + ":permits-queue-lapses", base + ":permits-waiter:"};
}

std::optional<std::pair<std::string, bool>> name_of_key(const std::string& prefix, const std::string& key) {
    if (key.size() < prefix.size() + 2 || key.compare(0, prefix.size(), prefix) != 0 || key[prefix.size()] != '{')
        return std::nullopt;
    const size_t close = key.find('}', prefix.size() + 1);
    if (close == std::string::npos) return std::nullopt;
    const std::string suffix = key.substr(close + 1);
    if (suffix != ":lock" && suffix != ":permits") return std::nullopt;
    std::string name;
    for (size_t i = prefix.size() + 1; i < close; ++i) {
        if (key[i] != '%') {
            name += key[i];
            continue;
        }
        if (i + 2 >= close) return std::nullopt;
        const int hi = std::isxdigit(static_cast<unsigned char>(key[i + 1])) ? std::stoi(key.substr(i + 1, 2), nullptr, 16) : -1;
        if (hi < 0 || !std::isxdigit(static_cast<unsigned char>(key[i + 2]))) return std::nullopt;
        name += char(hi);
        i += 2;
    }
    return std::make_pair(name, suffix == ":permits");
}

namespace {

// Each command dlock runs, with sample arguments on the probe keys, that the current user may not
// run: "SUBSCRIBE <channel>" etc. False (not a list) on a server without redis.acl_check_cmd
// (before Redis 7), where there is nothing to ask.
const char* const permissions_probe = R"lua(
if not redis.acl_check_cmd then return false end
local denied = {}
local function need(what, ...)
  if not redis.acl_check_cmd(...) then table.insert(denied, what) end
end
need('EVALSHA ' .. KEYS[1], 'EVALSHA', '0000000000000000000000000000000000000000', '3', KEYS[1], KEYS[2], KEYS[3])
need('GET ' .. KEYS[1], 'GET', KEYS[1])
need('SET ' .. KEYS[1], 'SET', KEYS[1], 'owner', 'PX', '1')
need('PTTL ' .. KEYS[1], 'PTTL', KEYS[1])
need('PEXPIRE ' .. KEYS[1], 'PEXPIRE', KEYS[1], '1')
need('DEL ' .. KEYS[1], 'DEL', KEYS[1])
need('GET ' .. KEYS[2], 'GET', KEYS[2])
need('SET ' .. KEYS[2], 'SET', KEYS[2], '1')
need('INCR ' .. KEYS[2], 'INCR', KEYS[2])
need('TIME', 'TIME')
if ARGV[1] == '1' then
  need('ZADD ' .. KEYS[4], 'ZADD', KEYS[4], '1', 'owner')
  need('ZREM ' .. KEYS[4], 'ZREM', KEYS[4], 'owner')
  need('ZRANGE ' .. KEYS[4], 'ZRANGE', KEYS[4], '0', '0')
  need('ZRANGEBYSCORE ' .. KEYS[4], 'ZRANGEBYSCORE', KEYS[4], '-inf', '0')
  need('ZSCORE ' .. KEYS[4], 'ZSCORE', KEYS[4], 'owner')
end
need('PUBLISH ' .. KEYS[3], 'PUBLISH', KEYS[3], 'released')
need('SUBSCRIBE ' .. KEYS[3], 'SUBSCRIBE', KEYS[3])
return denied
)lua";

}  // namespace

void check_permissions(connection& c, const settings& s, bool waiter_queue) {
    // No lock name is empty, so these keys and this channel are never a lock's.
    const lock_keys probe = keys_for(s.key_prefix, "");
    reply_ptr r = c.command(
        {"EVAL", permissions_probe, "4", probe.lock, probe.fence, probe.channel, probe.queue, waiter_queue ? "1" : "0"});
    if (r->type == REDIS_REPLY_ERROR) {
        const std::string error(r->str, r->len);
        if (error.find("acl_check_cmd") != std::string::npos) return;  // an older server without the call
        const failure f = classify_error_reply(c.where().text(), error);
        if (f.status != DLOCK_PERMISSION) throw f;
        fail(DLOCK_PERMISSION, fmt::format("redis {}: ACL user `{}` may not run dlock's scripts on keys `{}*` ({}); grant it "
                                       "`~{}*` and `+eval +evalsha +script|load`",
                                       c.where().text(), s.username.empty() ? "default" : s.username, s.key_prefix, error,
                                       s.key_prefix));
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) return;  // nothing denied, or nothing to ask
    std::string denied;
    bool channels = false, keys = false;
    for (size_t i = 0; i < r->elements; ++i) {
        if (r->element[i]->type != REDIS_REPLY_STRING) continue;
        const std::string what(r->element[i]->str, r->element[i]->len);
        denied += (denied.empty() ? "" : ", ") + what;
        if (what.rfind("PUBLISH", 0) == 0 || what.rfind("SUBSCRIBE", 0) == 0) channels = true;
        else if (what.rfind("TIME", 0) != 0) keys = true;
    }
    std::string grant;
    if (keys) grant += fmt::format("`~{}*` ", s.key_prefix);
    if (channels) grant += fmt::format("`&{}*` ", s.key_prefix);
    fail(DLOCK_PERMISSION, fmt::format("redis {}: ACL user `{}` may not run what dlock needs: {}; grant it {}and the commands "
                                   "`+eval +evalsha +script|load +get +set +incr +pttl +pexpire +del +time {}+publish +subscribe "
                                   "+unsubscribe` (ACL SETUSER), or use another `username`",
                                   c.where().text(), s.username.empty() ? "default" : s.username, denied, grant,
                                   waiter_queue ? "+zadd +zrem +zrange +zrangebyscore +zscore " : ""));
}

}  // namespace dlock::redis_common

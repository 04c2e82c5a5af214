// The Lua scripts, running them (EVALSHA with a NOSCRIPT fallback), the key space, and the ACL check.
#include "redis_common.hpp"

#include <fmt/format.h>

#include <cstring>

namespace dlock::redis_common {

std::string script::sha1() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return sha1_;
}

void script::learn_sha1(const std::string& sha) const {
    std::lock_guard<std::mutex> lock(mutex_);
    sha1_ = sha;
}

namespace {

// The grant of a free lock, shared by the acquire scripts: grant(before_set) checks and bumps the
// fence key, runs `before_set` (or nothing), then sets the lock key. KEYS[1] lock, KEYS[2] fence;
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
local function grant(before_set)
  local fence = redis.call('GET', KEYS[2])
  local function corrupt(why)
    return redis.error_reply('WRONGTYPE dlock fence key ' .. KEYS[2] .. ' does not hold a token (' .. why .. ')')
  end
  if fence then
    if not string.match(fence, '^%d+$') then return corrupt('not a decimal integer') end
  else
    local now = redis.call('TIME')
    redis.call('SET', KEYS[2], now[1] .. string.format('%06d', tonumber(now[2])))
  end
  local token = redis.pcall('INCR', KEYS[2])
  if type(token) == 'table' and token.err then return corrupt(token.err) end
  if before_set then before_set() end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, token}
end
)lua";

// The waiter queue of a lock: KEYS[3] maps each waiting owner token to its arrival (server time,
// µs), KEYS[4] to the server time (ms) its entry lapses unless the waiter renews it by retrying.
// drop_lapsed removes lapsed entries (a waiter that died or gave up without leaving): at most 100
// per call, so a script's cost stays bounded. wake_next publishes on the first waiter's channel
// (prefix .. owner), and gives it claim_ms to take the lock before its entry lapses. A first
// waiter nobody hears on its channel (its client died and its connection with it) is dropped and
// the next one woken instead, up to 10 in one call — unless it queued less than claim_ms ago: a
// waiter subscribes only after its first attempt queued it, and retries once it has, so it is kept,
// and the waiter after it is woken too, to take over once the first one's claim lapses if it never
// comes. (A live waiter dropped, its pub/sub connection being restored, queues again at the back
// with its next retry, which follows the restored subscription at once.)
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
  end
end
local function wake_next(now, now_us, claim_ms, prefix)
  for _ = 1, 10 do
    local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
    if #first == 0 then return end
    local heard = redis.call('PUBLISH', prefix .. first[1], 'next') > 0
    if heard or now_us - tonumber(first[2]) < claim_ms * 1000 then
      local lapses = tonumber(redis.call('ZSCORE', KEYS[4], first[1]))
      if lapses == nil or lapses > now + claim_ms then redis.call('ZADD', KEYS[4], now + claim_ms, first[1]) end
      if not heard then
        local second = redis.call('ZRANGE', KEYS[3], 1, 1)[1]
        if second then redis.call('PUBLISH', prefix .. second, 'next') end
      end
      return
    end
    redis.call('ZREM', KEYS[3], first[1])
    redis.call('ZREM', KEYS[4], first[1])
  end
end
)lua";

}  // namespace

static const std::string acquire_source = std::string(grant_lua) + R"lua(
if redis.call('GET', KEYS[1]) then
  return {0, redis.call('PTTL', KEYS[1])}
end
return grant(nil)
)lua";
const script acquire_script(acquire_source.c_str());

// ARGV[3] mode: 0 barging (the queue is ignored), 1 fair try (granted only when nobody queues or
// we are first), 2 fair wait (as 1, and when not granted, queue us or renew our entry, which then
// lapses ARGV[4] ms after the retry time returned). Not granted: {0, ms until the holder's key
// expires (-1: it has no expiry), or until the first waiter's entry lapses when the lock is free,
// 1 when held | 0 when free but others queue first}.
// The queue's keys expire with their longest-lived entry, so a queue nobody visits again vanishes.
static const std::string queue_acquire_source = std::string(grant_lua) + queue_lua + R"lua(
local mode = tonumber(ARGV[3])
local now, now_us = server_time()
local first
if mode > 0 then
  drop_lapsed(now)
  first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
end
local held = redis.call('GET', KEYS[1])
if not held and (mode == 0 or first == nil or first == ARGV[1]) then
  return grant(function()
    if first == ARGV[1] then
      redis.call('ZREM', KEYS[3], ARGV[1])
      redis.call('ZREM', KEYS[4], ARGV[1])
    end
  end)
end
local wait_ms
if held then
  wait_ms = redis.call('PTTL', KEYS[1])
else
  wait_ms = math.max(0, tonumber(redis.call('ZSCORE', KEYS[4], first)) - now)
end
if mode == 2 then
  local keep = math.max(wait_ms, 0) + tonumber(ARGV[4])
  redis.call('ZADD', KEYS[3], 'NX', now_us, ARGV[1])
  redis.call('ZADD', KEYS[4], now + keep, ARGV[1])
  if redis.call('PTTL', KEYS[4]) < keep then
    redis.call('PEXPIRE', KEYS[3], keep)
    redis.call('PEXPIRE', KEYS[4], keep)
  end
end
return {0, wait_ms, held and 1 or 0}
)lua";
const script queue_acquire_script(queue_acquire_source.c_str());

// PUBLISH before DEL: if the user may not publish on the channel (an ACL changed after open), the
// script fails before it deleted anything, so the release is refused whole — never half done with
// the lock gone and the caller told it failed. Waiters woken by the message run after the script.
const script release_script(R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PUBLISH', KEYS[3], 'released')
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
)lua");

// As release_script (the broadcast channel, KEYS[5], still wakes barging waiters), and wakes the
// first queued waiter (wake_next). DEL last: see release_script.
static const std::string queue_release_source = std::string(queue_lua) + R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PUBLISH', KEYS[5], 'released')
local now, now_us = server_time()
drop_lapsed(now)
wake_next(now, now_us, tonumber(ARGV[2]), ARGV[3])
redis.call('DEL', KEYS[1])
return 1
)lua";
const script queue_release_script(queue_release_source.c_str());

// A queued waiter leaves without the lock; when the lock is free, the waiter now first is woken
// (the one leaving may have been woken for it). -> 1 when the entry was there, else 0.
static const std::string leave_queue_source = std::string(queue_lua) + R"lua(
local removed = redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
if not redis.call('GET', KEYS[1]) then
  local now, now_us = server_time()
  drop_lapsed(now)
  wake_next(now, now_us, tonumber(ARGV[2]), ARGV[3])
end
return removed
)lua";
const script leave_queue_script(leave_queue_source.c_str());

const script renew_script(R"lua(
local result = {}
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[2 * i - 1] then
    redis.call('PEXPIRE', key, ARGV[2 * i])
    result[i] = 1
  else
    result[i] = 0
  end
end
return result
)lua");

const script inspect_script(R"lua(
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
)lua");

std::vector<std::string> script_command(const script& s, bool by_source, const std::vector<std::string>& keys,
                                        const std::vector<std::string>& args) {
    std::vector<std::string> cmd;
    cmd.reserve(3 + keys.size() + args.size());
    const std::string sha = by_source ? std::string() : s.sha1();
    if (by_source || sha.empty()) {
        cmd.emplace_back("EVAL");
        cmd.emplace_back(s.source());
    } else {
        cmd.emplace_back("EVALSHA");
        cmd.push_back(sha);
    }
    cmd.push_back(std::to_string(keys.size()));
    cmd.insert(cmd.end(), keys.begin(), keys.end());
    cmd.insert(cmd.end(), args.begin(), args.end());
    return cmd;
}

reply_ptr run_script(connection& c, const script& s, const std::vector<std::string>& keys,
                     const std::vector<std::string>& args) {
    reply_ptr r = c.command(script_command(s, false, keys, args));
    if (r->type == REDIS_REPLY_ERROR && std::strncmp(r->str, "NOSCRIPT", 8) == 0)
        r = c.command(script_command(s, true, keys, args));  // the server lost its script cache
    if (r->type == REDIS_REPLY_ERROR) throw classify_error_reply(c.where().text(), std::string(r->str, r->len));
    return r;
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

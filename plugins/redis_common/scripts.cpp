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

// The lock key is written last, after every check passed, because a script's writes before an
// error are not undone: GET raises WRONGTYPE on a lock key of another type (an error, never
// "held"); the fence key must hold digits only (Lua's tonumber would also take "1.5", " 7" or
// "-3"), and INCR, run before the SET, refuses what is left (leading zeros, a value that would
// overflow) — so a lock is never set without its token. (The seed below is the only earlier
// write; INCR cannot fail on it.)
// A missing fence key (a name's first lock, or a server that restarted without its data) is seeded
// with the server's TIME in microseconds before INCR: tokens then keep rising across a loss of
// the data, as long as the server's clock does not go back and fewer than one lock per microsecond
// was taken since the previous seed. Starting again at 1 would let a resource that saw the old
// tokens accept a stale holder's writes (FAULTS.md scenario 6, restart delayed past the ttl).
const script acquire_script(R"lua(
if redis.call('GET', KEYS[1]) then
  return {0, redis.call('PTTL', KEYS[1])}
end
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
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, token}
)lua");

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
    return {base + ":lock", base + ":fence", base + ":released"};
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
need('PUBLISH ' .. KEYS[3], 'PUBLISH', KEYS[3], 'released')
need('SUBSCRIBE ' .. KEYS[3], 'SUBSCRIBE', KEYS[3])
return denied
)lua";

}  // namespace

void check_permissions(connection& c, const settings& s) {
    // No lock name is empty, so these keys and this channel are never a lock's.
    const lock_keys probe = keys_for(s.key_prefix, "");
    reply_ptr r = c.command({"EVAL", permissions_probe, "3", probe.lock, probe.fence, probe.channel});
    if (r->type == REDIS_REPLY_ERROR) {
        const std::string error(r->str, r->len);
        if (error.find("acl_check_cmd") != std::string::npos) return;  // an older server without the call
        const failure f = classify_error_reply(c.where().text(), error);
        if (f.status != DLOCK_BACKEND || f.message.find("permission denied") == std::string::npos) throw f;
        fail(DLOCK_CONFIG, fmt::format("redis {}: ACL user `{}` may not run dlock's scripts on keys `{}*` ({}); grant it "
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
    fail(DLOCK_CONFIG, fmt::format("redis {}: ACL user `{}` may not run what dlock needs: {}; grant it {}and the commands "
                                   "`+eval +evalsha +script|load +get +set +incr +pttl +pexpire +del +time +publish "
                                   "+subscribe +unsubscribe` (ACL SETUSER), or use another `username`",
                                   c.where().text(), s.username.empty() ? "default" : s.username, denied, grant));
}

}  // namespace dlock::redis_common

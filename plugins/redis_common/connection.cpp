// Endpoints, connections, the pool, scripts, keys and hazard checks.
#include "redis_common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>

namespace dlock::redis_common {

int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::string endpoint::text() const {
    return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
}

endpoint parse_endpoint(const std::string& text) {
    endpoint e;
    std::string port;
    if (!text.empty() && text[0] == '[') {
        const size_t close = text.find(']');
        if (close == std::string::npos) fail(DLOCK_CONFIG, fmt::format("redis endpoint `{}`: unclosed `[`", text));
        e.host = text.substr(1, close - 1);
        if (close + 1 < text.size()) {
            if (text[close + 1] != ':') fail(DLOCK_CONFIG, fmt::format("redis endpoint `{}`: expected `:port` after `]`", text));
            port = text.substr(close + 2);
        }
    } else {
        const size_t colon = text.rfind(':');
        e.host = text.substr(0, colon);
        if (colon != std::string::npos) port = text.substr(colon + 1);
    }
    if (e.host.empty()) fail(DLOCK_CONFIG, fmt::format("redis endpoint `{}` has no host (expected host:port)", text));
    if (!port.empty()) {
        char* end = nullptr;
        const long p = std::strtol(port.c_str(), &end, 10);
        if (*end || p < 1 || p > 65535) fail(DLOCK_CONFIG, fmt::format("redis endpoint `{}`: `{}` is not a port", text, port));
        e.port = int(p);
    }
    return e;
}

settings read_settings(const dlock_option_value* values, size_t count, settings s, const char* backend) {
    if (const auto* v = find_option(values, count, "username")) s.username = v->string_value;
    if (const auto* v = find_option(values, count, "password")) s.password = v->string_value;
    if (const auto* v = find_option(values, count, "database")) s.database = v->int_value;
    if (const auto* v = find_option(values, count, "key_prefix")) s.key_prefix = v->string_value;
    if (const auto* v = find_option(values, count, "connect_timeout")) s.connect_timeout_ms = v->int_value;
    if (const auto* v = find_option(values, count, "command_timeout")) s.command_timeout_ms = v->int_value;
    if (const auto* v = find_option(values, count, "pool_size")) {
        if (v->int_value < 1 || v->int_value > 1024)
            fail(DLOCK_CONFIG, fmt::format("{}: `pool_size` {} is outside 1..1024", backend, v->int_value));
        s.pool_size = size_t(v->int_value);
    }
    if (s.database < 0) fail(DLOCK_CONFIG, fmt::format("{}: `database` {} is negative", backend, s.database));
    if (s.connect_timeout_ms < 1 || s.command_timeout_ms < 1)
        fail(DLOCK_CONFIG, fmt::format("{}: `connect_timeout` and `command_timeout` must be at least 1ms", backend));
    return s;
}

failure classify_error_reply(const std::string& server, const std::string& error) {
    auto starts = [&](const char* prefix) { return error.rfind(prefix, 0) == 0; };
    if (starts("READONLY"))
        return {DLOCK_BACKEND, fmt::format("redis {} is a read-only replica ({}); point dlock at the master", server, error)};
    if (starts("OOM"))
        return {DLOCK_BACKEND, fmt::format("redis {} is out of memory and refuses writes ({}); raise maxmemory or free memory", server, error)};
    if (starts("LOADING"))
        return {DLOCK_UNAVAILABLE, fmt::format("redis {} is loading its dataset ({}); retry shortly", server, error)};
    if (starts("MISCONF"))
        return {DLOCK_BACKEND, fmt::format("redis {} refuses writes because it cannot persist ({})", server, error)};
    if (starts("WRONGTYPE"))
        return {DLOCK_BACKEND, fmt::format("redis {}: a dlock key holds a value of another type ({}); another program writes "
                                           "under dlock's key prefix",
                                           server, error)};
    if (starts("NOAUTH") || starts("WRONGPASS") || error.find("invalid password") != std::string::npos ||
        error.find("invalid username-password") != std::string::npos)
        return {DLOCK_CONFIG, fmt::format("redis {}: authentication failed ({}); check `username`/`password`", server, error)};
    if (starts("NOPERM") || error.find("The user executing the script can't") != std::string::npos)
        return {DLOCK_BACKEND, fmt::format("redis {}: permission denied ({}); the ACL user needs EVAL/EVALSHA, PUBLISH and "
                                           "SUBSCRIBE on dlock's keys",
                                           server, error)};
    return {DLOCK_BACKEND, fmt::format("redis {} answered with an error: {}", server, error)};
}

namespace {

timeval to_timeval(int64_t ms) { return timeval{time_t(ms / 1000), suseconds_t((ms % 1000) * 1000)}; }

reply_ptr blocking_command(redisContext* ctx, const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
    }
    return reply_ptr(static_cast<redisReply*>(redisCommandArgv(ctx, int(argv.size()), argv.data(), lens.data())));
}

}  // namespace

connection::connection(const endpoint& where, const settings& s) : where_(where) {
    ctx_.reset(redisConnectWithTimeout(where.host.c_str(), where.port, to_timeval(s.connect_timeout_ms)));
    if (!ctx_) fail(DLOCK_INTERNAL, "redis: out of memory allocating a connection");
    if (ctx_->err)
        fail(DLOCK_UNAVAILABLE, fmt::format("redis {}: cannot connect: {} (is the server running and reachable?)", where.text(),
                                            ctx_->errstr));
    redisSetTimeout(ctx_.get(), to_timeval(s.command_timeout_ms));
    redisEnableKeepAlive(ctx_.get());
    auto expect_ok = [&](const std::vector<std::string>& args, const char* what) {
        reply_ptr r = blocking_command(ctx_.get(), args);
        if (!r) fail(DLOCK_UNAVAILABLE, fmt::format("redis {}: connection lost during {}: {}", where.text(), what, ctx_->errstr));
        if (r->type == REDIS_REPLY_ERROR) throw classify_error_reply(where.text(), r->str);
        return r;
    };
    if (!s.password.empty()) {
        if (s.username.empty()) expect_ok({"AUTH", s.password}, "AUTH");
        else expect_ok({"AUTH", s.username, s.password}, "AUTH");
    }
    if (s.database != 0) expect_ok({"SELECT", std::to_string(s.database)}, "SELECT");
    // Load every script, so EVALSHA works on this server from the first call.
    for (const script* sc : {&acquire_script, &release_script, &renew_script, &inspect_script}) {
        reply_ptr r = expect_ok({"SCRIPT", "LOAD", sc->source()}, "SCRIPT LOAD");
        if (r->type == REDIS_REPLY_STRING) sc->learn_sha1(std::string(r->str, r->len));
    }
}

reply_ptr connection::command(const std::vector<std::string>& args) {
    if (broken_) fail(DLOCK_UNAVAILABLE, fmt::format("redis {}: connection is broken", where_.text()));
    while (owed_ > 0) {  // replies of requests nobody waits for: read and drop them first
        void* raw = nullptr;
        if (redisGetReply(ctx_.get(), &raw) != REDIS_OK) {
            broken_ = true;
            fail(DLOCK_UNAVAILABLE, fmt::format("redis {}: connection lost: {}", where_.text(), ctx_->errstr));
        }
        reply_ptr dropped(static_cast<redisReply*>(raw));
        --owed_;
    }
    errno = 0;
    reply_ptr r = blocking_command(ctx_.get(), args);
    if (!r) {
        const int error = errno;  // hiredis leaves the failed read's or write's errno in place
        broken_ = true;
        closed_by_server_ = ctx_->err == REDIS_ERR_EOF ||
                            (ctx_->err == REDIS_ERR_IO && (error == ECONNRESET || error == EPIPE));
        // hiredis reports an unsent command and a lost reply alike; a timeout or EOF after sending
        // leaves the outcome unknown.
        fail(DLOCK_UNKNOWN, fmt::format("redis {}: no reply: {}", where_.text(), ctx_->errstr[0] ? ctx_->errstr : "connection lost"));
    }
    return r;
}

bool connection::closed_while_idle() const {
    if (broken_) return true;
    pollfd p{ctx_->fd, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0) return false;  // quiet (or poll failed: the next command will tell)
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) return true;
    // Readable: fine when replies are owed; otherwise the server sent something unasked (an
    // error before closing, as when it refuses a client), which would answer our next command.
    return owed_ == 0;
}

bool connection::send_behind_pending(const std::vector<std::string>& args) {
    broken_ = true;  // its replies are never read
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
    }
    char* raw = nullptr;
    const int length = redisFormatCommandArgv(&raw, int(argv.size()), argv.data(), lens.data());
    if (length < 0) return false;
    std::unique_ptr<char, void (*)(char*)> formatted(raw, redisFreeCommand);
    // Whatever hiredis still buffers (a request it could not flush) goes first, to keep the order.
    std::string bytes(ctx_->obuf ? ctx_->obuf : "", ctx_->obuf ? sdslen(ctx_->obuf) : 0);
    bytes.append(formatted.get(), size_t(length));
    for (size_t sent = 0; sent < bytes.size();) {
        const ssize_t n = send(ctx_->fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);  // SO_SNDTIMEO bounds it
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        sent += size_t(n);
    }
    return true;
}

pool::pool(endpoint where, settings s) : where_(std::move(where)), settings_(std::move(s)) {}

pool::lease::~lease() {
    if (pool_ && conn_) pool_->give_back(std::move(conn_));
}

pool::lease pool::borrow() {
    return borrow(now_ns() + (settings_.connect_timeout_ms + settings_.command_timeout_ms) * 1'000'000);
}

pool::lease pool::borrow(int64_t deadline_ns) {
    std::unique_lock<std::mutex> lock(mutex_);
    const size_t limit = std::max<size_t>(settings_.pool_size, 1);
    for (;;) {
        if (!idle_.empty()) {
            auto c = std::move(idle_.back());
            idle_.pop_back();
            if (!c->closed_while_idle()) return lease(this, std::move(c));
            --open_;  // closed by the server meanwhile: drop it, try the next (or a new one)
            continue;
        }
        if (open_ < limit) break;
        if (available_.wait_until(lock, std::chrono::steady_clock::time_point(std::chrono::nanoseconds(deadline_ns))) ==
                std::cv_status::timeout &&
            idle_.empty() && open_ >= limit)
            fail(DLOCK_UNAVAILABLE, fmt::format("redis {}: all {} connections of the pool stayed busy; raise `pool_size`",
                                                where_.text(), limit));
    }
    const int64_t now = now_ns();
    if (now < retry_after_ns_)
        fail(DLOCK_UNAVAILABLE, fmt::format("redis {}: unreachable; next reconnect attempt in {} ms", where_.text(),
                                            (retry_after_ns_ - now) / 1'000'000 + 1));
    ++open_;
    lock.unlock();
    try {
        auto c = std::make_unique<connection>(where_, settings_);
        lock.lock();
        backoff_ms_ = 0;
        retry_after_ns_ = 0;
        return lease(this, std::move(c));
    } catch (...) {
        lock.lock();
        --open_;
        backoff_ms_ = backoff_ms_ ? std::min<int64_t>(backoff_ms_ * 2, 1000) : 10;
        retry_after_ns_ = now_ns() + backoff_ms_ * 1'000'000;
        available_.notify_one();
        throw;
    }
}

void pool::give_back(std::unique_ptr<connection> c) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (c->broken()) {
        --open_;
    } else {
        idle_.push_back(std::move(c));
    }
    available_.notify_one();
}

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
// tokens accept a stale holder's writes (docs/design/faults.md §6, restart delayed past the ttl).
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

std::vector<std::string> hazard_warnings(connection& c) {
    std::vector<std::string> warnings;
    auto config_get = [&](const char* key) -> std::string {
        reply_ptr r = c.command({"CONFIG", "GET", key});
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[1]->type != REDIS_REPLY_STRING) return "?";
        return std::string(r->element[1]->str, r->element[1]->len);
    };
    const std::string policy = config_get("maxmemory-policy");
    if (policy == "?") return warnings;  // CONFIG disabled (renamed): nothing to learn
    if (policy != "noeviction")
        warnings.push_back(fmt::format("{}: maxmemory-policy is `{}`: under memory pressure the server may evict lock "
                                       "keys, and two holders would then hold one lock; use `noeviction`",
                                       c.where().text(), policy));
    const std::string aof = config_get("appendonly");
    const std::string save = config_get("save");
    if (aof != "yes" && save.empty())
        warnings.push_back(fmt::format("{}: persistence is off (appendonly no, no RDB save points): a restart loses "
                                       "every lock while their holders still believe they hold them",
                                       c.where().text()));
    else if (aof != "yes")
        warnings.push_back(fmt::format("{}: only RDB snapshots persist data (save \"{}\"): a restart loses the locks "
                                       "taken since the last snapshot; use appendonly yes + appendfsync always",
                                       c.where().text(), save));
    else if (config_get("appendfsync") != "always")
        warnings.push_back(fmt::format("{}: appendfsync is not `always`: a crash can lose the last second of lock "
                                       "writes",
                                       c.where().text()));
    return warnings;
}

}  // namespace dlock::redis_common

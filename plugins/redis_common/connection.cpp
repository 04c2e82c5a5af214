// Endpoints, settings, one connection (AUTH, SELECT, timeouts, replies owed), error replies and
// the server's hazard checks.
#include "redis_common.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>

namespace dlock::redis_common {

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
        return {DLOCK_PERMISSION, fmt::format("redis {}: permission denied ({}); the ACL user needs EVAL/EVALSHA, PUBLISH and "
                                           "SUBSCRIBE on dlock's keys",
                                           server, error)};
    return {DLOCK_BACKEND, fmt::format("redis {} answered with an error: {}", server, error)};
}

namespace {

timeval to_timeval(int64_t ms) { return timeval{time_t(ms / 1000), suseconds_t((ms % 1000) * 1000)}; }

// redisCommandArgv, with the request written by write_buffered: redisGetReply then finds nothing to
// write and only reads.
reply_ptr blocking_command(redisContext* ctx, const command_line& line) {
    if (line.append_to(ctx) != REDIS_OK) return nullptr;
    if (!write_buffered(ctx)) return nullptr;
    void* raw = nullptr;
    if (redisGetReply(ctx, &raw) != REDIS_OK) return nullptr;
    return reply_ptr(static_cast<redisReply*>(raw));
}

// write_buffered's sending, also after `ctx` failed (send_behind_pending).
bool send_buffered(redisContext* ctx) {
    size_t sent = 0;
    const size_t length = sdslen(ctx->obuf);
    while (sent < length) {
        const ssize_t n = ::send(ctx->fd, ctx->obuf + sent, length - sent, MSG_NOSIGNAL);  // SO_SNDTIMEO bounds it
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const int error = n < 0 ? errno : EPIPE;
            if (sent > 0) {  // keep what was not sent, as hiredis does
                std::memmove(ctx->obuf, ctx->obuf + sent, length - sent);
                sdssetlen(ctx->obuf, length - sent);
                ctx->obuf[length - sent] = '\0';
            }
            ctx->err = REDIS_ERR_IO;
            std::snprintf(ctx->errstr, sizeof ctx->errstr, "%s", std::strerror(error));
            errno = error;
            return false;
        }
        sent += size_t(n);
    }
    sdssetlen(ctx->obuf, 0);  // sds.h's inline helpers: libhiredis 0.14 exports its sds functions without C linkage
    ctx->obuf[0] = '\0';
    return true;
}

}  // namespace

command_line& command_line::add(const char* data, size_t size) {
    if (count_ < inline_capacity) {
        inline_argv_[count_] = data;
        inline_lengths_[count_] = size;
    } else {
        if (heap_argv_.empty()) {
            heap_argv_.assign(inline_argv_, inline_argv_ + inline_capacity);
            heap_lengths_.assign(inline_lengths_, inline_lengths_ + inline_capacity);
        }
        heap_argv_.push_back(data);
        heap_lengths_.push_back(size);
    }
    ++count_;
    return *this;
}

command_line& command_line::add(const std::vector<std::string>& args) {
    for (const auto& a : args) add(a.data(), a.size());
    return *this;
}

void command_line::set(size_t i, std::string_view text) {
    (heap_argv_.empty() ? inline_argv_ : heap_argv_.data())[i] = text.data();
    (heap_lengths_.empty() ? inline_lengths_ : heap_lengths_.data())[i] = text.size();
}

int command_line::append_to(redisContext* ctx) const {
    return redisAppendCommandArgv(ctx, int(count_), const_cast<const char**>(argv()), lengths());
}

bool write_buffered(redisContext* ctx) {
    if (ctx->err) return false;
    return send_buffered(ctx);
}

connection::connection(const endpoint& where, const settings& s) : where_(where) {
    ctx_.reset(redisConnectWithTimeout(where.host.c_str(), where.port, to_timeval(s.connect_timeout_ms)));
    if (!ctx_) fail(DLOCK_INTERNAL, "redis: out of memory allocating a connection");
    if (ctx_->err)
        fail(DLOCK_UNAVAILABLE, fmt::format("redis {}: cannot connect: {} (is the server running and reachable?)", where.text(),
                                            ctx_->errstr));
    redisSetTimeout(ctx_.get(), to_timeval(s.command_timeout_ms));
    redisEnableKeepAlive(ctx_.get());
    auto expect_ok = [&](const std::vector<std::string>& args, const char* what) {
        reply_ptr r = blocking_command(ctx_.get(), command_line(args));
        if (!r) fail(DLOCK_UNAVAILABLE, fmt::format("redis {}: connection lost during {}: {}", where.text(), what, ctx_->errstr));
        if (r->type == REDIS_REPLY_ERROR) throw classify_error_reply(where.text(), r->str);
        return r;
    };
    if (!s.password.empty()) {
        if (s.username.empty()) expect_ok({"AUTH", s.password}, "AUTH");
        else expect_ok({"AUTH", s.username, s.password}, "AUTH");
    }
    if (s.database != 0) expect_ok({"SELECT", std::to_string(s.database)}, "SELECT");
    // Load every script whose SHA1 the process does not know yet, so EVALSHA works from the first
    // call. Once known, a new connection loads nothing (14 commands per connection otherwise, which
    // a pool that reconnects under load pays again and again): a server that lacks a script (the
    // first connection to it, a restart, SCRIPT FLUSH) answers EVALSHA with NOSCRIPT, and every
    // caller then sends the script itself (run_script; pipelined requests always send it).
    for (const script* sc : {&acquire_script, &release_script, &inspect_script, &queue_acquire_script,
                              &queue_release_script, &leave_queue_script, &shared_acquire_script, &shared_release_script,
                              &permit_acquire_script, &permit_release_script, &renew_holds_script, &holders_script,
                              &break_script, &mark_waiting_writer_script}) {
        if (!sc->sha1().empty()) continue;
        reply_ptr r = expect_ok({"SCRIPT", "LOAD", sc->source()}, "SCRIPT LOAD");
        if (r->type == REDIS_REPLY_STRING) sc->learn_sha1(std::string(r->str, r->len));
    }
}

reply_ptr connection::command(const command_line& line) {
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
    reply_ptr r = blocking_command(ctx_.get(), line);
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

bool connection::send_behind_pending(const command_line& line) {
    broken_ = true;  // its replies are never read
    // Appended behind whatever hiredis still buffers (a request it could not flush), to keep the
    // order, and sent whether or not the context failed.
    return line.append_to(ctx_.get()) == REDIS_OK && send_buffered(ctx_.get());
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

// Redis before 5.0 replicates a script verbatim unless it calls redis.replicate_commands(), and so
// refuses a write after a non-deterministic command: "Write commands not allowed after non
// deterministic commands". dlock's scripts read TIME and then write (every queue script, the shared
// and permit scripts, renewal of shared holds and permits, break): they need effects replication,
// the default from Redis 5.0. (Nothing newer is needed: UNLINK is 4.0, ZADD NX/XX 3.0.2, and
// redis.acl_check_cmd, 7.0, is used only where present.) Redis 5.0 to 6.2 refuse the same way
// when run with `lua-replicate-commands no`. The probe writes the key of the name "", which no lock
// has, as check_permissions does.
std::string server_version_refusal(const std::string& where, const std::string& version, const std::string& error) {
    int major = -1;
    if (!version.empty() && std::isdigit(static_cast<unsigned char>(version[0]))) major = std::atoi(version.c_str());
    if (major >= 5)
        return fmt::format("redis {}: the server (redis_version {}) does not replicate script effects (lua-replicate-commands "
                           "no?): dlock's scripts read TIME and then write, which needs script effects replication ({}); "
                           "set `lua-replicate-commands yes`, the default",
                           where, version, error);
    if (major >= 0)
        return fmt::format("redis {}: the server (redis_version {}) is older than Redis 5.0: dlock's scripts read TIME and "
                           "then write, which needs script effects replication, the default from Redis 5.0 ({}); upgrade "
                           "the server to Redis 5.0 or later",
                           where, version, error);
    return fmt::format("redis {}: the server (redis_version {}) does not replicate script effects: it is older than Redis "
                       "5.0, or runs with `lua-replicate-commands no`; dlock's scripts read TIME and then write, which "
                       "needs script effects replication ({}); upgrade the server to Redis 5.0 or later, or set "
                       "`lua-replicate-commands yes`",
                       where, version, error);
}

void check_server_version(connection& c, const settings& s) {
    const lock_keys probe = keys_for(s.key_prefix, "");
    reply_ptr r = c.command({"EVAL", "redis.call('TIME') redis.call('DEL', KEYS[1]) return 1", "1", probe.lock});
    if (r->type != REDIS_REPLY_ERROR) return;
    const std::string error(r->str, r->len);
    if (error.find("non deterministic") == std::string::npos && error.find("replicate_commands") == std::string::npos)
        return;  // another refusal: check_permissions names it
    std::string version = "unknown: INFO refused";
    reply_ptr info = c.command({"INFO", "server"});
    if (info->type == REDIS_REPLY_STRING) {
        const std::string text(info->str, info->len);
        const size_t at = text.find("redis_version:");
        if (at != std::string::npos) version = text.substr(at + 14, text.find_first_of("\r\n", at) - at - 14);
    }
    fail(DLOCK_NOT_SUPPORTED, server_version_refusal(c.where().text(), version, error));
}

}  // namespace dlock::redis_common

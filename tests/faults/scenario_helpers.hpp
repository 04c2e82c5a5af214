// scenario_helpers.hpp — small helpers the backend-specific scenario files share: restoring a
// server whatever ends a cell, joining a helper thread on unwind, soak rounds, millisecond text,
// lock names as ZooKeeper and etcd escape them and Redis keys them, a target's endpoints, a refused
// acquire, and waiting for a holder's LOST.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "suite.hpp"

namespace dlock::faults::helpers {

// Runs `action` when the scope ends, whatever ends it; a failing restore must not hide the cell's
// own outcome, so its exception is swallowed (the next cell's reset would report a dead server).
class on_scope_exit {
public:
    explicit on_scope_exit(std::function<void()> action) : action_(std::move(action)) {}
    ~on_scope_exit() {
        try {
            action_();
        } catch (...) {
        }
    }
    on_scope_exit(const on_scope_exit&) = delete;
    on_scope_exit& operator=(const on_scope_exit&) = delete;

private:
    std::function<void()> action_;
};

// A thread joined when it goes out of scope, so that an exception thrown while it runs (a holder
// that stopped answering, a server that did not come back) unwinds instead of terminating.
class joining_thread {
public:
    template <typename F>
    explicit joining_thread(F&& body) : thread_(std::forward<F>(body)) {}
    ~joining_thread() { join(); }
    void join() {
        if (thread_.joinable()) thread_.join();
    }

private:
    std::thread thread_;
};

// Runs `round` once in the CI size and `soak_rounds` times in the soak size — each round with its
// own suffix for lock names and holder labels, so that every round leaves its own histories —
// then runs the checkers once over all of them.
inline void in_rounds(context& ctx, int soak_rounds, const std::function<void(const std::string& suffix)>& round) {
    const int rounds = ctx.ci_or_soak(1, soak_rounds);
    for (int i = 0; i < rounds; ++i) round(i == 0 ? "" : "-" + std::to_string(i + 1));
    ctx.check_histories();
}

// A lock name as one path element / key directory: ZooKeeper and etcd both turn `/` (and `%`) into
// %XX (docs/backends/zookeeper.md, etcd.md); the suite's names hold nothing else they would escape.
inline std::string escaped(const std::string& name) {
    std::string out;
    for (char ch : name) out += ch == '/' ? std::string("%2F") : ch == '%' ? std::string("%25") : std::string(1, ch);
    return out;
}

inline double ms_between(int64_t from_ns, int64_t to_ns) { return double(to_ns - from_ns) / 1e6; }
inline std::string ms_text(double ms) { return std::to_string(int64_t(ms)) + " ms"; }

// Opens `config` through the C API and requires the open to fail with `expected` (a dlock_status);
// `what` says what is wrong with it ("a missing chroot"). Should the open succeed anyway, a lock is
// tried with it: a grant is recorded as a false success. Returns the error message.
inline std::string require_open_refused(context& ctx, const std::filesystem::path& config, int expected,
                                        const std::string& what, const std::string& expected_name) {
    dlock_client* client = nullptr;
    const int status = dlock_client_open(config.c_str(), &client);
    const std::string message = dlock_last_error();
    ctx.require(status == expected, "opening with " + what + " is a " + expected_name + " error: " + message);
    if (status == DLOCK_OK && client) {
        dlock::client opened(client);
        std::error_code ec;
        auto lease = opened.acquire(ctx.lock_name("refused"), dlock::acquire_options().with_wait(std::chrono::milliseconds(0)), ec);
        if (!ec) ctx.violation(violation_kind::false_success, "a lock was granted with " + what);
    }
    return message;
}

// A try-once acquire that must not succeed: a success is a false success (a violation), an
// outcome other than `expected_status` (when given) fails the cell.
inline void expect_refused(context& ctx, const acquire_result& r, const std::string& what,
                           const std::string& expected_status = "") {
    if (r.ok) ctx.violation(violation_kind::false_success, what + ": acquire reported success");
    if (!expected_status.empty())
        ctx.require(r.status == expected_status, what + ": expected " + expected_status + ", got " + r.status + " (" + r.message + ")");
}

// The holder's LOST callback time, once it ran (polling the holder every `poll`, for at most `limit`).
inline std::optional<int64_t> await_lost(holder& h, const std::string& name, milliseconds limit,
                                         milliseconds poll = milliseconds(10)) {
    std::optional<int64_t> at;
    wait_until([&] { return (at = h.lost_at_ns(name)).has_value(); }, limit, poll);
    return at;
}

// The endpoints of every server of the target (one for a standalone server, none for file).
inline std::vector<lab::endpoint> target_endpoints(context& ctx) {
    const auto& servers = ctx.tgt().servers;
    if (servers.empty()) return {};
    return ctx.lab().access(servers.front()).endpoints;
}

// The Redis key holding `name`'s lock with the lab's default key prefix (docs/backends/redis.md:
// `<prefix>{<name>}:lock`; the suite's names hold no `{`, `}` or `%`, which would be escaped).
inline std::string redis_lock_key(const std::string& name) { return "dlock:{" + name + "}:lock"; }

}  // namespace dlock::faults::helpers

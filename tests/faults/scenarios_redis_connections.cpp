// scenarios_redis_connections.cpp — fault scenarios for the `redis` backend's connection handling
// (docs/backends/redis.md, "A failed command"), written against the suite's API (suite.hpp):
//   6r  server restart while the clients' pooled connections sit idle — SAFE: the dead connections
//       are dropped before use, so a try-once acquire right after the restart succeeds at its first
//       call, and the old holder learns LOST at its first renewal (within ttl/3 + one round trip);
//   6p  server paused (SIGSTOP) under a try-once acquire, whose reply is then lost to the command
//       timeout — SAFE: the acquire answers UNKNOWN, its owner-fenced release follows the pending
//       script on the same connection, so once the server resumes no key is left and another
//       holder acquires at once.
// Each cell restores the server it touched however it ends.
#include <chrono>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

#include "dlock/lab/lab.hpp"
#include "scenario_helpers.hpp"
#include "suite.hpp"

namespace dlock::faults {
namespace {

using namespace std::chrono_literals;
using namespace helpers;

// 6r: A holds `held` (ttl 3 s); B took and released another name, so its pooled connection is idle.
// The server restarts without persistence. B's try-once acquire of a third name must succeed at its
// first call (no UNKNOWN from a dead pooled connection), and A must report LOST at its first
// renewal after the restart.
void restart_with_idle_connections(context& ctx) {
    const nanoseconds round_trip = ctx.round_trip();  // before the fault
    auto& server = ctx.lab().redis();
    on_scope_exit restore([&] {
        if (!server.running()) server.restart(lab::data_policy::keep);
    });
    const std::string held = ctx.lock_name("held"), warm = ctx.lock_name("warm"), fresh = ctx.lock_name("fresh");
    auto a = ctx.spawn_holder("a");
    auto b = ctx.spawn_holder("b");
    const milliseconds ttl = 3s;
    const auto first = a->acquire(held, 0ms, ttl);
    ctx.require(first.ok, "A acquires: " + first.message);
    if (!first.ok) return;
    const auto warmed = b->acquire(warm, 0ms, ttl);
    ctx.require(warmed.ok, "B's warm-up acquire: " + warmed.message);
    b->release(warm);

    server.restart(lab::data_policy::keep);
    const int64_t restarted_ns = monotonic_ns();
    ctx.fault("redis restarted without persistence; the clients' pooled connections were idle");
    const auto after = b->acquire(fresh, 0ms, ttl);
    ctx.require(after.ok, "B's first try-once acquire after the restart succeeds (got " + after.status + " " + after.message + ")");
    if (after.ok) ctx.note("B acquired " + ms_text(ms_between(restarted_ns, after.returned_ns)) + " after the restart, first call");
    std::optional<int64_t> lost;
    wait_until([&] { return (lost = a->lost_at_ns(held)).has_value(); }, ttl, 10ms);
    if (lost) {
        ctx.record_lost_detection(nanoseconds(*lost - restarted_ns), ttl / 3 + round_trip);
        ctx.require(nanoseconds(*lost - restarted_ns) <= ttl / 3 + round_trip + 500ms,
                    "A learns LOST at its first renewal after the restart (" + ms_text(ms_between(restarted_ns, *lost)) + ")");
    } else {
        ctx.require(false, "A never reported LOST after the server forgot its lock");
    }
    a->release(held);
    a->quit();
    if (after.ok) b->release(fresh);
    b->quit();
    ctx.check_histories();
}

// 6p: A (command_timeout 300 ms) tries once while the server is paused: the script is sent, its
// reply never comes in time. The acquire must answer UNKNOWN (never success), and once the server
// resumes and runs what was queued, no key of A's may be left: B acquires at once.
void paused_under_an_acquire(context& ctx) {
    auto& server = ctx.lab().redis();
    on_scope_exit restore([&] {
        if (server.paused()) server.resume();
    });
    const auto where = server.client_endpoint();
    const std::filesystem::path config = ctx.dir() / "short-timeout.yaml";
    std::ofstream(config) << "backend: redis\noptions:\n  endpoint: \"" << where.to_string() << "\"\n  command_timeout: 300ms\n";
    const std::string name = ctx.lock_name("paused");
    auto a = ctx.spawn_holder("a", config);
    auto b = ctx.spawn_holder("b");
    const auto warmed = a->acquire(ctx.lock_name("warm"), 0ms);  // A's connection is open before the fault
    ctx.require(warmed.ok, "A's warm-up acquire: " + warmed.message);
    a->release(ctx.lock_name("warm"));

    server.pause();
    ctx.fault("redis paused (SIGSTOP) under A's try-once acquire");
    const auto refused = a->acquire(name, 0ms, 30s);
    server.resume();
    const int64_t resumed_ns = monotonic_ns();
    if (refused.ok) ctx.violation(violation_kind::false_success, "an acquire on a paused server reported success");
    ctx.require(refused.status == "DLOCK_UNKNOWN", "the lost reply makes the outcome unknown: got " + refused.status + " " + refused.message);
    const bool gone = wait_until([&] { return server.client().checked({"EXISTS", redis_lock_key(name)}).integer == 0; }, 2s, 10ms);
    ctx.require(gone, "no key is left once the server ran the queued script and release (ttl was 30 s)");
    const auto next = b->acquire(name, 0ms);
    ctx.require(next.ok, "B acquires once the server resumed: " + next.status + " " + next.message);
    if (next.ok) {
        ctx.record_liveness(std::chrono::duration_cast<milliseconds>(nanoseconds(next.returned_ns - resumed_ns)));
        b->release(name);
    }
    a->quit();
    b->quit();
    ctx.check_histories();
}

const registrar restart_idle{{6, "r", "server restart with idle pooled connections", {{"redis", verdict::safe}},
                              restart_with_idle_connections}};
const registrar paused_acquire{{6, "p", "server paused under an acquire (reply lost)", {{"redis", verdict::safe}},
                                paused_under_an_acquire}};

}  // namespace
}  // namespace dlock::faults

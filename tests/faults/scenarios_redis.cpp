// scenarios_redis.cpp — the fault scenarios of docs/design/faults.md that only Redis-based backends (`redis`,
// `redlock`) meet, written against the suite's API (suite.hpp):
//   6a  server restart without persistence right after an acquire — EV (the server forgets the key);
//   6b  the same crash with `appendonly yes` + `appendfsync always` — SAFE (the key survives);
//   6c  restart delayed past the ttl — SAFE claimed (the old holder's validity ran out first; but
//       for redis the fence counter is forgotten too, so tokens repeat: the cell finds EV);
//   7a–7d Redlock: 2 of 5 nodes down works; 3 of 5 down fails cleanly; late nodes get the lock back;
//       a client paused during its acquisition round is refused (validity ≤ 0);
//   8a  clock jump on one node (its lock keys expire early): EV for redis, SAFE for redlock;
//   8b  clock jumps on a majority of redlock's nodes: EV;
//   14a–14d server errors: NOSCRIPT falls back; READONLY, OOM and WRONGTYPE are clear errors, never "held".
// Verdicts are the ones docs/backends/redis.md claims. Each cell drives holder processes whose
// histories the checkers judge, and restores every server it touched however it ends.
#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dlock/lab/lab.hpp"
#include "dlock/lab/proxy.hpp"
#include "scenario_helpers.hpp"
#include "suite.hpp"

namespace dlock::faults {
namespace {

using namespace std::chrono_literals;

using namespace helpers;

// The Redis servers a target runs on: the single server, or Redlock's nodes.
std::vector<lab::redis_server*> redis_nodes(context& ctx) {
    std::vector<lab::redis_server*> nodes;
    if (ctx.tgt().name == "redis") {
        nodes.push_back(&ctx.lab().redis());
    } else {
        auto& set = ctx.lab().redlock();
        for (std::size_t i = 0; i < set.size(); ++i) nodes.push_back(&set.node(i));
    }
    return nodes;
}

// The smallest number of nodes whose loss breaks the target: its one server, or a Redlock quorum.
std::size_t majority(std::size_t nodes) { return nodes / 2 + 1; }

// Puts every server back: resumed if paused, started again if stopped.
void restore(const std::vector<lab::redis_server*>& nodes) {
    for (auto* node : nodes) {
        if (node->paused()) node->resume();
        if (!node->running()) node->restart(lab::data_policy::keep);
    }
}

bool key_exists(lab::redis_server& node, const std::string& key) {
    return node.client().checked({"EXISTS", key}).integer != 0;
}

// Releases every named lease of `h` (logging release-invoke so the checkers end its holds) and
// makes the process exit.
void finish(holder& h, const std::vector<std::string>& names) {
    for (const auto& name : names) h.release(name);
    h.quit();
}

// An acquire by a client whose pooled connections predate a server restart: its first command
// meets a dead connection, which the plugin reports as DLOCK_UNKNOWN (the request may have reached
// the server) or, for Redlock, DLOCK_UNAVAILABLE (too few nodes answered) — outcomes the contract
// says are safe to retry, as an application would. Retries a few times and notes that it did.
acquire_result acquire_retrying_transport(context& ctx, holder& h, const std::string& name, milliseconds wait,
                                          milliseconds ttl) {
    acquire_result r;
    for (int attempt = 0; attempt < 5; ++attempt) {
        r = h.acquire(name, wait, ttl);
        if (r.status != "DLOCK_UNKNOWN" && r.status != "DLOCK_UNAVAILABLE") break;
        ctx.note(h.label() + "'s acquire after the restart answered " + r.status + " (stale pooled connection); retried");
        std::this_thread::sleep_for(50ms);
    }
    return r;
}

// ---- 6: server restart --------------------------------------------------------------------------

// After a restart without persistence: B (the new holder) writes to the fenced resource, then A
// (the old one, as a holder stalled past its ttl would — docs/design/faults.md §3). The restart forgot the fence
// counter with the keys, so B's token may repeat A's and the resource cannot refuse A's write: a
// stale write accepted. Only for targets with fencing tokens (redis; redlock has none).
void fenced_writes_after_restart(context& ctx, holder& a, holder& b, const std::string& name, const acquire_result& first,
                                 const acquire_result& second) {
    if (!ctx.tgt().fencing()) return;
    b.fenced_write(name);
    const auto stale = a.fenced_write(name);
    if (stale.accepted && second.token <= first.token)
        ctx.violation(violation_kind::stale_write_accepted,
                      "after the restart B's token " + std::to_string(second.token) + " repeats A's " +
                          std::to_string(first.token) + ": the resource accepted the old holder's write after B's");
}

// 6a: A holds; the server forgets the key (restart without persistence); B acquires while A's
// validity runs — two holders. For redis the fence counter is forgotten too, so B's token repeats
// A's. For redlock the classic sequence: A gets a bare quorum (2 nodes down), the two come back
// empty, one of A's nodes restarts empty, and B gets a quorum of the three empty nodes.
void restart_without_persistence_round(context& ctx, const std::string& suffix) {
    const nanoseconds round_trip = ctx.round_trip();  // before the fault: afterwards the servers may not answer
    const bool redlock = ctx.tgt().name == "redlock";
    auto nodes = redis_nodes(ctx);
    on_scope_exit restore_nodes([&] { restore(nodes); });
    const std::string name = ctx.lock_name("restart" + suffix);
    ctx.resource();
    auto a = ctx.spawn_holder("a" + suffix);
    auto b = ctx.spawn_holder("b" + suffix);
    const milliseconds ttl = 3s;  // A's renewal comes at ttl/3: well after B's acquisition

    if (redlock) {
        nodes[3]->kill();
        nodes[4]->kill();
        ctx.fault("2 of 5 redlock nodes killed before A's acquire");
    }
    const auto first = a->acquire(name, 0ms, ttl);
    ctx.require(first.ok, "A acquires: " + first.message);
    if (!first.ok) return;

    int64_t restarted_ns = 0;
    if (redlock) {
        nodes[3]->restart(lab::data_policy::keep);
        nodes[4]->restart(lab::data_policy::keep);
        nodes[2]->restart(lab::data_policy::keep);
        restarted_ns = monotonic_ns();
        ctx.fault("redlock node 3 (one of A's quorum) restarted without persistence; nodes 4, 5 back empty");
    } else {
        nodes[0]->restart(lab::data_policy::keep);
        restarted_ns = monotonic_ns();
        ctx.fault("redis restarted without persistence");
    }
    const auto second = acquire_retrying_transport(ctx, *b, name, 0ms, ttl);
    const bool a_thinks_held = a->state(name) == "held";
    if (second.ok && a_thinks_held && second.returned_ns < first.valid_until_ns)
        ctx.note("EV demonstrated: B acquired " + ms_text(ms_between(restarted_ns, second.returned_ns)) +
                 " after the restart while A still held a valid lease");
    if (second.ok) fenced_writes_after_restart(ctx, *a, *b, name, first, second);
    // A learns it at its next renewal: within ttl/3 + one round trip of the server being back.
    if (const auto lost = await_lost(*a, name, ttl)) {
        ctx.record_lost_detection(nanoseconds(*lost - restarted_ns), ttl / 3 + round_trip);
    } else {
        ctx.require(false, "A never reported LOST after the server forgot its lock");
    }
    finish(*a, {name});
    finish(*b, {name});
}

void restart_without_persistence(context& ctx) {
    in_rounds(ctx, 5, [&](const std::string& suffix) { restart_without_persistence_round(ctx, suffix); });
}

// 6b: the same crash (SIGKILL, then restart on the data) on servers with appendonly yes +
// appendfsync always, in a lab of this cell's own: the key survives, B is refused while A holds,
// A keeps its lease, and B gets the lock once A releases.
void restart_with_fsync_always(context& ctx) {
    const bool redlock = ctx.tgt().name == "redlock";
    lab::lab_options options;
    options.redis.appendonly = options.redlock.appendonly = true;
    options.redis.appendfsync = options.redlock.appendfsync = "always";
    const lab::backend kind = redlock ? lab::backend::redlock : lab::backend::redis;
    lab::lab durable({kind}, options);
    std::vector<lab::redis_server*> nodes;
    if (redlock) {
        for (std::size_t i = 0; i < durable.redlock().size(); ++i) nodes.push_back(&durable.redlock().node(i));
    } else {
        nodes.push_back(&durable.redis());
    }
    const auto config = durable.config_path(kind);
    const std::string name = ctx.lock_name("durable");
    auto a = ctx.spawn_holder("a", config);
    auto b = ctx.spawn_holder("b", config);
    const milliseconds ttl = 4s;

    const auto first = a->acquire(name, 0ms, ttl);
    ctx.require(first.ok, "A acquires: " + first.message);
    if (!first.ok) return;
    const std::size_t crashed = majority(nodes.size());
    for (std::size_t i = 0; i < crashed; ++i) {
        nodes[i]->kill();
        nodes[i]->restart(lab::data_policy::keep);
    }
    ctx.fault(redlock ? "3 of 5 redlock nodes SIGKILLed and restarted (appendfsync always)"
                      : "redis SIGKILLed and restarted (appendfsync always)");
    const auto second = acquire_retrying_transport(ctx, *b, name, 0ms, ttl);
    expect_refused(ctx, second, "B after the crash (the lock survived on disk)", "timeout");
    // A's renewals reach the restarted servers again: never LOST (a SUSPECT spell is allowed).
    std::this_thread::sleep_for(ttl / 3 + 300ms);
    const std::string state = a->state(name);
    ctx.require(state == "held" || state == "suspect", "A keeps its lease across the crash, state " + state);
    ctx.require(a->release(name) == "released", "A's release after the crash");
    const auto third = b->acquire(name, 2s, ttl);
    ctx.require(third.ok, "B acquires once A released: " + third.message);
    b->release(name);
    a->quit();
    b->quit();
    ctx.check_histories();
}

// 6c: the server (or a Redlock quorum) crashes and is restarted empty only after the longest ttl
// in use has passed: by then A's own validity ran out (it reports LOST), so B's acquisition cannot
// overlap it. docs/design/faults.md calls this SAFE; for redis the fence counter is forgotten all the same
// (tokens start again at 1), which fenced_writes_after_restart() demonstrates — so the cell finds
// EV against the expected SAFE: a documented claim that does not hold, reported, not hidden.
void restart_delayed_past_ttl(context& ctx) {
    auto nodes = redis_nodes(ctx);
    on_scope_exit restore_nodes([&] { restore(nodes); });
    const std::string name = ctx.lock_name("delayed");
    ctx.resource();
    auto a = ctx.spawn_holder("a");
    auto b = ctx.spawn_holder("b");
    const milliseconds ttl = ctx.tgt().ttl;

    const auto first = a->acquire(name, 0ms, ttl);
    ctx.require(first.ok, "A acquires: " + first.message);
    if (!first.ok) return;
    const int64_t crashed_ns = monotonic_ns();
    for (std::size_t i = 0; i < majority(nodes.size()); ++i) nodes[i]->kill();
    ctx.fault("server crash (SIGKILL, no persistence); restart delayed past the ttl");
    const auto lost = await_lost(*a, name, ttl + 3s);
    ctx.require(lost.has_value(), "A reports LOST once its validity ran out with the server gone");
    if (lost) ctx.note("A reported LOST " + ms_text(ms_between(crashed_ns, *lost)) + " after the crash (ttl " +
                       std::to_string(ttl.count()) + " ms: a dead server cannot be heard sooner)");
    const auto delay_end = crashed_ns + std::chrono::duration_cast<nanoseconds>(ttl + 200ms).count();
    if (monotonic_ns() < delay_end) std::this_thread::sleep_for(nanoseconds(delay_end - monotonic_ns()));
    restore(nodes);
    const auto second = acquire_retrying_transport(ctx, *b, name, 2s, ttl);
    ctx.require(second.ok, "B acquires after the restart: " + second.message);
    if (second.ok) fenced_writes_after_restart(ctx, *a, *b, name, first, second);
    finish(*a, {name});
    finish(*b, {name});
    ctx.check_histories();
}

// ---- 7: Redlock quorum ----------------------------------------------------------------------------

// 7a: with 2 of 5 nodes down a quorum remains: contending workers still acquire, without overlap.
void redlock_minority_down(context& ctx) {
    auto nodes = redis_nodes(ctx);
    on_scope_exit restore_nodes([&] { restore(nodes); });
    nodes[0]->kill();
    nodes[1]->kill();
    ctx.fault("2 of 5 redlock nodes killed");
    ctx.resource();
    contend_options options;
    options.name = ctx.lock_name("minority");
    options.processes = ctx.ci_or_soak(3, 6);
    options.cycles = ctx.ci_or_soak(15, 150);
    options.hold = 5ms;
    auto workers = ctx.contend(options);
    const bool finished = workers->wait(ctx.ci_or_soak(60s, 600s));
    ctx.require(finished, "every worker finished: " + workers->failures());
    const auto report = ctx.check_histories();
    ctx.require(report.acquisitions > 0, "acquisitions succeed with 3 of 5 nodes up");
    ctx.require(report.failures == 0, "no acquire errors with a quorum up: " + std::to_string(report.failures));
}

// 7b: with 3 of 5 nodes down no quorum can grant: acquire fails with UNAVAILABLE (never a success,
// also when waiting), and leaves no key on the nodes that answered.
void redlock_majority_down(context& ctx) {
    auto nodes = redis_nodes(ctx);
    on_scope_exit restore_nodes([&] { restore(nodes); });
    const std::string name = ctx.lock_name("majority");
    auto a = ctx.spawn_holder("a");
    for (std::size_t i = 0; i < 3; ++i) nodes[i]->kill();
    ctx.fault("3 of 5 redlock nodes killed");
    expect_refused(ctx, a->acquire(name, 0ms), "try-once without a quorum", "DLOCK_UNAVAILABLE");
    const auto waited = a->acquire(name, 500ms);
    expect_refused(ctx, waited, "a 500 ms wait without a quorum");
    for (std::size_t i = 3; i < nodes.size(); ++i)
        ctx.require(!key_exists(*nodes[i], redis_lock_key(name)), "no key left on live node " + std::to_string(i + 1));
    restore(nodes);
    const auto after = acquire_retrying_transport(ctx, *a, name, 2s, 0ms);
    ctx.require(after.ok, "acquire works again once the nodes are back: " + after.message);
    finish(*a, {name});
    ctx.check_histories();
}

// A Redlock config reaching node i through proxies[i] when there is one, else directly.
std::filesystem::path proxied_config(context& ctx, const std::vector<lab::redis_server*>& nodes,
                                     const std::vector<std::unique_ptr<lab::tcp_proxy>>& proxies,
                                     const std::string& file_name) {
    std::string endpoints;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        const auto where = i < proxies.size() && proxies[i] ? proxies[i]->listen_endpoint() : nodes[i]->client_endpoint();
        endpoints += (i ? ", \"" : "\"") + where.to_string() + "\"";
    }
    const auto path = ctx.dir() / file_name;
    std::ofstream(path) << "backend: redlock\noptions:\n  endpoints: [" << endpoints << "]\n  command_timeout: 2s\n";
    return path;
}

// 7c: nodes 1–3 answer 100 ms late each way and nodes 4–5 are paused, so the quorum's grants come
// after the 150 ms ttl: no validity is left and the acquire must fail. The client gives the lock
// back on every node of the round: the paused nodes run SET then the pipelined release when they
// wake, so shortly after they resume (well inside the key's 150 ms) no key may be there.
void redlock_late_nodes(context& ctx) {
    auto nodes = redis_nodes(ctx);
    on_scope_exit restore_nodes([&] { restore(nodes); });
    std::vector<std::unique_ptr<lab::tcp_proxy>> proxies;
    for (std::size_t i = 0; i < 3; ++i) proxies.push_back(std::make_unique<lab::tcp_proxy>(nodes[i]->client_endpoint()));
    auto a = ctx.spawn_holder("a", proxied_config(ctx, nodes, proxies, "late.yaml"));
    auto b = ctx.spawn_holder("b");
    const std::string name = ctx.lock_name("late");
    const auto warm = a->acquire(ctx.lock_name("warm"), 0ms);  // connections open while all are fast
    ctx.require(warm.ok, "warm-up acquire: " + warm.message);
    a->release(ctx.lock_name("warm"));

    for (auto& p : proxies) p->set_delay(100ms);
    nodes[3]->pause();
    nodes[4]->pause();
    ctx.fault("3 redlock nodes delayed 100 ms each way, 2 paused");
    const auto late = a->acquire(name, 0ms, 150ms);
    expect_refused(ctx, late, "a round longer than the ttl", "timeout");
    nodes[3]->resume();
    nodes[4]->resume();
    std::this_thread::sleep_for(50ms);
    for (std::size_t i = 3; i < 5; ++i)
        ctx.require(!key_exists(*nodes[i], redis_lock_key(name)),
                    "the lock was given back on late node " + std::to_string(i + 1) + " (key present 50 ms after it woke)");
    for (auto& p : proxies) p->set_delay(0us);
    const auto next = b->acquire(name, 2s, 5s);
    ctx.require(next.ok, "another client acquires at once: " + next.message);
    finish(*a, {});
    finish(*b, {name});
    ctx.check_histories();
}

// 7d: the client itself is paused (SIGSTOP) in the middle of its acquisition round, longer than the
// ttl: when it resumes, the grants are there but no validity is left, so it must refuse the lock.
// (Its keys expire on the nodes by themselves by then, so "given back" is not observable here; 7c
// shows the give-back.)
void redlock_client_paused_during_acquire(context& ctx) {
    auto nodes = redis_nodes(ctx);
    on_scope_exit restore_nodes([&] { restore(nodes); });
    std::vector<std::unique_ptr<lab::tcp_proxy>> proxies;
    for (auto* node : nodes) proxies.push_back(std::make_unique<lab::tcp_proxy>(node->client_endpoint()));
    auto a = ctx.spawn_holder("a", proxied_config(ctx, nodes, proxies, "slow.yaml"));
    auto b = ctx.spawn_holder("b");
    const std::string name = ctx.lock_name("paused-client");
    const auto warm = a->acquire(ctx.lock_name("warm"), 0ms);
    ctx.require(warm.ok, "warm-up acquire: " + warm.message);
    a->release(ctx.lock_name("warm"));

    // Unpaused, the round takes ~200 ms and would leave ~300 ms of validity; the pause, 80 ms into
    // the round, lasts longer than the ttl.
    const milliseconds ttl = 500ms;
    for (auto& p : proxies) p->set_delay(100ms);
    acquire_result paused_round;
    joining_thread acquirer([&] { paused_round = a->acquire(name, 0ms, ttl); });
    std::this_thread::sleep_for(80ms);
    a->pause();
    ctx.fault("client SIGSTOPped during its acquisition round");
    std::this_thread::sleep_for(ttl + 300ms);
    a->resume();
    acquirer.join();
    for (auto& p : proxies) p->set_delay(0us);
    if (paused_round.ok && paused_round.valid_until_ns <= paused_round.returned_ns)
        ctx.violation(violation_kind::false_success, "acquire returned a lease with no validity left");
    ctx.require(!paused_round.ok,
                "a round outlasting the ttl is refused (validity <= 0); got " + paused_round.status + " " + paused_round.message);
    const auto next = b->acquire(name, 1s);
    ctx.require(next.ok, "another client acquires afterwards: " + next.message);
    finish(*a, paused_round.ok ? std::vector<std::string>{name} : std::vector<std::string>{});
    finish(*b, {name});
    ctx.check_histories();
}

// ---- 8: server clock jump ---------------------------------------------------------------------------

// A holds with a long ttl; a forward clock jump on `jumped` nodes is produced directly (their lock
// keys expire early: redis_server::expire_keys_early, the documented substitute for libfaketime);
// B tries. Where a quorum of keys vanished B gets in while A's lease is valid (EV, caught by the
// overlap checker); A learns it at its next renewal.
void clock_jump_round(context& ctx, std::size_t jumped, const std::string& suffix) {
    const nanoseconds round_trip = ctx.round_trip();  // before the fault: afterwards the servers may not answer
    auto nodes = redis_nodes(ctx);
    const std::string name = ctx.lock_name("clock" + suffix);
    ctx.resource();
    auto a = ctx.spawn_holder("a" + suffix);
    auto b = ctx.spawn_holder("b" + suffix);
    const milliseconds ttl = 3s;
    const auto first = a->acquire(name, 0ms, ttl);
    ctx.require(first.ok, "A acquires: " + first.message);
    if (!first.ok) return;
    for (std::size_t i = 0; i < jumped; ++i) {
        const auto expired = nodes[i]->expire_keys_early(redis_lock_key(name), 60s);
        ctx.require(expired == 1, "the jump expired A's key on node " + std::to_string(i + 1));
    }
    const int64_t jumped_ns = monotonic_ns();
    ctx.fault("clock jump (effect produced) +60 s on " + std::to_string(jumped) + " of " + std::to_string(nodes.size()) +
              " node(s)");
    const auto second = b->acquire(name, 0ms, ttl);
    const bool quorum_lost = jumped >= majority(nodes.size());
    if (quorum_lost) {
        if (second.ok) {
            ctx.note("EV demonstrated: B acquired while A's lease was valid for another " +
                     ms_text(ms_between(second.returned_ns, first.valid_until_ns)));
            if (ctx.tgt().fencing()) {
                // The fence counter has no expiry, so the jump left it alone: B's token is higher
                // and a fenced resource refuses A's write after B's.
                b->fenced_write(name);
                ctx.require(!a->fenced_write(name).accepted, "the old holder's write after B's is refused by its token");
            }
            if (const auto lost = await_lost(*a, name, ttl))
                ctx.record_lost_detection(nanoseconds(*lost - jumped_ns), ttl / 3 + round_trip);
            else
                ctx.require(false, "A never reported LOST after B took its lock");
        }
    } else {
        expect_refused(ctx, second, "B after one node's jump", "timeout");
        std::this_thread::sleep_for(ttl / 3 + 200ms);  // past a renewal
        ctx.require(a->state(name) == "held", "A keeps its lease: the other nodes still hold its key");
    }
    finish(*a, {name});
    finish(*b, second.ok ? std::vector<std::string>{name} : std::vector<std::string>{});
}

void clock_jump(context& ctx, std::size_t jumped) {
    in_rounds(ctx, 10, [&](const std::string& suffix) { clock_jump_round(ctx, jumped, suffix); });
}

// ---- 14: server errors ------------------------------------------------------------------------------

// 14a: the server's script cache is flushed (as after a restart): EVALSHA answers NOSCRIPT and the
// client falls back to EVAL — acquire, renew and release keep working.
void noscript_falls_back(context& ctx) {
    auto nodes = redis_nodes(ctx);
    const std::string name = ctx.lock_name("noscript");
    auto a = ctx.spawn_holder("a");
    const auto warm = a->acquire(ctx.lock_name("warm"), 0ms);  // the scripts are loaded
    ctx.require(warm.ok, "warm-up acquire: " + warm.message);
    a->release(ctx.lock_name("warm"));
    for (auto* node : nodes) node->client().checked({"SCRIPT", "FLUSH"});
    ctx.fault("SCRIPT FLUSH on every node");
    const milliseconds ttl = 600ms;
    const auto held = a->acquire(name, 0ms, ttl);
    ctx.require(held.ok, "acquire after SCRIPT FLUSH: " + held.message);
    for (auto* node : nodes) node->client().checked({"SCRIPT", "FLUSH"});
    ctx.fault("SCRIPT FLUSH on every node while held");
    std::this_thread::sleep_for(ttl + 200ms);  // renewals at ttl/3 meet NOSCRIPT
    ctx.require(a->state(name) == "held", "renewals fall back to EVAL: the lease outlives its ttl");
    for (auto* node : nodes) node->client().checked({"SCRIPT", "FLUSH"});
    ctx.require(a->release(name) == "released", "release after SCRIPT FLUSH");
    a->quit();
    ctx.check_histories();
}

// Turns `count` nodes into something that refuses dlock's writes with `error_reply` (set up by
// `break_node`, undone by `repair_node`), and checks that an acquire then fails with a clear
// DLOCK_BACKEND error mentioning `phrase` — never "held".
void server_error_is_clear(context& ctx, const std::string& fault, const std::string& phrase,
                           const std::function<void(lab::redis_server&, const std::string& name)>& break_node,
                           const std::function<void(lab::redis_server&, const std::string& name)>& repair_node) {
    auto nodes = redis_nodes(ctx);
    const std::size_t broken = majority(nodes.size());
    const std::string name = ctx.lock_name("error");
    auto a = ctx.spawn_holder("a");
    const auto warm = a->acquire(ctx.lock_name("warm"), 0ms);  // connections open before the fault
    ctx.require(warm.ok, "warm-up acquire: " + warm.message);
    a->release(ctx.lock_name("warm"));
    {
        on_scope_exit repair([&] {
            for (std::size_t i = 0; i < broken; ++i) repair_node(*nodes[i], name);
        });
        for (std::size_t i = 0; i < broken; ++i) break_node(*nodes[i], name);
        ctx.fault(fault + " on " + std::to_string(broken) + " of " + std::to_string(nodes.size()) + " node(s)");
        const auto refused = a->acquire(name, 0ms);
        expect_refused(ctx, refused, fault, "DLOCK_BACKEND");
        ctx.require(refused.message.find(phrase) != std::string::npos,
                    "the error says what is wrong (`" + phrase + "`): " + refused.message);
        ctx.require(a->state(name) != "held", "nothing reads as held after the error");
        ctx.note(refused.message);
    }
    const auto after = a->acquire(name, 2s);
    ctx.require(after.ok, "acquire works once the server is repaired: " + after.message);
    finish(*a, {name});
    ctx.check_histories();
}

// 14b: READONLY — the node became a replica (of an address where no master answers: writes are
// refused all the same).
void readonly_replica(context& ctx) {
    server_error_is_clear(
        ctx, "READONLY (node made a replica)", "read-only replica",
        [](lab::redis_server& node, const std::string&) { node.client().checked({"REPLICAOF", "127.0.0.1", "1"}); },
        [](lab::redis_server& node, const std::string&) { node.client().checked({"REPLICAOF", "NO", "ONE"}); });
}

// 14c: OOM — maxmemory below what the server uses, with noeviction.
void out_of_memory(context& ctx) {
    server_error_is_clear(
        ctx, "OOM (maxmemory 1 byte, noeviction)", "out of memory",
        [](lab::redis_server& node, const std::string&) {
            auto c = node.client();
            c.checked({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
            c.checked({"CONFIG", "SET", "maxmemory", "1"});
        },
        [](lab::redis_server& node, const std::string&) { node.client().checked({"CONFIG", "SET", "maxmemory", "0"}); });
}

// 14d: WRONGTYPE — another program wrote a hash where dlock's lock key goes.
void wrong_type(context& ctx) {
    server_error_is_clear(
        ctx, "WRONGTYPE (a hash at the lock key)", "another type",
        [](lab::redis_server& node, const std::string& name) {
            node.client().checked({"HSET", redis_lock_key(name), "field", "value"});
        },
        [](lab::redis_server& node, const std::string& name) { node.client().checked({"DEL", redis_lock_key(name)}); });
}

const registrar restart_ev{{6, "a", "server restart without persistence right after an acquire",
                            {{"redis", verdict::ev}, {"redlock", verdict::ev}}, restart_without_persistence}};
const registrar restart_fsync{{6, "b", "server crash with appendonly + appendfsync always",
                               {{"redis", verdict::safe}, {"redlock", verdict::safe}}, restart_with_fsync_always}};
const registrar restart_delayed{{6, "c", "server restart (no persistence) delayed past the ttl",
                                 {{"redis", verdict::safe}, {"redlock", verdict::safe}}, restart_delayed_past_ttl}};
const registrar minority_down{{7, "a", "redlock: 2 of 5 nodes down", {{"redlock", verdict::safe}}, redlock_minority_down}};
const registrar majority_down{{7, "b", "redlock: 3 of 5 nodes down", {{"redlock", verdict::safe}}, redlock_majority_down}};
const registrar late_nodes{{7, "c", "redlock: late nodes, round longer than the ttl", {{"redlock", verdict::safe}},
                            redlock_late_nodes}};
const registrar paused_client{{7, "d", "redlock: client paused during its acquisition", {{"redlock", verdict::safe}},
                               redlock_client_paused_during_acquire}};
const registrar jump_one{{8, "a", "server clock jump on one node (keys expire early)",
                          {{"redis", verdict::ev}, {"redlock", verdict::safe}}, [](context& ctx) { clock_jump(ctx, 1); }}};
const registrar jump_majority{{8, "b", "server clock jumps on a majority of nodes",
                               {{"redlock", verdict::ev}}, [](context& ctx) { clock_jump(ctx, 3); }}};
const registrar noscript{{14, "a", "NOSCRIPT (script cache flushed)", {{"redis", verdict::safe}, {"redlock", verdict::safe}},
                          noscript_falls_back}};
const registrar readonly{{14, "b", "READONLY replica", {{"redis", verdict::safe}, {"redlock", verdict::safe}}, readonly_replica}};
const registrar oom{{14, "c", "OOM (maxmemory)", {{"redis", verdict::safe}, {"redlock", verdict::safe}}, out_of_memory}};
const registrar wrongtype{{14, "d", "WRONGTYPE on the lock key", {{"redis", verdict::safe}, {"redlock", verdict::safe}}, wrong_type}};

}  // namespace
}  // namespace dlock::faults

// scenarios_redlock_slow_nodes.cpp — Redlock faults of docs/design/faults.md §7 (nodes late, down or paused) that
// concern a round's own requests and the waiters, written against the suite's API (suite.hpp):
//   7e one node paused for 30 s: a holder keeps its lease (every renewal succeeds on the other four),
//      contending workers stay exclusive and keep acquiring, a waiter gets the lock as soon as it is
//      released, and the release answers `released`;
//   7f a failed round's requests to one node are held back past the next round: that round's late
//      release must not delete the key the next round of the same acquisition set there, or a third
//      client reaches a quorum while the first holds the lock.
// Both are SAFE for `redlock` (docs/backends/redis.md). Every cell resumes what it paused.
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
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

std::vector<lab::redis_server*> redlock_nodes(context& ctx) {
    std::vector<lab::redis_server*> nodes;
    auto& set = ctx.lab().redlock();
    for (std::size_t i = 0; i < set.size(); ++i) nodes.push_back(&set.node(i));
    return nodes;
}

void resume_all(const std::vector<lab::redis_server*>& nodes) {
    for (auto* node : nodes)
        if (node->paused()) node->resume();
}

// 7e. A holds `held` (ttl 3 s: ten ttls under the pause) while B waits for it; workers contend on
// another name for the whole pause. A must stay HELD throughout, release must answer `released`,
// and B must get the lock within a round trip or two of the release, not at some timeout.
void one_node_paused(context& ctx) {
    auto nodes = redlock_nodes(ctx);
    on_scope_exit restore([&] { resume_all(nodes); });
    const milliseconds pause = ctx.ci_or_soak(milliseconds(30s), milliseconds(120s));
    const milliseconds ttl = 3s;
    const std::string held = ctx.lock_name("held");
    auto a = ctx.spawn_holder("a");
    auto b = ctx.spawn_holder("b");
    b->reply_limit = pause + 40s;  // B's acquire waits out the whole pause
    const auto first = a->acquire(held, 0ms, ttl);
    ctx.require(first.ok, "A acquires before the pause: " + first.message);

    nodes[0]->pause();
    ctx.fault("redlock node 1 SIGSTOPped for " + ms_text(double(pause.count())));
    ctx.resource();
    contend_options options;
    options.name = ctx.lock_name("contended");
    options.processes = 3;
    options.duration = pause;
    options.hold = 5ms;
    options.long_wait = 5s;
    auto workers = ctx.contend(options);

    acquire_result waited;
    joining_thread waiter([&] { waited = b->acquire(held, pause + 20s, ttl); });
    const auto until = std::chrono::steady_clock::now() + pause;
    std::string state = "held";
    while (std::chrono::steady_clock::now() < until && state == "held") {
        std::this_thread::sleep_for(500ms);
        state = a->state(held);
    }
    ctx.require(state == "held", "A's lease stays HELD with 4 of 5 nodes healthy; it became " + state);
    const int64_t released_at = monotonic_ns();
    const std::string outcome = a->release(held);
    ctx.require(outcome == "released", "A's release answers released, not " + outcome);
    waiter.join();
    ctx.require(waited.ok, "B, waiting, gets the lock after A's release: " + waited.status + " " + waited.message);
    if (waited.ok) {
        const double handoff = ms_between(released_at, waited.returned_ns);
        ctx.require(handoff < 3000, "B is woken by the release, not by a timeout: " + ms_text(handoff) + " after it");
        ctx.note("A held for " + ms_text(double(pause.count())) + " with node 1 paused; release to B's grant " + ms_text(handoff));
    }
    const bool finished = workers->wait(pause + 60s);
    ctx.require(finished, "every worker finished: " + workers->failures());
    resume_all(nodes);
    b->release(held);
    a->quit();
    b->quit();
    const auto report = ctx.check_histories();
    ctx.require(report.acquisitions > 10, "workers kept acquiring during the pause: " + std::to_string(report.acquisitions));
    ctx.note(std::to_string(report.acquisitions) + " acquisitions checked during the pause");
}

// 7f. Node 1 is reached through a proxy that holds A's first round back for 1.5 s (client to
// server only); nodes 2 and 3 hold another client's key. Round 1 fails (2 grants, node 1 late),
// its release is pipelined behind its SET on node 1's connection; round 2 wins on a fresh
// connection with exactly nodes 1, 4, 5. Then round 1's requests reach node 1. Once the other
// client's keys are gone, C tries: it must not get a quorum while A holds.
void failed_rounds_late_release(context& ctx) {
    auto nodes = redlock_nodes(ctx);
    on_scope_exit restore([&] { resume_all(nodes); });
    const std::string name = ctx.lock_name("late-release");
    lab::tcp_proxy proxy(nodes[0]->client_endpoint());
    std::string endpoints = "\"" + proxy.listen_endpoint().to_string() + "\"";
    for (std::size_t i = 1; i < nodes.size(); ++i) endpoints += ", \"" + nodes[i]->client_endpoint().to_string() + "\"";
    const auto config = ctx.dir() / "late-release.yaml";
    std::ofstream(config) << "backend: redlock\noptions:\n  endpoints: [" << endpoints << "]\n  command_timeout: 300ms\n";
    auto a = ctx.spawn_holder("a", config);
    auto c = ctx.spawn_holder("c");
    const auto warm = a->acquire(ctx.lock_name("warm"), 0ms);  // A's connections open while all are fast
    ctx.require(warm.ok, "warm-up acquire: " + warm.message);
    a->release(ctx.lock_name("warm"));
    for (std::size_t i = 1; i < 3; ++i)
        nodes[i]->client().checked({"SET", redis_lock_key(name), std::string(32, 'e'), "PX", "60000"});

    proxy.set_delay(1500ms, 0us);
    ctx.fault("A's round 1 to node 1 held back 1.5 s by a proxy");
    acquire_result first;
    const int64_t started = monotonic_ns();
    joining_thread acquirer([&] { first = a->acquire(name, 5s, 20s); });
    std::this_thread::sleep_for(200ms);  // round 1 is sent (and held back); round 2 starts at >= 300 ms
    proxy.set_delay(0us, 0us);
    acquirer.join();
    ctx.require(first.ok, "A acquires in a later round: " + first.message);
    const double took = ms_between(started, first.returned_ns);
    ctx.require(took >= 300 && took < 1500, "A's round 1 failed on its late node and round 2 won before round 1's "
                                            "requests arrived: acquired after " + ms_text(took));
    std::this_thread::sleep_for(std::chrono::nanoseconds(started + 2'200'000'000 - monotonic_ns()));
    const bool survived = nodes[0]->client().checked({"EXISTS", redis_lock_key(name)}).integer != 0;
    if (!survived) ctx.violation(violation_kind::other, "round 1's late release deleted round 2's key on node 1");
    for (std::size_t i = 1; i < 3; ++i) nodes[i]->client().checked({"DEL", redis_lock_key(name)});
    const auto second = c->acquire(name, 0ms);
    if (!second.ok) ctx.require(second.status == "timeout", "C is refused with a timeout: " + second.status + " " + second.message);
    ctx.note("A won round 2 after " + ms_text(took) + "; round 1's requests reached node 1 at 1500 ms; A's key there " +
             (survived ? "survived" : "was deleted") + "; C's try-once: " + second.status);
    if (second.ok) c->release(name);
    ctx.require(a->release(name) == "released", "A still held the lock and released it");
    a->quit();
    c->quit();
    ctx.check_histories();  // C's grant while A held is an overlap
}

const registrar paused_node{{7, "e", "redlock: one node paused for 30 s", {{"redlock", verdict::safe}}, one_node_paused}};
const registrar late_release{{7, "f", "redlock: a failed round's release arrives after the next round won",
                              {{"redlock", verdict::safe}}, failed_rounds_late_release}};

}  // namespace
}  // namespace dlock::faults

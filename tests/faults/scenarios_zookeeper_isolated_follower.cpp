// scenarios_zookeeper_isolated_follower.cpp — ZooKeeper ensemble scenarios beyond the quorum faults of
// scenarios_quorum.cpp: a follower cut off from the rest of the ensemble while its clients still
// reach it (docs/backends/zookeeper.md, "On an ensemble").
#include <fstream>
#include <optional>
#include <thread>

#include "dlock/lab/port_cut.hpp"
#include "dlock/lab/zookeeper_server.hpp"
#include "scenario_helpers.hpp"
#include "suite.hpp"

namespace dlock::faults {
namespace {

using namespace std::chrono_literals;
using helpers::joining_thread;
using helpers::ms_between;
using helpers::ms_text;

std::filesystem::path zookeeper_yaml(context& ctx, const std::string& file_name, const std::vector<lab::endpoint>& endpoints) {
    std::string connect;
    for (const auto& e : endpoints) connect += (connect.empty() ? "" : ",") + e.to_string();
    const auto path = ctx.dir() / file_name;
    std::ofstream(path) << "backend: zookeeper\noptions:\n  connect: \"" << connect << "\"\n  session_timeout: 4s\n";
    return path;
}

// The leader's index once one member leads and every other follows it (a member still rejoining
// after an earlier cell, or a resumed leader that still calls itself leader, would leave the real
// leader without a quorum while the cut blocks new connections between members); nullopt after
// `limit`.
std::optional<std::size_t> settled_leader(lab::zookeeper_ensemble& ensemble, milliseconds limit) {
    std::optional<std::size_t> leader;
    wait_until(
        [&] {
            std::size_t leaders = 0, followers = 0, index = 0;
            for (std::size_t i = 0; i < ensemble.size(); ++i) {
                const std::string role = ensemble.member(i).role();
                if (role == "leader") ++leaders, index = i;
                if (role == "follower") ++followers;
            }
            if (leaders == 1 && followers == ensemble.size() - 1) leader = index;
            return leader.has_value();
        },
        limit, 100ms);
    return leader;
}

// Holder A talks to follower F only (4 s sessions, its own heartbeat, no explicit renewals); B
// waits through the two other members. F is cut from them (iptables on its quorum and election
// connections; its client port stays open): F answers A from its own copy until it notices, after
// syncLimit ticks (2 s in the suite's lab), while the leader counts A's session down from F's last
// report and then hands the lock to B. A's client must report LOST — its valid_until must end —
// before B holds the lock.
void follower_cut_round(context& ctx, const std::string& suffix) {
    auto& ensemble = ctx.lab().zookeeper_ensemble();
    const auto leader = settled_leader(ensemble, 30s);
    if (!ctx.require(leader.has_value(), "the ensemble settles (one leader, the others following)")) return;
    const std::size_t follower = (*leader + 1) % ensemble.size();
    std::vector<lab::endpoint> others;
    for (std::size_t i = 0; i < ensemble.size(); ++i)
        if (i != follower) others.push_back(ensemble.member(i).client_endpoint());
    auto a = ctx.spawn_holder("a" + suffix, zookeeper_yaml(ctx, "a.yaml", {ensemble.member(follower).client_endpoint()}));
    auto b = ctx.spawn_holder("b" + suffix, zookeeper_yaml(ctx, "b.yaml", others));
    const std::string name = ctx.lock_name("follower-cut" + suffix);
    const auto first = a->acquire(name, 0ms);
    if (!ctx.require(first.ok, "A acquires through F: " + first.message)) return;
    acquire_result waited;
    std::optional<int64_t> lost;
    int64_t cut_ns = 0;
    {
        joining_thread waiter([&] { waited = b->acquire(name, 15s); });
        std::this_thread::sleep_for(2500ms);  // A's bound in its steady state (heartbeats every 0.5 s)
        std::vector<std::uint16_t> own, peers;
        for (const auto& peer : ensemble.member(follower).peers()) {
            auto& ports = peer.id == ensemble.member(follower).my_id() ? own : peers;
            ports.push_back(peer.quorum_port);
            ports.push_back(peer.election_port);
        }
        lab::port_cut cut(ensemble.member(follower).pid(), own, peers);  // throws (ERROR) when it cannot be made
        cut_ns = monotonic_ns();
        ctx.fault("follower cut from the leader and the other member; its client (the holder) still reaches it");
        waiter.join();
        wait_until([&] { return (lost = a->lost_at_ns(name)).has_value(); }, 10s, 10ms);
    }  // healed
    ctx.require(waited.ok, "B acquires once the leader expired A's session: " + waited.message);
    ctx.require(lost.has_value(), "A reports LOST");
    if (lost && waited.ok) {
        if (*lost > waited.returned_ns)
            ctx.violation(violation_kind::overlap, "B acquired " + ms_text(ms_between(waited.returned_ns, *lost)) +
                                                       " before A (connected to the cut follower) reported LOST");
        ctx.record_liveness(milliseconds(int64_t(ms_between(cut_ns, waited.returned_ns))));
        ctx.note("A LOST " + ms_text(ms_between(cut_ns, *lost)) + " after the cut, B acquired " +
                 ms_text(ms_between(cut_ns, waited.returned_ns)) + " after it (4 s sessions)");
    }
    ctx.require(a->release(name) == "already_lost", "A's release after the expiry is ALREADY_LOST");
    if (waited.ok) b->release(name);
    a->quit();
    b->quit();
    ctx.require(settled_leader(ensemble, 30s).has_value(), "F rejoins the ensemble once the cut heals");
}

const registrar follower_cut{{11, "c", "ZooKeeper follower cut from the leader (holder connected to it only)",
                              {{"zookeeper_ensemble", verdict::safe}},
                              [](context& ctx) {
                                  helpers::in_rounds(ctx, 5, [&](const std::string& suffix) { follower_cut_round(ctx, suffix); });
                              }}};

}  // namespace
}  // namespace dlock::faults

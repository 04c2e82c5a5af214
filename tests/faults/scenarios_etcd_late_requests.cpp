// scenarios_etcd_late_requests.cpp — etcd fault scenarios about requests that reach a member late:
//   12c etcd ghost key — every member answers later than request_timeout, so the acquire's wait
//       (three request_timeouts) runs out and it cleans up its key while its puts are still on their way to other members; a put that
//       lands after the clean-up must not create the key again (a "ghost" on the client's live
//       session lease would keep the lock taken for nobody until that client closes).
// The verdict is the one docs/backends/etcd.md claims (SAFE).
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dlock/lab/faults.hpp"
#include "dlock/lab/lab.hpp"
#include "dlock/lab/proxy.hpp"
#include "scenario_helpers.hpp"
#include "suite.hpp"

namespace dlock::faults {
namespace {

using namespace std::chrono_literals;
using namespace helpers;

// The keys under `dir`, read with etcdctl from `member`; throws when etcdctl fails (the cell errors).
std::vector<std::string> keys_under(const lab::endpoint& member, const std::string& dir) {
    std::string output;
    const int status = lab::run_command({"etcdctl", "--endpoints=" + member.to_string(), "--dial-timeout=2s",
                                         "--command-timeout=5s", "get", "--prefix", dir, "--keys-only"}, &output);
    if (status != 0) throw std::runtime_error("etcdctl get --prefix " + dir + " failed: " + output);
    std::vector<std::string> keys;
    size_t start = 0;
    while (start < output.size()) {
        size_t end = output.find('\n', start);
        if (end == std::string::npos) end = output.size();
        if (end > start) keys.push_back(output.substr(start, end - start));
        start = end + 1;
    }
    return keys;
}

void ghost_key_round(context& ctx, const std::string& suffix) {
    auto& cluster = ctx.lab().etcd_cluster();
    cluster.wait_for_leader();
    std::vector<std::unique_ptr<lab::tcp_proxy>> proxies;
    std::string endpoints;
    for (std::size_t i = 0; i < cluster.size(); ++i) {
        proxies.push_back(std::make_unique<lab::tcp_proxy>(cluster.member(i).client_endpoint()));
        endpoints += (i ? ", \"" : "\"") + proxies.back()->listen_endpoint().to_string() + "\"";
    }
    const auto config = ctx.dir() / ("through-proxies" + suffix + ".yaml");
    std::ofstream(config) << "backend: etcd\noptions:\n  endpoints: [" << endpoints
                          << "]\n  request_timeout: 500ms\n  dial_timeout: 500ms\n  session_ttl: 30s\n";
    auto w = ctx.spawn_holder("w" + suffix, config);
    auto c = ctx.spawn_holder("c" + suffix);
    const std::string name = ctx.lock_name("ghost" + suffix);

    // W connects to every member (gRPC connects only when a call goes there, and not within
    // dial_timeout through a slow proxy): each member in turn is silent while W takes and gives
    // back a lock, so that acquire moves on to the next member. W starts on member 0 again.
    for (std::size_t i = 0; i < proxies.size(); ++i) {
        const std::string warm = ctx.lock_name("connect-" + std::to_string(i) + suffix);
        proxies[i]->blackhole();
        const auto r = w->acquire(warm, 5s);
        proxies[i]->heal();
        ctx.require(r.ok, "W reaches another member while member " + std::to_string(i) + " is silent: " + r.message);
        if (r.ok) w->release(warm);
    }

    for (auto& p : proxies) p->set_delay(1000ms, 0us);
    ctx.fault("requests to every member delayed 1 s (request_timeout 500 ms); member 0 prompt again after 750 ms");
    acquire_result late;
    {
        // After W's put to member 0 left and before W gives up (3 × 500 ms): W's clean-up reaches
        // member 0 at once, while its put to member 2 is still on its way.
        joining_thread healer([&] {
            std::this_thread::sleep_for(750ms);
            proxies[0]->set_delay(0us);
        });
        late = w->acquire(name, 1500ms);  // one request_timeout per member, then no time left to retry
    }
    for (auto& p : proxies) p->set_delay(0us);
    ctx.require(!late.ok, "no member answered in time, yet W's acquire reported success");
    std::this_thread::sleep_for(2500ms);  // every delayed put (the last one sent at about 1 s) has landed

    const auto member1 = cluster.member(1).client_endpoint();
    const std::string dir = "dlock/" + escaped(name) + "/";
    std::vector<std::string> left;
    wait_until([&] {
        left = keys_under(member1, dir);
        return left.empty();
    }, 3s, 100ms);
    if (!left.empty())
        ctx.violation(violation_kind::other, "ghost key " + left.front() + " on W's live session lease after W's failed "
                                             "acquire cleaned up: the lock is taken for nobody");
    const auto next = c->acquire(name, 0ms);
    ctx.require(next.ok || !left.empty(), "with nothing left under the name, another client acquires: " + next.message);
    if (next.ok) c->release(name);
    ctx.note("W's acquire: " + late.status + " after " + ms_text(ms_between(late.invoked_ns, late.returned_ns)) +
             "; keys left under the name after every late put landed: " + std::to_string(left.size()) +
             "; another client's try-lock: " + (next.ok ? "acquired" : next.status));
    w->quit();
    c->quit();
}

void ghost_key(context& ctx) {
    in_rounds(ctx, 5, [&](const std::string& suffix) { ghost_key_round(ctx, suffix); });
}

const registrar ghost_key_scenario{{12, "c", "etcd ghost key: a late put after the clean-up", {{"etcd_cluster", verdict::safe}},
                                    ghost_key}};

}  // namespace
}  // namespace dlock::faults

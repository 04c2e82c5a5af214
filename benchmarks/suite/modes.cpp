// modes.cpp — semaphores and shared locks in the comparison suite (modes.hpp).
#include "modes.hpp"

#include "probes_support.hpp"
#include "workers.hpp"

#include <dlock/dlock.hpp>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

namespace dlock::bench {

namespace {

using clock_type = std::chrono::steady_clock;

std::vector<int64_t> numbers_of(const std::string& text) {
    std::vector<int64_t> out;
    const char* p = text.c_str();
    char* end = nullptr;
    for (;;) {
        const long long v = std::strtoll(p, &end, 10);
        if (end == p) break;
        out.push_back(v);
        p = end;
    }
    return out;
}

}  // namespace

distribution run_s1_mode(const target& t, uint32_t permits, bool shared, int cycles) {
    dlock::client client = dlock::client::open(t.config.string());
    const std::string name = std::string(permits ? "s1-permit/" : "s1-shared/") + t.name;
    const auto options = dlock::acquire_options().with_permits(permits).with_shared(shared);
    const int warmup = std::max(50, cycles / 10);
    for (int i = 0; i < warmup; ++i) client.acquire(name, options).release();
    std::vector<double> samples;
    samples.reserve(static_cast<std::size_t>(cycles));
    for (int i = 0; i < cycles; ++i) {
        const auto t0 = clock_type::now();
        dlock::lease lease = client.acquire(name, options);
        lease.release();
        samples.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
    }
    return summarize(std::move(samples));
}

permits_point run_permits_contention(const scenario_context& c, int permits, int contenders, int critical_us,
                                     std::chrono::milliseconds window) {
    const s3_layout layout = s3_layout_for(contenders);
    permits_point p;
    p.permits = permits;
    p.contenders = layout.processes * layout.threads;
    p.critical_us = critical_us;
    worker_group group(layout.processes, c.worker, c.t.config, c.worker_log);
    const std::string name = "s3-permits/" + std::to_string(permits) + "/" + std::to_string(p.contenders);
    // A warm-up round on the semaphore itself (it also stores the limit before the window).
    const int64_t warm_start = monotonic_ns() + 200'000'000, warm_end = warm_start + 200'000'000;
    group.broadcast("cycles " + name + " " + std::to_string(warm_start) + " " + std::to_string(warm_end) + " 0 " +
                        std::to_string(layout.threads) + " " + std::to_string(permits),
                    std::chrono::seconds(120));
    const int64_t start = monotonic_ns() + 200'000'000;
    const int64_t end = start + std::chrono::duration_cast<std::chrono::nanoseconds>(window).count();
    const auto answers = group.broadcast("cycles " + name + " " + std::to_string(start) + " " + std::to_string(end) + " " +
                                             std::to_string(critical_us) + " " + std::to_string(layout.threads) + " " +
                                             std::to_string(permits),
                                         window + std::chrono::seconds(120));
    struct holding {
        int64_t at;
        std::size_t who;
    };
    std::vector<holding> acquired, released;
    std::vector<double> per_contender(static_cast<std::size_t>(p.contenders), 0.0);
    int64_t first = INT64_MAX, last = 0;
    for (std::size_t w = 0; w < answers.size(); ++w) {
        const auto v = numbers_of(answers[w]);
        if (v.size() < 4) throw std::runtime_error("malformed cycles answer: " + answers[w].substr(0, 200));
        p.cycles += v[0];
        p.release_failures += v[3];
        for (std::size_t i = 4; i + 2 < v.size(); i += 3) {
            const std::size_t who = w * static_cast<std::size_t>(layout.threads) + static_cast<std::size_t>(v[i + 2]);
            acquired.push_back({v[i], who});
            released.push_back({v[i + 1], who});
            if (who < per_contender.size()) per_contender[who] += 1;
            first = std::min(first, v[i]);
            last = std::max(last, v[i + 1]);
        }
    }
    auto by_time = [](const holding& a, const holding& b) { return a.at < b.at; };
    std::sort(acquired.begin(), acquired.end(), by_time);
    std::sort(released.begin(), released.end(), by_time);
    std::vector<double> handoffs;
    long long same = 0, pairs = 0;
    for (std::size_t k = 0; k + static_cast<std::size_t>(permits) < acquired.size() && k < released.size(); ++k) {
        const auto& grant = acquired[k + static_cast<std::size_t>(permits)];
        ++pairs;
        if (grant.who == released[k].who) {
            ++same;
            continue;
        }
        if (grant.at >= released[k].at) handoffs.push_back(static_cast<double>(grant.at - released[k].at) / 1000.0);
    }
    if (pairs > 0) p.reacquired_by_releaser = static_cast<double>(same) / static_cast<double>(pairs);
    p.handoff = summarize(std::move(handoffs));
    p.jain = jain_index(per_contender);
    if (last > first) p.cycles_per_s = static_cast<double>(p.cycles) / (static_cast<double>(last - first) / 1e9);
    return p;
}

kazoo_modes run_kazoo_modes(const std::string& connect, int permits, int cycles, const std::filesystem::path& log) {
    kazoo_modes k;
    k.version = support::package_version("python3-kazoo");
    const std::string warmup = std::to_string(std::max(100, cycles / 10));
    auto part = [&](const std::string& mode, distribution& into, std::string& error) {
        const auto j = support::run_peer_process({support::debian_python(), support::peers_dir() + "/zookeeper_kazoo.py", connect,
                                                  std::to_string(cycles), warmup, mode, std::to_string(permits)},
                                                 log, std::chrono::seconds(300));
        peer_result r;
        support::read_peer_json(j, r);
        if (r.ok) into = r.s1;
        else error = r.error.empty() ? "no samples" : r.error;
    };
    part("semaphore", k.semaphore, k.semaphore_error);
    part("read", k.read, k.read_error);
    part("write", k.write, k.write_error);
    return k;
}

}  // namespace dlock::bench

// scenarios_generic.cpp — the docs/design/faults.md scenarios every backend faces: 1 contention, 2 holder
// killed, 3 holder paused past its ttl (and lost-detection latency), 4 stale release, 5 owner-only
// release, 9 client wall-clock jump, 15 bad input. Targets: file, redis, redlock, zookeeper, etcd,
// sql_lease, sql_advisory (the quorum targets are the quorum scenarios' business).
//
// Expected verdicts come from docs/design/faults.md and docs/backends/*.md. Scenario 3 is EV for every target
// whose lock expires by a ttl (redis, redlock, zookeeper, etcd, sql_lease): a holder paused past its
// ttl overlaps the next holder, which only fencing catches. docs/design/faults.md's EV list names redis,
// redlock, etcd and zookeeper; sql_lease behaves the same way (docs/backends/sql.md: "fenced off")
// and the suite records it as EV by the same rule. file and sql_advisory keep the lock while the
// holder is paused: SAFE.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <future>
#include <optional>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "partition_link.hpp"
#include "suite.hpp"

namespace {

using namespace dlock::faults;
using std::chrono::milliseconds;

const std::vector<std::string> generic_targets = {"file", "redis", "redlock", "zookeeper", "etcd", "sql_lease", "sql_advisory",
                                                  "mysql_lease", "mysql_named"};
// Targets whose lock is a server session's: the lab ends sessions to take it away.
bool session_lock(const std::string& target) { return target == "sql_advisory" || target == "mysql_named"; }

std::vector<expectation> every_target(verdict v) {
    std::vector<expectation> out;
    for (const auto& t : generic_targets) out.push_back({t, v});
    return out;
}

// A lock that the server frees on its own while its holder is stopped (a ttl, or a ZooKeeper
// session): the targets with a non-zero liveness bound.
bool expires_when_paused(const target& t) { return t.liveness_bound.count() > 0; }

int64_t ms_between(int64_t from_ns, int64_t to_ns) { return (to_ns - from_ns) / 1'000'000; }

// A third client's try-once: the lock must still be held by someone else.
void require_still_held(context& ctx, const std::string& name, const std::string& why) {
    static int probes = 0;  // labels name history files: each probe gets its own
    auto probe = ctx.spawn_holder(fmt::format("probe-{}", ++probes));
    const auto r = probe->acquire(name, milliseconds(0));
    if (r.ok) {
        ctx.violation(violation_kind::false_success, "a third client acquired a lock that should be held: " + why);
        probe->release(name);
    }
    ctx.require(r.ok || r.status == "timeout", "a third client's try-once answers timeout, not " + r.status + r.message);
    probe->quit();
}

// ---- 1: contention ---------------------------------------------------------------------------------

// The soak's size per target: the contenders run for $DLOCK_FAULT_SOAK_SECONDS (default 120 s) and,
// when fault_suite --acquisitions N set $DLOCK_FAULT_SOAK_ACQUISITIONS, until they also made N
// checked acquisitions (the time keeps the nemesis injecting faults on a fast backend).
struct soak_size {
    long long acquisitions = 0;  // > 0: at least this many
    milliseconds duration{0};    // at least this long
};

soak_size soak_size_from_environment() {
    soak_size out;
    if (const char* text = std::getenv("DLOCK_FAULT_SOAK_ACQUISITIONS"); text && std::atoll(text) > 0)
        out.acquisitions = std::atoll(text);
    const char* text = std::getenv("DLOCK_FAULT_SOAK_SECONDS");
    const long seconds = text ? std::atol(text) : 0;
    out.duration = milliseconds(1000 * (seconds > 0 ? seconds : 120));
    return out;
}

// A soak still ends: past this, the contenders are stopped and the cell fails its "ran to the end"
// requirement.
constexpr milliseconds kSoakTimeLimit = std::chrono::hours(3);

// The servers of this target among the lab's (their names start with the lab backend's name).
std::vector<dlock::lab::server*> target_servers(context& ctx) {
    std::vector<dlock::lab::server*> mine;
    if (ctx.tgt().servers.empty()) return mine;
    const std::string prefix(dlock::lab::backend_name(ctx.tgt().servers.front()));
    for (auto* s : ctx.lab().servers())
        if (s->name() == prefix || s->name().rfind(prefix + "-", 0) == 0) mine.push_back(s);
    return mine;
}

// Soak: the contenders run under a random nemesis that only injects faults the backends claim to
// survive (so the verdict stays SAFE): SIGKILL of extra "victim" workers (each replaced by a fresh
// one), short SIGSTOPs of contenders, short server pauses (≤ ttl/4), and — for a target with
// servers — short partitions (≤ ttl/4) of the contenders that reach the servers through a
// lab::partition: the whole link, the replies only, or (several servers) a minority of the servers.
// Runs while `keep_going()` says so.
void soak_nemesis(context& ctx, const std::vector<worker_group*>& contenders, dlock::lab::partition* link, const contend_options& base,
                  const std::function<bool()>& keep_going) {
    std::vector<std::unique_ptr<worker_group>> victims;
    auto spawn_victim = [&] {
        contend_options v = base;
        v.processes = 1;
        v.acquisitions = 0;
        v.label = fmt::format("victim-{}", victims.size());
        // A victim runs until it is killed: by the nemesis, or once the contenders stopped.
        v.duration = kSoakTimeLimit;
        victims.push_back(ctx.contend(v));
    };
    spawn_victim();
    const milliseconds blip = std::max(ctx.tgt().ttl / 4, milliseconds(100));
    const auto servers = target_servers(ctx);
    // Each pause and cut lasts as long as this thread's sleep plus the time to undo it; on a loaded
    // machine both can overrun (a starved thread, iptables waiting for the xtables lock). Each is
    // measured, and the longest of each kind is noted. A contender SIGSTOPped past half its ttl may
    // hold its lock past its validity in the middle of its critical section: that is scenario 3 (EV
    // for a ttl lock), not a fault the soak claims SAFE, so such an overrun fails the cell's
    // requirement. A server pause or a cut that overruns stays a fault the backends claim to survive
    // (the holder's process keeps running; 16a-16c cut for longer than the ttl).
    std::map<std::string, milliseconds> longest;  // per kind
    int stops_overran = 0;
    auto timed = [&](const std::string& kind, const std::function<void()>& start, milliseconds length,
                     const std::function<void()>& end) {
        start();
        const auto from = std::chrono::steady_clock::now();  // the fault is in place
        std::this_thread::sleep_for(length);
        end();
        const auto took = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - from);
        longest[kind] = std::max(longest[kind], took);
        if (kind == "SIGSTOP" && took > ctx.tgt().ttl / 2) ++stops_overran;
    };
    std::uniform_int_distribution<int> gap_ms(500, 2000), action(0, link ? 3 : 2);
    while (keep_going()) {
        std::this_thread::sleep_for(milliseconds(gap_ms(ctx.rng())));
        if (!keep_going()) break;
        switch (action(ctx.rng())) {
        case 0:
            victims.back()->kill(0);
            ctx.fault("SIGKILL a contender");
            spawn_victim();
            break;
        case 1: {
            auto& group = *contenders[ctx.rng()() % contenders.size()];
            const size_t i = ctx.rng()() % group.size();
            timed("SIGSTOP", [&] { group.pause(i); }, std::min(ctx.tgt().ttl / 4, milliseconds(200)), [&] { group.resume(i); });
            ctx.fault("short SIGSTOP of a contender");
            break;
        }
        case 2: {
            if (servers.empty()) break;
            auto* s = servers[ctx.rng()() % servers.size()];
            timed("server pause", [&] { s->pause(); }, ctx.tgt().ttl / 4, [&] { s->resume(); });
            ctx.fault("short pause of a server");
            break;
        }
        default: {
            const std::size_t n = link->servers().size();
            const int kind = int(ctx.rng()() % (n > 1 ? 3 : 2));
            std::string what;
            timed(
                "partition",
                [&] {
                    if (kind == 0) {
                        link->cut_all();
                        what = "short partition: link cut";
                    } else if (kind == 1) {
                        link->cut_all(dlock::lab::direction::downstream);
                        what = "short partition: replies dropped";
                    } else {
                        // A minority of the servers (Redlock, an ensemble): the rest still answer.
                        std::vector<std::size_t> minority(n);
                        for (std::size_t i = 0; i < n; ++i) minority[i] = i;
                        std::shuffle(minority.begin(), minority.end(), ctx.rng());
                        minority.resize((n - 1) / 2);
                        link->cut(minority);
                        what = "short partition: a minority of the servers cut";
                    }
                },
                blip, [&] { link->heal(); });
            ctx.fault(what);
            break;
        }
        }
    }
    // The last victim runs until now.
    victims.back()->kill(0);
    for (auto& v : victims) v->wait(milliseconds(30000));
    std::string lengths;
    for (const auto& [kind, ms] : longest) lengths += fmt::format("{}{} {} ms", lengths.empty() ? "" : ", ", kind, ms.count());
    ctx.note("longest " + (lengths.empty() ? std::string("fault: none") : lengths));
    ctx.require(stops_overran == 0,
                fmt::format("every SIGSTOP of a contender ended within ttl/2 ({} overran, the longest {} ms: the machine starved "
                            "the nemesis)",
                            stops_overran, longest["SIGSTOP"].count()));
}

void contention(context& ctx) {
    ctx.resource();
    contend_options o;
    o.name = ctx.lock_name("contended");
    o.processes = 32;
    o.cycles = 6;
    o.hold = milliseconds(2);
    o.long_wait = milliseconds(15000);
    std::vector<std::unique_ptr<worker_group>> groups;
    soak_size size;
    int processes = o.processes;
    if (!ctx.soak()) {
        groups.push_back(ctx.contend(o));
    } else {
        // Four names × 8 processes: one name's handoff rate would bound the acquisitions a soak
        // can check; every name is still contended by 8 processes. For a target with servers, one
        // more process per name reaches them through a lab::partition the nemesis cuts.
        size = soak_size_from_environment();
        constexpr int kNames = 4, kDirect = 8;
        o.duration = size.duration;
        if (size.acquisitions > 0) o.acquisitions = (size.acquisitions + kNames * kDirect - 1) / (kNames * kDirect);
        o.processes = kDirect;
        std::optional<links::partitioned_holder_link> side;
        if (!ctx.tgt().servers.empty()) side = links::make_link(ctx, "-soak", false);
        std::vector<worker_group*> direct;
        for (int i = 0; i < kNames; ++i) {
            contend_options part = o;
            part.name = ctx.lock_name(fmt::format("contended-{}", i));
            part.label = fmt::format("contend{}", i);
            groups.push_back(ctx.contend(part));
            direct.push_back(groups.back().get());
            if (side) {
                contend_options linked = part;
                linked.processes = 1;
                // Partitions slow these down: they need not make a full share.
                if (linked.acquisitions > 0) linked.acquisitions = std::max<long long>(1, linked.acquisitions / 2);
                linked.label = fmt::format("linked{}", i);
                linked.extra_env = side->env;
                groups.push_back(ctx.contend(linked, side->config));
            }
        }
        processes = int(groups.size()) == kNames ? kNames * kDirect : kNames * (kDirect + 1);
        // Until every contender ended on its own (its size reached), or the time limit.
        const auto until = std::chrono::steady_clock::now() + std::max(kSoakTimeLimit, size.duration * 2);
        soak_nemesis(ctx, direct, side ? side->link.get() : nullptr, o, [&] {
            return std::chrono::steady_clock::now() < until &&
                   std::any_of(groups.begin(), groups.end(), [](const auto& g) { return g->running(); });
        });
    }
    bool finished = true;
    std::string failures;
    for (auto& g : groups) {
        finished = g->wait(ctx.soak() ? milliseconds(60000) : milliseconds(150000)) && finished;
        failures += g->failures();
    }
    ctx.require(finished, "every contender ran to its end: " + failures);
    const auto r = ctx.check_histories(false);
    const std::size_t enough = !ctx.soak() ? 32u : size.acquisitions > 0 ? std::size_t(size.acquisitions) : 100u;
    ctx.require(r.acquisitions >= enough, fmt::format("enough acquisitions ({} of at least {})", r.acquisitions, enough));
    ctx.require(r.resource.counter_increments == r.acquisitions || ctx.soak(),
                fmt::format("every critical section incremented the counter ({} of {})", r.resource.counter_increments,
                            r.acquisitions));
    if (!ctx.soak()) ctx.require(r.failures == 0 && r.unknowns == 0, fmt::format("no acquire errors without faults ({} errors, {} unknown)", r.failures, r.unknowns));
    ctx.note(fmt::format("{} processes, {} acquisitions, {} timeouts, {} errors; counter {} of {} increments; tokens {}",
                         processes, r.acquisitions, r.timeouts, r.failures, r.resource.counter_value,
                         r.resource.counter_increments, ctx.tgt().fencing() ? "checked" : "none (no FENCING)"));
}

// ---- 2: holder killed ----------------------------------------------------------------------------

void holder_killed(context& ctx) {
    const std::string name = ctx.lock_name("killed");
    const int rounds = ctx.ci_or_soak(1, 5);
    for (int round = 0; round < rounds; ++round) {
        auto victim = ctx.spawn_holder(fmt::format("victim-{}", round));
        const auto held = victim->acquire(name);
        if (!ctx.require(held.ok, "the victim acquires: " + held.status + held.message)) return;
        auto waiter = ctx.spawn_holder(fmt::format("waiter-{}", round));
        const milliseconds wait = ctx.tgt().liveness_limit() + milliseconds(10000);
        auto next = std::async(std::launch::async, [&] { return waiter->acquire(name, wait); });
        // Let the waiter queue (and, for a ttl, let the victim renew at least once).
        std::this_thread::sleep_for(std::max(milliseconds(300), ctx.tgt().ttl / 2));
        const int64_t killed_at = monotonic_ns();
        victim->kill();
        ctx.fault("SIGKILL holder");
        const auto got = next.get();
        if (!ctx.require(got.ok, "the waiter acquires after the holder's death: " + got.status + got.message)) return;
        const milliseconds liveness(ms_between(killed_at, got.returned_ns));
        ctx.record_liveness(liveness);
        ctx.require(liveness <= ctx.tgt().liveness_limit(),
                    fmt::format("next holder within the bound: {} ms, limit {} ms (bound {} ms + margin)", liveness.count(),
                                ctx.tgt().liveness_limit().count(), ctx.tgt().liveness_bound.count()));
        if (ctx.tgt().fencing())
            ctx.require(got.token > held.token, fmt::format("the next token {} is above the dead holder's {}", got.token, held.token));
        waiter->release(name);
        waiter->quit();
    }
    ctx.check_histories(false);
}

// ---- 3: holder paused past its ttl ---------------------------------------------------------------

// Pause the holder past its ttl, let another acquire, resume it and let it act as a holder that
// trusts the lock alone. With a ttl: the two holders overlap (EV), the resumed holder's fenced
// write is refused, its lease reads LOST, and the unfenced counter loses an update. Without: the
// lock stays with the paused holder (SAFE).
void paused_past_ttl(context& ctx, const std::string& name) {
    auto& resource = ctx.resource();
    (void)resource;
    auto stalled = ctx.spawn_holder("stalled");
    const auto a = stalled->acquire(name);
    if (!ctx.require(a.ok, "the first holder acquires: " + a.status + a.message)) return;
    if (ctx.tgt().fencing()) ctx.require(stalled->fenced_write(name).accepted, "the holder's fenced write is accepted");
    stalled->pause();
    const int64_t paused_at = monotonic_ns();
    ctx.fault("SIGSTOP holder past its ttl");
    auto next = ctx.spawn_holder("next");

    if (!expires_when_paused(ctx.tgt())) {
        const milliseconds wait = std::max(ctx.tgt().ttl * 2, milliseconds(2000));
        const auto b = next->acquire(name, wait);
        if (b.ok) ctx.violation(violation_kind::false_success, "another client acquired while the holder was paused");
        stalled->resume();
        ctx.require(stalled->state(name) == "held", "the resumed holder still holds (no ttl)");
        if (ctx.tgt().fencing()) ctx.require(stalled->fenced_write(name).accepted, "the resumed holder's write is accepted");
        ctx.require(stalled->release(name) == "released", "the resumed holder releases");
        const auto c = next->acquire(name, milliseconds(5000));
        ctx.require(c.ok, "the lock is free after the release");
        if (c.ok) next->release(name);
        ctx.note(fmt::format("paused {} ms: nobody else acquired (no ttl); the holder kept the lock",
                             ms_between(paused_at, monotonic_ns())));
    } else {
        const auto b = next->acquire(name, ctx.tgt().ttl * 3 + milliseconds(10000));
        if (!ctx.require(b.ok, "another client acquires once the paused holder's ttl ran out: " + b.status + b.message)) {
            stalled->resume();
            return;
        }
        if (ctx.tgt().fencing()) ctx.require(next->fenced_write(name).accepted, "the new holder's fenced write is accepted");
        // The new holder reads the counter and sleeps inside its critical section while the
        // resumed holder does its own read-sleep-write: one increment is lost.
        auto incr = std::async(std::launch::async, [&] { return next->counter_increment(name, milliseconds(400)); });
        std::this_thread::sleep_for(milliseconds(100));
        stalled->resume();
        const int64_t resumed_at = monotonic_ns();
        stalled->counter_increment(name, milliseconds(0));
        incr.get();
        std::string fenced = "no fencing: nothing refused the stale holder";
        if (ctx.tgt().fencing()) {
            const auto w = stalled->fenced_write(name);
            ctx.require(!w.accepted, fmt::format("the resumed holder's fenced write (token {}) is rejected", a.token));
            fenced = fmt::format("its fenced write (token {} < {}) was {}", a.token, w.highest, w.accepted ? "ACCEPTED" : "rejected");
        }
        const bool lost = wait_until([&] { return stalled->state(name) == "lost"; }, ctx.tgt().ttl + milliseconds(2000), milliseconds(20));
        ctx.require(lost, "the resumed holder's lease reads LOST");
        const auto lost_at = stalled->lost_at_ns(name);
        ctx.require(lost_at.has_value(), "the on_lost callback ran");
        const std::string outcome = stalled->release(name);
        ctx.require(outcome == "already_lost", "the stale holder's release answers already_lost, not " + outcome);
        ctx.require(next->release(name) == "released", "the new holder releases");
        ctx.note(fmt::format("paused {} ms; next holder after {} ms; {}; LOST {} ms after SIGCONT", ms_between(paused_at, resumed_at),
                             ms_between(paused_at, b.returned_ns), fenced,
                             lost_at ? std::to_string(ms_between(resumed_at, *lost_at)) : std::string("never")));
    }
    stalled->quit();
    next->quit();
}

// The time from a server-side loss of the lock to the holder's LOST callback (docs/design/contract.md: ≤ ttl/3 +
// one round trip): the lab deletes every lock of the backend (reset_backend: FLUSHALL, delete of
// the nodes, revoke of every etcd lease, TRUNCATE; for advisory locks, the end of the session).
void lost_detection(context& ctx, const std::string& name) {
    if (ctx.tgt().servers.empty()) {
        ctx.note("lost detection: n/a (file: no server can take the lock away)");
        return;
    }
    const auto round_trip = ctx.round_trip();
    const int rounds = ctx.ci_or_soak(1, 5);
    for (int round = 0; round < rounds; ++round) {
        auto holder = ctx.spawn_holder(fmt::format("lost-{}", round));
        const auto got = holder->acquire(name);
        if (!ctx.require(got.ok, "the holder acquires: " + got.status + got.message)) return;
        // Let the holder settle (etcd arms its own-key watch shortly after acquiring), at a random
        // phase of its renewal cycle.
        std::this_thread::sleep_for(std::max(milliseconds(300), ctx.tgt().ttl / 2) + milliseconds(ctx.rng()() % 200));
        const int64_t fault_at = monotonic_ns();
        ctx.lab().reset(ctx.tgt().servers.front(), session_lock(ctx.tgt().name));
        ctx.fault(session_lock(ctx.tgt().name) ? "server ends the holder's session" : "server-side deletion of the lock");
        std::optional<int64_t> lost_at;
        const milliseconds detection_limit = ctx.tgt().ttl * 2 + milliseconds(2000);
        wait_until([&] { return (lost_at = holder->lost_at_ns(name)).has_value(); }, detection_limit, milliseconds(10));
        const auto bound = std::chrono::duration_cast<std::chrono::nanoseconds>(ctx.tgt().ttl) / 3 + round_trip;
        if (lost_at) {
            ctx.record_lost_detection(std::chrono::nanoseconds(*lost_at - fault_at), bound);
        } else {
            ctx.require(false, "LOST reported after the server lost the lock");
        }
        holder->release(name);
        holder->quit();
    }
    if (!ctx.result().lost_detection_ms.empty())
        ctx.note(fmt::format("lost detection bound ttl/3 + rtt = {:.0f} ms (rtt {:.2f} ms)",
                             double(std::chrono::duration_cast<std::chrono::microseconds>(
                                        std::chrono::duration_cast<std::chrono::nanoseconds>(ctx.tgt().ttl) / 3 + round_trip)
                                        .count()) / 1000.0,
                             double(round_trip.count()) / 1e6));
}

void holder_paused(context& ctx) {
    paused_past_ttl(ctx, ctx.lock_name("paused"));
    // Judge the pause before the deletion: the deletion is a fault of its own, not an overlap.
    const auto r = ctx.check_histories(true);
    ctx.require(r.overlaps == 0, "no overlap within the holders' own valid_until (the client's bound is honest)");
    lost_detection(ctx, ctx.lock_name("lost"));
}

// ---- 4: stale release ----------------------------------------------------------------------------

void stale_release(context& ctx) {
    const std::string name = ctx.lock_name("stale");
    ctx.resource();
    auto stale = ctx.spawn_holder("stale");
    auto next = ctx.spawn_holder("next");
    const auto a = stale->acquire(name);
    if (!ctx.require(a.ok, "the first holder acquires")) return;
    std::string outcome;
    if (expires_when_paused(ctx.tgt())) {
        stale->pause();
        ctx.fault("SIGSTOP holder past its ttl");
        const auto b = next->acquire(name, ctx.tgt().ttl * 3 + milliseconds(10000));
        stale->resume();
        if (!ctx.require(b.ok, "another client acquires after the ttl: " + b.status + b.message)) return;
        outcome = stale->release(name);
        ctx.note("A paused past its ttl, B acquired, A released: " + outcome);
    } else {
        // No ttl: a paused holder keeps the lock (scenario 3), so the stale release here is the
        // release of a lease already released, after another client took the lock.
        ctx.require(stale->release(name) == "released", "the first holder releases");
        const auto b = next->acquire(name, milliseconds(5000));
        if (!ctx.require(b.ok, "another client acquires")) return;
        outcome = stale->release(name);
        ctx.fault("release of a released lease");
        ctx.note("no ttl: A released, B acquired, A released again: " + outcome);
    }
    ctx.require(outcome == "already_lost" || (!expires_when_paused(ctx.tgt()) && outcome == "released"),
                "the stale release is refused or a no-op (answer: " + outcome + ")");
    // B's lock is untouched: still held after a renewal period, a third client cannot take it,
    // and B's fenced write goes through.
    std::this_thread::sleep_for(ctx.tgt().ttl / 3 + milliseconds(200));
    const std::string b_state = next->state(name);
    if (b_state != "held" && b_state != "suspect")
        ctx.violation(violation_kind::false_success, "the new holder lost its lock after the stale release: " + b_state);
    require_still_held(ctx, name, "after a stale release");
    if (ctx.tgt().fencing()) ctx.require(next->fenced_write(name).accepted, "the new holder's fenced write is accepted");
    ctx.require(next->release(name) == "released", "the new holder releases");
    stale->quit();
    next->quit();
    ctx.check_histories(false);
}

// ---- 5: owner-only release -----------------------------------------------------------------------

void owner_only_release(context& ctx) {
    const std::string name = ctx.lock_name("owned");
    auto owner = ctx.spawn_holder("owner");
    const auto a = owner->acquire(name);
    if (!ctx.require(a.ok, "the owner acquires")) return;

    // Another client: it cannot take the lock, and has nothing to release it with.
    auto other = ctx.spawn_holder("other");
    const auto tried = other->acquire(name, milliseconds(0));
    if (tried.ok) ctx.violation(violation_kind::false_success, "another client acquired a held lock");
    ctx.require(other->release(name) == "none", "another client holds no lease it could release");
    other->quit();  // closing its client releases only its own leases
    ctx.fault("another client tried, then closed");
    require_still_held(ctx, name, "after another client's attempt and close");

    // A reused old lease: the owner releases, re-acquires, then releases its first lease again.
    ctx.require(owner->release(name) == "released", "the owner releases");
    const auto again = owner->acquire(name, milliseconds(5000));
    if (!ctx.require(again.ok, "the owner acquires again")) return;
    const std::string reused = owner->release_previous(name);
    ctx.fault("release of an old lease after re-acquiring");
    ctx.require(reused == "released" || reused == "already_lost", "releasing the old lease is a no-op (" + reused + ")");
    if (owner->state(name) != "held") ctx.violation(violation_kind::false_success, "the old lease's release ended the new one");
    require_still_held(ctx, name, "after an old lease was released");

    // A reused old lease against another owner: the owner's released lease, released again while
    // a second client holds the lock.
    ctx.require(owner->release(name) == "released", "the owner releases its second lease");
    auto second = ctx.spawn_holder("second");
    const auto s = second->acquire(name, milliseconds(5000));
    if (!ctx.require(s.ok, "a second client acquires")) return;
    const std::string late = owner->release(name);
    ctx.fault("release of a released lease while another client holds");
    if (second->state(name) != "held") ctx.violation(violation_kind::false_success, "a released lease's release ended another owner's lock");
    require_still_held(ctx, name, "after a released lease was released again");
    ctx.require(second->release(name) == "released", "the second client releases");
    second->quit();
    owner->quit();
    ctx.check_histories(false);
    ctx.note("other client: refused; old lease re-released: " + reused + "; released lease re-released under another owner: " +
             late + "; forged token: not expressible through the API (a lease is an opaque handle only acquire makes; "
             "no call takes an owner token), so shown by construction here and per backend in tests/backends");
}

// ---- 9: client wall-clock jump -------------------------------------------------------------------

void wall_clock_jump(context& ctx) {
    const std::string library = clock_shift_library();
    if (!ctx.require(!library.empty(), "the clock-shift shim is built")) return;
    const std::string name = ctx.lock_name("clock");
    const auto shift_file = ctx.dir() / "clock-shift";
    auto set_shift = [&](long long seconds) { std::ofstream(shift_file) << seconds << "\n"; };
    set_shift(0);
    ctx.resource();
    auto jumper = ctx.spawn_holder_with_env("jumper", {}, {"LD_PRELOAD=" + library, "DLOCK_FAULT_CLOCK_SHIFT_FILE=" + shift_file.string()});
    auto other = ctx.spawn_holder("other");
    const auto a = jumper->acquire(name);
    if (!ctx.require(a.ok, "the jumping client acquires")) return;
    // One ttl covers three renewals (the keeper renews every ttl/3).
    const milliseconds settle = std::max(ctx.tgt().ttl, milliseconds(1000));
    int jumps = 0;
    long long offset = 0;  // the shift file holds the offset from the real clock
    for (long long jump : {+7200LL, -10800LL, +86400LL * 365}) {
        const long long before = std::stoll(jumper->raw("wallclock"));
        offset += jump;
        set_shift(offset);
        const long long after = std::stoll(jumper->raw("wallclock"));
        ctx.require(std::llabs(after - before - jump) < 30, fmt::format("the client's wall clock jumped by {} s (saw {} s)", jump, after - before));
        ctx.fault("client wall-clock jump");
        ++jumps;
        // Several renewal periods pass under the jumped clock.
        std::this_thread::sleep_for(settle);
        const std::string state = jumper->state(name);
        ctx.require(state == "held", "the lease stays held across the jump (" + state + ")");
        const auto tried = other->acquire(name, milliseconds(0));
        if (tried.ok) ctx.violation(violation_kind::false_success, "another client acquired during the jumped holder's hold");
        if (ctx.tgt().fencing()) ctx.require(jumper->fenced_write(name).accepted, "the holder's fenced write is accepted");
    }
    ctx.require(jumper->release(name) == "released", "the jumping client releases");
    const auto b = other->acquire(name, milliseconds(5000));
    ctx.require(b.ok, "the other client acquires after the release");
    if (b.ok) other->release(name);
    // A short contention under jumps: the jumping client and a normal one take turns.
    for (int i = 0; i < 10; ++i) {
        set_shift((i % 2 ? -1 : 1) * 3600LL * (i + 1));
        const auto j = jumper->acquire(name, milliseconds(5000));
        if (j.ok) {
            jumper->counter_increment(name, milliseconds(2));
            jumper->release(name);
        }
        const auto o = other->acquire(name, milliseconds(5000));
        if (o.ok) {
            other->counter_increment(name, milliseconds(2));
            other->release(name);
        }
        ctx.require(j.ok && o.ok, "both clients acquire in turn while the clock jumps");
    }
    set_shift(0);
    jumper->quit();
    other->quit();
    ctx.check_histories(true);
    ctx.note(fmt::format("{} wall-clock jumps (+2 h, −3 h, +1 y) of a holder's process via an LD_PRELOAD shim on "
                         "CLOCK_REALTIME/gettimeofday/time, each held over {} ms of renewals; then 10 alternating acquisitions "
                         "under jumps. Server clocks untouched (that is scenario 8)",
                         jumps, settle.count()));
}

// ---- 15: bad input -------------------------------------------------------------------------------

std::string hex(const std::string& bytes) {
    if (bytes.empty()) return "-";
    static const char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size() * 2);
    for (unsigned char c : bytes) {
        out += digits[c >> 4];
        out += digits[c & 15];
    }
    return out;
}

struct probe_case {
    std::string what;
    std::string command;                   // holder protocol line
    std::set<std::string> accepted;        // answers' first words (+ status) that are correct
};

void bad_input(context& ctx) {
    auto prober = ctx.spawn_holder("prober");
    std::vector<probe_case> cases;
    auto name_case = [&](std::string what, const std::string& name, std::set<std::string> ok) {
        cases.push_back({std::move(what), "probe_acquire " + hex(name) + " 0 default", std::move(ok)});
    };
    const std::set<std::string> invalid = {"DLOCK_INVALID_ARGUMENT"};
    const std::set<std::string> valid = {"ok"};
    name_case("empty name", "", invalid);
    name_case("1 MiB name", std::string(1 << 20, 'n'), invalid);
    name_case("1025-byte name", std::string(1025, 'n'), invalid);
    name_case("NUL inside the name", std::string("ab\0cd", 5), invalid);
    name_case("non-UTF-8 name", "\xff\xfe\xfd", invalid);
    name_case("truncated UTF-8 sequence", "lock-\xc3", invalid);
    name_case("overlong UTF-8 encoding of '/'", "\xc0\xaf", invalid);
    name_case("1024-byte name (the maximum)", ctx.lock_name("") + std::string(1024 - ctx.lock_name("").size(), 'm'), valid);
    name_case("name `/`", "/", valid);
    name_case("name `..`", "..", valid);
    name_case("name `.`", ".", valid);
    name_case("control characters", ctx.lock_name("\x01\x1f\x7f\t\r"), valid);
    name_case("path traversal", "../../../../etc/passwd", valid);
    name_case("key-pattern characters", ctx.lock_name("*?[a]{b}%s'\";--"), valid);
    auto ttl_case = [&](std::string what, const std::string& ttl, std::set<std::string> ok) {
        cases.push_back({std::move(what), "probe_acquire " + hex(ctx.lock_name("ttl")) + " 0 " + ttl, std::move(ok)});
    };
    // A backend without ttl may ignore a ttl it never uses; with one, 0 and negative are refused.
    const std::set<std::string> invalid_or_ignored =
        ctx.tgt().has_ttl() ? invalid : std::set<std::string>{"DLOCK_INVALID_ARGUMENT", "ok"};
    ttl_case("ttl 0", "0", invalid_or_ignored);
    ttl_case("negative ttl", "-5", invalid_or_ignored);
    ttl_case("ttl INT64_MIN", "-9223372036854775808", invalid_or_ignored);
    ttl_case("overflowing ttl (INT64_MAX ms)", "9223372036854775807", {"DLOCK_INVALID_ARGUMENT", "ok"});
    // A 1 ms grant is usually over when the reply arrives: the core refuses it, and a try-once
    // acquire then answers timeout.
    ttl_case("ttl below one round trip (1 ms)", "1", {"DLOCK_INVALID_ARGUMENT", "ok", "DLOCK_LOST", "timeout"});
    cases.push_back({"negative wait", "probe_acquire " + hex(ctx.lock_name("wait")) + " -7 default", {"ok", "DLOCK_INVALID_ARGUMENT"}});

    // Configs: this target's config with an unknown option, and broken configs of every kind.
    auto config_case = [&](std::string what, const std::string& text, std::set<std::string> ok) {
        const auto path = ctx.dir() / fmt::format("bad-config-{}.yaml", cases.size());
        std::ofstream(path) << text;
        cases.push_back({std::move(what), "probe_open " + path.string(), std::move(ok)});
    };
    std::ifstream in(ctx.tgt().config);
    const std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::set<std::string> config_error = {"DLOCK_CONFIG"};
    config_case("unknown option key", config + "  no_such_option: 1\n", config_error);
    config_case("unknown top-level key", config + "no_such_section: {}\n", config_error);
    config_case("malformed YAML", config + "  : [unclosed\n", config_error);
    config_case("defaults with a bad duration", config + "defaults: { ttl: soon }\n", config_error);
    config_case("defaults with ttl 0", config + "defaults: { ttl: 0s }\n", config_error);
    config_case("empty file", "", config_error);
    config_case("missing plugin", "backend: no_such_backend\n", {"DLOCK_PLUGIN", "DLOCK_CONFIG"});
    const std::string fakes = fake_plugin_dir();
    if (!fakes.empty()) {
        config_case("plugin with a too-old ABI", fmt::format("backend: fake-too-old\nplugin_path: [\"{}\"]\n", fakes), {"DLOCK_PLUGIN"});
        config_case("plugin with a too-new ABI", fmt::format("backend: fake-too-new\nplugin_path: [\"{}\"]\n", fakes), {"DLOCK_PLUGIN"});
        config_case("plugin without the entry symbol", fmt::format("backend: fake-no-symbol\nplugin_path: [\"{}\"]\n", fakes), {"DLOCK_PLUGIN"});
    }
    if (ctx.tgt().name == "redlock") {
        const auto endpoints = ctx.lab().access(dlock::lab::backend::redlock).endpoints;
        auto list = [](const std::vector<dlock::lab::endpoint>& e) {
            std::string out;
            for (const auto& x : e) out += (out.empty() ? "" : ", ") + x.to_string();
            return "[" + out + "]";
        };
        auto dup = endpoints;
        dup[1] = dup[0];
        config_case("duplicate Redlock endpoints", "backend: redlock\noptions:\n  endpoints: " + list(dup) + "\n", config_error);
        config_case("even Redlock node count (4)",
                    "backend: redlock\noptions:\n  endpoints: " + list({endpoints.begin(), endpoints.begin() + 4}) + "\n", config_error);
    }

    int precise = 0;
    for (const auto& c : cases) {
        std::string answer;
        try {
            answer = prober->raw(c.command);
        } catch (const std::exception& e) {
            answer = std::string("(no answer: ") + e.what() + ")";
        }
        if (!prober->alive()) {
            ctx.violation(violation_kind::other, c.what + ": the client process died (crash)");
            prober = ctx.spawn_holder(fmt::format("prober-{}", cases.size()));
            continue;
        }
        std::istringstream words(answer);
        std::string first, status;
        words >> first >> status;
        const std::string key = first == "error" ? status : first;
        std::string message;
        std::getline(words, message);
        const bool ok = c.accepted.count(key) && (first != "error" || message.size() > 1);
        if (ok) ++precise;
        if (first == "ok" && c.accepted.count("ok") == 0)
            ctx.violation(violation_kind::false_success, c.what + ": accepted (should be refused)");
        ctx.require(ok || (first == "ok" && c.accepted.count("ok") == 0),
                    c.what + ": expected one of {" + [&] {
                        std::string s;
                        for (const auto& a : c.accepted) s += (s.empty() ? "" : ", ") + a;
                        return s;
                    }() + "} with a message, got: " + answer.substr(0, 200));
        ctx.fault("bad input: " + c.what);
    }
    prober->quit();
    ctx.note(fmt::format("{} inputs tried, {} answered precisely, no crash", cases.size(), precise));
}

// ---- registration --------------------------------------------------------------------------------

std::vector<expectation> paused_expectations() {
    std::vector<expectation> out;
    for (const auto& t : generic_targets)
        out.push_back({t, t == "file" || session_lock(t) ? verdict::safe : verdict::ev});
    return out;
}

const registrar r1{{1, "", "contention, 32 processes", every_target(verdict::safe), contention}};
const registrar r2{{2, "", "holder killed (SIGKILL)", every_target(verdict::safe), holder_killed}};
const registrar r3{{3, "", "holder paused past its ttl", paused_expectations(), holder_paused}};
const registrar r4{{4, "", "stale release", every_target(verdict::safe), stale_release}};
const registrar r5{{5, "", "owner-only release", every_target(verdict::safe), owner_only_release}};
const registrar r9{{9, "", "client wall-clock jump", every_target(verdict::safe), wall_clock_jump}};
const registrar r15{{15, "", "bad input", every_target(verdict::safe), bad_input}};

}  // namespace

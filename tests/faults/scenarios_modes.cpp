// scenarios_modes.cpp — docs/design/faults.md scenarios 1–4 for the two modes of acquisition beside
// the exclusive lock: a semaphore of N = 3 permits ("1s".."4s") and a lock held shared or
// exclusively ("1r".."4r", r for readers). A (scenario, target) pair is a cell only where the
// target's client reports DLOCK_CAP_SEMAPHORE or DLOCK_CAP_SHARED (scenario::requires_capabilities);
// the runner lists the others as "not a cell".
//
// How safety is judged (docs/design/faults.md, "Semaphores and shared locks"):
// - the histories: the count of grant intervals (acquire-ok … release-invoke, half-open) held at
//   one instant — at most N for a semaphore; never an exclusive holder beside any other for a
//   shared lock — cut at each holder's valid_until, and (scenario 3) uncut;
// - the resource's census: each holder enters and leaves the resource inside its critical
//   section; an enter beside holders its mode forbids is a violation the resource confirms;
// - fencing, where the target has FENCING: every grant has its own token, strictly increasing per
//   name, but tokens of permits (or of shared holds) do not order holders that may hold together.
//   So the resource fences by mode: an exclusive write needs a token >= every token accepted; a
//   shared holder's access needs a token >= every exclusive token accepted; a permit's access is
//   refused once N distinct higher tokens were accepted (N newer permits wrote, so it is stale).
//   A permit older than N newer permit holders is caught; one still among the newest N is not —
//   fencing cannot tell which of N + 1 holders expired. Scenario 3s arranges the N newer holders.
//
// Verdicts as for locks: 1, 2, 4 SAFE everywhere; 3 EV for every target whose holds expire by a
// ttl or a session timeout while the holder is stopped (redis, zookeeper, etcd, sql_lease, …): the
// N + 1st holder (or the writer beside a paused reader) overlaps, and fencing refuses the resumed
// holder. file and the session-bound advisory modes keep the hold while the holder is stopped: SAFE.
#include <future>
#include <thread>

#include <fmt/format.h>

#include "suite.hpp"

namespace {

using namespace dlock::faults;
using std::chrono::milliseconds;

constexpr uint32_t kPermits = 3;

const std::vector<std::string> mode_targets = {"file", "redis", "redlock", "zookeeper", "etcd", "sql_lease", "sql_advisory",
                                               "mysql_lease", "mysql_named"};

// Targets whose holds belong to a server session that a stopped client keeps (docs/backends/sql.md).
bool session_lock(const std::string& target) { return target == "sql_advisory" || target == "mysql_named"; }

// A hold the server frees on its own while its holder is stopped (a ttl, a ZooKeeper session).
bool expires_when_paused(const target& t) { return t.liveness_bound.count() > 0; }

int64_t ms_between(int64_t from_ns, int64_t to_ns) { return (to_ns - from_ns) / 1'000'000; }

// The two families: how the first holder holds, how the one it keeps out asks, and who else must
// hold so that the one asking is kept out (the other N - 1 permits).
struct family {
    bool semaphore = true;
    hold_mode first() const { return semaphore ? hold_mode::permit(kPermits) : hold_mode::shared(); }
    hold_mode blocked() const { return semaphore ? hold_mode::permit(kPermits) : hold_mode::exclusive(); }
    int fillers() const { return semaphore ? int(kPermits) - 1 : 0; }
    const char* first_words() const { return semaphore ? "a permit" : "a shared hold"; }
    const char* blocked_words() const { return semaphore ? "another permit" : "an exclusive hold"; }
};
const family semaphore_family{true};
const family shared_family{false};

// Holders taking the other N - 1 permits (none for a shared lock), each with a fenced write and
// an enter into the resource's census when `census`.
std::vector<std::unique_ptr<holder>> take_fillers(context& ctx, const family& f, const std::string& name, bool census) {
    std::vector<std::unique_ptr<holder>> fillers;
    for (int i = 0; i < f.fillers(); ++i) {
        auto h = ctx.spawn_holder(fmt::format("filler-{}", i));
        const auto got = h->acquire_as(name, f.first(), milliseconds(5000));
        if (!ctx.require(got.ok, fmt::format("filler {} takes a permit: {}{}", i, got.status, got.message))) break;
        if (census) {
            if (ctx.tgt().fencing()) ctx.require(h->fenced_write(name).accepted, "a filler's fenced access is accepted");
            ctx.require(h->enter(name) == "ok", "a filler enters the resource's census within the limit");
        }
        fillers.push_back(std::move(h));
    }
    return fillers;
}

void release_all(context& ctx, std::vector<std::unique_ptr<holder>>& holders, const std::string& name, bool census) {
    for (auto& h : holders) {
        if (census) h->leave(name);
        const std::string outcome = h->release(name);
        ctx.require(outcome == "released", h->label() + " releases its hold (" + outcome + ")");
        h->quit();
    }
}

// A third client's try-once in `mode` must find no room: the name is as full as it should be.
void require_no_room(context& ctx, const std::string& name, const hold_mode& mode, const std::string& why) {
    static int probes = 0;
    auto probe = ctx.spawn_holder(fmt::format("probe-{}", ++probes));
    const auto r = probe->acquire_as(name, mode, milliseconds(0));
    if (r.ok) {
        ctx.violation(violation_kind::false_success, "a third client got a hold where there was no room: " + why);
        probe->release(name);
    }
    ctx.require(r.ok || r.status == "timeout", "a third client's try-once answers timeout, not " + r.status + r.message);
    probe->quit();
}

// ---- 1s, 1r: contention ------------------------------------------------------------------------

void contention(context& ctx, const family& f) {
    ctx.resource();
    contend_options o;
    o.name = ctx.lock_name(f.semaphore ? "permits" : "shared");
    o.label = f.semaphore ? "permit" : "rw";
    o.processes = ctx.ci_or_soak(12, 32);
    o.cycles = ctx.ci_or_soak(5, 60);
    o.hold = milliseconds(5);
    o.long_wait = milliseconds(15000);
    if (f.semaphore) o.permits = kPermits;
    else o.shared_percent = 70;
    auto group = ctx.contend(o);
    const bool finished = group->wait(ctx.soak() ? milliseconds(900000) : milliseconds(150000));
    ctx.require(finished, "every contender ran to its end: " + group->failures());
    const auto r = ctx.check_histories(false);
    const std::size_t enough = std::size_t(o.processes);
    ctx.require(r.acquisitions >= enough, fmt::format("enough acquisitions ({} of at least {})", r.acquisitions, enough));
    ctx.require(r.failures == 0 && r.unknowns == 0,
                fmt::format("no acquire errors without faults ({} errors, {} unknown)", r.failures, r.unknowns));
    ctx.note(fmt::format("{} processes, {} acquisitions ({}), {} timeouts; at most {} holders at once by the histories, {} inside "
                         "the resource at once{}; fenced accesses {} accepted, {} refused{}",
                         o.processes, r.acquisitions,
                         f.semaphore ? fmt::format("{} permits", kPermits) : fmt::format("{} % shared", o.shared_percent),
                         r.timeouts, r.max_holders, r.resource.max_inside,
                         f.semaphore ? fmt::format(" (limit {})", kPermits) : std::string(), r.resource.writes_accepted,
                         r.resource.writes_rejected,
                         ctx.tgt().fencing() ? (f.semaphore ? " (a permit is refused once N newer permits wrote)" : "")
                                             : " (no FENCING)"));
}

// ---- 2s, 2r: holder killed ---------------------------------------------------------------------

void holder_killed(context& ctx, const family& f) {
    const std::string name = ctx.lock_name("killed");
    const int rounds = ctx.ci_or_soak(1, 5);
    for (int round = 0; round < rounds; ++round) {
        auto victim = ctx.spawn_holder(fmt::format("victim-{}", round));
        const auto held = victim->acquire_as(name, f.first());
        if (!ctx.require(held.ok, "the victim acquires: " + held.status + held.message)) return;
        auto fillers = take_fillers(ctx, f, name, false);
        auto waiter = ctx.spawn_holder(fmt::format("waiter-{}", round));
        const milliseconds wait = ctx.tgt().liveness_limit() + milliseconds(10000);
        auto next = std::async(std::launch::async, [&] { return waiter->acquire_as(name, f.blocked(), wait); });
        // Let the waiter queue (and, for a ttl, let the victim renew at least once).
        std::this_thread::sleep_for(std::max(milliseconds(300), ctx.tgt().ttl / 2));
        if (next.wait_for(milliseconds(0)) == std::future_status::ready) {
            const auto early = next.get();
            ctx.violation(violation_kind::false_success,
                          fmt::format("{} was granted while the victim held {} ({})", f.blocked_words(), f.first_words(),
                                      early.ok ? "ok" : early.status));
            return;
        }
        const int64_t killed_at = monotonic_ns();
        victim->kill();
        ctx.fault(fmt::format("SIGKILL holder of {}", f.first_words()));
        const auto got = next.get();
        if (!ctx.require(got.ok, "the waiter acquires after the holder's death: " + got.status + got.message)) return;
        const milliseconds liveness(ms_between(killed_at, got.returned_ns));
        ctx.record_liveness(liveness);
        ctx.require(liveness <= ctx.tgt().liveness_limit(),
                    fmt::format("{} returns within the bound: {} ms, limit {} ms (bound {} ms + margin)",
                                f.semaphore ? "the dead holder's permit" : "the dead reader's hold", liveness.count(),
                                ctx.tgt().liveness_limit().count(), ctx.tgt().liveness_bound.count()));
        if (ctx.tgt().fencing())
            ctx.require(got.token > held.token, fmt::format("the next token {} is above the dead holder's {}", got.token, held.token));
        ctx.require(waiter->release(name) == "released", "the waiter releases");
        waiter->quit();
        release_all(ctx, fillers, name, false);
    }
    ctx.check_histories(false);
    ctx.note(fmt::format("{} held{}; {} waited; SIGKILL of the holder", f.first_words(),
                         f.semaphore ? fmt::format(" with the other {} permits taken", kPermits - 1) : std::string(),
                         f.blocked_words()));
}

// ---- 3s, 3r: holder paused past its ttl --------------------------------------------------------

void holder_paused(context& ctx, const family& f) {
    const std::string name = ctx.lock_name("paused");
    ctx.resource();
    const bool fencing = ctx.tgt().fencing();
    auto stalled = ctx.spawn_holder("stalled");
    const auto a = stalled->acquire_as(name, f.first());
    if (!ctx.require(a.ok, "the first holder acquires: " + a.status + a.message)) return;
    if (fencing) ctx.require(stalled->fenced_write(name).accepted, "the holder's fenced access is accepted");
    ctx.require(stalled->enter(name) == "ok", "the holder enters the resource's census");
    auto fillers = take_fillers(ctx, f, name, true);
    stalled->pause();
    const int64_t paused_at = monotonic_ns();
    ctx.fault("SIGSTOP holder past its ttl");
    auto next = ctx.spawn_holder("next");

    if (!expires_when_paused(ctx.tgt())) {
        const milliseconds wait = std::max(ctx.tgt().ttl * 2, milliseconds(2000));
        const auto b = next->acquire_as(name, f.blocked(), wait);
        if (b.ok) ctx.violation(violation_kind::false_success, std::string(f.blocked_words()) + " was granted while the holder was paused");
        stalled->resume();
        ctx.require(stalled->state(name) == "held", "the resumed holder still holds (no ttl)");
        if (fencing) ctx.require(stalled->fenced_write(name).accepted, "the resumed holder's access is accepted");
        stalled->leave(name);
        ctx.require(stalled->release(name) == "released", "the resumed holder releases");
        const auto c = next->acquire_as(name, f.blocked(), milliseconds(5000));
        ctx.require(c.ok, "there is room after the release");
        if (c.ok) next->release(name);
        ctx.note(fmt::format("paused {} ms: {} was not granted (no ttl); the holder kept {}", ms_between(paused_at, monotonic_ns()),
                             f.blocked_words(), f.first_words()));
    } else {
        const auto b = next->acquire_as(name, f.blocked(), ctx.tgt().ttl * 3 + milliseconds(10000));
        if (!ctx.require(b.ok, std::string(f.blocked_words()) + " is granted once the paused holder's ttl ran out: " + b.status +
                                   b.message)) {
            stalled->resume();
            return;
        }
        // The new holder acts on the resource while the paused one is still inside: the census
        // sees N + 1 holders (or a writer beside a reader).
        if (fencing) ctx.require(next->fenced_write(name).accepted, "the new holder's fenced access is accepted");
        const std::string census = next->enter(name);
        stalled->resume();
        const int64_t resumed_at = monotonic_ns();
        std::string fenced = "no fencing: nothing refused the stale holder";
        if (fencing) {
            const auto w = stalled->fenced_write(name);
            ctx.require(!w.accepted, fmt::format("the resumed holder's fenced access (token {}) is refused", a.token));
            fenced = fmt::format("its fenced access (token {}, highest {}) was {}", a.token, w.highest, w.accepted ? "ACCEPTED" : "refused");
        }
        const bool lost = wait_until([&] { return stalled->state(name) == "lost"; }, ctx.tgt().ttl + milliseconds(2000), milliseconds(20));
        ctx.require(lost, "the resumed holder's lease reads LOST");
        // The lease reads LOST a moment before the keeper's thread runs the callback.
        ctx.require(wait_until([&] { return stalled->lost_at_ns(name).has_value(); }, milliseconds(1000), milliseconds(10)),
                    "the on_lost callback ran (within 1 s of the lease reading LOST)");
        stalled->leave(name);
        const std::string outcome = stalled->release(name);
        ctx.require(outcome == "already_lost", "the stale holder's release answers already_lost, not " + outcome);
        next->leave(name);
        ctx.require(next->release(name) == "released", "the new holder releases");
        ctx.note(fmt::format("{} paused {} ms; {} granted after {} ms; the resource's census: {} on its enter; {}",
                             f.first_words(), ms_between(paused_at, resumed_at), f.blocked_words(), ms_between(paused_at, b.returned_ns),
                             census == "over" ? std::string("OVER the limit") : census, fenced));
    }
    release_all(ctx, fillers, name, true);
    stalled->quit();
    next->quit();
    const auto r = ctx.check_histories(true);
    ctx.require(r.overlaps == 0, "no count violation within the holders' own valid_until (the client's bound is honest)");
}

// ---- 4s, 4r: stale release ---------------------------------------------------------------------

void stale_release(context& ctx, const family& f) {
    const std::string name = ctx.lock_name("stale");
    ctx.resource();
    auto stale = ctx.spawn_holder("stale");
    auto next = ctx.spawn_holder("next");
    const auto a = stale->acquire_as(name, f.first());
    if (!ctx.require(a.ok, "the first holder acquires")) return;
    auto fillers = take_fillers(ctx, f, name, false);
    std::string outcome;
    if (expires_when_paused(ctx.tgt())) {
        stale->pause();
        ctx.fault("SIGSTOP holder past its ttl");
        const auto b = next->acquire_as(name, f.blocked(), ctx.tgt().ttl * 3 + milliseconds(10000));
        stale->resume();
        if (!ctx.require(b.ok, "another client is granted after the ttl: " + b.status + b.message)) return;
        outcome = stale->release(name);
        ctx.note(fmt::format("A paused past its ttl holding {}, B granted {}, A released: {}", f.first_words(), f.blocked_words(), outcome));
    } else {
        ctx.require(stale->release(name) == "released", "the first holder releases");
        const auto b = next->acquire_as(name, f.blocked(), milliseconds(5000));
        if (!ctx.require(b.ok, "another client is granted")) return;
        outcome = stale->release(name);
        ctx.fault("release of a released lease");
        ctx.note(fmt::format("no ttl: A released {}, B was granted {}, A released again: {}", f.first_words(), f.blocked_words(), outcome));
    }
    ctx.require(outcome == "already_lost" || (!expires_when_paused(ctx.tgt()) && outcome == "released"),
                "the stale release is refused or a no-op (answer: " + outcome + ")");
    // B's hold and the fillers' are untouched: still held after a renewal period, and a third
    // client finds no room.
    std::this_thread::sleep_for(ctx.tgt().ttl / 3 + milliseconds(200));
    for (holder* h : [&] {
             std::vector<holder*> all{next.get()};
             for (auto& x : fillers) all.push_back(x.get());
             return all;
         }()) {
        const std::string state = h->state(name);
        if (state != "held" && state != "suspect")
            ctx.violation(violation_kind::false_success, h->label() + " lost its hold after the stale release: " + state);
    }
    require_no_room(ctx, name, f.blocked(), "after a stale release");
    if (!f.semaphore) require_no_room(ctx, name, hold_mode::shared(), "a shared try beside the exclusive holder");
    if (ctx.tgt().fencing()) ctx.require(next->fenced_write(name).accepted, "the new holder's fenced access is accepted");
    ctx.require(next->release(name) == "released", "the new holder releases");
    release_all(ctx, fillers, name, false);
    stale->quit();
    next->quit();
    ctx.check_histories(false);
}

// ---- registration ------------------------------------------------------------------------------

std::vector<expectation> every_target(verdict v) {
    std::vector<expectation> out;
    for (const auto& t : mode_targets) out.push_back({t, v});
    return out;
}

std::vector<expectation> paused_expectations() {
    std::vector<expectation> out;
    for (const auto& t : mode_targets) out.push_back({t, t == "file" || session_lock(t) ? verdict::safe : verdict::ev});
    return out;
}

scenario in_mode(int number, const family& f, std::string title, std::vector<expectation> targets,
                 void (*run)(context&, const family&)) {
    scenario s;
    s.number = number;
    s.variant = f.semaphore ? "s" : "r";
    s.title = (f.semaphore ? fmt::format("semaphore (N = {}): ", kPermits) : std::string("shared lock: ")) + title;
    s.targets = std::move(targets);
    s.run = [&f, run](context& ctx) { run(ctx, f); };
    s.requires_capabilities = f.semaphore ? DLOCK_CAP_SEMAPHORE : DLOCK_CAP_SHARED;
    return s;
}

const registrar r1s{in_mode(1, semaphore_family, "contention", every_target(verdict::safe), contention)};
const registrar r1r{in_mode(1, shared_family, "contention, 70 % shared", every_target(verdict::safe), contention)};
const registrar r2s{in_mode(2, semaphore_family, "permit holder killed (SIGKILL)", every_target(verdict::safe), holder_killed)};
const registrar r2r{in_mode(2, shared_family, "shared holder killed (SIGKILL)", every_target(verdict::safe), holder_killed)};
const registrar r3s{in_mode(3, semaphore_family, "permit holder paused past its ttl", paused_expectations(), holder_paused)};
const registrar r3r{in_mode(3, shared_family, "shared holder paused past its ttl", paused_expectations(), holder_paused)};
const registrar r4s{in_mode(4, semaphore_family, "stale permit release", every_target(verdict::safe), stale_release)};
const registrar r4r{in_mode(4, shared_family, "stale shared release", every_target(verdict::safe), stale_release)};

}  // namespace

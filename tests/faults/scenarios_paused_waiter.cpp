// scenarios_paused_waiter.cpp — docs/design/faults.md scenario 19 for a paused *waiter*: "a paused
// waiter may delay others by a bounded time, never by a ttl or forever". Scenario 19 (exclusive
// lock) and 19s (a semaphore of one permit), for targets that queue their waiters (DLOCK_CAP_FAIR).
//
// Set-up: H holds the name with a long ttl (15 s, renewed), so that a waiter that is not woken
// would sleep for seconds; W1 waits for it, then W2 waits behind W1 (FIFO: W1 is first). W1 is
// stopped (SIGSTOP) — its connections stay open, so a server that tells waiters apart by their
// open subscription cannot tell it from a live one. H releases.
// Judged:
// - W2 is granted within the target's bound for a paused waiter after the release
//   (paused_waiter_bound: how long the target lets a woken first waiter take its turn, plus a
//   margin for a loaded machine), not when its own wait or H's ttl would have ended;
// - W1, resumed after W2 released, is granted in its turn (no waiter is stuck);
// - the histories show no two holders at once (SAFE: the verdict every cell expects).
// Cells: redis, redlock and sql_lease (exclusive), redis and sql_lease (permit). zookeeper and etcd
// are not cells: a paused waiter's session (which carries its node or key) ends with its session
// timeout as a dead holder's does, so the waiter behind is bounded by their liveness bound, and the
// resumed waiter then meets an ended session (etcd: its acquire fails by design, docs/design/faults.md
// §12), which "granted in its turn" does not judge. Another FAIR target becomes a cell by adding it to
// the registrations below with its bound in paused_waiter_bound.
#include <future>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "suite.hpp"

namespace {

using namespace dlock::faults;
using std::chrono::milliseconds;

// The noise allowance of a 2-core machine shared by the whole suite.
constexpr milliseconds kMargin{1000};

// How long a paused first waiter may hold the next one up on each target:
// - redis, redlock: its `claim`, the time a woken first waiter has to take its turn before the next
//   one takes over (docs/backends/redis.md): command_timeout, at least 500 ms — 2 s on redis and
//   200 ms on redlock by default, which the suite's configs keep;
// - sql_lease: `peer_timeout` (10 s by default, which the suite keeps): the server ends the paused
//   waiter's idle queue session, and its turnstile lock with it (docs/backends/sql.md, "Fair waits").
std::optional<milliseconds> paused_waiter_bound(const target& t) {
    if (t.name == "redis") return milliseconds(2000);
    if (t.name == "redlock") return milliseconds(500);
    if (t.name == "sql_lease") return milliseconds(10000);
    return std::nullopt;
}

int64_t ms_between(int64_t from_ns, int64_t to_ns) { return (to_ns - from_ns) / 1'000'000; }

void paused_waiter(context& ctx, const hold_mode& mode) {
    const auto claim = paused_waiter_bound(ctx.tgt());
    if (!ctx.require(claim.has_value(), "the target has a stated bound for a paused waiter (paused_waiter_bound)")) return;
    const milliseconds bound = *claim + kMargin;
    const std::string name = ctx.lock_name("paused-waiter");
    const milliseconds holder_ttl(15000), wait(40000);
    auto h = ctx.spawn_holder("holder");
    auto w1 = ctx.spawn_holder("paused-waiter");
    auto w2 = ctx.spawn_holder("next-waiter");
    const auto held = h->acquire_as(name, mode, milliseconds(0), holder_ttl);
    if (!ctx.require(held.ok, "the holder acquires: " + held.status + held.message)) return;
    auto first = std::async(std::launch::async, [&] { return w1->acquire_as(name, mode, wait); });
    std::this_thread::sleep_for(milliseconds(500));  // W1 queued and listening
    auto second = std::async(std::launch::async, [&] { return w2->acquire_as(name, mode, wait); });
    std::this_thread::sleep_for(milliseconds(500));  // W2 queued behind W1 and asleep
    w1->pause();
    ctx.fault("SIGSTOP of the first waiter");
    std::this_thread::sleep_for(milliseconds(200));
    const int64_t released_at = monotonic_ns();
    ctx.require(h->release(name) == "released", "the holder releases");
    const auto next = second.get();
    if (ctx.require(next.ok, "the waiter behind the paused one acquires: " + next.status + next.message)) {
        const milliseconds delay(ms_between(released_at, next.returned_ns));
        ctx.require(delay <= bound, fmt::format("the waiter behind the paused one is granted {} ms after the release, within "
                                                "the bound {} ms (the target's {} ms + {} ms)",
                                                delay.count(), bound.count(), claim->count(), kMargin.count()));
        std::this_thread::sleep_for(milliseconds(100));
        ctx.require(w2->release(name) == "released", "the next waiter releases");
        ctx.note(fmt::format("first waiter paused; the next one granted {} ms after the release (bound {} ms: the target's {} ms + "
                             "{} ms; the holder's ttl {} ms)",
                             delay.count(), bound.count(), claim->count(), kMargin.count(), holder_ttl.count()));
    }
    w1->resume();
    const int64_t resumed_at = monotonic_ns();
    const auto late = first.get();
    if (ctx.require(late.ok, "the resumed waiter acquires in its turn: " + late.status + late.message)) {
        ctx.note(fmt::format("the resumed waiter was granted {} ms after SIGCONT", ms_between(resumed_at, late.returned_ns)));
        ctx.require(w1->release(name) == "released", "the resumed waiter releases");
    }
    h->quit();
    w1->quit();
    w2->quit();
    const auto r = ctx.check_histories(false);
    ctx.require(r.failures == 0 && r.unknowns == 0,
                fmt::format("no acquire errors ({} errors, {} unknown)", r.failures, r.unknowns));
}

scenario paused_waiter_scenario(std::string variant, std::string title, hold_mode mode, std::vector<expectation> targets,
                                uint64_t capabilities) {
    scenario s;
    s.number = 19;
    s.variant = std::move(variant);
    s.title = std::move(title);
    s.targets = std::move(targets);
    s.run = [mode](context& ctx) { paused_waiter(ctx, mode); };
    s.requires_capabilities = capabilities;
    return s;
}

const registrar r19{paused_waiter_scenario("", "first waiter paused (SIGSTOP), the lock released", hold_mode::exclusive(),
                                           {{"redis", verdict::safe}, {"redlock", verdict::safe}, {"sql_lease", verdict::safe}},
                                           DLOCK_CAP_FAIR)};
const registrar r19s{paused_waiter_scenario("s", "semaphore (N = 1): first waiter paused (SIGSTOP), the permit released",
                                            hold_mode::permit(1),
                                            {{"redis", verdict::safe}, {"sql_lease", verdict::safe}},
                                            DLOCK_CAP_FAIR | DLOCK_CAP_SEMAPHORE)};

}  // namespace

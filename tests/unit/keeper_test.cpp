// The lease keeper, observed through the public API on the fake TTL backend: renewal at ttl/3,
// HELD -> SUSPECT -> LOST when renewals fail, loss pushed by the backend, the lost callback fired
// exactly once, and release after loss reporting ALREADY_LOST; grants already over or lost when
// acquire returns are refused; lost callbacks run where they cannot stall renewals.
//
// Time is simulated (dlock_internal/clock.hpp): the core and the fake, built into this program on
// the same clock, see time move only when a test advances it, and a test waits for the client's
// threads to settle back into waiting before it looks. Nothing depends on how fast the machine is.
#include "dlock_internal/backends.hpp"
#include "dlock_internal/clock.hpp"

#include <dlock/dlock.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

using namespace std::chrono_literals;

int fake_simulated_negotiate(uint32_t host_max_version, const dlock_plugin** out, uint32_t* out_min_version);

namespace {

const bool fake_registered = (dlock::core::testing::add_builtin_backend({"fake", &fake_simulated_negotiate}), true);

dlock::client fake_client(const std::string& options = "") {
    return dlock::client::from_yaml("backend: fake\nplugin_path: [" DLOCK_TEST_PLUGIN_DIR "]\n" +
                                    (options.empty() ? "" : "options:\n" + options));
}

int64_t ns(std::chrono::nanoseconds d) { return d.count(); }

// Counts what callbacks report from the dispatcher thread, and lets the test wait for a count.
class signal {
public:
    void raise() {
        std::lock_guard<std::mutex> lock(m_);
        ++count_;
        cv_.notify_all();
    }
    int count() {
        std::lock_guard<std::mutex> lock(m_);
        return count_;
    }
    // False if `n` is not reached within a real-time limit far beyond any scheduling delay.
    bool wait_for(int n) {
        std::unique_lock<std::mutex> lock(m_);
        return cv_.wait_for(lock, 30s, [&] { return count_ >= n; });
    }

private:
    std::mutex m_;
    std::condition_variable cv_;
    int count_ = 0;
};

// Moves the clock on by `step` whenever `waiters` threads wait on it, once started and until
// destroyed: for a call that itself waits on the clock while the test thread is inside it (an
// acquire pausing between attempts, a close waiting for a renewal the fake delays).
class clock_driver {
public:
    clock_driver(dlock::core::simulated_clock& clock, size_t waiters, std::chrono::nanoseconds step)
        : clock_(clock), waiters_(waiters), step_(step) {}
    ~clock_driver() {
        stop_ = true;
        if (thread_.joinable()) thread_.join();
    }
    void start() {
        thread_ = std::thread([this] {
            while (!stop_)
                if (clock_.wait_for_waiters(waiters_, ns(50ms))) clock_.advance(ns(step_));
        });
    }

private:
    dlock::core::simulated_clock& clock_;
    size_t waiters_;
    std::chrono::nanoseconds step_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

class Keeper : public ::testing::Test {
protected:
    void SetUp() override { dlock::core::testing::use_clock(clock_); }
    void TearDown() override { dlock::core::testing::use_clock(nullptr); }

    // Lets the client's threads that wait on the clock (`waiters` of them: the keeper, and each
    // pending lose_after of the fake) settle back into waiting.
    void settle(size_t waiters = 1) { ASSERT_TRUE(clock_->wait_for_waiters(waiters)) << "a thread never came back to wait"; }
    // Advances the clock by `d` in steps of `step`, letting the client settle after each.
    void advance(std::chrono::nanoseconds d, std::chrono::nanoseconds step = 10ms) {
        settle();
        for (std::chrono::nanoseconds done{0}; done < d; done += step) {
            clock_->advance(ns(std::min(step, d - done)));
            settle();
        }
    }
    // Advances the clock by `lose_after` of the fake: its thread that reports the loss waits on the
    // clock beside the keeper until then, and ends once it has reported.
    void advance_to_pushed_loss(std::chrono::nanoseconds lose_after) {
        settle(2);
        clock_->advance(ns(lose_after));
        settle(1);
    }
    // Raises `may_return` (letting a blocked callback return) once this thread waits for that callback
    // inside a dlock call: the keeper and this thread wait on the clock. Joined when the result goes.
    std::unique_ptr<std::thread, void (*)(std::thread*)> release_once_waiting(signal& may_return) {
        auto* opener = new std::thread([this, &may_return] {
            clock_->wait_for_waiters(2);
            may_return.raise();
        });
        return {opener, [](std::thread* t) { t->join(); delete t; }};
    }
    std::chrono::steady_clock::time_point now() const {
        return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(clock_->now_ns()));
    }

    std::shared_ptr<dlock::core::simulated_clock> clock_ = std::make_shared<dlock::core::simulated_clock>();
};

TEST_F(Keeper, RenewsBeforeTheTtlRunsOut) {
    auto client = fake_client();
    auto lease = client.acquire("renewed", dlock::acquire_options().with_ttl(300ms));
    const auto first_validity = lease.valid_until();
    advance(1s);  // > 3 ttls: only renewals keep it
    EXPECT_EQ(lease.state(), dlock::lease_state::held);
    EXPECT_GT(lease.valid_until(), first_validity + 500ms);
    const auto info = client.inspect("renewed");
    EXPECT_TRUE(info.held);
    EXPECT_EQ(info.holder, lease.owner());
    EXPECT_EQ(lease.release(), dlock::release_outcome::released);
}

// Why RenewsBeforeTheTtlRunsOut failed now and then on a loaded machine when it ran on real time:
// a renewal is due ⅔ of a ttl before validity ends (200 ms of its 300 ms ttl). A keeper that wakes,
// or a renewal that answers, later than that finds validity over: the lease is LOST, whatever the
// renewal then answers, and the test's sleep of 1 s gave the scheduler several such chances. Here
// the renewal takes 250 ms, so its answer comes 50 ms after validity ended.
TEST_F(Keeper, RenewalLaterThanTwoThirdsOfTheTtlLosesTheLease) {
    clock_driver to_the_end(*clock_, 1, 10ms);  // lets the late renewal end when the client closes
    auto client = fake_client("  renew_delay: 250ms\n");
    auto lease = client.acquire("late-renewal", dlock::acquire_options().with_ttl(300ms));
    advance(300ms);  // the keeper is in its renewal since 100 ms
    EXPECT_EQ(lease.state(), dlock::lease_state::lost);
    to_the_end.start();
}

TEST_F(Keeper, WithoutRenewalTheLeaseExpiresAndTheCallbackFiresOnce) {
    auto client = fake_client();
    auto lease = client.acquire("expires", dlock::acquire_options().with_ttl(200ms).with_renew(false));
    signal calls;
    lease.on_lost([&] { calls.raise(); });
    advance(200ms);
    EXPECT_TRUE(calls.wait_for(1));
    EXPECT_EQ(lease.state(), dlock::lease_state::lost);
    advance(100ms);
    EXPECT_EQ(calls.count(), 1);
    EXPECT_EQ(lease.release(), dlock::release_outcome::already_lost);
}

TEST_F(Keeper, FailingRenewalsMakeTheLeaseSuspectThenLost) {
    auto client = fake_client("  renew_status: 6\n");  // every renewal: DLOCK_UNAVAILABLE
    auto lease = client.acquire("unconfirmed", dlock::acquire_options().with_ttl(600ms));
    const auto acquired = now();
    signal calls;
    lease.on_lost([&] { calls.raise(); });
    while (lease.state() == dlock::lease_state::held && now() < acquired + 590ms) advance(10ms);
    EXPECT_EQ(lease.state(), dlock::lease_state::suspect) << "not SUSPECT within 590 ms";
    // Detected no later than valid_until, never before it.
    while (now() < lease.valid_until()) {
        EXPECT_EQ(calls.count(), 0) << "lost before valid_until";
        advance(10ms);
    }
    EXPECT_TRUE(calls.wait_for(1));
    EXPECT_EQ(lease.state(), dlock::lease_state::lost);
    EXPECT_GE(now(), lease.valid_until());
}

TEST_F(Keeper, RenewalAnsweringLostEndsTheLeaseAtOnce) {
    auto client = fake_client("  renew_status: 9\n");  // DLOCK_LOST
    auto lease = client.acquire("taken", dlock::acquire_options().with_ttl(3s));
    signal calls;
    lease.on_lost([&] { calls.raise(); });
    advance(1s, 1s);
    EXPECT_TRUE(calls.wait_for(1)) << "first renewal is due at ttl/3 = 1s";
}

TEST_F(Keeper, LossPushedByTheBackendFiresTheCallback) {
    auto client = fake_client("  lose_after: 150ms\n");
    auto lease = client.acquire("pushed", dlock::acquire_options().with_ttl(30s));
    signal calls;
    lease.on_lost([&] { calls.raise(); });
    advance_to_pushed_loss(150ms);
    EXPECT_TRUE(calls.wait_for(1));
    EXPECT_EQ(lease.state(), dlock::lease_state::lost);
}

TEST_F(Keeper, CallbackRegisteredOnALostLeaseRunsImmediately) {
    auto client = fake_client();
    auto lease = client.acquire("late", dlock::acquire_options().with_ttl(50ms).with_renew(false));
    advance(100ms);
    int calls = 0;
    lease.on_lost([&] { ++calls; });
    EXPECT_EQ(calls, 1);
}

TEST_F(Keeper, ExplicitRenewMovesValidity) {
    auto client = fake_client();
    auto lease = client.acquire("explicit", dlock::acquire_options().with_ttl(2s).with_renew(false));
    const auto before = lease.valid_until();
    advance(50ms);
    lease.renew();
    EXPECT_GT(lease.valid_until(), before);
}

TEST_F(Keeper, ManyLeasesAreRenewedInBatches) {
    auto client = fake_client();
    std::vector<dlock::lease> leases;
    for (int i = 0; i < 200; ++i)
        leases.push_back(client.acquire("batch/" + std::to_string(i), dlock::acquire_options().with_ttl(300ms)));
    advance(1s);
    for (auto& l : leases) EXPECT_EQ(l.state(), dlock::lease_state::held) << l.name();
}


// A grant whose validity is over when it arrives (a late reply) is given back and not handed out:
// a single try answers TIMEOUT; with a wait the acquisition is retried.
TEST_F(Keeper, ExpiredGrantIsGivenBackAndRetriedWithinTheWait) {
    clock_driver pauses(*clock_, 2, 1ms);  // the keeper, and this thread pausing between attempts
    auto client = fake_client("  expired_grants: 2\n");
    std::error_code ec;
    auto refused = client.acquire("late-grant", dlock::acquire_options().with_wait(0ms).with_ttl(5s), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << dlock_last_error();
    EXPECT_FALSE(refused);
    EXPECT_FALSE(client.inspect("late-grant").held) << "the refused grant was not given back";

    const auto asked = now();
    pauses.start();
    auto lease = client.acquire("late-grant", dlock::acquire_options().with_wait(2s).with_ttl(5s), ec);
    ASSERT_FALSE(ec) << dlock_last_error();
    EXPECT_GT(lease.valid_until(), asked + 4s);
    EXPECT_EQ(lease.fencing_token(), 3u) << "the second expired grant was not retried";
    EXPECT_EQ(client.inspect("late-grant").holder, lease.owner());
}

// The keeper is stuck in a slow renewal while the hold's validity runs out; a reentrant acquire
// must not share that hold (its validity is over), but acquire afresh.
TEST_F(Keeper, ReentrantAcquireRefusesAHoldWhoseValidityRanOut) {
    clock_driver to_the_end(*clock_, 1, 10ms);  // lets the stuck renewal end when the client closes
    auto client = fake_client("  renew_delay: 700ms\n");
    const auto options = dlock::acquire_options().with_ttl(150ms).with_reentrant(true).with_wait(0ms);
    auto first = client.acquire("reentered", options);
    advance(350ms);  // validity ended at 150 ms; the keeper is in renew since 50 ms
    const auto asked = now();
    std::error_code ec;
    auto second = client.acquire("reentered", options, ec);
    ASSERT_FALSE(ec) << dlock_last_error();
    EXPECT_GT(second.valid_until(), asked) << "re-entered a hold whose validity was over";
    EXPECT_NE(second.fencing_token(), first.fencing_token()) << "the expired hold was shared instead of acquired afresh";
    EXPECT_EQ(first.state(), dlock::lease_state::lost);
    to_the_end.start();
}

// The keeper is stuck in a slow renewal of another lease (`slow/` names) while this lease's
// validity runs out; the backend still holds the lock for it (its expiry is `drift` later, as a
// real server's is ttl − drift after the client's valid_until). From valid_until on another client
// may hold the lock, so release must answer ALREADY_LOST and a manual renew must not bring the lease
// back to HELD: both decide from validity, as state() does, not from the keeper having run.
TEST_F(Keeper, ReleaseAfterValidityEndedAnswersAlreadyLostBeforeTheKeeperRuns) {
    clock_driver to_the_end(*clock_, 1, 10ms);
    auto client = fake_client("  renew_delay: 1500ms\n  renew_delay_prefix: slow/\n  drift: 200ms\n");
    // Its first renewal is due at once (valid_until − ⅔ ttl = grant time): the keeper is in it for 1.5 s.
    auto stuck = client.acquire("slow/keeper", dlock::acquire_options().with_ttl(600ms));
    auto lapsed = client.acquire("lapsed", dlock::acquire_options().with_ttl(500ms).with_renew(false));
    advance(380ms);  // lapsed: validity ended at 300 ms; the backend's expiry is at 500 ms
    EXPECT_EQ(lapsed.release(), dlock::release_outcome::already_lost) << "released after its validity had ended";
    EXPECT_FALSE(client.inspect("lapsed").held) << "the owner-fenced release still removes what is ours";
    to_the_end.start();
}

TEST_F(Keeper, ManualRenewAfterValidityEndedAnswersLost) {
    clock_driver to_the_end(*clock_, 1, 10ms);
    auto client = fake_client("  renew_delay: 1500ms\n  renew_delay_prefix: slow/\n  drift: 200ms\n");
    auto stuck = client.acquire("slow/keeper", dlock::acquire_options().with_ttl(600ms));
    auto lapsed = client.acquire("lapsed", dlock::acquire_options().with_ttl(500ms).with_renew(false));
    advance(380ms);
    std::error_code ec;
    lapsed.renew(ec);
    EXPECT_EQ(ec, dlock::errc::lost) << "a manual renew after valid_until brought the lease back";
    EXPECT_EQ(lapsed.state(), dlock::lease_state::lost);
    EXPECT_EQ(lapsed.release(), dlock::release_outcome::already_lost);
    to_the_end.start();
}

// A release sent while the lease was valid went unanswered (it did remove the lock); the caller
// retries after valid_until. That first attempt may be what removed the lock, so the backend's
// answer decides (RELEASED), not the validity that ran out meanwhile.
TEST_F(Keeper, ReleaseRetriedAfterValidityEndedFollowsTheAttemptSentWhileValid) {
    auto client = fake_client("  unanswered_releases: 1\n  drift: 200ms\n");
    auto lease = client.acquire("in-doubt", dlock::acquire_options().with_ttl(500ms).with_renew(false));
    std::error_code ec;
    EXPECT_EQ(lease.release(ec), dlock::release_outcome::unknown);
    advance(400ms);  // validity ended at 300 ms
    EXPECT_EQ(lease.release(ec), dlock::release_outcome::released) << dlock_last_error();
}

// The backend reports the hold LOST before its acquire returns OK (as a session expiring at that
// moment would): the acquisition must not return a lease that is already lost, nor leave the lock
// behind.
TEST_F(Keeper, LossReportedDuringAcquireIsNeverHandedOut) {
    clock_driver pauses(*clock_, 2, 1ms);  // the keeper, and this thread pausing between attempts
    auto client = fake_client("  lose_in_acquire: true\n");
    std::error_code ec;
    auto lease = client.acquire("lost-at-birth", dlock::acquire_options().with_ttl(5s).with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << dlock_last_error();
    EXPECT_FALSE(lease) << "handed out in state " << int(lease.state());
    EXPECT_FALSE(client.inspect("lost-at-birth").held) << "the lost grant was not given back";

    const auto started = now();
    pauses.start();
    lease = client.acquire("lost-at-birth", dlock::acquire_options().with_ttl(5s).with_wait(300ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << dlock_last_error();
    EXPECT_GE(now() - started, 300ms) << "with a wait, the acquisition is retried";
}

// A lost callback that blocks (here longer than a ttl, as a recovery that re-acquires with a wait
// would) must not stop the renewals of the client's other leases.
TEST_F(Keeper, SlowLostCallbackDoesNotStallRenewals) {
    auto client = fake_client();
    auto kept = client.acquire("kept", dlock::acquire_options().with_ttl(300ms));
    auto dropped = client.acquire("dropped", dlock::acquire_options().with_ttl(100ms).with_renew(false));
    signal started;
    signal may_return;
    std::atomic<bool> done{false};
    dropped.on_lost([&] {
        started.raise();
        may_return.wait_for(1);
        done = true;
    });
    advance(100ms);
    ASSERT_TRUE(started.wait_for(1));
    const auto before = kept.valid_until();
    advance(1s);  // more than 3 ttls of `kept` while the callback blocks
    EXPECT_FALSE(done.load());
    EXPECT_EQ(kept.state(), dlock::lease_state::held);
    EXPECT_GT(kept.valid_until(), before + 500ms) << "`kept` was not renewed while the callback ran";
    may_return.raise();
}

// Replacing the lost callback while the previous one runs must not free the running one.
// (Under ASan or TSan a use after free shows here; without them it may pass silently.)
TEST_F(Keeper, ReplacingTheLostCallbackWhileItRunsIsSafe) {
    auto client = fake_client("  lose_after: 50ms\n");
    auto lease = client.acquire("replaced", dlock::acquire_options().with_ttl(30s));
    signal running;
    signal finished;
    signal may_return;
    const std::string payload(1000, 'x');
    lease.on_lost([&running, &finished, &may_return, payload] {
        running.raise();
        may_return.wait_for(1);
        // Reads its own captured state after it was replaced.
        EXPECT_EQ(payload.size(), 1000u);
        EXPECT_EQ(payload.back(), 'x');
        finished.raise();
    });
    advance_to_pushed_loss(50ms);
    ASSERT_TRUE(running.wait_for(1));
    const auto opener = release_once_waiting(may_return);
    for (int i = 0; i < 3; ++i) lease.on_lost([] {});
    EXPECT_TRUE(finished.wait_for(1));
    EXPECT_EQ(lease.state(), dlock::lease_state::lost);
}

// A C lost callback that runs until the test lets it return, for the tests that a call waits for a
// running callback.
struct blocking_callback {
    signal running;
    signal may_return;
    std::atomic<bool> finished{false};
    static void run(dlock_lease*, void* data) {
        auto* state = static_cast<blocking_callback*>(data);
        state->running.raise();
        state->may_return.wait_for(1);
        state->finished = true;
    }
};

// The C function waits for a running callback of the lease before replacing it, so the caller may
// free the previous callback's data as soon as it returns.
TEST_F(Keeper, CReplacementWaitsForTheRunningCallback) {
    blocking_callback p;
    auto client = fake_client("  lose_after: 50ms\n");
    auto lease = client.acquire("c-replaced", dlock::acquire_options().with_ttl(30s));
    ASSERT_EQ(dlock_lease_on_lost(lease.handle(), &blocking_callback::run, &p), DLOCK_OK);
    advance_to_pushed_loss(50ms);
    ASSERT_TRUE(p.running.wait_for(1));
    const auto opener = release_once_waiting(p.may_return);
    ASSERT_EQ(dlock_lease_on_lost(lease.handle(), nullptr, nullptr), DLOCK_OK);
    EXPECT_TRUE(p.finished.load()) << "dlock_lease_on_lost returned while the previous callback still ran";
}

// Destroying a released lease whose lost callback is still running waits for the callback, so the
// caller may free the callback's data once dlock_lease_destroy returns.
TEST_F(Keeper, DestroyingAReleasedLeaseWaitsForItsRunningCallback) {
    blocking_callback p;
    auto client = fake_client("  lose_after: 50ms\n");
    dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
    o.ttl_ms = 30'000;
    dlock_lease* lease = nullptr;
    ASSERT_EQ(dlock_acquire(client.handle(), "destroyed-while-called", &o, &lease), DLOCK_OK) << dlock_last_error();
    ASSERT_EQ(dlock_lease_on_lost(lease, &blocking_callback::run, &p), DLOCK_OK);
    advance_to_pushed_loss(50ms);
    ASSERT_TRUE(p.running.wait_for(1));
    EXPECT_EQ(dlock_lease_release(lease), DLOCK_LOST);
    const auto opener = release_once_waiting(p.may_return);
    dlock_lease_destroy(lease);
    EXPECT_TRUE(p.finished.load()) << "dlock_lease_destroy returned while the lease's callback still ran";
}

}  // namespace

int fake_inspects_running_when_destroyed();
int fake_interrupts_so_far();

// A client closed while another thread's inspect is inside the backend: close() waits for the
// inspect to return before it destroys the backend (as it waits for acquires), and the inspect
// answers. The fake's inspect pauses on the clock, and destroy records whether one was running.
TEST_F(Keeper, CloseWaitsForAnInspectInsideTheBackend) {
    dlock_client* c = nullptr;
    ASSERT_EQ(dlock_client_open_yaml("backend: fake\nplugin_path: [" DLOCK_TEST_PLUGIN_DIR "]\noptions:\n  inspect_delay: 500ms\n",
                                     nullptr, &c),
              DLOCK_OK)
        << dlock_last_error();
    int inspected = -1;
    std::thread inspector([&] {
        dlock_lock_info info = DLOCK_LOCK_INFO_INIT;
        inspected = dlock_inspect(c, "inspected", &info);
    });
    settle(2);  // the keeper and the inspect's pause wait on the clock
    const int interrupts_before = fake_interrupts_so_far();
    std::thread closer([&] { dlock_client_close(c); });
    while (fake_interrupts_so_far() == interrupts_before) std::this_thread::yield();  // close() has begun
    clock_driver to_the_end(*clock_, 1, 10ms);  // then the pause may end
    to_the_end.start();
    closer.join();
    inspector.join();
    EXPECT_EQ(inspected, DLOCK_OK) << dlock_last_error();
    EXPECT_EQ(fake_inspects_running_when_destroyed(), 0) << "the backend was destroyed under a running inspect";
}

// A manual renew still in flight when the keeper scans makes the keeper skip the hold and sleep
// until the hold's old validity ends. Once the renew answers, the keeper must be woken for the new
// schedule (a renewal ⅓ of a ttl after the manual one), not renew only when the old validity ends:
// on a backend whose validity counts from the send, a manual renew right after the acquire would
// leave that late renewal almost no time.
TEST_F(Keeper, ManualRenewWakesTheKeeperForTheNewSchedule) {
    clock_driver to_the_end(*clock_, 1, 10ms);  // lets a renewal in flight end when the client closes
    auto client = fake_client("  renew_delay: 100ms\n");
    const auto start = now();
    auto lease = client.acquire("renewed-by-hand", dlock::acquire_options().with_ttl(900ms));
    advance(290ms);  // the keeper's renewal is due at 300 ms
    std::error_code renewed;
    std::thread renewer([&] { lease.renew(renewed); });
    settle(2);  // the keeper and the manual renewal's pause wait on the clock
    advance(100ms);  // the keeper woke at 300 ms beside the busy hold; the renewal answers at 390 ms
    renewer.join();
    ASSERT_FALSE(renewed) << dlock_last_error();
    EXPECT_EQ(lease.valid_until(), start + 390ms + 900ms);
    advance(460ms);  // to 850 ms: the keeper renewed at 690 ms (⅓ of the ttl after 390 ms), answered at 790 ms
    EXPECT_EQ(lease.valid_until(), start + 790ms + 900ms) << "the keeper slept until the old validity's end (900 ms)";
    to_the_end.start();
}

// The lease keeper, observed through the public API on the fake TTL backend: renewal at ttl/3,
// HELD -> SUSPECT -> LOST when renewals fail, loss pushed by the backend, the lost callback fired
// exactly once, and release after loss reporting ALREADY_LOST; grants already over or lost when
// acquire returns are refused; lost callbacks run where they cannot stall renewals.
#include <dlock/dlock.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

using namespace std::chrono_literals;

namespace {

dlock::client fake_client(const std::string& options = "") {
    return dlock::client::from_yaml("backend: fake\nplugin_path: [" DLOCK_TEST_PLUGIN_DIR "]\n" +
                                    (options.empty() ? "" : "options:\n" + options));
}

template <typename Predicate>
bool eventually(Predicate p, std::chrono::milliseconds limit = 5s) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
        if (p()) return true;
        std::this_thread::sleep_for(5ms);
    }
    return p();
}

TEST(Keeper, RenewsBeforeTheTtlRunsOut) {
    auto client = fake_client();
    auto lease = client.acquire("renewed", dlock::acquire_options().with_ttl(300ms));
    const auto first_validity = lease.valid_until();
    std::this_thread::sleep_for(1s);  // > 3 ttls: only renewals keep it
    EXPECT_EQ(lease.state(), dlock::lease_state::held);
    EXPECT_GT(lease.valid_until(), first_validity + 500ms);
    const auto info = client.inspect("renewed");
    EXPECT_TRUE(info.held);
    EXPECT_EQ(info.holder, lease.owner());
    EXPECT_EQ(lease.release(), dlock::release_outcome::released);
}

TEST(Keeper, WithoutRenewalTheLeaseExpiresAndTheCallbackFiresOnce) {
    auto client = fake_client();
    auto lease = client.acquire("expires", dlock::acquire_options().with_ttl(200ms).with_renew(false));
    std::atomic<int> calls{0};
    lease.on_lost([&] { ++calls; });
    EXPECT_TRUE(eventually([&] { return calls.load() == 1; }));
    EXPECT_EQ(lease.state(), dlock::lease_state::lost);
    std::this_thread::sleep_for(100ms);
    EXPECT_EQ(calls.load(), 1);
    EXPECT_EQ(lease.release(), dlock::release_outcome::already_lost);
}

TEST(Keeper, FailingRenewalsMakeTheLeaseSuspectThenLost) {
    auto client = fake_client("  renew_status: 6\n");  // every renewal: DLOCK_UNAVAILABLE
    auto lease = client.acquire("unconfirmed", dlock::acquire_options().with_ttl(600ms));
    std::atomic<int> calls{0};
    lease.on_lost([&] { ++calls; });
    EXPECT_TRUE(eventually([&] { return lease.state() == dlock::lease_state::suspect; }, 590ms));
    EXPECT_TRUE(eventually([&] { return calls.load() == 1; }));
    EXPECT_EQ(lease.state(), dlock::lease_state::lost);
    // Detected no later than valid_until (plus scheduling slack), never before it.
    EXPECT_GE(std::chrono::steady_clock::now(), lease.valid_until());
}

TEST(Keeper, RenewalAnsweringLostEndsTheLeaseAtOnce) {
    auto client = fake_client("  renew_status: 9\n");  // DLOCK_LOST
    auto lease = client.acquire("taken", dlock::acquire_options().with_ttl(3s));
    std::atomic<int> calls{0};
    lease.on_lost([&] { ++calls; });
    EXPECT_TRUE(eventually([&] { return calls.load() == 1; }, 2500ms)) << "first renewal is due at ttl/3 = 1s";
}

TEST(Keeper, LossPushedByTheBackendFiresTheCallback) {
    auto client = fake_client("  lose_after: 150ms\n");
    auto lease = client.acquire("pushed", dlock::acquire_options().with_ttl(30s));
    std::atomic<int> calls{0};
    lease.on_lost([&] { ++calls; });
    EXPECT_TRUE(eventually([&] { return calls.load() == 1; }));
    EXPECT_EQ(lease.state(), dlock::lease_state::lost);
}

TEST(Keeper, CallbackRegisteredOnALostLeaseRunsImmediately) {
    auto client = fake_client();
    auto lease = client.acquire("late", dlock::acquire_options().with_ttl(50ms).with_renew(false));
    std::this_thread::sleep_for(100ms);
    int calls = 0;
    lease.on_lost([&] { ++calls; });
    EXPECT_EQ(calls, 1);
}

TEST(Keeper, ExplicitRenewMovesValidity) {
    auto client = fake_client();
    auto lease = client.acquire("explicit", dlock::acquire_options().with_ttl(2s).with_renew(false));
    const auto before = lease.valid_until();
    std::this_thread::sleep_for(50ms);
    lease.renew();
    EXPECT_GT(lease.valid_until(), before);
}

TEST(Keeper, ManyLeasesAreRenewedInBatches) {
    auto client = fake_client();
    std::vector<dlock::lease> leases;
    for (int i = 0; i < 200; ++i)
        leases.push_back(client.acquire("batch/" + std::to_string(i), dlock::acquire_options().with_ttl(300ms)));
    std::this_thread::sleep_for(1s);
    for (auto& l : leases) EXPECT_EQ(l.state(), dlock::lease_state::held) << l.name();
}


// A grant whose validity is over when it arrives (a late reply) is given back and not handed out:
// a single try answers TIMEOUT; with a wait the acquisition is retried.
TEST(Keeper, ExpiredGrantIsGivenBackAndRetriedWithinTheWait) {
    auto client = fake_client("  expired_grants: 2\n");
    std::error_code ec;
    auto refused = client.acquire("late-grant", dlock::acquire_options().with_wait(0ms).with_ttl(5s), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << dlock_last_error();
    EXPECT_FALSE(refused);
    EXPECT_FALSE(client.inspect("late-grant").held) << "the refused grant was not given back";

    const auto asked = std::chrono::steady_clock::now();
    auto lease = client.acquire("late-grant", dlock::acquire_options().with_wait(2s).with_ttl(5s), ec);
    ASSERT_FALSE(ec) << dlock_last_error();
    EXPECT_GT(lease.valid_until(), asked + 4s);
    EXPECT_EQ(lease.fencing_token(), 3u) << "the second expired grant was not retried";
    EXPECT_EQ(client.inspect("late-grant").holder, lease.owner());
}

// The keeper is stuck in a slow renewal while the hold's validity runs out; a reentrant acquire
// must not share that hold (its validity is over), but acquire afresh.
TEST(Keeper, ReentrantAcquireRefusesAHoldWhoseValidityRanOut) {
    auto client = fake_client("  renew_delay: 700ms\n");
    const auto options = dlock::acquire_options().with_ttl(150ms).with_reentrant(true).with_wait(0ms);
    auto first = client.acquire("reentered", options);
    std::this_thread::sleep_for(350ms);  // validity ended at 150 ms; the keeper is in renew since ~50 ms
    const auto asked = std::chrono::steady_clock::now();
    std::error_code ec;
    auto second = client.acquire("reentered", options, ec);
    ASSERT_FALSE(ec) << dlock_last_error();
    EXPECT_GT(second.valid_until(), asked) << "re-entered a hold whose validity was over";
    EXPECT_NE(second.fencing_token(), first.fencing_token()) << "the expired hold was shared instead of acquired afresh";
    EXPECT_EQ(first.state(), dlock::lease_state::lost);
}

// The keeper is stuck in a slow renewal of another lease (`slow/` names) while this lease's
// validity runs out; the backend still holds the lock for it (its expiry is `drift` later, as a
// real server's is ttl − drift after the client's valid_until). From valid_until on another client
// may hold the lock, so release must answer ALREADY_LOST and a manual renew must not bring the lease
// back to HELD: both decide from validity, as state() does, not from the keeper having run.
TEST(Keeper, ReleaseAfterValidityEndedAnswersAlreadyLostBeforeTheKeeperRuns) {
    auto client = fake_client("  renew_delay: 1500ms\n  renew_delay_prefix: slow/\n  drift: 200ms\n");
    // Its first renewal is due at once (valid_until − ⅔ ttl = grant time): the keeper is in it for 1.5 s.
    auto stuck = client.acquire("slow/keeper", dlock::acquire_options().with_ttl(600ms));
    auto lapsed = client.acquire("lapsed", dlock::acquire_options().with_ttl(500ms).with_renew(false));
    std::this_thread::sleep_for(380ms);  // lapsed: validity ended at ~300 ms; the backend's expiry is at 500 ms
    EXPECT_EQ(lapsed.release(), dlock::release_outcome::already_lost) << "released after its validity had ended";
    EXPECT_FALSE(client.inspect("lapsed").held) << "the owner-fenced release still removes what is ours";
}

TEST(Keeper, ManualRenewAfterValidityEndedAnswersLost) {
    auto client = fake_client("  renew_delay: 1500ms\n  renew_delay_prefix: slow/\n  drift: 200ms\n");
    auto stuck = client.acquire("slow/keeper", dlock::acquire_options().with_ttl(600ms));
    auto lapsed = client.acquire("lapsed", dlock::acquire_options().with_ttl(500ms).with_renew(false));
    std::this_thread::sleep_for(380ms);
    std::error_code ec;
    lapsed.renew(ec);
    EXPECT_EQ(ec, dlock::errc::lost) << "a manual renew after valid_until brought the lease back";
    EXPECT_EQ(lapsed.state(), dlock::lease_state::lost);
    EXPECT_EQ(lapsed.release(), dlock::release_outcome::already_lost);
}

// A release sent while the lease was valid went unanswered (it did remove the lock); the caller
// retries after valid_until. That first attempt may be what removed the lock, so the backend's
// answer decides (RELEASED), not the validity that ran out meanwhile.
TEST(Keeper, ReleaseRetriedAfterValidityEndedFollowsTheAttemptSentWhileValid) {
    auto client = fake_client("  unanswered_releases: 1\n  drift: 200ms\n");
    auto lease = client.acquire("in-doubt", dlock::acquire_options().with_ttl(500ms).with_renew(false));
    std::error_code ec;
    EXPECT_EQ(lease.release(ec), dlock::release_outcome::unknown);
    std::this_thread::sleep_for(400ms);  // validity ended at ~300 ms
    EXPECT_EQ(lease.release(ec), dlock::release_outcome::released) << dlock_last_error();
}

// The backend reports the hold LOST before its acquire returns OK (as a session expiring at that
// moment would): the acquisition must not return a lease that is already lost, nor leave the lock
// behind.
TEST(Keeper, LossReportedDuringAcquireIsNeverHandedOut) {
    auto client = fake_client("  lose_in_acquire: true\n");
    std::error_code ec;
    auto lease = client.acquire("lost-at-birth", dlock::acquire_options().with_ttl(5s).with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << dlock_last_error();
    EXPECT_FALSE(lease) << "handed out in state " << int(lease.state());
    EXPECT_FALSE(client.inspect("lost-at-birth").held) << "the lost grant was not given back";

    const auto started = std::chrono::steady_clock::now();
    lease = client.acquire("lost-at-birth", dlock::acquire_options().with_ttl(5s).with_wait(300ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << dlock_last_error();
    EXPECT_GE(std::chrono::steady_clock::now() - started, 300ms) << "with a wait, the acquisition is retried";
}

// A lost callback that blocks (here longer than a ttl, as a recovery that re-acquires with a wait
// would) must not stop the renewals of the client's other leases.
TEST(Keeper, SlowLostCallbackDoesNotStallRenewals) {
    auto client = fake_client();
    auto kept = client.acquire("kept", dlock::acquire_options().with_ttl(300ms));
    auto dropped = client.acquire("dropped", dlock::acquire_options().with_ttl(100ms).with_renew(false));
    std::atomic<bool> started{false};
    std::atomic<bool> done{false};
    dropped.on_lost([&] {
        started = true;
        std::this_thread::sleep_for(1500ms);
        done = true;
    });
    ASSERT_TRUE(eventually([&] { return started.load(); }));
    const auto before = kept.valid_until();
    std::this_thread::sleep_for(1s);  // more than 3 ttls of `kept` while the callback blocks
    EXPECT_FALSE(done.load());
    EXPECT_EQ(kept.state(), dlock::lease_state::held);
    EXPECT_GT(kept.valid_until(), before + 500ms) << "`kept` was not renewed while the callback ran";
    EXPECT_TRUE(eventually([&] { return done.load(); }));
}

// Replacing the lost callback while the previous one runs must not free the running one.
// (Under ASan or TSan a use after free shows here; without them it may pass silently.)
TEST(Keeper, ReplacingTheLostCallbackWhileItRunsIsSafe) {
    auto client = fake_client("  lose_after: 50ms\n");
    auto lease = client.acquire("replaced", dlock::acquire_options().with_ttl(30s));
    std::atomic<bool> running{false};
    std::atomic<int> finished{0};
    const std::string payload(1000, 'x');
    lease.on_lost([&running, &finished, payload] {
        running = true;
        std::this_thread::sleep_for(200ms);
        // Reads its own captured state after it was replaced.
        EXPECT_EQ(payload.size(), 1000u);
        EXPECT_EQ(payload.back(), 'x');
        ++finished;
    });
    ASSERT_TRUE(eventually([&] { return running.load(); }));
    for (int i = 0; i < 3; ++i) lease.on_lost([] {});
    EXPECT_TRUE(eventually([&] { return finished.load() == 1; }));
    EXPECT_EQ(lease.state(), dlock::lease_state::lost);
}

// A C lost callback that runs for 200 ms, for the tests that a call waits for a running callback.
struct slow_callback {
    std::atomic<bool> running{false};
    std::atomic<bool> finished{false};
    static void run(dlock_lease*, void* data) {
        auto* state = static_cast<slow_callback*>(data);
        state->running = true;
        std::this_thread::sleep_for(200ms);
        state->finished = true;
    }
};

// The C function waits for a running callback of the lease before replacing it, so the caller may
// free the previous callback's data as soon as it returns.
TEST(Keeper, CReplacementWaitsForTheRunningCallback) {
    slow_callback p;
    auto client = fake_client("  lose_after: 50ms\n");
    auto lease = client.acquire("c-replaced", dlock::acquire_options().with_ttl(30s));
    ASSERT_EQ(dlock_lease_on_lost(lease.handle(), &slow_callback::run, &p), DLOCK_OK);
    ASSERT_TRUE(eventually([&] { return p.running.load(); }));
    ASSERT_EQ(dlock_lease_on_lost(lease.handle(), nullptr, nullptr), DLOCK_OK);
    EXPECT_TRUE(p.finished.load()) << "dlock_lease_on_lost returned while the previous callback still ran";
}

// Destroying a released lease whose lost callback is still running waits for the callback, so the
// caller may free the callback's data once dlock_lease_destroy returns.
TEST(Keeper, DestroyingAReleasedLeaseWaitsForItsRunningCallback) {
    slow_callback p;
    auto client = fake_client("  lose_after: 50ms\n");
    dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
    o.ttl_ms = 30'000;
    dlock_lease* lease = nullptr;
    ASSERT_EQ(dlock_acquire(client.handle(), "destroyed-while-called", &o, &lease), DLOCK_OK) << dlock_last_error();
    ASSERT_EQ(dlock_lease_on_lost(lease, &slow_callback::run, &p), DLOCK_OK);
    ASSERT_TRUE(eventually([&] { return p.running.load(); }));
    EXPECT_EQ(dlock_lease_release(lease), DLOCK_LOST);
    dlock_lease_destroy(lease);
    EXPECT_TRUE(p.finished.load()) << "dlock_lease_destroy returned while the lease's callback still ran";
}

}  // namespace

// The lease keeper, observed through the public API on the fake TTL backend: renewal at ttl/3,
// HELD -> SUSPECT -> LOST when renewals fail, loss pushed by the backend, the lost callback fired
// exactly once, and release after loss reporting ALREADY_LOST.
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

}  // namespace

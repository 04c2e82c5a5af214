// A wait cancelled by its token on a plugin built against the frozen v1 headers, which knows
// nothing of per-acquire cancellation: the core cuts the wait into slices and checks the token
// between them, so the v1 plugin's waiter returns CANCELLED promptly and leaves the lock free for
// the next holder. Compiled against today's headers (the caller side is new; the plugin is v1).
#include <dlock/dlock.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

using namespace std::chrono_literals;

namespace {

std::string v1_config() { return std::string("backend: abi_v1\nplugin_path: [\"") + DLOCK_ABI_V1_PLUGIN_DIR + "\"]\n"; }

TEST(AbiV1Plugin, CancelledWaitReturnsCancelledPromptlyAndLeavesTheLockFree) {
    auto holder_client = dlock::client::from_yaml(v1_config());
    auto waiter_client = dlock::client::from_yaml(v1_config());
    auto holder = holder_client.acquire("abi/cancel", dlock::acquire_options().with_wait(0ms));
    dlock::cancellation cancel;
    std::error_code ec;
    std::atomic<bool> done{false};
    std::thread waiter([&] {
        dlock::mutex m(waiter_client, "abi/cancel");
        try {
            m.lock(cancel);
        } catch (const std::system_error& e) {
            ec = e.code();
        }
        done = true;
    });
    std::this_thread::sleep_for(400ms);
    EXPECT_FALSE(done.load());
    const auto start = std::chrono::steady_clock::now();
    cancel.cancel();
    waiter.join();
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
    EXPECT_EQ(ec, dlock::errc::cancelled);
    EXPECT_EQ(holder.state(), dlock::lease_state::held);
    holder.release();
    auto next = waiter_client.acquire("abi/cancel", dlock::acquire_options().with_wait(0ms));
    EXPECT_TRUE(next);
}

TEST(AbiV1Plugin, TryLockForWithAnUncancelledTokenTimesOutAsUsual) {
    auto holder_client = dlock::client::from_yaml(v1_config());
    auto waiter_client = dlock::client::from_yaml(v1_config());
    auto holder = holder_client.acquire("abi/timeout", dlock::acquire_options().with_wait(0ms));
    dlock::cancellation cancel;
    dlock::mutex m(waiter_client, "abi/timeout");
    const auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(m.try_lock_for(600ms, cancel));  // three slices, then TIMEOUT, not CANCELLED
    EXPECT_GE(std::chrono::steady_clock::now() - start, 600ms);
    EXPECT_FALSE(cancel.cancelled());
}

}  // namespace

// The plugin kit's contracts without a server: the waker's wake rules (seen from a fake transport
// driven by the test), the clock's saturation, and the exception firewall.
#include <dlock/plugin_kit.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <poll.h>
#include <stdexcept>
#include <string>
#include <thread>

namespace kit = dlock::plugin_kit;

namespace {

// A waker whose transport is the test: it exposes the transport side and counts on_change calls.
class test_transport : public kit::waker {
public:
    test_transport() : waker("test", [this] { ++changes; }) {}
    using waker::confirmed;
    using waker::connection_lost;
    using waker::heard;
    using waker::requests;
    using waker::resubscribe;
    using waker::unconfirmed;
    bool nudged() {
        pollfd p{wake_fd(), POLLIN, 0};
        const bool readable = poll(&p, 1, 0) == 1;
        if (readable) drain();
        return readable;
    }
    std::atomic<int> changes{0};
};

constexpr int64_t second_ns = 1'000'000'000;

int64_t in_ms(int64_t ms) { return kit::now_ns() + ms * kit::ns_per_ms; }

TEST(PluginKitWaker, WatchAndUnwatchAskTheTransportInOrderOnlyForTheFirstAndLastWatcher) {
    test_transport t;
    t.watch("a");
    EXPECT_TRUE(t.nudged());
    t.watch("a");  // a second watcher: already asked for
    EXPECT_FALSE(t.nudged());
    t.unwatch("a");
    EXPECT_FALSE(t.nudged());
    t.unwatch("a");  // the last one: unsubscribe
    t.watch("a");    // and subscribe again, after it
    EXPECT_TRUE(t.nudged());
    const auto todo = t.requests();
    ASSERT_EQ(todo.size(), 3u);
    EXPECT_TRUE(todo[0].subscribe);
    EXPECT_FALSE(todo[1].subscribe);
    EXPECT_TRUE(todo[2].subscribe);
    for (const auto& r : todo) EXPECT_EQ(r.channel, "a");
    EXPECT_TRUE(t.requests().empty());
}

TEST(PluginKitWaker, ResubscribeListsEveryWatchedChannelAndDropsPendingRequests) {
    test_transport t;
    t.watch("a");
    t.watch("b");
    t.watch("c");
    t.unwatch("c");
    const auto names = t.resubscribe();
    EXPECT_EQ(names, (std::vector<std::string>{"a", "b"}));
    EXPECT_TRUE(t.requests().empty());
}

TEST(PluginKitWaker, WaitListeningEndsWhenTheSubscriptionIsConfirmed) {
    test_transport t;
    t.watch("a");
    EXPECT_FALSE(t.wait_listening("a", 0));  // not confirmed: asks without waiting
    auto waiting = std::async(std::launch::async, [&] { return t.wait_listening("a", in_ms(30'000)); });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    t.confirmed("a");
    ASSERT_EQ(waiting.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    EXPECT_TRUE(waiting.get());
    EXPECT_GE(t.changes.load(), 1);
    t.unconfirmed("a");
    EXPECT_FALSE(t.wait_listening("a", 0));
}

TEST(PluginKitWaker, AMessageBetweenTheRetryAndTheWaitIsNotSleptThrough) {
    test_transport t;
    t.watch("a");
    t.confirmed("a");
    const uint64_t seen = t.generation("a");  // read before the retry
    t.heard("a");                              // the release arrives before the waiter sleeps
    const auto start = std::chrono::steady_clock::now();
    t.wait_change("a", seen, in_ms(30'000));
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
    EXPECT_NE(t.generation("a"), seen);
}

TEST(PluginKitWaker, AMessageWakesAWaiter) {
    test_transport t;
    t.watch("a");
    t.confirmed("a");
    const uint64_t seen = t.generation("a");
    auto waiting = std::async(std::launch::async, [&] { t.wait_change("a", seen, kit::forever_ns); });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    t.heard("b");  // another channel: nobody watches it; nothing changes for "a"
    EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
    t.heard("a");
    EXPECT_EQ(waiting.wait_for(std::chrono::seconds(10)), std::future_status::ready);
}

TEST(PluginKitWaker, ALostConnectionWakesEveryWaiterAndEndsListening) {
    test_transport t;
    t.watch("a");
    t.watch("b");
    t.confirmed("a");
    t.confirmed("b");
    const uint64_t a = t.generation("a"), b = t.generation("b");
    t.connection_lost();
    EXPECT_NE(t.generation("a"), a);
    EXPECT_NE(t.generation("b"), b);
    EXPECT_FALSE(t.wait_listening("a", 0));
    EXPECT_FALSE(t.wait_listening("b", 0));
    // Confirmed again on the next connection: a bump, since what was published meanwhile was not heard.
    const uint64_t before = t.generation("a");
    t.confirmed("a");
    EXPECT_TRUE(t.wait_listening("a", 0));
    EXPECT_NE(t.generation("a"), before);
}

TEST(PluginKitWaker, InterruptEndsEveryWaitNowAndLater) {
    test_transport t;
    t.watch("a");
    const uint64_t seen = t.generation("a");
    auto changing = std::async(std::launch::async, [&] { t.wait_change("a", seen, kit::forever_ns); });
    auto listening = std::async(std::launch::async, [&] { return t.wait_listening("a", kit::forever_ns); });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    t.interrupt();
    ASSERT_EQ(changing.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    ASSERT_EQ(listening.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    EXPECT_FALSE(listening.get());
    t.confirmed("a");
    EXPECT_FALSE(t.wait_listening("a", kit::forever_ns));  // returns at once: interrupted
}

TEST(PluginKitWaker, AWaitForAChannelNobodyWatchesReturnsAtOnce) {
    test_transport t;
    t.wait_change("nobody", 0, in_ms(30'000));
    EXPECT_EQ(t.generation("nobody"), 0u);
}

TEST(PluginKitClock, MillisecondsSaturateInsteadOfOverflowing) {
    EXPECT_EQ(kit::ms_to_ns(0), 0);
    EXPECT_EQ(kit::ms_to_ns(1500), 1'500'000'000);
    EXPECT_EQ(kit::ms_to_ns(-2), -2'000'000);
    EXPECT_EQ(kit::ms_to_ns(kit::forever_ns / kit::ns_per_ms), kit::forever_ns);
    EXPECT_EQ(kit::ms_to_ns(kit::forever_ns), kit::forever_ns);
    EXPECT_EQ(kit::ms_to_ns(-kit::forever_ns), -kit::forever_ns);
}

TEST(PluginKitClock, NowIsTheSteadyClock) {
    const int64_t before = kit::now_ns();
    const int64_t steady = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now().time_since_epoch()).count();
    const int64_t after = kit::now_ns();
    EXPECT_LE(before, steady);
    EXPECT_LE(steady, after);
    EXPECT_EQ(kit::steady_time(steady).time_since_epoch(), std::chrono::nanoseconds(steady));
    EXPECT_LT(after - before, 10 * second_ns);
}

TEST(PluginKitSupport, TheFirewallTurnsEveryExceptionIntoAStatusAndAMessage) {
    dlock_plugin_error error{};
    EXPECT_EQ(kit::guarded(&error, "x", [] { return DLOCK_OK; }), DLOCK_OK);
    EXPECT_EQ(kit::guarded(&error, "x", []() -> int { kit::fail(DLOCK_CONFIG, "x backend: bad `a`"); }), DLOCK_CONFIG);
    EXPECT_STREQ(error.message, "x backend: bad `a`");
    EXPECT_EQ(kit::guarded(&error, "x", []() -> int { throw std::runtime_error("boom"); }), DLOCK_INTERNAL);
    EXPECT_STREQ(error.message, "x backend: boom");
    EXPECT_EQ(kit::guarded(&error, "x", []() -> int { throw 42; }), DLOCK_INTERNAL);
    EXPECT_STREQ(error.message, "x backend: unexpected exception");
    EXPECT_EQ(kit::guarded(nullptr, "x", []() -> int { throw 42; }), DLOCK_INTERNAL);  // no buffer: status only
    const std::string long_message(5000, 'm');
    EXPECT_EQ(kit::guarded(&error, "x", [&]() -> int { kit::fail(DLOCK_BACKEND, long_message); }), DLOCK_BACKEND);
    EXPECT_EQ(std::string(error.message).size(), sizeof error.message - 1);  // cut, NUL-terminated
}

TEST(PluginKitSupport, NegotiationOffersVersionOneOrTellsTheMinimum) {
    const dlock_plugin table{};
    const dlock_plugin* out = nullptr;
    uint32_t min_version = 0;
    EXPECT_EQ(kit::negotiate_v1(1, &table, &out, &min_version), DLOCK_OK);
    EXPECT_EQ(out, &table);
    out = nullptr;
    EXPECT_EQ(kit::negotiate_v1(0, &table, &out, &min_version), DLOCK_NOT_SUPPORTED);
    EXPECT_EQ(min_version, 1u);
    EXPECT_EQ(out, nullptr);
    EXPECT_EQ(kit::negotiate_v1(0, &table, &out, nullptr), DLOCK_NOT_SUPPORTED);  // no out_min_version: no crash
}

TEST(PluginKitSupport, FindOptionReturnsOnlyASetValue) {
    dlock_option_value values[2]{};
    values[0].name = "a";
    values[0].is_set = 0;
    values[1].name = "b";
    values[1].is_set = 1;
    EXPECT_EQ(kit::find_option(values, 2, "a"), nullptr);
    EXPECT_EQ(kit::find_option(values, 2, "b"), &values[1]);
    EXPECT_EQ(kit::find_option(values, 2, "c"), nullptr);
}

}  // namespace

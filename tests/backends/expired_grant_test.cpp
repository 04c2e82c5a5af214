// A grant that arrives after its validity ran out is not a lock: acquire must refuse it and give the
// key back, on a real Redis reached through the lab's delaying proxy. The reply to the acquire script
// takes longer than the ttl, so the key has already expired on the server when the client learns
// it was set. The overlap checker cuts each holder's interval at valid_until and so cannot see such
// a holder; this test asserts the outcome of acquire itself.
#include "backend_test.hpp"
#include "support.hpp"

#include "dlock/lab/gtest.hpp"
#include "dlock/lab/proxy.hpp"

#include <dlock/dlock.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <thread>

using namespace std::chrono_literals;
using dlock::lab::backend;

namespace {

class ExpiredGrant : public dlock::test::lab_backend_test {
protected:
    ExpiredGrant() : lab_backend_test({backend::redis}) {}

    void SetUp() override {
        lab_backend_test::SetUp();
        if (!lab_) return;
        proxy_ = std::make_unique<dlock::lab::tcp_proxy>(lab_->redis().client_endpoint());
        config_ = dir_.path() + "/slow.yaml";
        std::ofstream(config_) << "backend: redis\noptions:\n  endpoint: \"" << proxy_->listen_endpoint().to_string()
                               << "\"\n  command_timeout: 2s\n";
    }

    // The key of `name` on the server (never through the proxy).
    long long key_exists(const std::string& name) {
        return lab_->redis().client().checked({"EXISTS", "dlock:{" + name + "}:lock"}).integer;
    }

    dlock::test::scratch_dir dir_{"dlock-expired-grant"};
    std::unique_ptr<dlock::lab::tcp_proxy> proxy_;
    std::string config_;
};

// ttl 100 ms, 150 ms of delay each way: the server sets the key at +150 ms, it expires at +250 ms,
// the reply arrives at +300 ms. A single try (wait 0) must answer TIMEOUT and leave no key.
TEST_F(ExpiredGrant, GrantArrivingAfterItsValidityIsRefused) {
    auto client = dlock::client::open(config_);  // connects while the proxy is fast
    proxy_->set_delay(150ms);
    const auto sent = std::chrono::steady_clock::now();
    std::error_code ec;
    auto lease = client.acquire("expired/once", dlock::acquire_options().with_wait(0ms).with_ttl(100ms).with_renew(false), ec);
    const std::string message = dlock_last_error();
    EXPECT_GE(std::chrono::steady_clock::now() - sent, 300ms) << "the proxy did not delay the round trip";
    EXPECT_EQ(ec, dlock::errc::timeout) << "a grant whose validity was over on arrival was handed out: " << message;
    EXPECT_FALSE(lease) << "valid_until is "
                        << std::chrono::duration_cast<std::chrono::milliseconds>(lease.valid_until() - std::chrono::steady_clock::now()).count()
                        << " ms from now";
    proxy_->set_delay(0us);
    std::this_thread::sleep_for(200ms);
    EXPECT_EQ(key_exists("expired/once"), 0) << "the refused grant left a key behind";
    // Nothing was left that blocks the next holder.
    auto next = client.acquire("expired/once", dlock::acquire_options().with_wait(0ms).with_ttl(5s), ec);
    EXPECT_FALSE(ec) << dlock_last_error();
    EXPECT_TRUE(next);
}

// With a wait, every late grant is given back and the acquisition is retried until the deadline:
// the answer is TIMEOUT, never a lease whose validity is already over.
TEST_F(ExpiredGrant, LateGrantsAreRetriedUntilTheDeadlineThenTimeOut) {
    auto client = dlock::client::open(config_);
    proxy_->set_delay(150ms);
    const auto started = std::chrono::steady_clock::now();
    std::error_code ec;
    auto lease = client.acquire("expired/retried", dlock::acquire_options().with_wait(800ms).with_ttl(100ms).with_renew(false), ec);
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
    const std::string message = dlock_last_error();
    EXPECT_EQ(ec, dlock::errc::timeout) << message;
    EXPECT_FALSE(lease);
    EXPECT_GE(took.count(), 800) << "gave up before the deadline: " << message;
    EXPECT_LT(took.count(), 10'000) << "the wait was not honoured";
    proxy_->set_delay(0us);
    std::this_thread::sleep_for(200ms);
    EXPECT_EQ(key_exists("expired/retried"), 0) << "a refused grant left a key behind";
}

}  // namespace

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    dlock::lab::add_lab_environment({backend::redis});
    return RUN_ALL_TESTS();
}

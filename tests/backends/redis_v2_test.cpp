// The `redis` backend's semaphores, shared locks, holders, list and break (docs/backends/redis.md,
// "Semaphores and shared locks" and "Listing and breaking locks"), on real servers from the lab:
// what the conformance tiers check for every backend, and what is particular to this layout — the
// keys it leaves (and does not leave), the waiter queue shared by readers and writers, the stored
// limit, and the ACL right that separates breaking from locking.
#include "backend_test.hpp"
#include "support.hpp"

#include "dlock/lab/gtest.hpp"
#include "dlock/lab/secured.hpp"

#include <dlock/dlock.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using dlock::lab::backend;
using dlock::test::child_process;

namespace {

using clock_type = std::chrono::steady_clock;

const dlock::acquire_options try_once = dlock::acquire_options().with_wait(0ms);
dlock::acquire_options shared_for(std::chrono::milliseconds wait) {
    return dlock::acquire_options().with_shared(true).with_wait(wait);
}
dlock::acquire_options permit_of(uint32_t n, std::chrono::milliseconds wait) {
    return dlock::acquire_options().with_permits(n).with_wait(wait);
}

std::chrono::milliseconds since(clock_type::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t);
}

class RedisModes : public dlock::test::lab_backend_test {
protected:
    RedisModes() : lab_backend_test({backend::redis}) {}

    dlock::client open() const { return dlock::client::open(config(backend::redis)); }
    dlock::lab::redis_client redis() { return lab_->redis().client(); }
    // The server's reply as text lines (arrays flattened), for assertions on the raw layout.
    std::vector<std::string> raw(const std::vector<std::string>& command) {
        std::vector<std::string> out;
        flatten(redis().checked(command), out);
        return out;
    }
    std::vector<std::string> keys_of(const std::string& name) {
        return raw({"KEYS", "dlock:{" + name + "}*"});  // a test on its own server: KEYS is fine here
    }

private:
    static void flatten(const dlock::lab::redis_reply& r, std::vector<std::string>& out) {
        using kind = dlock::lab::redis_reply::kind;
        switch (r.type) {
            case kind::array:
                for (const auto& e : r.elements) flatten(e, out);
                break;
            case kind::integer: out.push_back(std::to_string(r.integer)); break;
            case kind::nil: out.push_back("(nil)"); break;
            default: out.push_back(r.text);
        }
    }
};

// ---- semaphores ----------------------------------------------------------------------------------

// N permits at once, the N+1st waits and is woken by a release (not by a timer: well before the
// holders' ttl), and the freed permit is not handed out twice.
TEST_F(RedisModes, SemaphoreNPermitsAtOnceAndTheNextIsWokenByARelease) {
    auto a = open(), b = open(), c = open(), d = open();
    const auto ttl = dlock::acquire_options().with_permits(2).with_wait(0ms).with_ttl(20s);
    auto pa = a.acquire("sem/wake", ttl);
    auto pb = b.acquire("sem/wake", ttl);
    std::error_code ec;
    c.acquire("sem/wake", permit_of(2, 0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "a third permit of two";
    std::promise<clock_type::time_point> got;
    std::thread waiter([&] {
        auto p = c.acquire("sem/wake", permit_of(2, 15s));
        got.set_value(clock_type::now());
        p.release();
    });
    std::this_thread::sleep_for(300ms);
    const auto released = clock_type::now();
    EXPECT_EQ(pa.release(), dlock::release_outcome::released);
    auto fut = got.get_future();
    ASSERT_EQ(fut.wait_for(10s), std::future_status::ready) << "the waiter was not woken by the release";
    const auto latency = std::chrono::duration_cast<std::chrono::milliseconds>(fut.get() - released);
    waiter.join();
    std::cout << "[redis] permit handed to the waiter " << latency.count() << " ms after the release\n";
    EXPECT_LT(latency, 5s) << "woken by the release, not at the holders' expiry (20 s)";
    d.acquire("sem/wake", permit_of(2, 0ms), ec);
    EXPECT_TRUE(!ec) << "the waiter's permit was released, one is free: " << ec.message();
}

// The layout: one sorted set holds the permits ("<owner>:<token>" by expiry) and the limit; a
// released last permit leaves nothing behind, and a waiter that times out leaves no queue entry.
TEST_F(RedisModes, SemaphoreKeysHoldPermitsAndLimitAndNothingIsLeftBehind) {
    auto a = open(), b = open();
    auto p = a.acquire("sem/layout", permit_of(3, 0ms));
    const auto members = raw({"ZRANGE", "dlock:{sem/layout}:permits", "0", "-1"});
    ASSERT_EQ(members.size(), 2u);
    EXPECT_EQ(members[0], "limit:3");
    EXPECT_EQ(members[1], std::string(p.owner()) + ":" + std::to_string(p.fencing_token()));
    EXPECT_TRUE(raw({"EXISTS", "dlock:{sem/layout}:lock"}) == std::vector<std::string>{"0"})
        << "a semaphore and a lock of one name are different objects";
    p.release();
    EXPECT_TRUE(keys_of("sem/layout").size() == 1u && keys_of("sem/layout")[0] == "dlock:{sem/layout}:permits-fence")
        << "only the fence counter outlives the last permit";

    auto one = a.acquire("sem/left", permit_of(1, 0ms));
    std::error_code ec;
    b.acquire("sem/left", permit_of(1, 400ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout);
    EXPECT_EQ(raw({"ZCARD", "dlock:{sem/left}:permits-queue"}), std::vector<std::string>{"0"})
        << "a waiter that timed out left the queue";
    EXPECT_EQ(raw({"ZCARD", "dlock:{sem/left}:permits"}), std::vector<std::string>{"2"})
        << "the timed-out waiter left no permit: only the holder's and the limit";
}

}  // namespace

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    dlock::lab::add_lab_environment({backend::redis, backend::redlock});
    return RUN_ALL_TESTS();
}

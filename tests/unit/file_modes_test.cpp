// The `file` backend's semaphores, shared locks, holders and list (plugin ABI version 2), across
// clients of one process and across processes: all N permits usable at once and the next one
// waits, a release of any permit (or the death of its holder) wakes the waiter, a mismatched limit
// is refused while the stored one stands, shared holders together and an exclusive holder apart,
// a waiting writer stops new readers, one fencing counter for every grant of a name, the holders
// and their tokens as holders() and list() report them, and nothing left behind by a failed
// acquire.
#include "support.hpp"

#include <dlock/dlock.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <future>
#include <poll.h>
#include <set>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace std::chrono_literals;

namespace {

using clock_type = std::chrono::steady_clock;

dlock::acquire_options try_for(std::chrono::milliseconds wait) { return dlock::acquire_options().with_wait(wait); }
dlock::acquire_options permit_of(uint32_t n, std::chrono::milliseconds wait) { return try_for(wait).with_permits(n); }
dlock::acquire_options shared_for(std::chrono::milliseconds wait) { return try_for(wait).with_shared(true); }

// A process that holds one hold of `name` (a permit of N when permits != 0, else shared or
// exclusive) until it is killed. Forked before the test opens its own clients, so it shares none
// of their lock descriptions.
class holder_process {
public:
    holder_process(const std::string& yaml, const std::string& name, uint32_t permits, bool shared) {
        int fds[2];
        if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
        pid_ = ::fork();
        if (pid_ < 0) throw std::runtime_error("fork failed");
        if (pid_ == 0) {
            ::close(fds[0]);
            dlock_client* client = nullptr;
            if (dlock_client_open_yaml(yaml.c_str(), "holder", &client) != DLOCK_OK) ::_exit(2);
            dlock_acquire_options options = DLOCK_ACQUIRE_OPTIONS_INIT;
            options.wait_ms = 10'000;
            options.permits = permits;
            options.shared = shared ? 1 : 0;
            dlock_lease* lease = nullptr;
            const char answer = dlock_acquire(client, name.c_str(), &options, &lease) == DLOCK_OK ? 'y' : 'n';
            if (::write(fds[1], &answer, 1) != 1) ::_exit(3);
            for (;;) ::pause();
        }
        ::close(fds[1]);
        pollfd ready{fds[0], POLLIN, 0};
        char answer = 0;
        if (::poll(&ready, 1, 10'000) == 1 && ::read(fds[0], &answer, 1) == 1) held_ = answer == 'y';
        ::close(fds[0]);
    }
    ~holder_process() { kill(); }
    holder_process(const holder_process&) = delete;
    holder_process& operator=(const holder_process&) = delete;

    bool held() const { return held_; }
    pid_t pid() const { return pid_; }
    void kill() {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGKILL);
        int status = 0;
        ::waitpid(pid_, &status, 0);
        pid_ = -1;
    }

private:
    pid_t pid_ = -1;
    bool held_ = false;
};

class FileModes : public ::testing::Test {
protected:
    std::string yaml() const { return "backend: file\noptions:\n  directory: \"" + dir_.path() + "\"\n"; }
    dlock::client open_client() { return dlock::client::from_yaml(yaml()); }

    dlock::test::scratch_dir dir_{"dlock-file-modes"};
};

std::set<std::string> owners_of(const std::vector<dlock::holder_info>& holders) {
    std::set<std::string> owners;
    for (const auto& h : holders) owners.insert(h.holder);
    return owners;
}

TEST_F(FileModes, ReportsSemaphoreSharedAndListButNotBreak) {
    auto c = open_client();
    EXPECT_TRUE(c.has(DLOCK_CAP_SEMAPHORE));
    EXPECT_TRUE(c.has(DLOCK_CAP_SHARED));
    EXPECT_TRUE(c.has(DLOCK_CAP_LIST));
    EXPECT_FALSE(c.has(DLOCK_CAP_BREAK)) << "another process's OFD lock cannot be removed";
    EXPECT_EQ(dlock_break(c.handle(), "anything", 0, nullptr), DLOCK_NOT_SUPPORTED);
}

// ---- semaphores ---------------------------------------------------------------------------------

TEST_F(FileModes, AllPermitsUsableAtOnceAndTheNextOneWaits) {
    auto a = open_client();
    auto b = open_client();
    std::vector<dlock::lease> held;
    for (int i = 0; i < 3; ++i) held.push_back((i % 2 ? a : b).acquire("stalls", permit_of(3, 0ms)));
    std::error_code ec;
    auto fourth = a.acquire("stalls", permit_of(3, 150ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "a fourth permit of three was granted";
    auto fifth = b.acquire("stalls", permit_of(3, 0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout);
    held[1].release();
    auto after = a.acquire("stalls", permit_of(3, 0ms));
    EXPECT_EQ(after.state(), dlock::lease_state::held);
}

// The waiter is woken by the release of whichever permit frees first, not only of the one it
// happens to watch: here the last of three is released while the first two stay held.
TEST_F(FileModes, AReleaseOfAnyPermitWakesTheWaiter) {
    auto holders = open_client();
    auto waiter = open_client();
    for (int released = 0; released < 3; ++released) {
        const std::string name = "any-permit-" + std::to_string(released);
        std::vector<dlock::lease> held;
        for (int i = 0; i < 3; ++i) held.push_back(holders.acquire(name, permit_of(3, 0ms)));
        auto waiting = std::async(std::launch::async, [&] {
            std::error_code ec;
            auto l = waiter.acquire(name, permit_of(3, 10'000ms), ec);
            return std::make_pair(ec, clock_type::now());
        });
        std::this_thread::sleep_for(200ms);  // the waiter is asleep
        const auto freed = clock_type::now();
        held[size_t(released)].release();
        ASSERT_EQ(waiting.wait_for(5s), std::future_status::ready) << "permit " << released << " freed, waiter not woken";
        const auto [ec, woke] = waiting.get();
        EXPECT_FALSE(ec) << ec.message();
        std::printf("permit %d released: waiter acquired after %.2f ms\n", released,
                    std::chrono::duration<double, std::milli>(woke - freed).count());
    }
}

// The head waiter gives up: the next one in the queue becomes head, and a later release wakes it.
TEST_F(FileModes, WhenTheHeadWaiterGivesUpTheNextOneTakesOver) {
    auto holder = open_client();
    auto waiters = open_client();
    auto held = holder.acquire("relay", permit_of(1, 0ms));
    auto wait_for_permit = [&](std::chrono::milliseconds wait) {
        return std::async(std::launch::async, [&waiters, wait] {
            std::error_code ec;
            auto l = waiters.acquire("relay", permit_of(1, wait), ec);
            return std::make_pair(ec, clock_type::now());
        });
    };
    auto head = wait_for_permit(300ms);
    std::this_thread::sleep_for(100ms);  // the first waiter holds the gate
    auto next = wait_for_permit(10'000ms);
    EXPECT_EQ(head.get().first, dlock::errc::timeout);
    std::this_thread::sleep_for(200ms);  // the second one is head now, asleep on its doorbell
    const auto freed = clock_type::now();
    held.release();
    ASSERT_EQ(next.wait_for(5s), std::future_status::ready) << "the second waiter was not woken";
    const auto [ec, woke] = next.get();
    EXPECT_FALSE(ec) << ec.message();
    std::printf("the second waiter acquired %.2f ms after the release\n",
                std::chrono::duration<double, std::milli>(woke - freed).count());
}

// A killed holder's permit returns at once (the kernel drops its OFD lock), and the waiter
// is woken by it.
TEST_F(FileModes, AKilledHoldersPermitReturnsAtOnce) {
    holder_process child(yaml(), "killed-permit", 1, false);
    ASSERT_TRUE(child.held());
    auto c = open_client();
    std::error_code ec;
    auto refused = c.acquire("killed-permit", permit_of(1, 0ms), ec);
    ASSERT_EQ(ec, dlock::errc::timeout) << "the child's permit was not held";
    auto waiting = std::async(std::launch::async, [&] {
        std::error_code wait_ec;
        auto l = c.acquire("killed-permit", permit_of(1, 10'000ms), wait_ec);
        return std::make_pair(wait_ec, clock_type::now());
    });
    std::this_thread::sleep_for(200ms);
    const auto killed = clock_type::now();
    child.kill();
    ASSERT_EQ(waiting.wait_for(5s), std::future_status::ready) << "the dead holder's permit did not come back";
    const auto [wait_ec, woke] = waiting.get();
    EXPECT_FALSE(wait_ec) << wait_ec.message();
    std::printf("holder killed: waiter acquired the permit after %.2f ms\n",
                std::chrono::duration<double, std::milli>(woke - killed).count());
}

TEST_F(FileModes, MismatchedLimitIsRefusedNamingBothWhileHeld) {
    auto a = open_client();
    auto b = open_client();
    auto held = a.acquire("pool", permit_of(3, 0ms));
    std::error_code ec;
    auto other = b.acquire("pool", permit_of(5, 0ms), ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
    const std::string message = dlock_last_error();
    EXPECT_NE(message.find("pool"), std::string::npos) << message;
    EXPECT_NE(message.find('3'), std::string::npos) << message;
    EXPECT_NE(message.find('5'), std::string::npos) << message;
    // Nothing was taken by the refused acquire: the other two permits of three are still free.
    auto second = b.acquire("pool", permit_of(3, 0ms));
    auto third = b.acquire("pool", permit_of(3, 0ms));
    EXPECT_EQ(a.holders("pool", true).size(), 3u);
    // The stored limit is forgotten once the last holder is gone.
    held.release();
    second.release();
    third.release();
    auto five = b.acquire("pool", permit_of(5, 0ms));
    const auto now_holders = a.holders("pool", true);
    ASSERT_EQ(now_holders.size(), 1u);
    EXPECT_EQ(now_holders[0].permits, 5u);
}

TEST_F(FileModes, ASemaphoreAndALockOfOneNameAreDifferentObjects) {
    auto a = open_client();
    auto b = open_client();
    auto permit = a.acquire("both", permit_of(1, 0ms));
    auto lock = b.acquire("both", try_for(0ms));
    auto shared = a.acquire("other", shared_for(0ms));
    auto other_permit = b.acquire("other", permit_of(1, 0ms));
    EXPECT_EQ(a.holders("both", true).size(), 1u);
    EXPECT_EQ(a.holders("both", false).size(), 1u);
}

// ---- shared locks ------------------------------------------------------------------------------

TEST_F(FileModes, SharedHoldersTogetherExclusiveApart) {
    auto a = open_client();
    auto b = open_client();
    auto c = open_client();
    auto r1 = a.acquire("rw", shared_for(0ms));
    auto r2 = b.acquire("rw", shared_for(0ms));
    std::error_code ec;
    auto w = c.acquire("rw", try_for(100ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "an exclusive hold beside two shared ones";
    EXPECT_TRUE(c.inspect("rw").held);
    r1.release();
    w = c.acquire("rw", try_for(100ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "an exclusive hold beside a shared one";
    r2.release();
    auto writer = c.acquire("rw", try_for(0ms));
    auto r3 = a.acquire("rw", shared_for(100ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "a shared hold beside an exclusive one";
    writer.release();
    auto r4 = a.acquire("rw", shared_for(0ms));
}

TEST_F(FileModes, SharedHoldersAcrossProcesses) {
    holder_process reader(yaml(), "rw-proc", 0, true);
    ASSERT_TRUE(reader.held());
    auto c = open_client();
    auto mine = c.acquire("rw-proc", shared_for(0ms));  // together with the child's
    mine.release();
    std::error_code ec;
    auto w = c.acquire("rw-proc", try_for(100ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "an exclusive hold beside the child's shared one";
    reader.kill();
    auto writer = c.acquire("rw-proc", try_for(2'000ms));
    EXPECT_EQ(writer.state(), dlock::lease_state::held);
}

// Writer preference: once an exclusive acquirer waits, a new shared acquirer waits behind it, even
// though only shared holders hold the lock.
TEST_F(FileModes, AWaitingWriterStopsNewReaders) {
    auto a = open_client();
    auto b = open_client();
    auto w = open_client();
    auto r1 = a.acquire("pref", shared_for(0ms));
    auto writing = std::async(std::launch::async, [&] {
        std::error_code ec;
        auto l = w.acquire("pref", try_for(10'000ms), ec);
        if (!ec) {
            std::this_thread::sleep_for(100ms);
            l.release();
        }
        return ec;
    });
    std::this_thread::sleep_for(300ms);  // the writer waits
    std::error_code ec;
    auto r2 = b.acquire("pref", shared_for(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "a reader overtook a waiting writer";
    auto r3 = b.acquire("pref", shared_for(150ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "a reader overtook a waiting writer";
    r1.release();
    EXPECT_FALSE(writing.get()) << "the writer did not get the lock";
    auto r4 = b.acquire("pref", shared_for(2'000ms));
}

// A stream of overlapping readers does not starve a writer.
TEST_F(FileModes, OverlappingReadersDoNotStarveAWriter) {
    std::vector<dlock::client> readers;
    for (int i = 0; i < 3; ++i) readers.push_back(open_client());
    auto w = open_client();
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (auto& r : readers)
        threads.emplace_back([&] {
            while (!stop) {
                std::error_code ec;
                auto l = r.acquire("starve", shared_for(50ms), ec);
                std::this_thread::sleep_for(30ms);
            }
        });
    std::this_thread::sleep_for(200ms);
    std::error_code ec;
    auto writer = w.acquire("starve", try_for(3'000ms), ec);
    stop = true;
    for (auto& t : threads) t.join();
    EXPECT_FALSE(ec) << "the writer was starved by overlapping readers: " << ec.message();
}

TEST_F(FileModes, OneFencingCounterForEveryGrantOfAName) {
    auto a = open_client();
    auto b = open_client();
    uint64_t last = 0;
    auto check = [&](const dlock::lease& l) {
        EXPECT_GT(l.fencing_token(), last);
        last = l.fencing_token();
    };
    {
        auto x = a.acquire("fenced", try_for(0ms));
        check(x);
    }
    {
        auto r1 = a.acquire("fenced", shared_for(0ms));
        check(r1);
        auto r2 = b.acquire("fenced", shared_for(0ms));
        check(r2);
    }
    auto x = b.acquire("fenced", try_for(0ms));
    check(x);
    x.release();
    auto p1 = a.acquire("fenced", permit_of(2, 0ms));
    auto p2 = b.acquire("fenced", permit_of(2, 0ms));
    EXPECT_GT(p2.fencing_token(), p1.fencing_token());
}

// A client's idle description of a deleted file is not taken for the lock: a shared acquirer and a
// permit acquirer see the holder of the file the path names now.
TEST_F(FileModes, DeletedFilesAreNotTakenForTheLockOrTheSemaphore) {
    auto a = open_client();
    auto b = open_client();
    a.acquire("swept-rw", shared_for(0ms)).release();
    a.acquire("swept-sem", permit_of(1, 0ms)).release();
    ASSERT_EQ(::unlink((dir_.path() + "/swept-rw.lock").c_str()), 0);
    ASSERT_EQ(::unlink((dir_.path() + "/swept-sem.sem").c_str()), 0);
    auto writer = b.acquire("swept-rw", try_for(0ms));
    auto permit = b.acquire("swept-sem", permit_of(1, 0ms));
    std::error_code ec;
    auto reader = a.acquire("swept-rw", shared_for(100ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "a shared hold of the deleted file beside the writer of the new one";
    auto second = a.acquire("swept-sem", permit_of(1, 100ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "a second permit of one, on the deleted file";
}

// ---- holders and list --------------------------------------------------------------------------

TEST_F(FileModes, HoldersReportEveryHolderWithItsTokens) {
    auto a = open_client();
    auto b = open_client();
    EXPECT_TRUE(a.holders("who").empty());
    {
        auto x = a.acquire("who", try_for(0ms));
        const auto hs = b.holders("who");
        ASSERT_EQ(hs.size(), 1u);
        EXPECT_EQ(hs[0].kind, dlock::hold_kind::exclusive);
        EXPECT_EQ(hs[0].holder, x.owner());
        EXPECT_EQ(hs[0].fencing_token, x.fencing_token());
        EXPECT_EQ(hs[0].name, "who");
        EXPECT_FALSE(hs[0].ttl_left);
    }
    auto r1 = a.acquire("who", shared_for(0ms));
    auto r2 = b.acquire("who", shared_for(0ms));
    auto r3 = b.acquire("who", shared_for(0ms));
    r2.release();
    auto hs = a.holders("who");
    ASSERT_EQ(hs.size(), 2u);
    EXPECT_EQ(owners_of(hs), (std::set<std::string>{std::string(r1.owner()), std::string(r3.owner())}));
    for (const auto& h : hs) {
        EXPECT_EQ(h.kind, dlock::hold_kind::shared);
        EXPECT_EQ(h.fencing_token, h.holder == r1.owner() ? r1.fencing_token() : r3.fencing_token());
    }
    auto p1 = a.acquire("who", permit_of(4, 0ms));
    auto p2 = b.acquire("who", permit_of(4, 0ms));
    hs = a.holders("who", true);
    ASSERT_EQ(hs.size(), 2u);
    EXPECT_EQ(owners_of(hs), (std::set<std::string>{std::string(p1.owner()), std::string(p2.owner())}));
    for (const auto& h : hs) {
        EXPECT_EQ(h.kind, dlock::hold_kind::permit);
        EXPECT_EQ(h.permits, 4u);
        EXPECT_EQ(h.fencing_token, h.holder == p1.owner() ? p1.fencing_token() : p2.fencing_token());
    }
}

TEST_F(FileModes, ListRecoversEveryNameAndFiltersByPrefix) {
    auto a = open_client();
    auto b = open_client();
    const std::string long_name = "jobs/" + std::string(300, 'x') + "/é";
    auto x = a.acquire("jobs/a b", try_for(0ms));
    auto s = b.acquire(long_name, shared_for(0ms));
    auto p = a.acquire("jobs/.pool", permit_of(2, 0ms));
    auto other = b.acquire("other", try_for(0ms));
    a.acquire("jobs/released", try_for(0ms)).release();
    const auto listed = b.list("jobs/");
    std::set<std::pair<std::string, std::string>> seen;
    for (const auto& h : listed) seen.insert({h.name, h.holder});
    EXPECT_EQ(seen, (std::set<std::pair<std::string, std::string>>{
                        {"jobs/a b", std::string(x.owner())}, {long_name, std::string(s.owner())}, {"jobs/.pool", std::string(p.owner())}}));
    for (const auto& h : listed)
        if (h.name == "jobs/.pool") {
            EXPECT_EQ(h.kind, dlock::hold_kind::permit);
        }
    EXPECT_EQ(b.list().size(), 4u);
}

// ---- nothing left behind ------------------------------------------------------------------------

TEST_F(FileModes, FailedAcquiresLeaveNothingBehind) {
    auto a = open_client();
    auto b = open_client();
    auto p = a.acquire("left", permit_of(1, 0ms));
    std::error_code ec;
    auto late = b.acquire("left", permit_of(1, 100ms), ec);
    ASSERT_EQ(ec, dlock::errc::timeout);
    EXPECT_EQ(a.holders("left", true).size(), 1u);
    p.release();
    auto next = a.acquire("left", permit_of(1, 0ms));  // the timed-out waiter holds nothing
    next.release();

    // A writer that gives up waiting lets readers in again at once.
    auto r1 = a.acquire("left", shared_for(0ms));
    auto w = b.acquire("left", try_for(100ms), ec);
    ASSERT_EQ(ec, dlock::errc::timeout);
    auto r2 = a.acquire("left", shared_for(0ms));
    EXPECT_EQ(b.holders("left").size(), 2u);
    // A reader that gives up waiting holds no slot.
    r1.release();
    r2.release();
    auto x = a.acquire("left", try_for(0ms));
    auto r3 = b.acquire("left", shared_for(100ms), ec);
    ASSERT_EQ(ec, dlock::errc::timeout);
    const auto hs = a.holders("left");
    ASSERT_EQ(hs.size(), 1u);
    EXPECT_EQ(hs[0].holder, x.owner());
}

// Closing the client ends a semaphore wait (asleep on the gate or on the doorbell) and a shared
// wait (asleep behind an exclusive holder) with DLOCK_CANCELLED.
TEST_F(FileModes, CloseEndsSemaphoreAndSharedWaits) {
    auto holder = open_client();
    auto permit = holder.acquire("closing-sem", permit_of(1, 0ms));
    auto exclusive = holder.acquire("closing-rw", try_for(0ms));
    dlock_client* waiter = nullptr;
    ASSERT_EQ(dlock_client_open_yaml(yaml().c_str(), "waiter", &waiter), DLOCK_OK) << dlock_last_error();
    auto wait = [waiter](uint32_t permits, int shared) {
        return std::async(std::launch::async, [=] {
            dlock_acquire_options options = DLOCK_ACQUIRE_OPTIONS_INIT;
            options.wait_ms = DLOCK_WAIT_FOREVER;
            options.permits = permits;
            options.shared = shared;
            dlock_lease* lease = nullptr;
            const int status = dlock_acquire(waiter, permits ? "closing-sem" : "closing-rw", &options, &lease);
            dlock_lease_destroy(lease);
            return status;
        });
    };
    auto head = wait(1, 0);
    auto queued = wait(1, 0);
    auto reader = wait(0, 1);
    std::this_thread::sleep_for(300ms);
    auto closing = std::async(std::launch::async, [waiter] { dlock_client_close(waiter); });
    const bool closed = closing.wait_for(5s) == std::future_status::ready;
    if (!closed) {
        permit.release();
        exclusive.release();
    }
    ASSERT_TRUE(closed) << "close() did not end the waits";
    EXPECT_EQ(head.get(), DLOCK_CANCELLED);
    EXPECT_EQ(queued.get(), DLOCK_CANCELLED);
    EXPECT_EQ(reader.get(), DLOCK_CANCELLED);
}

}  // namespace

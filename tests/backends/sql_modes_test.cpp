// The `sql` backend's semaphores, shared locks, holders, list and break, on the lab's real
// PostgreSQL (lease and advisory modes) and its secured variant: the properties the conformance
// tiers state for every backend, seen here through what PostgreSQL stores (rows, counts, advisory
// locks), plus what is particular to this backend — the limit stored in slot 0, the writer
// preference of the lease turnstile and of PostgreSQL's own lock queue, the tables an older table
// layout gains, and the DELETE privilege that break needs.
#include "backend_test.hpp"

#include "dlock/lab/faults.hpp"
#include "dlock/lab/gtest.hpp"
#include "dlock/lab/secured.hpp"
#include "sql_statements.hpp"  // the plugin's own statements, for interleavings run from side sessions

#include <dlock/dlock.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <unistd.h>

using namespace std::chrono_literals;
using dlock::lab::backend;
using dlock::test::child_process;
using clock_type = std::chrono::steady_clock;

namespace {

using dlock::test::eventually;

dlock::acquire_options permits_of(uint32_t n) { return dlock::acquire_options().with_permits(n).with_wait(0ms); }

int64_t ms_since(clock_type::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t).count();
}

class SqlModes : public dlock::test::lab_backend_test {
protected:
    SqlModes() : lab_backend_test({backend::sql}, true) {}

    void SetUp() override {
        lab_backend_test::SetUp();
        if (!lab_) return;
        scratch_ = std::make_unique<dlock::test::scratch_dir>("dlock-sql-v2-test");
    }

    std::string dsn() const { return dlock::lab::lab_environment::instance().access(backend::sql).dsn; }
    dlock::lab::postgres_client raw() { return lab_->sql().client(); }
    int64_t scalar(const std::string& sql) { return std::stoll(raw().query_value(sql).value_or("-1")); }

    std::string yaml(const std::string& mode, const std::string& extra = "") const {
        return "backend: sql\noptions:\n  dsn: \"" + dsn() + "\"\n  mode: " + mode + "\n" + extra;
    }
    std::string config(const std::string& mode, const std::string& extra = "") {
        const std::string path = scratch_->path() + "/" + mode + std::to_string(++configs_) + ".yaml";
        std::ofstream(path) << yaml(mode, extra);
        return path;
    }
    dlock::client open(const std::string& mode, const std::string& extra = "") {
        return dlock::client::from_yaml(yaml(mode, extra), "sql_v2_test");
    }
    static dlock::acquire_options shared() { return dlock::acquire_options().with_shared(true); }
    static dlock::acquire_options permits(uint32_t n) { return dlock::acquire_options().with_permits(n); }

    std::unique_ptr<dlock::test::scratch_dir> scratch_;
    int configs_ = 0;
};

// ---- capabilities -------------------------------------------------------------------------------

TEST_F(SqlModes, EachModeReportsWhatItOffers) {
    const uint64_t v2 = DLOCK_CAP_SEMAPHORE | DLOCK_CAP_SHARED | DLOCK_CAP_LIST | DLOCK_CAP_BREAK;
    EXPECT_EQ(open("lease").capabilities() & v2, v2);
    // Advisory mode: shared advisory locks and list. No semaphore (no sound wait over N keys), no
    // break (an advisory lock ends only with its holder's session).
    EXPECT_EQ(open("advisory").capabilities() & v2, DLOCK_CAP_SHARED | DLOCK_CAP_LIST);
}

// ---- lease mode: semaphores ---------------------------------------------------------------------

TEST_F(SqlModes, AllNPermitsAreUsableAtOnceAndAReleaseWakesTheNextWaiter) {
    auto client = open("lease");
    dlock::semaphore sem(client, "v2/stalls", 3);
    auto p1 = sem.acquire();
    auto p2 = sem.acquire();
    auto p3 = sem.acquire();
    EXPECT_EQ(scalar("SELECT count(*) FROM dlock_locks_holders WHERE kind = 'P' AND name = 'v2/stalls' AND owner IS NOT NULL"), 3);
    EXPECT_FALSE(sem.try_acquire()) << "the 4th of 3 permits";
    std::promise<int64_t> woken;
    clock_type::time_point released_at;
    std::thread waiter([&] {
        auto other = open("lease");
        auto p = dlock::semaphore(other, "v2/stalls", 3).try_acquire_for(20s);
        woken.set_value(p ? ms_since(released_at) : -1);
    });
    std::this_thread::sleep_for(300ms);  // the waiter is LISTENing
    released_at = clock_type::now();
    p2.release();
    const int64_t after = woken.get_future().get();
    waiter.join();
    std::cout << "[sql lease] permit waiter woken " << after << " ms after a release (holders' ttl 30 s)\n";
    ASSERT_GE(after, 0) << "the waiter never got the released permit";
    EXPECT_LT(after, 3000) << "woken by the release's NOTIFY, not at a holder's expiry";
    EXPECT_GT(p3.fencing_token(), p1.fencing_token()) << "each grant of the semaphore takes the next token";
}

// fair: true (the default): a permit released while a fair waiter is queued in the semaphore's
// turnstile goes to that waiter; the releaser's immediate re-acquire (a try-once, and a wait) does
// not barge past it, and the waiters are served in the order they queued.
TEST_F(SqlModes, ReleasedPermitGoesToTheQueuedFairWaitersInOrderNotBackToTheReleaser) {
    auto client = open("lease");
    dlock::semaphore sem(client, "v2/fair", 1);
    auto held = sem.acquire();
    std::atomic<int> served{0};
    std::promise<int> first_turn, second_turn;
    auto queue = [&](std::promise<int>& turn) {
        return std::thread([&] {
            auto other = open("lease");
            auto p = dlock::semaphore(other, "v2/fair", 1).try_acquire_for(20s);
            turn.set_value(p ? ++served : -1);
            std::this_thread::sleep_for(200ms);  // holds its permit a while
        });
    };
    std::thread first = queue(first_turn);
    std::this_thread::sleep_for(500ms);  // the first waiter has queued in the turnstile
    std::thread second = queue(second_turn);
    std::this_thread::sleep_for(500ms);
    held.release();
    EXPECT_FALSE(sem.try_acquire()) << "the releaser took its permit straight back past the queued waiters";
    auto again = std::async(std::launch::async, [&] { return bool(sem.try_acquire_for(20s)); });
    EXPECT_EQ(first_turn.get_future().get(), 1) << "the first queued waiter is served first";
    EXPECT_EQ(second_turn.get_future().get(), 2) << "the second queued waiter is served before the releaser's wait";
    EXPECT_TRUE(again.get());
    first.join();
    second.join();
}

TEST_F(SqlModes, MismatchedLimitIsRefusedNamingBothNumbersAndTheName) {
    auto client = open("lease");
    auto held = client.acquire("v2/limit", permits(3).with_wait(0ms));
    std::error_code ec;
    client.acquire("v2/limit", permits(5).with_wait(0ms), ec);
    ASSERT_EQ(ec, dlock::errc::invalid_argument);
    const std::string message = dlock_last_error();
    EXPECT_NE(message.find("v2/limit"), std::string::npos) << message;
    EXPECT_NE(message.find("limit of 3"), std::string::npos) << message;
    EXPECT_NE(message.find("asks for 5"), std::string::npos) << message;
    EXPECT_EQ(scalar("SELECT permits FROM dlock_locks_holders WHERE kind = 'P' AND name = 'v2/limit' AND slot = 0"), 3)
        << "the stored limit is untouched";
    // A lock of the same name is another object.
    auto lock = client.acquire("v2/limit", dlock::acquire_options().with_wait(0ms));
    EXPECT_TRUE(lock);
}

TEST_F(SqlModes, KilledPermitHolderPermitReturnsAfterItsTtl) {
    const int64_t ttl_ms = 1200;
    child_process holder({DLOCK_CONFORMANCE_WORKER, "hold", config("lease"), "v2/killed", std::to_string(ttl_ms), "permits:1"}, true);
    const std::string line = dlock::test::expect_line(holder, 10000);
    ASSERT_EQ(line.rfind("held ", 0), 0u) << line;
    const auto killed = clock_type::now();
    holder.kill(SIGKILL);
    auto client = open("lease");
    auto p = client.acquire("v2/killed", permits(1).with_wait(5s));
    const int64_t recovery = ms_since(killed);
    std::cout << "[sql lease] permit back " << recovery << " ms after its holder's SIGKILL (ttl " << ttl_ms << " ms)\n";
    EXPECT_LT(recovery, ttl_ms + 1000) << "the waiter retries at the permit's expiry, no later";
    EXPECT_GT(p.fencing_token(), std::stoull(line.substr(5)));
}

TEST_F(SqlModes, TimedOutAcquiresLeaveNothingBehind) {
    auto client = open("lease");
    auto permit = client.acquire("v2/nothing", permits(1).with_wait(0ms));
    auto exclusive = client.acquire("v2/nothing-lock", dlock::acquire_options().with_wait(0ms));
    const int64_t rows_before = scalar("SELECT count(*) FROM dlock_locks_holders");
    std::error_code ec;
    client.acquire("v2/nothing", permits(1).with_wait(300ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout);
    client.acquire("v2/nothing-lock", shared().with_wait(300ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout);
    client.acquire("v2/nothing-lock", shared().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout);
    EXPECT_EQ(scalar("SELECT count(*) FROM dlock_locks_holders"), rows_before) << "no holder row was added";
    EXPECT_EQ(scalar("SELECT count(*) FROM dlock_locks_holders WHERE owner IS NOT NULL"), 1) << "only the one permit";
    EXPECT_EQ(scalar("SELECT readers FROM dlock_locks WHERE name = 'v2/nothing-lock'"), 0);
    EXPECT_TRUE(eventually([&] { return scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'") == 0; }, 5s))
        << "the waiters left their turnstiles";
}

// ---- lease mode: shared locks -------------------------------------------------------------------

TEST_F(SqlModes, SharedHoldersTogetherAndTheLastReleaseWakesTheWriter) {
    auto client = open("lease");
    auto r1 = client.acquire("v2/rw", shared().with_wait(0ms).with_ttl(30s));
    auto r2 = client.acquire("v2/rw", shared().with_wait(0ms).with_ttl(30s));
    EXPECT_EQ(scalar("SELECT readers FROM dlock_locks WHERE name = 'v2/rw'"), 2);
    std::error_code ec;
    client.acquire("v2/rw", dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "an exclusive acquire while readers hold";
    std::promise<std::pair<int64_t, uint64_t>> writer_done;
    clock_type::time_point last_release;
    std::thread writer([&] {
        auto other = open("lease");
        std::error_code wec;
        auto w = other.acquire("v2/rw", dlock::acquire_options().with_wait(20s), wec);
        writer_done.set_value({wec ? -1 : ms_since(last_release), wec ? 0 : w.fencing_token()});
    });
    std::this_thread::sleep_for(300ms);
    r1.release();
    std::this_thread::sleep_for(200ms);
    last_release = clock_type::now();
    r2.release();
    const auto [after, token] = writer_done.get_future().get();
    writer.join();
    std::cout << "[sql lease] writer took the lock " << after << " ms after the last reader's release (readers' ttl 30 s)\n";
    ASSERT_GE(after, 0) << "the writer never got the lock";
    EXPECT_LT(after, 3000) << "woken by the last reader's release, not at the readers' expiry";
    EXPECT_GT(token, std::max(r1.fencing_token(), r2.fencing_token())) << "shared and exclusive grants share the counter";
}

TEST_F(SqlModes, ExclusiveHolderExcludesReadersUntilItsRelease) {
    auto client = open("lease");
    auto w = client.acquire("v2/wr", dlock::acquire_options().with_wait(0ms));
    std::error_code ec;
    client.acquire("v2/wr", shared().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout);
    auto reader = std::async(std::launch::async, [&] {
        auto other = open("lease");
        std::error_code rec;
        auto r = other.acquire("v2/wr", shared().with_wait(20s), rec);
        return rec ? uint64_t(0) : r.fencing_token();
    });
    std::this_thread::sleep_for(300ms);
    w.release();
    const uint64_t token = reader.get();
    EXPECT_GT(token, w.fencing_token());
}

// A fair writer queued in the turnstile stops readers arriving after it, though the lock is held
// shared (writer preference); readers that hold keep it until they release.
TEST_F(SqlModes, QueuedWriterStopsNewReaders) {
    auto client = open("lease");
    auto r1 = client.acquire("v2/pref", shared().with_wait(0ms).with_ttl(30s));
    std::atomic<bool> writer_got{false};
    std::thread writer([&] {
        auto other = open("lease");
        auto w = other.acquire("v2/pref", dlock::acquire_options().with_wait(20s).with_fair(true));
        writer_got = true;
        std::this_thread::sleep_for(200ms);
    });
    ASSERT_TRUE(eventually([&] { return scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND mode = 'ExclusiveLock'") == 1; }, 5s))
        << "the writer never queued in the turnstile";
    std::error_code ec;
    client.acquire("v2/pref", shared().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "a reader arriving after a queued writer";
    auto late_reader = std::async(std::launch::async, [&] {
        auto other = open("lease");
        std::error_code rec;
        auto r = other.acquire("v2/pref", shared().with_wait(20s), rec);
        return !rec && writer_got.load();  // admitted only once the writer had its turn
    });
    std::this_thread::sleep_for(300ms);
    EXPECT_FALSE(writer_got);
    r1.release();
    writer.join();
    EXPECT_TRUE(writer_got);
    EXPECT_TRUE(late_reader.get()) << "the late reader got the lock after the writer, not before";
}

// ---- lease mode: a paused fair waiter delays the others by a bound (peer_timeout), not forever -----
// A waiter process admitted by a turnstile is paused (SIGSTOP) while it waits; the server ends its
// silent queue session after peer_timeout (idle_session_timeout on queue sessions), which frees the
// turnstile. Without that bound, the free permits (or the free lock) stay unusable to everyone until
// the paused process resumes. SqlFaults.PausedFairWaiterDelaysOthersByABoundNotForever is the
// exclusive lock's case.
constexpr double paused_waiter_bound_s = 3.0;   // peer_timeout below
constexpr double paused_waiter_margin_s = 3.0;  // a loaded machine
const std::string paused_waiter_options = "  peer_timeout: 3s\n";

// Both permits of a semaphore are released while a paused waiter holds the semaphore's turnstile:
// the live waiter queued behind it gets a permit within the bound, and the other permit is usable.
TEST_F(SqlModes, PausedFairPermitWaiterDelaysOthersByABoundNotForever) {
    const std::string name = "v2/paused-permit-waiter";
    auto client = open("lease", paused_waiter_options);
    dlock::semaphore sem(client, name, 2);
    auto p1 = sem.acquire();
    auto p2 = sem.acquire();
    child_process paused({DLOCK_CONFORMANCE_WORKER, "hold", config("lease", paused_waiter_options), name, "30000", "permits:2"}, true);
    ASSERT_TRUE(eventually([&] { return scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted") == 1; }, 5s))
        << "the waiting process was never admitted";
    std::this_thread::sleep_for(300ms);  // it listens and waits for a permit
    paused.kill(SIGSTOP);
    clock_type::time_point released_at;
    std::promise<int64_t> granted;
    std::thread waiter([&] {
        auto other = open("lease", paused_waiter_options);
        auto p = dlock::semaphore(other, name, 2).try_acquire_for(20s);
        granted.set_value(p ? ms_since(released_at) : -1);
    });
    EXPECT_TRUE(eventually([&] { return scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted") == 1; }, 5s))
        << "the live waiter never queued";
    released_at = clock_type::now();
    p1.release();
    p2.release();
    const int64_t after_ms = granted.get_future().get();
    waiter.join();
    std::cout << "[sql lease] permit waiter behind a paused admitted waiter granted " << after_ms << " ms after both permits "
              << "were released (bound " << paused_waiter_bound_s << " s: peer_timeout)\n";
    ASSERT_GE(after_ms, 0) << "two free permits stayed unusable while a paused waiter held the turnstile";
    EXPECT_LT(after_ms, (paused_waiter_bound_s + paused_waiter_margin_s) * 1000);
    EXPECT_TRUE(sem.try_acquire_for(5s)) << "the other free permit";
    paused.kill(SIGKILL);
}

// A fair writer admitted by the lock's turnstile is paused while a reader holds; the reader releases:
// every reader queued behind the writer is granted within the bound, together.
TEST_F(SqlModes, PausedFairWriterDelaysTheReadersBehindItByABoundNotForever) {
    const std::string name = "v2/paused-writer";
    auto client = open("lease", paused_waiter_options);
    auto r0 = client.acquire(name, shared().with_wait(0ms).with_ttl(30s));
    child_process paused({DLOCK_CONFORMANCE_WORKER, "hold", config("lease", paused_waiter_options), name, "30000"}, true);
    ASSERT_TRUE(eventually([&] { return scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND mode = 'ExclusiveLock'") == 1; }, 5s))
        << "the writer process was never admitted";
    std::this_thread::sleep_for(300ms);  // it listens and waits for the reader
    paused.kill(SIGSTOP);
    clock_type::time_point released_at;
    std::atomic<int> holding{0}, most{0};
    auto reader = [&](std::promise<int64_t>& granted) {
        return std::thread([&] {
            auto other = open("lease", paused_waiter_options);
            std::error_code ec;
            auto r = other.acquire(name, shared().with_wait(20s).with_ttl(10s), ec);
            granted.set_value(ec ? -1 : ms_since(released_at));
            if (ec) return;
            const int now = ++holding;
            for (int seen = most; now > seen && !most.compare_exchange_weak(seen, now);) {
            }
            std::this_thread::sleep_for(1s);
            --holding;
        });
    };
    std::promise<int64_t> first, second;
    std::thread r1 = reader(first), r2 = reader(second);
    EXPECT_TRUE(eventually([&] { return scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted") == 2; }, 5s))
        << "the readers never queued behind the writer";
    released_at = clock_type::now();
    r0.release();
    const int64_t first_ms = first.get_future().get(), second_ms = second.get_future().get();
    r1.join();
    r2.join();
    std::cout << "[sql lease] readers behind a paused admitted writer granted " << first_ms << " and " << second_ms
              << " ms after the lock was freed (bound " << paused_waiter_bound_s << " s: peer_timeout)\n";
    ASSERT_GE(first_ms, 0) << "the readers stayed behind a paused writer while the lock was free";
    ASSERT_GE(second_ms, 0) << "the readers stayed behind a paused writer while the lock was free";
    EXPECT_LT(std::max(first_ms, second_ms), (paused_waiter_bound_s + paused_waiter_margin_s) * 1000);
    EXPECT_EQ(most, 2) << "the readers held together";
    paused.kill(SIGKILL);
}

TEST_F(SqlModes, KilledReaderFreesTheLockAfterItsTtl) {
    const int64_t ttl_ms = 1200;
    child_process holder({DLOCK_CONFORMANCE_WORKER, "hold", config("lease"), "v2/dead-reader", std::to_string(ttl_ms), "shared"}, true);
    const std::string line = dlock::test::expect_line(holder, 10000);
    ASSERT_EQ(line.rfind("held ", 0), 0u) << line;
    auto client = open("lease");
    auto r = client.acquire("v2/dead-reader", shared().with_wait(0ms).with_ttl(1200ms).with_renew(false));
    r.release();  // a live reader leaves; the dead one still counts
    const auto killed = clock_type::now();
    holder.kill(SIGKILL);
    auto w = client.acquire("v2/dead-reader", dlock::acquire_options().with_wait(5s));
    const int64_t recovery = ms_since(killed);
    std::cout << "[sql lease] writer in " << recovery << " ms after the last reader's SIGKILL (ttl " << ttl_ms << " ms)\n";
    EXPECT_LT(recovery, ttl_ms + 1000);
    EXPECT_GT(w.fencing_token(), std::stoull(line.substr(5)));
}

// Issue 28, trace A: a reader whose statement waited for the lock's row (a side session holds it
// FOR UPDATE) must not outlive the row's generation. After the row expires and R3 starts a new
// generation, the first reader's late release must leave R3's count alone, so a writer stays out
// while R3 holds. Each acquire is one reader row, counted once.
TEST_F(SqlModes, WriterNeverJoinsALiveReaderAfterALateRelease) {
    const std::string name = "v2/late-release";
    auto client = open("lease");
    client.acquire(name, dlock::acquire_options().with_wait(0ms)).release();  // the lock's row exists
    auto side = raw();  // a psql-like session
    side.execute("BEGIN");
    side.execute("SELECT 1 FROM dlock_locks WHERE name = '" + name + "' FOR UPDATE");
    const auto locked = clock_type::now();
    auto reader_client = open("lease");
    auto waiting = std::async(std::launch::async, [&] {
        return reader_client.acquire(name, shared().with_ttl(3s).with_renew(false).with_wait(10s));
    });
    ASSERT_TRUE(eventually([&] { return scalar("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'") == 1; }, 5s))
        << "the reader's statement never waited for the row";
    std::this_thread::sleep_until(locked + 2s);
    side.execute("COMMIT");
    auto r_w = waiting.get();
    std::cout << "[sql lease] reader granted " << ms_since(locked) << " ms after the side session locked the row\n";
    EXPECT_EQ(scalar("SELECT readers FROM dlock_locks WHERE name = '" + name + "'"), 1) << "one acquire, one reader counted";
    EXPECT_EQ(scalar("SELECT count(*) FROM dlock_locks_holders WHERE kind = 'S' AND name = '" + name + "' AND owner IS NOT NULL"), 1)
        << "one acquire, one reader row";
    EXPECT_EQ(scalar("SELECT count(*) FROM dlock_locks_holders h JOIN dlock_locks t ON t.name = h.name WHERE h.kind = 'S'"
                     " AND h.name = '" + name + "' AND h.owner IS NOT NULL AND h.expiry > t.expiry"), 0)
        << "the reader's row outlives the lock's row";

    // The row expires; R3 starts a new generation of readers.
    ASSERT_TRUE(eventually([&] {
        return scalar("SELECT count(*) FROM dlock_locks WHERE name = '" + name + "' AND expiry <= clock_timestamp()") == 1;
    }, 10s));
    auto r3 = client.acquire(name, shared().with_ttl(30s).with_wait(0ms));
    EXPECT_EQ(scalar("SELECT readers FROM dlock_locks WHERE name = '" + name + "'"), 1) << "R3 starts a new generation";
    EXPECT_EQ(r_w.release(), dlock::release_outcome::already_lost) << "the first reader's row ended with its generation";
    EXPECT_EQ(scalar("SELECT readers FROM dlock_locks WHERE name = '" + name + "'"), 1) << "the late release counted R3 out";
    EXPECT_EQ(scalar("SELECT count(*) FROM dlock_locks WHERE name = '" + name + "' AND owner = 'shared'"), 1);
    std::error_code ec;
    auto writer = client.acquire(name, dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "an exclusive acquire got in while R3 holds";
    EXPECT_EQ(r3.state(), dlock::lease_state::held);
    r3.renew(ec);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_EQ(r3.release(), dlock::release_outcome::released);
    auto after = client.acquire(name, dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_FALSE(ec) << "the last reader's release frees the lock: " << ec.message();
}

// Issue 28, trace B: a break that waits for the lock's row while a shared acquire commits removes
// that reader too; its hold is LOST at its next renewal, and its release does not count out a
// reader of the next generation (a writer would then get in beside that reader).
TEST_F(SqlModes, SharedHoldTakenDuringABreakIsLostAtItsNextRenewal) {
    const std::string name = "v2/break-race";
    auto client = open("lease");
    client.acquire(name, dlock::acquire_options().with_wait(0ms)).release();  // the lock's row exists
    auto side = raw();
    side.execute("BEGIN");
    side.execute("SELECT 1 FROM dlock_locks WHERE name = '" + name + "' FOR UPDATE");
    auto waiters = [&] { return scalar("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"); };
    auto reader_client = open("lease");
    auto reading = std::async(std::launch::async, [&] {
        return reader_client.acquire(name, shared().with_ttl(30s).with_renew(false).with_wait(10s));
    });
    ASSERT_TRUE(eventually([&] { return waiters() == 1; }, 5s)) << "the reader never waited for the row";
    auto breaker = open("lease");
    auto breaking = std::async(std::launch::async, [&] { return breaker.break_lock(name); });
    ASSERT_TRUE(eventually([&] { return waiters() == 2; }, 5s)) << "the break never waited for the row";
    side.execute("COMMIT");  // the reader's statement goes first, the break after it
    auto r = reading.get();
    EXPECT_EQ(breaking.get(), 1u) << "the break counts the reader that committed while it waited";
    EXPECT_EQ(scalar("SELECT count(*) FROM dlock_locks_holders WHERE kind = 'S' AND name = '" + name + "' AND owner IS NOT NULL"), 0)
        << "the break left a reader's row";

    auto r2 = client.acquire(name, shared().with_ttl(30s).with_wait(0ms));  // the next generation
    std::error_code ec;
    r.renew(ec);
    EXPECT_EQ(ec, dlock::errc::lost) << "the broken reader renewed its hold";
    EXPECT_EQ(r.release(), dlock::release_outcome::already_lost);
    EXPECT_EQ(scalar("SELECT readers FROM dlock_locks WHERE name = '" + name + "'"), 1) << "the broken reader counted R2 out";
    auto writer = client.acquire(name, dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "an exclusive acquire got in beside R2";
    r2.renew(ec);
    EXPECT_FALSE(ec) << ec.message();
}

// The text of one of the lease mode's shared statements, as the plugin prepares it on dlock's
// default tables: a side session runs it (PREPARE … AS <text>; EXECUTE …) to stop an interleaving
// at a point no client call can.
std::string shared_statement(const std::string& id) {
    const dlock::sql::statements sql{"dlock_locks", "dlock_fences", "dlock_schema_version", "dlock_locks_holders"};
    for (const auto& [name, text] : sql.shared())
        if (name == id) return text;
    ADD_FAILURE() << "no statement " << id;
    return "";
}

// Issue 28 (review of the two-statement break): R1 reads (ttl 1.5 s); R_old's shared acquire adds
// its reader row with its transaction still open; a break waits for the lock's row, and a shared
// acquire N (ttl 60 s) waits for it too, its snapshot taken before R_old commits. R1's row expires,
// R_old commits, the break frees the row (its first statement only: the breaker's connection is
// gone before a second one, or an older dlock breaks) and N starts a new generation after it: it
// reuses R1's expired slot and cannot see R_old's row, which stays live. Nothing R_old does then may
// count in N's generation: its renewal is refused, its release counts nobody out, holders does not
// list it, and no writer gets in while N holds. (The break and N both wait for R_old's transaction;
// N's server process is stopped while R_old commits and the break runs, so that the break goes
// first, as the server lets either go first.)
TEST_F(SqlModes, BrokenReaderCommittedDuringTheBreakNeverCountsOutTheNextGeneration) {
    const std::string name = "v2/break-generation";
    const std::string rold_owner = "0123456789abcdef0123456789abcdef";
    auto client = open("lease");
    auto waiters = [&] { return scalar("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"); };
    client.acquire(name, dlock::acquire_options().with_wait(0ms)).release();  // the lock's row exists
    auto r1 = client.acquire(name, shared().with_ttl(1500ms).with_renew(false).with_wait(0ms));
    const auto r1_granted = clock_type::now();
    auto rold = raw();  // R_old: the plugin's shared_acquire, its transaction left open
    rold.execute("PREPARE shared_acquire AS " + shared_statement("shared_acquire"));
    rold.execute("PREPARE shared_renew AS " + shared_statement("shared_renew"));
    rold.execute("PREPARE shared_release AS " + shared_statement("shared_release"));
    rold.execute("BEGIN");
    ASSERT_TRUE(rold.query_value("EXECUTE shared_acquire('" + name + "', '" + rold_owner + "', 60000, 'rold', true, 0)"))
        << "R_old was not granted";
    auto breaker = raw();
    breaker.execute("PREPARE break_lock AS " + shared_statement("break_lock"));
    const std::string breaker_pid = breaker.query_value("SELECT pg_backend_pid()").value_or("0");
    auto breaking = std::async(std::launch::async, [&] {
        return breaker.query_value("EXECUTE break_lock('" + name + "', 'dlock_test_break')");
    });
    ASSERT_TRUE(eventually([&] { return waiters() == 1; }, 5s)) << "the break never waited for the row";
    auto n_client = open("lease");
    auto n_acquiring = std::async(std::launch::async, [&] { return n_client.acquire(name, shared().with_ttl(60s).with_wait(20s)); });
    ASSERT_TRUE(eventually([&] { return waiters() == 2; }, 5s)) << "N never waited for the row";
    const pid_t n_pid = pid_t(scalar("SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> " + breaker_pid));
    ASSERT_GT(n_pid, 0);
    ASSERT_EQ(::kill(n_pid, SIGSTOP), 0) << "stopping N's server process";
    std::this_thread::sleep_until(r1_granted + 2s);  // R1's row has expired
    rold.execute("COMMIT");
    const auto broken = breaking.wait_for(10s);
    ::kill(n_pid, SIGCONT);
    ASSERT_EQ(broken, std::future_status::ready) << "the break did not end while N was stopped";
    breaking.get();
    auto n = n_acquiring.get();
    ASSERT_EQ(scalar("SELECT count(*) FROM dlock_locks WHERE name = '" + name + "' AND owner = 'shared' AND readers = 1 AND fence = " +
                     std::to_string(n.fencing_token())), 1)
        << "the interleaving did not happen: N did not start a new generation after the break";
    ASSERT_EQ(scalar("SELECT count(*) FROM dlock_locks_holders WHERE kind = 'S' AND name = '" + name + "' AND owner = '" +
                     rold_owner + "' AND expiry > clock_timestamp()"), 1)
        << "the interleaving did not happen: R_old's row is not live after N's acquire";

    EXPECT_FALSE(rold.query_value("EXECUTE shared_renew(ARRAY['" + name + "'], ARRAY['" + rold_owner + "'], ARRAY[60000::float8])"))
        << "the broken reader renewed its hold";
    EXPECT_EQ(rold.query_value("EXECUTE shared_release('" + name + "', '" + rold_owner + "', 'dlock_test_release')").value_or(""), "f")
        << "the broken reader's release was counted";
    EXPECT_EQ(scalar("SELECT readers FROM dlock_locks WHERE name = '" + name + "'"), 1) << "the broken reader counted N out";
    EXPECT_EQ(scalar("SELECT count(*) FROM dlock_locks WHERE name = '" + name + "' AND owner = 'shared'"), 1);
    std::error_code ec;
    auto writer = client.acquire(name, dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "an exclusive acquire got in while N holds";
    const auto listed = client.holders(name);
    EXPECT_EQ(listed.size(), 1u) << "holders lists a reader of an ended generation";
    for (const auto& h : listed) EXPECT_EQ(h.holder, n.owner());
    EXPECT_EQ(n.state(), dlock::lease_state::held);
    n.renew(ec);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_EQ(n.release(), dlock::release_outcome::released);
    auto after = client.acquire(name, dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_FALSE(ec) << "N's release frees the lock: " << ec.message();
}

// Issue 28 (review of the one-transaction break): a breaker that stalls (SIGSTOP, a host gone)
// between break_lock and COMMIT keeps the lock's row locked while its session idles in the
// transaction, where statement_timeout does not apply. The break bounds that idle on the server
// (break_bound: idle_in_transaction_session_timeout = peer_timeout, for this transaction only), so
// the server ends the stalled session, rolls the break back and frees the row within peer_timeout:
// a writer waiting longer than that gets the lock. A side session runs the plugin's own break
// statements (peer_timeout 3 s, as the client's) and then idles.
TEST_F(SqlModes, StalledBreakHoldsTheLockRowForABoundNotForever) {
    const std::string name = "v2/stalled-break";
    auto client = open("lease", "  peer_timeout: 3s\n");
    client.acquire(name, dlock::acquire_options().with_wait(0ms)).release();  // the lock's row exists
    dlock::sql::statements sql{"dlock_locks", "dlock_fences", "dlock_schema_version", "dlock_locks_holders"};
    sql.break_idle_ms = 3000;
    std::string begin, bound, lock;
    for (const auto& [id, text] : sql.shared()) {
        if (id == "break_begin") begin = text;
        if (id == "break_bound") bound = text;
        if (id == "break_lock") lock = text;
    }
    ASSERT_FALSE(begin.empty() || bound.empty() || lock.empty()) << "the plugin's break statements";
    auto breaker = raw();
    breaker.execute("PREPARE break_lock AS " + lock);
    breaker.execute(begin);
    breaker.execute(bound);
    ASSERT_TRUE(breaker.query_value("EXECUTE break_lock('" + name + "', 'dlock_test_break')")) << "the break found no row";
    const auto stalled = clock_type::now();  // the breaker idles in its transaction from here
    auto writer = open("lease", "  peer_timeout: 3s\n");
    std::error_code ec;
    auto lease = writer.acquire(name, dlock::acquire_options().with_ttl(30s).with_wait(15s), ec);
    const int64_t waited = ms_since(stalled);
    ASSERT_FALSE(ec) << "the writer was not granted within 15 s of the stall (" << waited << " ms): " << ec.message() << ": "
                     << dlock_last_error();
    EXPECT_LT(waited, 15000);
    std::cerr << "[          ] the writer got the lock " << waited << " ms after the breaker stalled\n";
    EXPECT_EQ(scalar("SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%'"), 0)
        << "the stalled breaker's session is still there";
    EXPECT_EQ(lease.release(), dlock::release_outcome::released);
}

// Issue 28, trace A's double count: a shared acquire that runs out of its wait while its statement
// waits for the lock's row (a side session holds it FOR UPDATE for 2 s) must not leave a second
// reader row behind a retry, nor a count the rows do not match: once the side session ends, at
// most one reader row, `readers` equal to the live reader rows, and a writer gets in at once after
// the reader (if it was granted) releases.
TEST_F(SqlModes, SharedAcquireRunningOutOfItsWaitOnARowLockIsCountedOnce) {
    const std::string name = "v2/row-lock-deadline";
    auto client = open("lease");
    client.acquire(name, dlock::acquire_options().with_wait(0ms)).release();  // the lock's row exists
    auto side = raw();
    side.execute("BEGIN");
    side.execute("SELECT 1 FROM dlock_locks WHERE name = '" + name + "' FOR UPDATE");
    const auto locked = clock_type::now();
    auto reader_client = open("lease");
    auto acquiring = std::async(std::launch::async, [&] {
        std::error_code failed;
        auto lease = reader_client.acquire(name, shared().with_ttl(30s).with_wait(1s), failed);
        std::cout << "[sql lease] shared acquire with wait 1 s answered after " << ms_since(locked) << " ms: "
                  << (failed ? failed.message() + " (" + dlock_last_error() + ")" : std::string("granted")) << "\n";
        return std::make_pair(std::move(lease), failed);
    });
    std::this_thread::sleep_until(locked + 2s);
    side.execute("COMMIT");
    auto [reader, ec] = acquiring.get();
    std::this_thread::sleep_for(500ms);  // a statement still running on the server would commit now
    const std::string live_rows = "SELECT count(*) FROM dlock_locks_holders WHERE kind = 'S' AND name = '" + name +
                                  "' AND owner IS NOT NULL AND expiry > clock_timestamp()";
    EXPECT_EQ(scalar(live_rows), ec ? 0 : 1) << "one acquire, at most one reader row (none when it was refused)";
    EXPECT_EQ(scalar("SELECT count(*) FROM (SELECT owner FROM dlock_locks_holders WHERE kind = 'S' AND name = '" + name +
                     "' AND owner IS NOT NULL GROUP BY owner HAVING count(*) > 1) d"), 0)
        << "two reader rows with one owner";
    EXPECT_EQ(scalar("SELECT CASE WHEN owner = 'shared' AND expiry > clock_timestamp() THEN readers ELSE 0 END FROM dlock_locks"
                     " WHERE name = '" + name + "'"), scalar(live_rows))
        << "the count and the live reader rows differ";
    if (!ec) {
        EXPECT_EQ(reader.release(), dlock::release_outcome::released);
    }
    const auto released = clock_type::now();
    auto writer = client.acquire(name, dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_FALSE(ec) << "a writer waits " << ms_since(released) << " ms after the reader's release: " << ec.message();
}

// The same for a permit: an acquire that runs out of its wait while its statement waits for the
// semaphore's slot 0 (held FOR UPDATE by a side session for 2 s) leaves no ghost permit.
TEST_F(SqlModes, PermitAcquireRunningOutOfItsWaitOnARowLockIsTakenOnce) {
    const std::string name = "v2/permit-row-lock-deadline";
    auto client = open("lease");
    client.acquire(name, permits(1).with_wait(0ms)).release();  // the semaphore's slots exist
    auto side = raw();
    side.execute("BEGIN");
    side.execute("SELECT 1 FROM dlock_locks_holders WHERE kind = 'P' AND name = '" + name + "' AND slot = 0 FOR UPDATE");
    const auto locked = clock_type::now();
    auto permit_client = open("lease");
    auto acquiring = std::async(std::launch::async, [&] {
        std::error_code failed;
        auto lease = permit_client.acquire(name, permits(1).with_ttl(30s).with_wait(1s), failed);
        std::cout << "[sql lease] permit acquire with wait 1 s answered after " << ms_since(locked) << " ms: "
                  << (failed ? failed.message() + " (" + dlock_last_error() + ")" : std::string("granted")) << "\n";
        return std::make_pair(std::move(lease), failed);
    });
    std::this_thread::sleep_until(locked + 2s);
    side.execute("COMMIT");
    auto [permit, ec] = acquiring.get();
    std::this_thread::sleep_for(500ms);
    EXPECT_EQ(scalar("SELECT count(*) FROM dlock_locks_holders WHERE kind = 'P' AND name = '" + name +
                     "' AND slot > 0 AND owner IS NOT NULL AND expiry > clock_timestamp()"), ec ? 0 : 1)
        << "a ghost permit";
    if (!ec) {
        EXPECT_EQ(permit.release(), dlock::release_outcome::released);
    }
    auto next = client.acquire(name, permits(1).with_wait(0ms), ec);
    EXPECT_FALSE(ec) << "the one permit is not free: " << ec.message();
}

// ---- lease mode: holders, list, break -----------------------------------------------------------

TEST_F(SqlModes, HoldersAndListReportEveryKindWithItsToken) {
    auto client = open("lease");
    auto x = client.acquire("v2/list/x", dlock::acquire_options().with_wait(0ms).with_ttl(30s));
    auto s1 = client.acquire("v2/list/s", shared().with_wait(0ms).with_ttl(30s));
    auto s2 = client.acquire("v2/list/s", shared().with_wait(0ms).with_ttl(30s));
    auto p = client.acquire("v2/list/p", permits(4).with_wait(0ms).with_ttl(30s));
    auto other = client.acquire("v2/other", dlock::acquire_options().with_wait(0ms));

    const auto readers = client.holders("v2/list/s");
    ASSERT_EQ(readers.size(), 2u);
    std::set<std::string> owners;
    for (const auto& h : readers) {
        EXPECT_EQ(h.kind, dlock::hold_kind::shared);
        owners.insert(h.holder);
        EXPECT_EQ(h.fencing_token, h.holder == s1.owner() ? s1.fencing_token() : s2.fencing_token());
        ASSERT_TRUE(h.ttl_left);
        EXPECT_GT(h.ttl_left->count(), 20000);
    }
    EXPECT_EQ(owners, (std::set<std::string>{std::string(s1.owner()), std::string(s2.owner())}));
    const auto sem = client.holders("v2/list/p", true);
    ASSERT_EQ(sem.size(), 1u);
    EXPECT_EQ(sem[0].kind, dlock::hold_kind::permit);
    EXPECT_EQ(sem[0].permits, 4u);
    EXPECT_EQ(sem[0].holder, p.owner());
    EXPECT_EQ(sem[0].fencing_token, p.fencing_token());
    EXPECT_TRUE(client.holders("v2/list/p").empty()) << "the lock `v2/list/p` is another object, free";

    const auto listed = client.list("v2/list/");
    EXPECT_EQ(listed.size(), 4u);
    for (const auto& h : listed) EXPECT_EQ(h.name.rfind("v2/list/", 0), 0u) << h.name;
    EXPECT_EQ(client.list("v2/").size(), 5u);
    // A prefix is compared as bytes: LIKE wildcards in it are plain characters.
    EXPECT_TRUE(client.list("v2/l_st").empty());
    EXPECT_TRUE(client.list("v2/%").empty());
}

TEST_F(SqlModes, BreakingReadersFencesThemAndTheirLeasesBecomeLost) {
    auto client = open("lease");
    auto holder_client = open("lease");
    auto s1 = holder_client.acquire("v2/break", shared().with_wait(0ms).with_ttl(30s));
    auto s2 = holder_client.acquire("v2/break", shared().with_wait(0ms).with_ttl(30s));
    EXPECT_EQ(client.break_lock("v2/break"), 2u);
    std::error_code ec;
    s1.renew(ec);
    EXPECT_EQ(ec, dlock::errc::lost) << dlock_last_error();
    auto w = client.acquire("v2/break", dlock::acquire_options().with_wait(0ms));
    EXPECT_GT(w.fencing_token(), std::max(s1.fencing_token(), s2.fencing_token()));
    EXPECT_EQ(s2.release(), dlock::release_outcome::already_lost);
    EXPECT_TRUE(client.inspect("v2/break").held) << "the late release touched nothing of the writer's";
    // A break forgets a semaphore's limit: the next acquire may store another.
    {
        auto p = client.acquire("v2/break-sem", permits(2).with_wait(0ms));
        EXPECT_EQ(client.break_lock("v2/break-sem", true), 1u);
        auto q = client.acquire("v2/break-sem", permits(5).with_wait(0ms));
        EXPECT_GT(q.fencing_token(), p.fencing_token());
    }
}

// The secured server's tenant B has SELECT, INSERT and UPDATE on its tables — all that locking,
// semaphores and shared locks need — but not DELETE: it locks, and its break is refused.
TEST(SqlModesSecured, BreakWithoutDeleteIsRefusedWithPermission) {
    DLOCK_LAB_REQUIRE(backend::sql);
    auto& server = dlock::lab::shared_secured_server(dlock::lab::secured_backend::postgres);
    auto client = dlock::client::open(server.tenant_b().config.string());
    const uint64_t v2 = DLOCK_CAP_SEMAPHORE | DLOCK_CAP_SHARED | DLOCK_CAP_LIST | DLOCK_CAP_BREAK;
    EXPECT_EQ(client.capabilities() & v2, v2);
    auto reader = client.acquire("v2/secured", dlock::acquire_options().with_shared(true).with_wait(0ms));
    auto permit = client.acquire("v2/secured", dlock::acquire_options().with_permits(2).with_wait(0ms));
    EXPECT_EQ(client.holders("v2/secured").size(), 1u);
    size_t broken = 99;
    ASSERT_EQ(dlock_break(client.handle(), "v2/secured", 0, &broken), DLOCK_PERMISSION);
    const std::string message = dlock_last_error();
    EXPECT_NE(message.find("GRANT DELETE"), std::string::npos) << message;
    EXPECT_EQ(message.find(server.tenant_b().password), std::string::npos) << message;
    EXPECT_EQ(reader.release(), dlock::release_outcome::released);
    EXPECT_EQ(permit.release(), dlock::release_outcome::released);
}

// ---- tables of an older dlock -------------------------------------------------------------------

TEST_F(SqlModes, OlderLeaseTableGainsTheReadersColumnAndTheHoldersTable) {
    raw().execute("CREATE SCHEMA v1_layout");
    raw().execute("CREATE TABLE v1_layout.dlock_locks (name text COLLATE \"C\" PRIMARY KEY, owner text, fence bigint NOT NULL, "
                  "expiry timestamptz, holder text, acquired_at timestamptz, waiters integer NOT NULL DEFAULT 0, "
                  "released_at timestamptz)");
    raw().execute("INSERT INTO v1_layout.dlock_locks (name, fence) VALUES ('v2/old', 41)");
    auto client = open("lease", "  schema: v1_layout\n");
    EXPECT_TRUE(client.capabilities() & DLOCK_CAP_SHARED);
    auto r = client.acquire("v2/old", shared().with_wait(0ms));
    EXPECT_EQ(r.fencing_token(), 42u) << "the lock's existing fence counter goes on";
    EXPECT_EQ(r.release(), dlock::release_outcome::released);
    client.close();
    EXPECT_EQ(scalar("SELECT count(*) FROM pg_attribute WHERE attrelid = 'v1_layout.dlock_locks'::regclass"
                     " AND attname IN ('readers', 'generation')"), 2);
    // A table of the first release with shared locks (`readers`, no `generation`) gains `generation`.
    raw().execute("ALTER TABLE v1_layout.dlock_locks DROP COLUMN generation");
    auto again = open("lease", "  schema: v1_layout\n");
    EXPECT_TRUE(again.capabilities() & DLOCK_CAP_SHARED);
    EXPECT_EQ(scalar("SELECT count(*) FROM pg_attribute WHERE attrelid = 'v1_layout.dlock_locks'::regclass"
                     " AND attname = 'generation' AND NOT attisdropped"), 1);
    again.acquire("v2/old", shared().with_wait(0ms)).release();
    again.close();
    raw().execute("SET client_min_messages = warning; DROP SCHEMA v1_layout CASCADE");
}

// ---- advisory mode: shared advisory locks -------------------------------------------------------

TEST_F(SqlModes, AdvisorySharedHoldersTogetherAndAQueuedExclusiveStopsLaterOnes) {
    auto client = open("advisory");
    auto r1 = client.acquire("v2/adv", shared().with_wait(0ms));
    auto r2 = client.acquire("v2/adv", shared().with_wait(0ms));
    EXPECT_EQ(scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND mode = 'ShareLock' AND granted"), 2);
    std::error_code ec;
    client.acquire("v2/adv", dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout);
    std::atomic<bool> writer_got{false};
    std::thread writer([&] {
        auto other = open("advisory");
        auto w = other.acquire("v2/adv", dlock::acquire_options().with_wait(20s));
        writer_got = true;
        std::this_thread::sleep_for(200ms);
    });
    ASSERT_TRUE(eventually([&] { return scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted") == 1; }, 5s));
    // PostgreSQL's lock queue: a shared request that conflicts with a queued exclusive one waits behind it.
    client.acquire("v2/adv", shared().with_wait(300ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "a shared acquire behind a queued exclusive one";
    r1.release();
    r2.release();
    writer.join();
    EXPECT_TRUE(writer_got);
    EXPECT_NE(client.capabilities() & DLOCK_CAP_SHARED, 0u);
    client.acquire("v2/adv-sem", permits(2).with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::not_supported) << "no semaphore in advisory mode";
}

// Advisory mode's inspect asks the server's lock table, not the fence row: a lock that an earlier
// shared holder still holds is held after the last shared acquirer let go, and so is a key an
// application holds with pg_advisory_lock itself.
TEST_F(SqlModes, AdvisoryInspectShowsALockHeldWhileAnyReaderHoldsIt) {
    auto client = open("advisory");
    auto first = client.acquire("v2/adv-inspect", shared().with_wait(0ms));
    auto last = client.acquire("v2/adv-inspect", shared().with_wait(0ms));
    auto info = client.inspect("v2/adv-inspect");
    EXPECT_TRUE(info.held);
    EXPECT_EQ(info.holder, last.owner()) << "the holder named is the last acquirer, while it holds";
    last.release();
    info = client.inspect("v2/adv-inspect");
    EXPECT_TRUE(info.held) << "the first reader still holds the key";
    EXPECT_EQ(info.holder, "") << "the fence row's owner let go: no holder is named";
    first.release();
    EXPECT_FALSE(client.inspect("v2/adv-inspect").held);
}

// Advisory mode recovers names from its fence rows and holders from pg_locks: the session that took
// a name last is reported with its owner and fencing token, other shared holders without them.
TEST_F(SqlModes, AdvisoryHoldersAndListComeFromTheFenceRowsAndPgLocks) {
    auto client = open("advisory");
    auto x = client.acquire("v2/adv-list/x", dlock::acquire_options().with_wait(0ms));
    auto s1 = client.acquire("v2/adv-list/s", shared().with_wait(0ms));
    auto s2 = client.acquire("v2/adv-list/s", shared().with_wait(0ms));
    { auto gone = client.acquire("v2/adv-list/released", dlock::acquire_options().with_wait(0ms)); }

    const auto exclusive = client.holders("v2/adv-list/x");
    ASSERT_EQ(exclusive.size(), 1u);
    EXPECT_EQ(exclusive[0].kind, dlock::hold_kind::exclusive);
    EXPECT_EQ(exclusive[0].holder, x.owner());
    EXPECT_EQ(exclusive[0].fencing_token, x.fencing_token());
    EXPECT_FALSE(exclusive[0].ttl_left) << "advisory holds have no ttl";

    const auto readers = client.holders("v2/adv-list/s");
    ASSERT_EQ(readers.size(), 2u);
    int named = 0;
    for (const auto& h : readers) {
        EXPECT_EQ(h.kind, dlock::hold_kind::shared);
        if (!h.holder.empty()) {
            ++named;
            EXPECT_EQ(h.holder, s2.owner()) << "the last shared grant is the one the fence row names";
            EXPECT_EQ(h.fencing_token, s2.fencing_token());
        }
    }
    EXPECT_EQ(named, 1);
    EXPECT_TRUE(client.holders("v2/adv-list/released").empty());
    EXPECT_TRUE(client.holders("v2/adv-list/x", true).empty()) << "no semaphores in advisory mode";
    EXPECT_EQ(client.list("v2/adv-list/").size(), 3u);
    EXPECT_TRUE(client.list("v2/adv-list_").empty());
    size_t broken = 0;
    EXPECT_EQ(dlock_break(client.handle(), "v2/adv-list/x", 0, &broken), DLOCK_NOT_SUPPORTED) << "an advisory lock ends with its session";
}

// ---- living beside applications that take advisory locks themselves ------------------------------

// `advisory_key_prefix: "pgkey:"` makes the dlock name `pgkey:K` the application's
// pg_advisory_lock(K): each excludes the other, both ways, and shared holds meet
// pg_advisory_lock_shared(K).
TEST_F(SqlModes, NameWithTheKeyPrefixIsTheApplicationsAdvisoryLock) {
    const std::string prefix = "  advisory_key_prefix: \"pgkey:\"\n";
    auto client = open("advisory", prefix);
    auto app = raw();  // one session, as an application's connection
    ASSERT_EQ(app.query_value("SELECT pg_try_advisory_lock(-4242)").value_or(""), "t");
    std::error_code ec;
    client.acquire("pgkey:-4242", dlock::acquire_options().with_wait(300ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "the application holds key -4242";
    client.acquire("pgkey:-4242", shared().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "nor shared while the application holds it exclusively";
    auto other = client.acquire("pgkey:4242", dlock::acquire_options().with_wait(0ms));
    EXPECT_TRUE(other) << "another key is another lock";
    ASSERT_EQ(app.query_value("SELECT pg_advisory_unlock(-4242)").value_or(""), "t");

    auto lease = client.acquire("pgkey:-4242", dlock::acquire_options().with_wait(0ms));
    EXPECT_EQ(app.query_value("SELECT pg_try_advisory_lock(-4242)").value_or(""), "f") << "dlock holds key -4242";
    EXPECT_EQ(app.query_value("SELECT pg_try_advisory_lock_shared(-4242)").value_or(""), "f");
    lease.release();
    auto reader = client.acquire("pgkey:-4242", shared().with_wait(0ms));
    EXPECT_EQ(app.query_value("SELECT pg_try_advisory_lock_shared(-4242)").value_or(""), "t") << "shared with dlock's reader";
    EXPECT_EQ(app.query_value("SELECT pg_try_advisory_lock(-4242)").value_or(""), "f");

    // A name with the prefix that is no 64-bit integer is refused, not hashed.
    for (const char* bad : {"pgkey:", "pgkey:12x", "pgkey:99999999999999999999", "pgkey: 1", "pgkey:+1"}) {
        client.acquire(bad, dlock::acquire_options().with_wait(0ms), ec);
        EXPECT_EQ(ec, dlock::errc::invalid_argument) << bad;
    }
    // Only advisory mode has keys.
    dlock_client* c = nullptr;
    EXPECT_EQ(dlock_client_open_yaml(yaml("lease", prefix).c_str(), "sql_v2_test", &c), DLOCK_CONFIG);
    EXPECT_NE(std::string(dlock_last_error()).find("advisory_key_prefix"), std::string::npos) << dlock_last_error();
    dlock_client_close(c);
}

// Issue 28: `pgkey:42`, `pgkey:042` and `pgkey:-0` would be one advisory key (42, 0) under names
// with fence counters of their own, so a token could go backwards between two spellings. Only the
// canonical decimal spelling of a key is a name; any other is refused, naming the canonical one.
TEST_F(SqlModes, KeyPrefixAcceptsOnlyTheCanonicalSpellingOfAKey) {
    auto client = open("advisory", "  advisory_key_prefix: \"pgkey:\"\n");
    client.acquire("pgkey:42", dlock::acquire_options().with_wait(0ms)).release();
    auto canonical = client.acquire("pgkey:42", dlock::acquire_options().with_wait(0ms));
    const uint64_t token = canonical.fencing_token();
    canonical.release();
    const std::pair<const char*, const char*> aliases[] = {
        {"pgkey:042", "pgkey:42"}, {"pgkey:0042", "pgkey:42"}, {"pgkey:-0", "pgkey:0"}, {"pgkey:-007", "pgkey:-7"}};
    for (const auto& [alias, spelling] : aliases) {
        std::error_code ec;
        auto lease = client.acquire(alias, dlock::acquire_options().with_wait(0ms), ec);
        EXPECT_EQ(ec, dlock::errc::invalid_argument) << alias << " was taken with token " << (lease ? lease.fencing_token() : 0)
                                                     << " after token " << token << " of pgkey:42";
        const std::string message = dlock_last_error();
        EXPECT_NE(message.find(std::string("`") + spelling + "`"), std::string::npos) << alias << ": " << message;
        client.acquire(alias, shared().with_wait(0ms), ec);
        EXPECT_EQ(ec, dlock::errc::invalid_argument) << alias << " (shared)";
    }
    auto again = client.acquire("pgkey:42", dlock::acquire_options().with_wait(0ms));
    EXPECT_GT(again.fencing_token(), token);
    auto zero = client.acquire("pgkey:0", dlock::acquire_options().with_wait(0ms));
    auto negative = client.acquire("pgkey:-7", dlock::acquire_options().with_wait(0ms));
    EXPECT_TRUE(zero && negative) << "canonical spellings, zero and negative keys included, are names";
}

// Issue 28: a limit above INT32_MAX would be stored as a negative number (the permits columns are
// 32-bit): refused before any statement, on both dialects.
TEST_F(SqlModes, PermitsAboveInt32MaxAreRefused) {
    auto client = open("lease");
    std::error_code ec;
    client.acquire("v2/huge", permits(uint32_t(INT32_MAX) + 1).with_wait(0ms), ec);
    ASSERT_EQ(ec, dlock::errc::invalid_argument);
    const std::string message = dlock_last_error();
    EXPECT_NE(message.find("2147483648"), std::string::npos) << message;
    EXPECT_NE(message.find("2147483647"), std::string::npos) << message;
    client.acquire("v2/huge", permits(UINT32_MAX).with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
    EXPECT_EQ(scalar("SELECT count(*) FROM dlock_locks_holders WHERE name = 'v2/huge'"), 0) << "nothing was stored";
}

// ---- the MySQL dialect (MariaDB) ----------------------------------------------------------------

class MysqlModes : public ::testing::Test {
protected:
    void SetUp() override {
        DLOCK_LAB_REQUIRE(backend::mariadb);
        auto& env = dlock::lab::lab_environment::instance();
        if (!env.owned_lab()) GTEST_SKIP() << "attached to a `dlock-lab up`: resets need a lab of our own";
        lab_ = env.owned_lab();
        env.reset(backend::mariadb, true);
    }
    dlock::client open(const std::string& mode = "lease") {
        return dlock::client::from_yaml("backend: sql\noptions:\n  dsn: \"" + lab_->mariadb().dsn() + "\"\n  mode: " + mode + "\n",
                                        "sql_v2_test");
    }
    int64_t scalar(const std::string& sql) { return std::stoll(lab_->mariadb().client().query_value(sql).value_or("-1")); }

    dlock::lab::lab* lab_ = nullptr;
};

TEST_F(MysqlModes, LeaseModeHasSemaphoresListAndBreakNamedModeNone) {
    const uint64_t v2 = DLOCK_CAP_SEMAPHORE | DLOCK_CAP_SHARED | DLOCK_CAP_LIST | DLOCK_CAP_BREAK;
    EXPECT_EQ(open("lease").capabilities() & v2, DLOCK_CAP_SEMAPHORE | DLOCK_CAP_LIST | DLOCK_CAP_BREAK) << "no shared locks";
    EXPECT_EQ(open("named").capabilities() & v2, 0u) << "GET_LOCK has no shared mode; N GET_LOCK names cannot be waited on";
}

TEST_F(MysqlModes, PermitsAreAtMostNTheLimitIsCheckedAndAFailedAcquireLeavesNothing) {
    auto client = open();
    dlock::semaphore sem(client, "v2/my-stalls", 2);
    auto p1 = sem.acquire();
    auto p2 = sem.acquire();
    EXPECT_GT(p2.fencing_token(), p1.fencing_token());
    const auto start = clock_type::now();
    EXPECT_FALSE(sem.try_acquire_for(300ms)) << "the 3rd of 2 permits";
    EXPECT_GE(ms_since(start), 250);
    std::error_code ec;
    client.acquire("v2/my-stalls", permits_of(3), ec);
    ASSERT_EQ(ec, dlock::errc::invalid_argument);
    const std::string message = dlock_last_error();
    EXPECT_NE(message.find("limit of 2"), std::string::npos) << message;
    EXPECT_NE(message.find("asks for 3"), std::string::npos) << message;
    EXPECT_EQ(scalar("SELECT COUNT(*) FROM dlock_locks_holders WHERE kind = 'P' AND name = 'v2/my-stalls' AND slot > 0"), 2)
        << "no slot beyond the limit was created";
    EXPECT_EQ(scalar("SELECT COUNT(*) FROM dlock_locks_holders WHERE owner IS NOT NULL"), 2);
    const auto held = client.holders("v2/my-stalls", true);
    ASSERT_EQ(held.size(), 2u);
    for (const auto& h : held) {
        EXPECT_EQ(h.permits, 2u);
        EXPECT_TRUE(h.holder == p1.owner() || h.holder == p2.owner()) << h.holder;
    }
    auto waiter = std::async(std::launch::async, [&] { return bool(sem.try_acquire_for(10s)); });
    std::this_thread::sleep_for(100ms);
    p1.release();
    EXPECT_TRUE(waiter.get()) << "the released permit goes to the waiter";
    EXPECT_EQ(p2.release(), dlock::release_outcome::released);
}

// Issue 28: the MySQL dialect refuses a limit above INT32_MAX as PostgreSQL does.
TEST_F(MysqlModes, PermitsAboveInt32MaxAreRefused) {
    auto client = open();
    std::error_code ec;
    client.acquire("v2/my-huge", permits_of(uint32_t(INT32_MAX) + 1), ec);
    ASSERT_EQ(ec, dlock::errc::invalid_argument);
    const std::string message = dlock_last_error();
    EXPECT_NE(message.find("2147483648"), std::string::npos) << message;
    EXPECT_NE(message.find("2147483647"), std::string::npos) << message;
    client.acquire("v2/my-huge", permits_of(UINT32_MAX), ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
    EXPECT_EQ(scalar("SELECT COUNT(*) FROM dlock_locks_holders WHERE name = 'v2/my-huge'"), 0) << "nothing was stored";
}

// A user with SELECT, INSERT, UPDATE and CREATE (what locking and semaphores need) but not DELETE
// uses semaphores and is refused a break with DLOCK_PERMISSION naming the grant; the break removes
// nothing.
TEST_F(MysqlModes, BreakWithoutDeleteIsRefusedWithPermission) {
    if (geteuid() != 0) GTEST_SKIP() << "creating accounts needs MariaDB's root, which only the OS root can be here";
    const std::string socket = (lab_->mariadb().dir() / "data" / "mariadbd.sock").string();
    auto as_root = [&](const std::string& sql) {
        std::string output;
        ASSERT_EQ(dlock::lab::run_command({"mariadb", "--no-defaults", "--socket=" + socket, "-u", "root", "-e", sql}, &output), 0)
            << output;
    };
    as_root("DROP USER IF EXISTS 'dlock_locker'@'%'; CREATE USER 'dlock_locker'@'%' IDENTIFIED BY 'locker-pw-3'; "
            "GRANT SELECT, INSERT, UPDATE, CREATE ON dlock.* TO 'dlock_locker'@'%'");
    if (HasFatalFailure()) return;
    const std::string port = std::to_string(lab_->mariadb().client_endpoint().port);
    auto locker = dlock::client::from_yaml("backend: sql\noptions:\n  dsn: \"mysql://dlock_locker:locker-pw-3@127.0.0.1:" + port +
                                               "/dlock\"\n", "sql_v2_test");
    EXPECT_NE(locker.capabilities() & DLOCK_CAP_BREAK, 0u) << "the backend can break; this user may not";
    auto permit = locker.acquire("v2/my-break", permits_of(2));
    size_t broken = 99;
    EXPECT_EQ(dlock_break(locker.handle(), "v2/my-break", 1, &broken), DLOCK_PERMISSION);
    const std::string message = dlock_last_error();
    EXPECT_NE(message.find("GRANT DELETE"), std::string::npos) << message;
    EXPECT_EQ(message.find("locker-pw-3"), std::string::npos) << message;
    EXPECT_EQ(dlock_break(locker.handle(), "v2/my-break-lock", 0, &broken), DLOCK_PERMISSION) << "a lock's break too";
    std::error_code ec;
    permit.renew(ec);
    EXPECT_FALSE(ec) << "the refused break removed nothing: " << ec.message();
    EXPECT_EQ(open().break_lock("v2/my-break", true), 1u) << "the lab's user (ALL PRIVILEGES) may";
    permit.renew(ec);
    EXPECT_EQ(ec, dlock::errc::lost);
    locker.close();
    as_root("DROP USER 'dlock_locker'@'%'");
}

// dlock's GET_LOCK name for a short lower-case name is `dlock:` + the name: an application's
// GET_LOCK('dlock:orders') and dlock's `orders` in named mode are one lock.
TEST_F(MysqlModes, NamedModeSharesGetLockNamesWithApplications) {
    auto client = open("named");
    auto app = lab_->mariadb().client();
    ASSERT_EQ(app.query_value("SELECT GET_LOCK('dlock:v2/orders', 0)").value_or(""), "1");
    std::error_code ec;
    client.acquire("v2/orders", dlock::acquire_options().with_wait(300ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "the application holds GET_LOCK('dlock:v2/orders')";
    ASSERT_EQ(app.query_value("SELECT RELEASE_LOCK('dlock:v2/orders')").value_or(""), "1");
    auto lease = client.acquire("v2/orders", dlock::acquire_options().with_wait(0ms));
    EXPECT_EQ(app.query_value("SELECT GET_LOCK('dlock:v2/orders', 0)").value_or(""), "0") << "dlock holds it";
}

}  // namespace

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    dlock::lab::add_lab_environment({backend::sql, backend::mariadb});
    return RUN_ALL_TESTS();
}

// The tiers of the lock modes and administration, each gated by its capability bit, so a backend is
// held to exactly what it claims:
//   SEMAPHORE — at most N holders at any instant across processes (the count checker and a live
//               census), all N permits usable at once and the N+1st waits, a killed holder's
//               permit returns within the backend's bound, owner-only release of a permit, a
//               mismatched limit refused while holders exist, holders() lists the permit tokens;
//   SHARED    — shared holders run together across processes, an exclusive holder excludes every
//               shared one and the other way round (checker: never an exclusive holder beside
//               anyone), no writer starvation, std::shared_lock over dlock::shared_mutex;
//   LIST      — a held lock appears with its owner and fencing tokens, a released one disappears,
//               the prefix filters;
//   BREAK     — a break removes the holders and says how many, the broken lease is LOST at its
//               next renewal, and the next holder's fencing token is higher (FENCING) or, without
//               fencing, nobody holds the name until the broken lease's validity has ended.
#include "backends.hpp"
#include "support.hpp"

#include <dlock/dlock.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <type_traits>

using namespace std::chrono_literals;
using dlock::conformance::backend_case;

namespace dlock::conformance {
void PrintTo(const backend_case& c, std::ostream* os);  // defined in conformance_test.cpp
}  // namespace dlock::conformance

// ---- dlock::shared_mutex meets SharedTimedLockable (checked at compile time) ---------------------

namespace {

template <typename M, typename = void>
struct is_shared_timed_lockable : std::false_type {};
template <typename M>
struct is_shared_timed_lockable<
    M, std::void_t<decltype(std::declval<M&>().lock()), decltype(std::declval<M&>().unlock()),
                   decltype(std::declval<M&>().lock_shared()), decltype(std::declval<M&>().unlock_shared())>>
    : std::conjunction<std::is_same<decltype(std::declval<M&>().try_lock()), bool>,
                       std::is_same<decltype(std::declval<M&>().try_lock_for(1ms)), bool>,
                       std::is_same<decltype(std::declval<M&>().try_lock_until(std::chrono::steady_clock::now())), bool>,
                       std::is_same<decltype(std::declval<M&>().try_lock_shared()), bool>,
                       std::is_same<decltype(std::declval<M&>().try_lock_shared_for(1ms)), bool>,
                       std::is_same<decltype(std::declval<M&>().try_lock_shared_until(std::chrono::system_clock::now())), bool>> {};

static_assert(is_shared_timed_lockable<dlock::shared_mutex>::value, "dlock::shared_mutex must meet SharedTimedLockable");
static_assert(is_shared_timed_lockable<std::shared_timed_mutex>::value, "the trait itself accepts the standard's model");
static_assert(!is_shared_timed_lockable<dlock::mutex>::value, "the trait refuses a type without the shared half");
static_assert(std::is_same_v<decltype(std::declval<const dlock::semaphore&>().try_acquire_for(1ms)), std::optional<dlock::permit>>);
static_assert(std::is_same_v<dlock::permit, dlock::lease>, "a permit is a lease");

}  // namespace

// Every member of the standard lock types, instantiated over dlock::shared_mutex.
template class std::shared_lock<dlock::shared_mutex>;
template class std::unique_lock<dlock::shared_mutex>;

namespace {

using clock_type = std::chrono::steady_clock;

const dlock::acquire_options try_once = dlock::acquire_options().with_wait(0ms);

class Modes : public ::testing::TestWithParam<backend_case> {
protected:
    void SetUp() override {
        DLOCK_CONFORMANCE_REQUIRE_SERVERS(GetParam());
        static std::map<std::string, std::pair<std::unique_ptr<dlock::test::scratch_dir>, std::string>> setups;
        auto& setup = setups[GetParam().label];
        if (!setup.first) {
            setup.first = std::make_unique<dlock::test::scratch_dir>("dlock-modes-" + GetParam().label);
            setup.second = GetParam().make_config(setup.first->path());
        }
        scratch_ = setup.first->path();
        config_ = setup.second;
        client_ = dlock::client::open(config_);
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        prefix_ = std::string("modes/") + info->name() + "/";
    }

    dlock::client open() { return dlock::client::open(config_); }
    std::string name(const std::string& suffix) const { return prefix_ + suffix; }
    bool has(uint64_t cap) const { return client_.has(cap); }
    const std::string& label() const { return GetParam().label; }

    // The wait within which a SIGKILLed holder's hold must come back (as the basic tier's).
    std::chrono::milliseconds recovery_bound(std::chrono::milliseconds ttl) const {
        return (has(DLOCK_CAP_SESSION_BOUND) ? 0ms : ttl) + GetParam().recovery_slack;
    }

    // Runs `processes` workers in `mode` on `n` and gathers their histories and census.
    struct run_result {
        dlock::test::history history;
        uint64_t census_most = 0, census_violations = 0;
        size_t workers_that_held = 0;
    };
    run_result run_workers(const std::string& n, const std::string& mode, int processes, int iterations) {
        const std::string census = scratch_ + "/census-" + label() + "-" + std::to_string(++runs_);
        {
            std::ofstream(census, std::ios::binary | std::ios::trunc).write(std::string(24, '\0').data(), 24);
        }
        std::vector<std::unique_ptr<dlock::test::child_process>> workers;
        std::vector<std::string> histories;
        for (int p = 0; p < processes; ++p) {
            histories.push_back(census + "-history-" + std::to_string(p));
            workers.push_back(std::make_unique<dlock::test::child_process>(
                std::vector<std::string>{DLOCK_CONFORMANCE_WORKER, "modes", config_, n, mode, std::to_string(iterations),
                                         histories.back(), census, std::to_string(p + 1)}));
        }
        for (auto& w : workers) EXPECT_EQ(w->wait(), 0);
        run_result r;
        for (const auto& path : histories) {
            const size_t before = r.history.held.size();
            dlock::test::read_history(path, r.history);
            if (r.history.held.size() > before) ++r.workers_that_held;
        }
        uint64_t words[3] = {0, 0, 0};
        std::ifstream(census, std::ios::binary).read(reinterpret_cast<char*>(words), sizeof words);
        r.census_most = words[1];
        r.census_violations = words[2];
        return r;
    }

    std::string scratch_, config_, prefix_;
    dlock::client client_;
    int runs_ = 0;
};

// ---- SEMAPHORE -----------------------------------------------------------------------------------

// docs/design/faults.md §1 for counts: 6 processes contend for 3 permits, try-once and waits mixed.
TEST_P(Modes, SemaphoreAdmitsAtMostNHoldersAcrossProcesses) {
    if (!has(DLOCK_CAP_SEMAPHORE)) GTEST_SKIP() << "backend has no SEMAPHORE capability";
    constexpr int permits = 3, processes = 6, iterations = 40;
    const auto r = run_workers(name("sem"), "permits:" + std::to_string(permits), processes, iterations);
    EXPECT_TRUE(r.history.failures.empty()) << r.history.failures.front();
    const auto v = dlock::test::check_at_most(r.history.held, permits);
    std::cout << "[" << label() << "] " << v.summary() << "; census: at most " << r.census_most << " holders, "
              << r.census_violations << " violations; " << r.history.timeouts << " attempts timed out\n";
    EXPECT_EQ(v.violations, 0u) << v.first_problem;
    EXPECT_EQ(r.census_violations, 0u) << "a worker found more than " << permits << " holders present";
    EXPECT_LE(r.census_most, uint64_t(permits));
    EXPECT_EQ(r.workers_that_held, size_t(processes)) << "every process should get a permit at least once";
    if (has(DLOCK_CAP_FENCING)) {
        std::vector<uint64_t> fences;
        for (const auto& i : r.history.held) fences.push_back(i.fence);
        std::sort(fences.begin(), fences.end());
        EXPECT_EQ(std::adjacent_find(fences.begin(), fences.end()), fences.end()) << "two grants with one fencing token";
    }
}

// All N permits are usable at once (by N clients), the N+1st waits, and a release lets it in.
TEST_P(Modes, SemaphoreAllNPermitsUsableAtOnceAndTheNextWaits) {
    if (!has(DLOCK_CAP_SEMAPHORE)) GTEST_SKIP() << "backend has no SEMAPHORE capability";
    constexpr uint32_t permits = 3;
    std::vector<dlock::client> clients;
    std::vector<dlock::permit> held;
    for (uint32_t i = 0; i < permits; ++i) {
        clients.push_back(open());
        auto p = dlock::semaphore(clients.back(), name("sem"), permits).try_acquire();
        ASSERT_TRUE(p) << "permit " << i + 1 << " of " << permits << " refused while only " << i << " are held";
        held.push_back(std::move(*p));
    }
    auto waiter_client = open();
    dlock::semaphore sem(waiter_client, name("sem"), permits);
    EXPECT_FALSE(sem.try_acquire()) << "permit " << permits + 1 << " of " << permits << " granted";
    const auto start = clock_type::now();
    EXPECT_FALSE(sem.try_acquire_for(300ms));
    EXPECT_GE(clock_type::now() - start, 300ms);

    std::atomic<bool> acquired{false};
    clock_type::time_point got;
    std::optional<dlock::permit> taken;
    std::thread waiter([&] {
        taken = sem.try_acquire_until(clock_type::now() + 30s);
        got = clock_type::now();
        acquired = true;
    });
    std::this_thread::sleep_for(300ms);
    EXPECT_FALSE(acquired.load()) << "a waiter got a permit while all were held";
    const auto released = clock_type::now();
    EXPECT_EQ(held[1].release(), dlock::release_outcome::released);
    waiter.join();
    ASSERT_TRUE(taken) << dlock_last_error();
    EXPECT_LT(got - released, 5s) << "the waiter must be woken by the release, not left to time out";
    EXPECT_EQ(taken->state(), dlock::lease_state::held);
    EXPECT_FALSE(sem.try_acquire()) << "the freed permit was handed out twice";
}

// One dlock::semaphore object used by more threads than it has permits: at most N hold at once.
TEST_P(Modes, SemaphoreObjectSharedByThreadsAdmitsAtMostN) {
    if (!has(DLOCK_CAP_SEMAPHORE)) GTEST_SKIP() << "backend has no SEMAPHORE capability";
    constexpr int threads = 5, rounds = 6;
    const dlock::semaphore sem(client_, name("sem"), 2);
    std::atomic<int> present{0}, most{0}, failures{0};
    std::vector<std::thread> workers;
    for (int i = 0; i < threads; ++i) {
        workers.emplace_back([&] {
            for (int r = 0; r < rounds; ++r) {
                std::optional<dlock::permit> p;
                try {
                    p = sem.try_acquire_for(30s);
                } catch (const std::system_error&) {
                }
                if (!p) {
                    ++failures;
                    return;
                }
                const int now = ++present;
                for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
                }
                std::this_thread::sleep_for(5ms);
                --present;
            }
        });
    }
    for (auto& t : workers) t.join();
    std::cout << "[" << label() << "] " << threads << " threads on one semaphore object of 2 permits: at most " << most.load()
              << " held at once\n";
    EXPECT_EQ(failures.load(), 0) << dlock_last_error();
    EXPECT_LE(most.load(), 2);
}

// docs/design/faults.md §2 for a permit: a holder is SIGKILLed; its permit comes back within the bound.
TEST_P(Modes, SemaphoreKilledHoldersPermitReturns) {
    if (!has(DLOCK_CAP_SEMAPHORE)) GTEST_SKIP() << "backend has no SEMAPHORE capability";
    const std::string n = name("sem");
    const auto ttl = 1500ms;
    dlock::semaphore sem(client_, n, 2);
    auto mine = sem.acquire();
    dlock::test::child_process holder({DLOCK_CONFORMANCE_WORKER, "hold", config_, n, std::to_string(ttl.count()), "permits:2"}, true);
    std::string line;
    ASSERT_TRUE(holder.read_line(line, 10000)) << "the holder never acquired";
    ASSERT_EQ(line.rfind("held", 0), 0u) << line;
    auto other = open();
    dlock::semaphore other_sem(other, n, 2);
    ASSERT_FALSE(other_sem.try_acquire()) << "both permits are held";

    const auto killed = clock_type::now();
    holder.kill(SIGKILL);
    holder.wait();
    const auto bound = recovery_bound(ttl);
    auto next = other_sem.try_acquire_for(bound);
    const auto recovery = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - killed);
    std::cout << "[" << label() << "] permit back " << recovery.count() << " ms after its holder's SIGKILL (bound "
              << bound.count() << " ms)\n";
    ASSERT_TRUE(next) << "the killed holder's permit did not come back within " << bound.count() << " ms";
    EXPECT_EQ(mine.state(), dlock::lease_state::held) << "the live holder's permit is untouched";
    if (has(DLOCK_CAP_FENCING)) {
        EXPECT_GT(next->fencing_token(), std::stoull(line.substr(5)));
    }
}

// docs/design/faults.md §4-5 for a permit: a released permit's repeated release, and a stale one's,
// never free another holder's permit.
TEST_P(Modes, SemaphorePermitReleaseIsOwnerOnly) {
    if (!has(DLOCK_CAP_SEMAPHORE)) GTEST_SKIP() << "backend has no SEMAPHORE capability";
    const std::string n = name("sem");
    auto a_client = open(), b_client = open(), c_client = open(), d_client = open();
    auto a = dlock::semaphore(a_client, n, 2).acquire();
    auto b = dlock::semaphore(b_client, n, 2).acquire();
    EXPECT_EQ(a.release(), dlock::release_outcome::released);
    auto c = dlock::semaphore(c_client, n, 2).try_acquire();
    ASSERT_TRUE(c) << "a released permit must be free again";
    EXPECT_EQ(a.release(), dlock::release_outcome::released) << "a repeated release is a no-op";
    dlock::semaphore d(d_client, n, 2);
    EXPECT_FALSE(d.try_acquire()) << "the repeated release freed another holder's permit";
    EXPECT_EQ(b.state(), dlock::lease_state::held);
    EXPECT_EQ(c->state(), dlock::lease_state::held);
    if (has(DLOCK_CAP_TTL)) {
        // A permit that expired unrenewed is LOST, and its release touches nothing of the holder after it.
        auto e_client = open();
        const std::string m = name("expiring");
        auto stale = e_client.acquire(m, dlock::acquire_options().with_permits(1).with_wait(0ms).with_ttl(500ms).with_renew(false));
        auto next = dlock::semaphore(d_client, m, 1).try_acquire_for(5s);
        ASSERT_TRUE(next) << "an unrenewed permit must expire";
        EXPECT_EQ(stale.release(), dlock::release_outcome::already_lost);
        EXPECT_FALSE(dlock::semaphore(c_client, m, 1).try_acquire()) << "the stale release freed the next holder's permit";
    }
}

// Two clients using N=3 and N=5 on one name: the second is refused while the first holds.
TEST_P(Modes, SemaphoreMismatchedLimitIsRefused) {
    if (!has(DLOCK_CAP_SEMAPHORE)) GTEST_SKIP() << "backend has no SEMAPHORE capability";
    const std::string n = name("sem");
    auto held = dlock::semaphore(client_, n, 3).acquire();
    auto other = open();
    std::error_code ec;
    auto refused = other.acquire(n, dlock::acquire_options().with_permits(5).with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument) << ec.message() << ": " << dlock_last_error();
    const std::string why = dlock_last_error();
    EXPECT_NE(why.find('3'), std::string::npos) << "the message names the stored limit: " << why;
    EXPECT_NE(why.find('5'), std::string::npos) << "the message names the limit asked for: " << why;
    EXPECT_NE(why.find(n), std::string::npos) << "the message names the semaphore: " << why;
    EXPECT_FALSE(refused);
    auto same = dlock::semaphore(other, n, 3).try_acquire();
    EXPECT_TRUE(same) << "the refusal left the semaphore usable with its own limit";
}

// holders(name, semaphore) lists the N permit holders with their tokens; the lock of the same name
// is another object.
TEST_P(Modes, SemaphoreHoldersListsThePermitTokens) {
    if (!has(DLOCK_CAP_SEMAPHORE)) GTEST_SKIP() << "backend has no SEMAPHORE capability";
    const std::string n = name("sem");
    std::vector<dlock::client> clients;
    std::map<std::string, uint64_t> expected;  // owner -> fencing token
    std::vector<dlock::permit> held;
    for (int i = 0; i < 3; ++i) {
        clients.push_back(open());
        held.push_back(dlock::semaphore(clients.back(), n, 3).acquire());
        expected[std::string(held.back().owner())] = held.back().fencing_token();
    }
    const auto listed = client_.holders(n, true);
    ASSERT_EQ(listed.size(), 3u);
    for (const auto& h : listed) {
        EXPECT_EQ(h.name, n);
        EXPECT_EQ(h.kind, dlock::hold_kind::permit);
        EXPECT_TRUE(h.permits == 3 || h.permits == 0) << "the stored limit, or 0 when unknown: " << h.permits;
        ASSERT_EQ(expected.count(h.holder), 1u) << "holder `" << h.holder << "` is none of the permits' owners";
        if (has(DLOCK_CAP_FENCING)) {
            EXPECT_EQ(h.fencing_token, expected[h.holder]);
        }
    }
    EXPECT_TRUE(client_.holders(n, false).empty()) << "the lock of the same name is another object";
    auto lock = client_.acquire(n, try_once);  // a full semaphore leaves the lock of its name free
    EXPECT_TRUE(lock);
    held[0].release();
    EXPECT_EQ(client_.holders(n, true).size(), 2u);
}

// ---- SHARED --------------------------------------------------------------------------------------

// Three processes hold the lock shared at the same time.
TEST_P(Modes, SharedHoldersRunTogetherAcrossProcesses) {
    if (!has(DLOCK_CAP_SHARED)) GTEST_SKIP() << "backend has no SHARED capability";
    const std::string n = name("rw");
    const auto ttl = 2000ms;
    std::vector<std::unique_ptr<dlock::test::child_process>> readers;
    for (int i = 0; i < 3; ++i) {
        readers.push_back(std::make_unique<dlock::test::child_process>(
            std::vector<std::string>{DLOCK_CONFORMANCE_WORKER, "hold", config_, n, std::to_string(ttl.count()), "shared"}, true));
        std::string line;
        ASSERT_TRUE(readers.back()->read_line(line, 10000)) << "shared holder " << i + 1 << " could not join the others";
        ASSERT_EQ(line.rfind("held", 0), 0u) << line;
    }
    std::error_code ec;
    client_.acquire(n, try_once, ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "an exclusive acquire beside shared holders: " << dlock_last_error();
    try {  // holders() has no capability bit of its own: NOT_SUPPORTED where the backend lacks it
        const auto holders = client_.holders(n);
        EXPECT_EQ(holders.size(), 3u);
        for (const auto& h : holders) EXPECT_EQ(h.kind, dlock::hold_kind::shared);
    } catch (const std::system_error& e) {
        EXPECT_EQ(e.code(), dlock::errc::not_supported) << e.what();
    }
    for (auto& r : readers) r->kill(SIGKILL);
    for (auto& r : readers) r->wait();
    auto after = client_.acquire(n, dlock::acquire_options().with_wait(
                                        recovery_bound(ttl)));
    EXPECT_TRUE(after) << "the dead shared holders' holds come back";
}

// Exclusive excludes shared, shared excludes exclusive, shared admits shared; through
// dlock::shared_mutex and the standard lock types.
TEST_P(Modes, ExclusiveExcludesSharedAndViceVersa) {
    if (!has(DLOCK_CAP_SHARED)) GTEST_SKIP() << "backend has no SHARED capability";
    auto a_client = open(), b_client = open(), c_client = open();
    dlock::shared_mutex a(a_client, name("rw")), b(b_client, name("rw")), c(c_client, name("rw"));
    {
        std::shared_lock<dlock::shared_mutex> reader(a);
        ASSERT_TRUE(reader.owns_lock());
        EXPECT_FALSE(b.try_lock()) << "an exclusive hold beside a shared one";
        EXPECT_FALSE(b.try_lock_for(200ms));
        std::shared_lock<dlock::shared_mutex> second_reader(c, std::try_to_lock);
        EXPECT_TRUE(second_reader.owns_lock()) << "shared holders run together";
        EXPECT_EQ(c.shared_holds(), 1u);
    }
    EXPECT_EQ(a.shared_holds(), 0u);
    {
        std::unique_lock<dlock::shared_mutex> writer(b, std::try_to_lock);
        ASSERT_TRUE(writer.owns_lock()) << "free once the shared holders left";
        EXPECT_FALSE(a.try_lock_shared()) << "a shared hold beside an exclusive one";
        EXPECT_FALSE(c.try_lock_shared_until(clock_type::now() + 200ms));
        EXPECT_FALSE(c.try_lock()) << "two exclusive holders";
        if (has(DLOCK_CAP_FENCING)) {
            EXPECT_GT(b.fencing_token(), 0u);
        }
    }
    std::shared_lock<dlock::shared_mutex> again(a, std::try_to_lock);
    EXPECT_TRUE(again.owns_lock());
}

// One dlock::shared_mutex shared by threads, as a std::shared_mutex is: each thread's shared hold
// is its own lease, and unlock_shared releases the calling thread's.
TEST_P(Modes, SharedMutexObjectSharedByThreads) {
    if (!has(DLOCK_CAP_SHARED)) GTEST_SKIP() << "backend has no SHARED capability";
    dlock::shared_mutex m(client_, name("rw"));
    auto other = open();
    dlock::shared_mutex writer(other, name("rw"));
    std::mutex step;
    std::condition_variable changed;
    int holding = 0;
    bool leave = false;
    std::vector<std::string> owners(2);
    std::vector<std::thread> readers;
    for (int i = 0; i < 2; ++i) {
        readers.emplace_back([&, i] {
            std::shared_lock<dlock::shared_mutex> reading(m);
            std::unique_lock<std::mutex> lock(step);
            ++holding;
            changed.notify_all();
            changed.wait(lock, [&] { return leave; });
        });
    }
    {
        std::unique_lock<std::mutex> lock(step);
        ASSERT_TRUE(changed.wait_for(lock, 30s, [&] { return holding == 2; })) << "two threads could not hold it shared together";
    }
    EXPECT_EQ(m.shared_holds(), 2u);
    EXPECT_FALSE(writer.try_lock()) << "exclusive beside two shared holds of one object";
    {
        std::lock_guard<std::mutex> lock(step);
        leave = true;
    }
    changed.notify_all();
    for (auto& t : readers) t.join();
    EXPECT_EQ(m.shared_holds(), 0u) << "each thread released its own hold";
    EXPECT_TRUE(writer.try_lock_for(5s)) << "free once both threads released";
    writer.unlock();
}

// 6 processes, two acquires in three shared and one exclusive: the checker finds no exclusive
// holder beside anyone, and the census agrees.
TEST_P(Modes, SharedAndExclusiveHoldersAcrossProcessesNeverMeet) {
    if (!has(DLOCK_CAP_SHARED)) GTEST_SKIP() << "backend has no SHARED capability";
    constexpr int processes = 6, iterations = 40;
    const auto r = run_workers(name("rw"), "shared", processes, iterations);
    EXPECT_TRUE(r.history.failures.empty()) << r.history.failures.front();
    const auto v = dlock::test::check_shared_exclusion(r.history.held);
    size_t exclusive = 0;
    for (const auto& i : r.history.held) exclusive += i.kind == 'x';
    std::cout << "[" << label() << "] " << v.summary() << "; " << exclusive << " exclusive; census: "
              << r.census_violations << " violations; " << r.history.timeouts << " attempts timed out\n";
    EXPECT_EQ(v.violations, 0u) << v.first_problem;
    EXPECT_EQ(r.census_violations, 0u) << "a worker found an exclusive holder beside another holder";
    EXPECT_GT(exclusive, 0u) << "no exclusive hold was taken: the test showed nothing";
    EXPECT_EQ(r.workers_that_held, size_t(processes));
    if (has(DLOCK_CAP_FENCING)) {
        // Shared holds and the exclusive lock of a name share one counter: an exclusive grant's
        // token is above every token granted before it.
        auto held = r.history.held;
        std::sort(held.begin(), held.end(), [](const auto& x, const auto& y) { return x.acquired_ns < y.acquired_ns; });
        uint64_t highest = 0;
        size_t inversions = 0;
        for (const auto& i : held) {
            if (i.kind == 'x' && i.fence <= highest) ++inversions;
            highest = std::max(highest, i.fence);
        }
        EXPECT_EQ(inversions, 0u) << "an exclusive holder's token not above every earlier grant's";
    }
}

// Readers keep arriving with overlap (the lock is never free of them); an exclusive acquirer that
// starts waiting gets in within a bound, because new readers wait behind it (writer preference or
// FIFO).
TEST_P(Modes, WaitingWriterIsNotStarvedByArrivingReaders) {
    if (!has(DLOCK_CAP_SHARED)) GTEST_SKIP() << "backend has no SHARED capability";
    const std::string n = name("rw");
    constexpr int readers = 3;
    constexpr auto read_hold = 300ms;
    std::vector<dlock::client> clients;
    for (int i = 0; i < readers; ++i) clients.push_back(open());
    std::atomic<bool> stop{false};
    std::atomic<int> reads{0}, failures{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < readers; ++i) {
        threads.emplace_back([&, i] {
            std::this_thread::sleep_for(read_hold / readers * i);  // staggered: a reader always holds
            while (!stop) {
                std::error_code ec;
                auto lease = clients[i].acquire(n, dlock::acquire_options().with_shared(true).with_wait(60s), ec);
                if (ec) {
                    ++failures;
                    return;
                }
                ++reads;
                std::this_thread::sleep_for(read_hold);
                lease.release(ec);
            }
        });
    }
    std::this_thread::sleep_for(2 * read_hold);
    std::error_code ec;
    client_.acquire(n, try_once, ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "the readers should hold the lock now";
    const int reads_before = reads.load();
    const auto start = clock_type::now();
    auto writer = client_.acquire(n, dlock::acquire_options().with_wait(30s), ec);
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - start);
    stop = true;
    const bool got = !ec;
    writer = dlock::lease();
    for (auto& t : threads) t.join();
    std::cout << "[" << label() << "] the writer waited " << waited.count() << " ms for readers that hold "
              << std::chrono::milliseconds(read_hold).count() << " ms each (" << reads.load() - reads_before
              << " reads meanwhile)\n";
    EXPECT_TRUE(got) << "the writer starved: " << dlock_last_error();
    EXPECT_LT(waited, 10s) << "the writer waited far beyond the readers' holds";
    EXPECT_EQ(failures.load(), 0);
}

// ---- LIST ----------------------------------------------------------------------------------------

TEST_P(Modes, ListShowsHeldLocksWithTheirTokensAndFiltersByPrefix) {
    if (!has(DLOCK_CAP_LIST)) GTEST_SKIP() << "backend has no LIST capability";
    auto other = open();
    auto a = other.acquire(name("a"), try_once);
    auto b = other.acquire(name("b"), try_once);
    auto outside = other.acquire("modes-outside/" + label(), try_once);
    auto find = [](const std::vector<dlock::holder_info>& list, const std::string& n) {
        std::vector<dlock::holder_info> out;
        for (const auto& h : list)
            if (h.name == n) out.push_back(h);
        return out;
    };
    auto listed = client_.list(prefix_);
    for (const auto& [lease, n] : {std::pair<dlock::lease*, std::string>{&a, name("a")}, {&b, name("b")}}) {
        const auto found = find(listed, n);
        ASSERT_EQ(found.size(), 1u) << "`" << n << "` is held once";
        EXPECT_EQ(found[0].kind, dlock::hold_kind::exclusive);
        EXPECT_EQ(found[0].holder, lease->owner());
        if (has(DLOCK_CAP_FENCING)) {
            EXPECT_EQ(found[0].fencing_token, lease->fencing_token());
        }
    }
    for (const auto& h : listed) EXPECT_EQ(h.name.rfind(prefix_, 0), 0u) << "`" << h.name << "` is outside the prefix";
    EXPECT_EQ(find(client_.list(), "modes-outside/" + label()).size(), 1u) << "an empty prefix lists everything";
    a.release();
    listed = client_.list(prefix_);
    EXPECT_TRUE(find(listed, name("a")).empty()) << "a released lock disappears";
    EXPECT_EQ(find(listed, name("b")).size(), 1u);
    if (has(DLOCK_CAP_SEMAPHORE)) {
        auto p = dlock::semaphore(other, name("sem"), 2).acquire();
        const auto found = find(client_.list(prefix_), name("sem"));
        ASSERT_EQ(found.size(), 1u);
        EXPECT_EQ(found[0].kind, dlock::hold_kind::permit);
        EXPECT_EQ(found[0].holder, p.owner());
    }
    if (has(DLOCK_CAP_SHARED)) {
        auto s = other.acquire(name("rw"), dlock::acquire_options().with_shared(true).with_wait(0ms));
        const auto found = find(client_.list(prefix_), name("rw"));
        ASSERT_EQ(found.size(), 1u);
        EXPECT_EQ(found[0].kind, dlock::hold_kind::shared);
        EXPECT_EQ(found[0].holder, s.owner());
    }
}

// ---- BREAK ---------------------------------------------------------------------------------------

// With FENCING the next holder's token is above the broken one's, so a resource refuses the
// broken holder from then on. Without it nothing tells the two apart, so the break must be fenced
// by time: nobody holds the name while the broken lease is still valid (it may not renew, or not
// learn of the break until its next renewal), and the name is free once that validity has ended.
TEST_P(Modes, BreakRemovesTheHolderFencedAndItsLeaseBecomesLost) {
    if (!has(DLOCK_CAP_BREAK)) GTEST_SKIP() << "backend has no BREAK capability";
    const bool fencing = has(DLOCK_CAP_FENCING);
    const std::string n = name("x");
    auto holder_client = open();
    // Without fencing the next holder waits out the broken lease's validity: a short ttl.
    auto broken = holder_client.acquire(n, dlock::acquire_options().with_wait(0ms).with_ttl(fencing ? 30s : 3s));
    EXPECT_EQ(client_.break_lock(n), 1u);
    const auto broken_valid_until = broken.valid_until();  // as confirmed before the break
    std::error_code ec;
    broken.renew(ec);
    EXPECT_EQ(ec, dlock::errc::lost) << "the broken lease's next renewal: " << ec.message() << ": " << dlock_last_error();
    EXPECT_EQ(broken.state(), dlock::lease_state::lost);
    auto next_client = open();  // outlives its lease: a closed client releases its leases
    if (!fencing) {
        // A waiting acquire whose deadline is the broken lease's validity: never granted before it.
        // (Its deadline is 100 ms short of it, so that a round sent just before the deadline and
        // run late by a loaded server is not mistaken for an early grant.)
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(broken_valid_until - clock_type::now());
        ASSERT_GT(left, 600ms) << "the test needs the broken lease still valid here";
        auto early = next_client.acquire(n, dlock::acquire_options().with_wait(left - 100ms), ec);
        EXPECT_FALSE(early) << "another client holds the name while the broken lease is valid for "
                            << std::chrono::duration_cast<std::chrono::milliseconds>(broken_valid_until - clock_type::now()).count()
                            << " ms more";
        EXPECT_EQ(ec, dlock::errc::timeout) << ec.message() << ": " << dlock_last_error();
        if (early) early.release();
    }
    auto next = next_client.acquire(n, dlock::acquire_options().with_wait(5s));
    ASSERT_TRUE(next) << "the break frees the name, at the latest when the broken lease's validity ends";
    if (fencing) {
        EXPECT_GT(next.fencing_token(), broken.fencing_token()) << "the next holder's token is above the broken one's";
    }
    EXPECT_EQ(broken.release(), dlock::release_outcome::already_lost) << "and its release touches nothing of the next holder";
    EXPECT_TRUE(client_.inspect(n).held);
    next.release();
    EXPECT_EQ(client_.break_lock(name("never-held")), 0u) << "breaking a free lock removes nothing";
    if (has(DLOCK_CAP_SEMAPHORE)) {
        auto p1 = dlock::semaphore(holder_client, name("sem"), 2).acquire();
        auto p2 = dlock::semaphore(holder_client, name("sem"), 2).acquire();
        EXPECT_EQ(client_.break_lock(name("sem"), true), 2u);
        p1.renew(ec);
        EXPECT_EQ(ec, dlock::errc::lost) << dlock_last_error();
        auto after = dlock::semaphore(client_, name("sem"), 2).try_acquire_for(5s);
        ASSERT_TRUE(after);
        if (has(DLOCK_CAP_FENCING)) {
            EXPECT_GT(after->fencing_token(), std::max(p1.fencing_token(), p2.fencing_token()));
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Backends, Modes, ::testing::ValuesIn(dlock::conformance::backend_cases()),
                         [](const ::testing::TestParamInfo<backend_case>& info) { return info.param.label; });

}  // namespace

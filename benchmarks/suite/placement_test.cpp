// placement_test.cpp — the CPU placement guard of the comparison suite (placement.hpp): which CPUs a
// plan picks, that the guard pins this process's threads and a server's whole process tree, and that
// it gives every thread back the mask it had, including threads made while pinned. A `sh` with a
// child `sleep` stands in for a server with a backend process.
#include "placement.hpp"

#include "dlock/lab/process.hpp"

#include <gtest/gtest.h>

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace dlock::bench {
namespace {

using namespace std::chrono_literals;

cpu_set_t cpus(std::initializer_list<int> list) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu : list) CPU_SET(cpu, &set);
    return set;
}

cpu_set_t mask_of(pid_t thread) {
    cpu_set_t set;
    CPU_ZERO(&set);
    EXPECT_EQ(::sched_getaffinity(thread, sizeof set, &set), 0) << "thread " << thread;
    return set;
}

bool same_mask(const cpu_set_t& a, const cpu_set_t& b) { return CPU_EQUAL(&a, &b); }

std::vector<int> allowed_cpus() {
    const cpu_set_t set = mask_of(0);
    std::vector<int> out;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
        if (CPU_ISSET(cpu, &set)) out.push_back(cpu);
    return out;
}

// Every thread of `process` and of its descendants.
std::vector<pid_t> tree_threads(pid_t process) {
    std::vector<pid_t> out = threads_of(process);
    for (const auto& d : dlock::lab::live_descendants(process))
        for (pid_t t : threads_of(d.pid)) out.push_back(t);
    return out;
}

TEST(PlacementPlan, SameCpuUsesTheHighestAllowedCpu) {
    const auto plan = plan_for(placement_mode::same_cpu, cpus({0, 2, 5}));
    ASSERT_TRUE(plan);
    EXPECT_EQ(plan->client_cpu, 5);
    EXPECT_EQ(plan->server_cpu, 5);
}

TEST(PlacementPlan, AcrossPutsTheClientOnTheHighestAndTheServersOnTheLowest) {
    const auto plan = plan_for(placement_mode::across_cpus, cpus({1, 3, 4}));
    ASSERT_TRUE(plan);
    EXPECT_EQ(plan->client_cpu, 4);
    EXPECT_EQ(plan->server_cpu, 1);
}

TEST(PlacementPlan, NoPlanWhenUnpinnedOrTooFewCpus) {
    EXPECT_FALSE(plan_for(placement_mode::unpinned, cpus({0, 1})));
    EXPECT_FALSE(plan_for(placement_mode::across_cpus, cpus({3})));
    EXPECT_FALSE(plan_for(placement_mode::same_cpu, cpus({})));
    EXPECT_TRUE(plan_for(placement_mode::same_cpu, cpus({3})));
}

TEST(PlacementPlan, ParsesTheCommandLineSpellingsOnly) {
    EXPECT_EQ(parse_placement("same"), placement_mode::same_cpu);
    EXPECT_EQ(parse_placement("across"), placement_mode::across_cpus);
    EXPECT_EQ(parse_placement("none"), placement_mode::unpinned);
    EXPECT_FALSE(parse_placement("Same"));
    EXPECT_FALSE(parse_placement(""));
    for (auto mode : {placement_mode::same_cpu, placement_mode::across_cpus, placement_mode::unpinned})
        EXPECT_EQ(parse_placement(placement_name(mode)), mode);
}

// Pins this process and a server tree on two different CPUs, then restores: each thread gets back
// the mask it had (the server's, set apart beforehand, is not simply "every CPU").
TEST(PlacementGuard, PinsClientAndServerTreeAndRestoresEveryThreadsMask) {
    const std::vector<int> allowed = allowed_cpus();
    if (allowed.size() < 2) GTEST_SKIP() << "needs two CPUs to tell the client's CPU from the servers'; this process may use " << allowed.size();
    const auto plan = plan_for(placement_mode::across_cpus, mask_of(0));
    ASSERT_TRUE(plan);

    dlock::lab::spawn_options server;
    server.argv = {"/bin/sh", "-c", "sleep 60 & wait"};
    auto child = dlock::lab::child_process::spawn(server);
    // The backend: wait until the shell has started it.
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (dlock::lab::live_descendants(child.pid()).empty() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
    ASSERT_FALSE(dlock::lab::live_descendants(child.pid()).empty()) << "the stand-in server's child did not start";
    // The server's own mask before: the client's CPU only, distinct from both the plan's server
    // CPU and "every CPU".
    const cpu_set_t server_before = cpus({plan->client_cpu});
    for (pid_t t : tree_threads(child.pid())) ASSERT_EQ(::sched_setaffinity(t, sizeof server_before, &server_before), 0);
    const cpu_set_t client_before = mask_of(0);

    // A thread made while pinned, alive after the guard ends.
    std::mutex m;
    std::condition_variable cv;
    bool finish = false;
    std::atomic<pid_t> late_thread{0};
    std::thread late;
    {
        placement_guard guard(*plan, {child.pid()});
        EXPECT_TRUE(guard.problems().empty()) << guard.problems().front();
        for (pid_t t : threads_of(::getpid())) EXPECT_TRUE(same_mask(mask_of(t), cpus({plan->client_cpu}))) << "client thread " << t;
        const auto server_threads = tree_threads(child.pid());
        EXPECT_GE(server_threads.size(), 2u);
        for (pid_t t : server_threads) EXPECT_TRUE(same_mask(mask_of(t), cpus({plan->server_cpu}))) << "server thread " << t;
        late = std::thread([&] {
            late_thread = static_cast<pid_t>(::syscall(SYS_gettid));
            std::unique_lock lock(m);
            cv.wait(lock, [&] { return finish; });
        });
        while (late_thread.load() == 0) std::this_thread::sleep_for(1ms);
        EXPECT_TRUE(same_mask(mask_of(late_thread), cpus({plan->client_cpu})));
        guard.restore();
        EXPECT_TRUE(guard.problems().empty()) << guard.problems().front();
    }
    for (pid_t t : threads_of(::getpid())) EXPECT_TRUE(same_mask(mask_of(t), client_before)) << "client thread " << t;
    EXPECT_TRUE(same_mask(mask_of(late_thread), client_before)) << "the thread made while pinned";
    for (pid_t t : tree_threads(child.pid())) EXPECT_TRUE(same_mask(mask_of(t), server_before)) << "server thread " << t;
    {
        std::lock_guard lock(m);
        finish = true;
    }
    cv.notify_all();
    late.join();
    child.kill_group();
}

// Same-CPU placement needs one CPU only, and a server that is gone is no problem.
TEST(PlacementGuard, SameCpuPinsBothSidesAndToleratesAGoneServer) {
    const auto plan = plan_for(placement_mode::same_cpu, mask_of(0));
    ASSERT_TRUE(plan);
    const cpu_set_t client_before = mask_of(0);
    dlock::lab::spawn_options server;
    server.argv = {"/bin/sleep", "60"};
    auto child = dlock::lab::child_process::spawn(server);
    const pid_t server_pid = child.pid();
    {
        placement_guard guard(*plan, {server_pid, -1});
        EXPECT_TRUE(same_mask(mask_of(0), cpus({plan->client_cpu})));
        EXPECT_TRUE(same_mask(mask_of(server_pid), cpus({plan->server_cpu})));
        child.kill_group();
        guard.restore();
        EXPECT_TRUE(guard.problems().empty()) << guard.problems().front();
    }
    EXPECT_TRUE(same_mask(mask_of(0), client_before));
}

}  // namespace
}  // namespace dlock::bench

// The `file` backend against what can happen to its directory and its threads: a lock file deleted
// or replaced behind the clients' backs (and, as a documented limit, deleted while held), a lock
// file truncated from outside, and an application thread that blocks every signal while it waits.
#include "support.hpp"

#include <dlock/dlock.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <pthread.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <vector>
#include <unistd.h>

using namespace std::chrono_literals;

namespace {

class FileBackend : public ::testing::Test {
protected:
    dlock::client open_client() {
        return dlock::client::from_yaml("backend: file\noptions:\n  directory: \"" + dir_.path() + "\"\n");
    }
    // The lock file of a name made of letters only (such names are kept as they are).
    std::string path_of(const std::string& name) { return dir_.path() + "/" + name + ".lock"; }

    dlock::test::scratch_dir dir_{"dlock-file-backend"};
};

dlock::acquire_options try_for(std::chrono::milliseconds wait) { return dlock::acquire_options().with_wait(wait); }

// A's description of the old file is cached for reuse; the file is deleted (tmpfiles, a clean-up
// script) and B creates and locks a new one at the same path. A must see B's lock, not its own
// stale inode.
TEST_F(FileBackend, DeletedLockFileDoesNotGiveTwoHolders) {
    auto a = open_client();
    auto b = open_client();
    a.acquire("swept", try_for(0ms)).release();
    ASSERT_EQ(::unlink(path_of("swept").c_str()), 0);
    auto held_by_b = b.acquire("swept", try_for(0ms));
    std::error_code ec;
    auto second = a.acquire("swept", try_for(200ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "A locked the deleted inode while B holds the file at the path";
    EXPECT_FALSE(second);
    EXPECT_EQ(held_by_b.release(), dlock::release_outcome::released);
    auto after = a.acquire("swept", try_for(2s));
    EXPECT_GT(after.fencing_token(), held_by_b.fencing_token());
}

// The same when the file is replaced (a backup restored, an editor's rename over it).
TEST_F(FileBackend, ReplacedLockFileDoesNotGiveTwoHolders) {
    auto a = open_client();
    auto b = open_client();
    a.acquire("replaced", try_for(0ms)).release();
    const std::string copy = dir_.path() + "/copy";
    std::filesystem::copy_file(path_of("replaced"), copy);
    ASSERT_EQ(std::rename(copy.c_str(), path_of("replaced").c_str()), 0);
    auto held_by_b = b.acquire("replaced", try_for(0ms));
    std::error_code ec;
    auto second = a.acquire("replaced", try_for(200ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "A locked the replaced inode while B holds the file at the path";
    EXPECT_FALSE(second);
}

// Replacement while A waits: A's wait ends on the old inode when it is unlocked, and A must not take
// that for the lock while B holds the file now at the path.
TEST_F(FileBackend, FileReplacedDuringAWaitIsNotTakenForTheLock) {
    auto a = open_client();
    auto b = open_client();
    auto c = open_client();
    auto old_holder = c.acquire("moved", try_for(0ms));
    auto waiting = std::async(std::launch::async, [&] {
        std::error_code ec;
        auto l = a.acquire("moved", try_for(1500ms), ec);
        return ec;
    });
    std::this_thread::sleep_for(200ms);  // A sleeps in the kernel on the old inode
    ASSERT_EQ(::unlink(path_of("moved").c_str()), 0);
    auto held_by_b = b.acquire("moved", try_for(0ms));
    old_holder.release();  // wakes A on the deleted inode
    EXPECT_EQ(waiting.get(), dlock::errc::timeout) << "A took the deleted inode for the lock B holds";
}

// The limit no check can remove, demonstrated: a file deleted while it is HELD lets a newcomer lock
// a new file at the path while the old holder still holds the deleted one (docs/backends/file.md:
// keep the directory out of reach of cleaners). The old holder keeps its lease and its lower token.
TEST_F(FileBackend, FileDeletedWhileHeldLetsASecondHolderIn) {
    auto a = open_client();
    auto b = open_client();
    auto held_by_a = a.acquire("deleted-while-held", try_for(0ms));
    ASSERT_EQ(::unlink(path_of("deleted-while-held").c_str()), 0);
    std::error_code ec;
    auto held_by_b = b.acquire("deleted-while-held", try_for(0ms), ec);
    EXPECT_FALSE(ec) << "expected the documented violation: B locks the new file";
    EXPECT_EQ(held_by_a.state(), dlock::lease_state::held);
    // The new file starts a new counter: the fencing tokens do not tell the holders apart either.
    EXPECT_EQ(held_by_b.fencing_token(), 1u);
    EXPECT_EQ(held_by_a.fencing_token(), 1u);
}

// A lock file truncated from outside: an error that names the file, never a SIGBUS, and never a
// fencing counter silently restarted below tokens already handed out.
TEST_F(FileBackend, TruncatedLockFileIsAnErrorNotACrash) {
    auto a = open_client();
    a.acquire("cut", try_for(0ms)).release();
    ASSERT_EQ(::truncate(path_of("cut").c_str(), 0), 0);
    auto b = open_client();
    for (dlock::client* client : {&a, &b}) {  // A's cached description, then a fresh client's
        std::error_code ec;
        auto lease = client->acquire("cut", try_for(0ms), ec);
        EXPECT_EQ(ec, dlock::errc::backend) << (client == &a ? "cached" : "fresh");
        const std::string message = dlock_last_error();
        EXPECT_NE(message.find(path_of("cut")), std::string::npos) << message;
        EXPECT_NE(message.find("fencing counter is lost"), std::string::npos) << message;
    }
    // Once the file is removed (by someone who knows no process uses it), a new one is started.
    ASSERT_EQ(::unlink(path_of("cut").c_str()), 0);
    EXPECT_EQ(a.acquire("cut", try_for(0ms)).fencing_token(), 1u);
}

// A full tmpfs: creating and writing a lock file is an error (UNAVAILABLE, nothing held), never a
// SIGBUS from a write to a mapped page the file system cannot back. Runs in a child process with a
// private mount namespace holding an 8 KiB tmpfs, which needs CAP_SYS_ADMIN.
TEST_F(FileBackend, FullFileSystemIsAnErrorNotACrash) {
    constexpr int cannot_mount = 77;
    const std::string full = dir_.path() + "/full";
    ASSERT_EQ(::mkdir(full.c_str(), 0700), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
            ::mount("tmpfs", full.c_str(), "tmpfs", 0, "size=8k") != 0)
            ::_exit(cannot_mount);
        {
            std::ofstream fill(full + "/fill");
            const std::string block(1024, 'x');
            for (int i = 0; i < 64 && fill; ++i) fill << block << std::flush;
        }
        dlock_client* client = nullptr;
        const std::string yaml = "backend: file\noptions:\n  directory: \"" + full + "\"\n";
        if (dlock_client_open_yaml(yaml.c_str(), "full", &client) != DLOCK_OK) ::_exit(2);
        dlock_acquire_options options = DLOCK_ACQUIRE_OPTIONS_INIT;
        options.wait_ms = 0;
        dlock_lease* lease = nullptr;
        const int status = dlock_acquire(client, "no-room", &options, &lease);
        std::fprintf(stderr, "acquire on a full tmpfs: %s: %s\n", dlock_status_name(status), dlock_last_error());
        dlock_lease_destroy(lease);
        dlock_client_close(client);
        ::_exit(status == DLOCK_UNAVAILABLE ? 0 : 3);
    }
    int wstatus = 0;
    ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
    if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == cannot_mount)
        GTEST_SKIP() << "no private tmpfs here (needs CAP_SYS_ADMIN for unshare + mount)";
    ASSERT_FALSE(WIFSIGNALED(wstatus)) << "the acquiring process died of signal " << WTERMSIG(wstatus);
    EXPECT_EQ(WEXITSTATUS(wstatus), 0) << "acquire on a full file system did not answer DLOCK_UNAVAILABLE (see stderr)";
}

// Runs `body` on a thread that blocks every signal (as programs with a sigwait thread do).
template <typename F>
auto on_thread_blocking_all_signals(F body) {
    return std::async(std::launch::async, [body] {
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, nullptr);
        return body();
    });
}

TEST_F(FileBackend, DeadlineIsHonouredWhenTheThreadBlocksSignals) {
    auto holder = open_client();
    auto waiter = open_client();
    auto held = holder.acquire("blocked", try_for(0ms));
    auto attempt = on_thread_blocking_all_signals([&] {
        std::error_code ec;
        const auto started = std::chrono::steady_clock::now();
        auto l = waiter.acquire("blocked", try_for(100ms), ec);
        return std::make_pair(ec, std::chrono::steady_clock::now() - started);
    });
    const bool returned = attempt.wait_for(5s) == std::future_status::ready;
    if (!returned) held.release();  // let the stuck wait end so the test can finish
    ASSERT_TRUE(returned) << "a 100 ms wait did not end in 5 s: the deadline signal was blocked";
    const auto [ec, took] = attempt.get();
    EXPECT_EQ(ec, dlock::errc::timeout);
    EXPECT_GE(took, 100ms);
}

TEST_F(FileBackend, CloseInterruptsAWaiterThatBlocksSignals) {
    auto holder = open_client();
    auto held = holder.acquire("closing", try_for(0ms));
    // The C handle, so the closing thread and the waiting one share no C++ object.
    dlock_client* waiter = nullptr;
    const std::string yaml = "backend: file\noptions:\n  directory: \"" + dir_.path() + "\"\n";
    ASSERT_EQ(dlock_client_open_yaml(yaml.c_str(), "waiter", &waiter), DLOCK_OK) << dlock_last_error();
    auto attempt = on_thread_blocking_all_signals([waiter] {
        dlock_acquire_options options = DLOCK_ACQUIRE_OPTIONS_INIT;
        options.wait_ms = DLOCK_WAIT_FOREVER;
        dlock_lease* lease = nullptr;
        const int status = dlock_acquire(waiter, "closing", &options, &lease);
        dlock_lease_destroy(lease);
        return status;
    });
    std::this_thread::sleep_for(200ms);
    auto closing = std::async(std::launch::async, [waiter] { dlock_client_close(waiter); });
    const bool closed = closing.wait_for(5s) == std::future_status::ready;
    if (!closed) held.release();
    ASSERT_TRUE(closed) << "close() did not interrupt a waiter that blocks signals";
    EXPECT_EQ(attempt.get(), DLOCK_CANCELLED);
}

// Unlocked descriptions are kept for reuse, at most `idle_descriptors` of them, whichever way the
// pool is used: one name over and over, many names, many threads at once.
TEST_F(FileBackend, IdleDescriptionsStayWithinTheirLimitAndAreReused) {
    const std::string dir = std::filesystem::canonical(dir_.path()).string();
    auto open_lock_files = [&] {  // descriptions of files in the directory, open in this process
        int n = 0;
        for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
            std::error_code ec;
            const auto target = std::filesystem::read_symlink(entry.path(), ec).string();
            // A file this client created shows under its temporary name: anything in the directory.
            if (!ec && target.rfind(dir + "/", 0) == 0) ++n;
        }
        return n;
    };
    auto client = dlock::client::from_yaml("backend: file\noptions:\n  directory: \"" + dir_.path() + "\"\n  idle_descriptors: 3\n");
    client.acquire("same", try_for(0ms)).release();
    EXPECT_EQ(open_lock_files(), 1);
    for (int i = 0; i < 100; ++i) client.acquire("same", try_for(0ms)).release();
    EXPECT_EQ(open_lock_files(), 1) << "locking one name again opened another description";
    for (int i = 0; i < 10; ++i) client.acquire("name" + std::to_string(i), try_for(0ms)).release();
    EXPECT_EQ(open_lock_files(), 3);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&client, t] {
            for (int i = 0; i < 200; ++i) client.acquire("thread" + std::to_string(t) + "-" + std::to_string(i % 5), try_for(2s)).release();
        });
    for (auto& t : threads) t.join();
    EXPECT_LE(open_lock_files(), 3);
    EXPECT_GE(open_lock_files(), 1);
    // The kept descriptions still lock: a second client contends with each.
    auto other = open_client();
    auto held = client.acquire("thread0-0", try_for(0ms));
    std::error_code ec;
    EXPECT_FALSE(other.acquire("thread0-0", try_for(0ms), ec));
    EXPECT_EQ(ec, dlock::errc::timeout);

    auto keeps_none = dlock::client::from_yaml("backend: file\noptions:\n  directory: \"" + dir_.path() + "\"\n  idle_descriptors: 0\n");
    const int before = open_lock_files();
    for (int i = 0; i < 5; ++i) keeps_none.acquire("none" + std::to_string(i), try_for(0ms)).release();
    EXPECT_EQ(open_lock_files(), before) << "idle_descriptors: 0 kept a description open";
}

}  // namespace

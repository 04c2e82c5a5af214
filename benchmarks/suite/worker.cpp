// worker.cpp — dlock-bench-worker: one client process of the comparison suite's multi-process
// scenarios (S2–S6). It opens one dlock::client from the config named on its command line, prints
// "ready <pid>", then answers one line on stdout for each command line read on stdin (the protocol
// is in worker_protocol.hpp). Times are CLOCK_MONOTONIC nanoseconds (std::chrono::steady_clock on
// Linux), a clock every process of the machine shares, so the driver can merge events of several
// workers. The worker dies with the driver (PR_SET_PDEATHSIG) and exits at end of input.
#include "worker_protocol.hpp"

#include <dlock/dlock.hpp>

#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <exception>
#include <functional>
#include <cstdio>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
namespace proto = dlock::bench::worker_protocol;

int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now().time_since_epoch()).count(); }

// CPU time (user + system, every thread) this process has used so far.
int64_t process_cpu_ns() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    auto to_ns = [](const timeval& t) { return int64_t(t.tv_sec) * 1'000'000'000 + int64_t(t.tv_usec) * 1000; };
    return to_ns(usage.ru_utime) + to_ns(usage.ru_stime);
}

void sleep_until_ns(int64_t ns) { std::this_thread::sleep_until(clock_type::time_point(std::chrono::nanoseconds(ns))); }

// A critical section that keeps the lock for `us` microseconds of wall time, spinning so that the
// time is not stretched by the scheduler's wake-up latency.
void critical_section(int64_t us) {
    if (us <= 0) return;
    const int64_t end = now_ns() + us * 1000;
    while (now_ns() < end) {
    }
}

// Runs body(0) … body(n - 1) at once, body(0) in the calling thread and the others in threads kept
// from one call to the next (more are started when a call asks for more), and waits for all; the
// first exception of any thread is rethrown in the caller. Kept threads make per-thread state of the
// client (a redlock waiter's wake-up subscription) once per thread, as in a long-lived worker, instead
// of in every measured window and every counted run.
class thread_crew {
public:
    thread_crew() = default;
    thread_crew(const thread_crew&) = delete;
    thread_crew& operator=(const thread_crew&) = delete;
    ~thread_crew() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stopping_ = true;
        }
        work_.notify_all();
        for (auto& t : threads_) t.join();
    }

    void run(int64_t n, const std::function<void(int64_t)>& body) {
        std::unique_lock<std::mutex> lock(mutex_);
        // A thread started here waits for the generation this call is about to begin.
        while (static_cast<int64_t>(threads_.size()) < n - 1)
            threads_.emplace_back(&thread_crew::serve, this, static_cast<int64_t>(threads_.size()) + 1, generation_);
        job_ = &body;
        job_size_ = n;
        pending_ = n - 1;
        failure_ = nullptr;
        ++generation_;
        lock.unlock();
        work_.notify_all();
        guarded(body, 0);
        lock.lock();
        done_.wait(lock, [&] { return pending_ == 0; });
        job_ = nullptr;
        if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
    }

private:
    void guarded(const std::function<void(int64_t)>& body, int64_t index) {
        try {
            body(index);
        } catch (...) {
            std::lock_guard<std::mutex> lock(mutex_);
            if (!failure_) failure_ = std::current_exception();
        }
    }

    void serve(int64_t index, uint64_t seen) {
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
            work_.wait(lock, [&] { return stopping_ || generation_ != seen; });
            if (stopping_) return;
            seen = generation_;
            if (index >= job_size_) continue;  // this call asked for fewer threads
            const std::function<void(int64_t)>* job = job_;
            lock.unlock();
            guarded(*job, index);
            lock.lock();
            if (--pending_ == 0) done_.notify_all();
        }
    }

    std::mutex mutex_;
    std::condition_variable work_, done_;
    std::vector<std::thread> threads_;
    const std::function<void(int64_t)>* job_ = nullptr;
    int64_t job_size_ = 0;
    int64_t pending_ = 0;
    uint64_t generation_ = 0;
    bool stopping_ = false;
    std::exception_ptr failure_;
};

class worker {
public:
    explicit worker(dlock::client client) : client_(std::move(client)) {}

    // Runs one command line; returns the reply line (without newline). Unknown commands and
    // failures reply "err <text>".
    std::string run(const std::string& line) {
        std::istringstream in(line);
        std::string verb;
        in >> verb;
        try {
            if (verb == proto::acquire) return acquire(in);
            if (verb == proto::release) return release(in);
            if (verb == proto::cycles) return cycles(in);
            if (verb == proto::count) return count(in);
            if (verb == proto::hold) return hold(in);
            if (verb == proto::status) return status();
            if (verb == proto::drop) return drop();
            return "err unknown command: " + line;
        } catch (const std::exception& e) {
            return std::string("err ") + e.what();
        }
    }

private:
    // acquire NAME TTL_MS → ok <returned_ns> <granted_ttl_ms> (granted_ttl_ms -1 without expiry)
    std::string acquire(std::istringstream& in) {
        std::string name;
        int64_t ttl_ms = 0;
        in >> name >> ttl_ms;
        dlock::acquire_options options;
        options.with_wait(dlock::forever);
        if (ttl_ms > 0) options.with_ttl(std::chrono::milliseconds(ttl_ms));
        const int64_t asked = now_ns();
        dlock::lease lease = client_.acquire(name, options);
        const int64_t returned = now_ns();
        const auto until = lease.valid_until();
        int64_t granted_ms = -1;
        if (until != clock_type::time_point::max())
            granted_ms = (std::chrono::duration_cast<std::chrono::nanoseconds>(until.time_since_epoch()).count() - asked) / 1'000'000;
        named_[name] = std::move(lease);
        return "ok " + std::to_string(returned) + " " + std::to_string(granted_ms);
    }

    // release NAME → ok <called_ns> <returned_ns>
    std::string release(std::istringstream& in) {
        std::string name;
        in >> name;
        auto found = named_.find(name);
        if (found == named_.end()) return "err not held: " + name;
        const int64_t called = now_ns();
        const auto outcome = found->second.release();
        const int64_t returned = now_ns();
        named_.erase(found);
        if (outcome != dlock::release_outcome::released) return "err release outcome not `released`";
        return "ok " + std::to_string(called) + " " + std::to_string(returned);
    }

    // Releases; an outcome other than `released` is counted (the driver reports the count) and
    // logged to stderr with its detail, and the run goes on: the next acquire still has to wait for
    // whatever the backend believes about the lock.
    void release_counted(dlock::lease& lease) {
        const auto outcome = lease.release();
        if (outcome == dlock::release_outcome::released) return;
        ++release_failures_;
        std::cerr << "dlock-bench-worker " << getpid() << ": release of `" << lease.name() << "`: "
                  << (outcome == dlock::release_outcome::already_lost ? "already_lost" : "unknown") << ": " << dlock_last_error() << std::endl;
    }
    int64_t take_release_failures() { return release_failures_.exchange(0); }

    // cycles NAME START_NS END_NS CS_US [THREADS [PERMITS]] → ok <cycles> <cpu_ns> <wall_ns> <release_failures>
    // <acquired_ns releasing_ns thread>...: acquire+release cycles from START until END (a holding at
    // END is finished; a wait is given up at END) in each of THREADS threads, with a critical
    // section of CS_US. PERMITS > 0: each cycle takes one of PERMITS permits of the semaphore NAME.
    // Each cycle's triple is (acquire returned, release called, the thread that held).
    std::string cycles(std::istringstream& in) {
        std::string name;
        int64_t start = 0, end = 0, cs_us = 0, threads = 1, permits = 0;
        in >> name >> start >> end >> cs_us;
        if (!(in >> threads)) threads = 1;
        if (!(in >> permits)) permits = 0;
        threads = std::max<int64_t>(1, threads);
        std::vector<std::vector<std::pair<int64_t, int64_t>>> events(static_cast<std::size_t>(threads));
        sleep_until_ns(start);
        const int64_t cpu0 = process_cpu_ns();
        const int64_t wall0 = now_ns();
        crew_.run(threads, [&](int64_t thread) {
            auto& mine = events[static_cast<std::size_t>(thread)];
            mine.reserve(4096);
            for (int64_t left; (left = end - now_ns()) > 0;) {
                // A waiter gives up at END: the window closes for every waiter at once, instead of
                // after one more handoff per waiter (1 000 of them on a slow backend).
                const auto wait = std::chrono::milliseconds(std::max<int64_t>(1, (left + 999'999) / 1'000'000));
                std::error_code ec;
                dlock::lease lease =
                    client_.acquire(name, dlock::acquire_options().with_wait(wait).with_permits(static_cast<uint32_t>(permits)), ec);
                if (ec == dlock::errc::timeout) break;
                if (ec) throw std::runtime_error("acquire `" + name + "`: " + ec.message() + ": " + dlock_last_error());
                const int64_t acquired = now_ns();
                critical_section(cs_us);
                const int64_t releasing = now_ns();
                release_counted(lease);
                mine.emplace_back(acquired, releasing);
            }
        });
        const int64_t wall = now_ns() - wall0;
        const int64_t cpu = process_cpu_ns() - cpu0;
        std::size_t n = 0;
        for (const auto& e : events) n += e.size();
        std::string out = "ok " + std::to_string(n) + " " + std::to_string(cpu) + " " + std::to_string(wall) + " " +
                          std::to_string(take_release_failures());
        for (std::size_t t = 0; t < events.size(); ++t)
            for (const auto& [a, r] : events[t]) out += " " + std::to_string(a) + " " + std::to_string(r) + " " + std::to_string(t);
        return out;
    }

    // count NAME N CS_US [THREADS] → ok <cycles> <cpu_ns> <wall_ns> <release_failures>: exactly N
    // cycles, split over THREADS threads.
    std::string count(std::istringstream& in) {
        std::string name;
        int64_t n = 0, cs_us = 0, threads = 1;
        in >> name >> n >> cs_us;
        if (!(in >> threads)) threads = 1;
        threads = std::max<int64_t>(1, threads);
        const int64_t cpu0 = process_cpu_ns();
        const int64_t wall0 = now_ns();
        const auto options = dlock::acquire_options().with_wait(dlock::forever);
        crew_.run(threads, [&](int64_t thread) {
            const int64_t mine = n / threads + (thread < n % threads ? 1 : 0);
            for (int64_t i = 0; i < mine; ++i) {
                dlock::lease lease = client_.acquire(name, options);
                critical_section(cs_us);
                release_counted(lease);
            }
        });
        return "ok " + std::to_string(n) + " " + std::to_string(process_cpu_ns() - cpu0) + " " + std::to_string(now_ns() - wall0) + " " +
               std::to_string(take_release_failures());
    }

    // hold PREFIX N TTL_MS → ok <held> <wall_ns>: acquires N leases PREFIX/0 … PREFIX/N-1 with
    // auto-renew, from several threads (acquiring 10 000 one after the other would take minutes on
    // the fsyncing servers), and keeps them until `drop`.
    std::string hold(std::istringstream& in) {
        std::string prefix;
        int64_t n = 0, ttl_ms = 0;
        in >> prefix >> n >> ttl_ms;
        const auto options = dlock::acquire_options().with_wait(std::chrono::seconds(30)).with_ttl(std::chrono::milliseconds(ttl_ms)).with_renew(true);
        const int64_t wall0 = now_ns();
        std::atomic<int64_t> next{0};
        std::mutex held_mutex;
        std::string first_error;
        auto acquire_some = [&] {
            for (int64_t i = next++; i < n; i = next++) {
                std::error_code ec;
                dlock::lease lease = client_.acquire(prefix + "/" + std::to_string(i), options, ec);
                std::lock_guard<std::mutex> guard(held_mutex);
                if (ec) {
                    if (first_error.empty()) first_error = ec.message() + ": " + dlock_last_error();
                    continue;
                }
                held_.push_back(std::move(lease));
            }
        };
        std::vector<std::thread> threads;
        const int64_t thread_count = std::min<int64_t>(n, 16);
        for (int64_t i = 0; i < thread_count; ++i) threads.emplace_back(acquire_some);
        for (auto& t : threads) t.join();
        if (!first_error.empty() && held_.empty()) return "err " + first_error;
        return "ok " + std::to_string(held_.size()) + " " + std::to_string(now_ns() - wall0);
    }

    // status → ok <cpu_ns> <held>: the process's CPU so far and how many `hold` leases read HELD
    // (or SUSPECT) now.
    std::string status() {
        const int64_t cpu = process_cpu_ns();
        const auto held = std::count_if(held_.begin(), held_.end(), [](const dlock::lease& l) { return l.held(); });
        return "ok " + std::to_string(cpu) + " " + std::to_string(held);
    }

    // drop → ok: releases every `hold` lease.
    std::string drop() {
        held_.clear();
        return "ok";
    }

    dlock::client client_;
    std::map<std::string, dlock::lease> named_;
    std::vector<dlock::lease> held_;
    std::atomic<int64_t> release_failures_{0};
    thread_crew crew_;  // after client_: its threads end before the client closes
};

}  // namespace

int main(int argc, char** argv) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1) return 1;  // the driver died before prctl took effect
    if (argc != 2) {
        std::cerr << "usage: dlock-bench-worker CONFIG   (driven by dlock-compare over stdin/stdout)\n";
        return 2;
    }
    std::error_code ec;
    dlock::client client = dlock::client::open(argv[1], ec);
    if (ec) {
        std::cout << "err open " << argv[1] << ": " << ec.message() << ": " << dlock_last_error() << std::endl;
        return 1;
    }
    std::cout << proto::ready << " " << getpid() << std::endl;
    worker w(std::move(client));
    std::string line;
    while (std::getline(std::cin, line)) {
        if (line == proto::quit) break;
        std::cout << w.run(line) << std::endl;
    }
    return 0;
}

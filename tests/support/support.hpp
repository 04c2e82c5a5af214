// support.hpp — helpers shared by the process-level tests: spawning child processes, and the
// history checker that judges mutual exclusion from CLOCK_MONOTONIC intervals.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <sys/types.h>
#include <vector>

namespace dlock::test {

// A child process. Its stdout can be read line by line; the destructor SIGKILLs and reaps it.
class child_process {
public:
    // Runs argv[0] (searched on PATH) with `argv`. capture_stdout: read it with read_line().
    // feed_stdin: write to it with write_line().
    explicit child_process(const std::vector<std::string>& argv, bool capture_stdout = false,
                           const std::vector<std::string>& extra_env = {}, bool feed_stdin = false);
    ~child_process();
    child_process(const child_process&) = delete;
    child_process& operator=(const child_process&) = delete;

    pid_t pid() const { return pid_; }
    // Reads one line of stdout (without '\n'); false on EOF or after timeout_ms.
    bool read_line(std::string& line, int timeout_ms);
    // Writes one line to its stdin.
    void write_line(const std::string& line);
    // Waits for exit; returns the exit status, or 128+signal.
    int wait();
    void kill(int signo);

private:
    pid_t pid_ = -1;
    int stdout_fd_ = -1;
    int stdin_fd_ = -1;
    std::string buffer_;
    bool reaped_ = false;
    int status_ = -1;
};

// Polls `condition` until it holds or `within` has passed, every `step`; true once it held. For a
// test watching state the library changes by itself (the library under test never polls).
template <typename Condition>
bool eventually(Condition&& condition, std::chrono::milliseconds within,
                std::chrono::milliseconds step = std::chrono::milliseconds(5)) {
    const auto until = std::chrono::steady_clock::now() + within;
    while (!condition()) {
        if (std::chrono::steady_clock::now() >= until) return false;
        std::this_thread::sleep_for(step);
    }
    return true;
}

// One successful acquisition as a worker recorded it.
struct interval {
    uint64_t fence = 0;
    int64_t acquired_ns = 0;   // acquire returned ok
    int64_t released_ns = 0;   // release invoked
    int64_t valid_until_ns = 0;
    std::string who;           // which history it came from
    char kind = 'x';           // 'x' exclusive, 's' shared, 'p' a semaphore's permit
};

struct history {
    std::vector<interval> held;
    size_t timeouts = 0;
    std::vector<std::string> failures;
};

// Reads the "ok FENCE T1 T2 VALID [KIND]" / "timeout" / "fail ..." lines of conformance_worker
// (KIND x, s or p; x when absent).
void read_history(const std::string& path, history& into);

struct verdict {
    size_t intervals = 0;
    size_t overlaps = 0;            // pairs of holders whose intervals intersect
    size_t fence_inversions = 0;    // a later holder with a token not above an earlier one's
    std::string first_problem;
    std::string summary() const;
};

// The overlap checker: holders' intervals [acquired, min(released, valid_until)) must not
// intersect; with check_fences, tokens must strictly increase in acquisition order.
verdict check_mutual_exclusion(std::vector<interval> intervals, bool check_fences);

// The overlap checker generalised to counts, for semaphores and shared locks. The intervals are
// cut at valid_until as above and half-open, so a holder that takes over at the instant another
// leaves does not count as both.
struct count_verdict {
    size_t intervals = 0;
    size_t max_holders = 0;         // the most intervals held at one instant
    size_t max_shared = 0;          // the most shared intervals held at one instant
    size_t violations = 0;          // intervals that began where they were not allowed
    std::string first_problem;
    std::string summary() const;
};

// A semaphore of `limit` permits: at no instant more than `limit` holders.
count_verdict check_at_most(std::vector<interval> intervals, size_t limit);

// A lock held shared ('s') or exclusively ('x'): an exclusive holder never beside anyone, any
// number of shared holders together.
count_verdict check_shared_exclusion(std::vector<interval> intervals);

// A fresh directory under $TMPDIR (or /tmp), removed by the destructor.
class scratch_dir {
public:
    explicit scratch_dir(const std::string& prefix);
    ~scratch_dir();
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

}  // namespace dlock::test

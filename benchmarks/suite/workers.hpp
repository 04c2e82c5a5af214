// workers.hpp — the driver's side of dlock-bench-worker (worker_protocol.hpp): worker_process, one
// spawned worker with a pipe to its stdin and one from its stdout, and worker_group, several of them
// on one config started together.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace dlock::bench {

// Thrown when a worker cannot be spawned, answers "err …", closes its output or is too slow.
class worker_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// One worker process. Its stderr is appended to `log`. Move-only; the destructor asks it to quit,
// then kills it (SIGKILL) if it has not exited within a second, and reaps it.
class worker_process {
public:
    worker_process(const std::filesystem::path& executable, const std::filesystem::path& config,
                   const std::filesystem::path& log);
    worker_process(worker_process&& other) noexcept;
    worker_process& operator=(worker_process&&) = delete;
    worker_process(const worker_process&) = delete;
    worker_process& operator=(const worker_process&) = delete;
    ~worker_process();

    pid_t pid() const { return pid_; }

    // Waits for the "ready" line (the worker's client is open). Throws worker_error with what the
    // worker said otherwise.
    void wait_ready(std::chrono::milliseconds timeout);
    // Sends one command line.
    void send(const std::string& line);
    // Reads the next answer; returns the text after "ok " (or "" for a bare "ok"). Throws
    // worker_error for "err …", end of output or timeout.
    std::string receive(std::chrono::milliseconds timeout);
    std::string request(const std::string& line, std::chrono::milliseconds timeout) {
        send(line);
        return receive(timeout);
    }
    // SIGKILLs the worker now (S6), and reaps it.
    void kill_now();

private:
    std::string read_line(std::chrono::milliseconds timeout);

    pid_t pid_ = -1;
    int to_worker_ = -1;
    int from_worker_ = -1;
    std::string buffered_;  // bytes read past the last returned line
};

// `count` workers on one config, spawned together and all ready when the constructor returns.
class worker_group {
public:
    worker_group(int count, const std::filesystem::path& executable, const std::filesystem::path& config,
                 const std::filesystem::path& log, std::chrono::milliseconds ready_timeout = std::chrono::seconds(60));
    std::size_t size() const { return workers_.size(); }
    worker_process& operator[](std::size_t i) { return workers_[i]; }
    // Sends `line` to every worker, then collects every answer (in worker order).
    std::vector<std::string> broadcast(const std::string& line, std::chrono::milliseconds timeout);
    // Sends each worker its own line, then collects every answer.
    std::vector<std::string> scatter(const std::vector<std::string>& lines, std::chrono::milliseconds timeout);

private:
    std::vector<worker_process> workers_;
};

// CLOCK_MONOTONIC now, in nanoseconds (the clock of worker_protocol.hpp).
int64_t monotonic_ns();

}  // namespace dlock::bench

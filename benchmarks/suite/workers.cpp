// workers.cpp — spawning dlock-bench-worker processes and talking to them over pipes.
#include "workers.hpp"

#include "worker_protocol.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

extern char** environ;

namespace dlock::bench {

int64_t monotonic_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace {

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// Reaps `pid`, waiting up to `timeout`; true when it was reaped.
bool reap(pid_t pid, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
        int status = 0;
        const pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD)) return true;
        if (std::chrono::steady_clock::now() >= deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}

}  // namespace

worker_process::worker_process(const std::filesystem::path& executable, const std::filesystem::path& config,
                               const std::filesystem::path& log) {
    int in_pipe[2], out_pipe[2];
    if (::pipe2(in_pipe, O_CLOEXEC) != 0) throw worker_error(errno_text("pipe2"));
    if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
        ::close(in_pipe[0]);
        ::close(in_pipe[1]);
        throw worker_error(errno_text("pipe2"));
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in_pipe[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
    posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    const std::string exe = executable.string(), cfg = config.string();
    char* argv[] = {const_cast<char*>(exe.c_str()), const_cast<char*>(cfg.c_str()), nullptr};
    const int rc = ::posix_spawn(&pid_, exe.c_str(), &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(in_pipe[0]);
    ::close(out_pipe[1]);
    to_worker_ = in_pipe[1];
    from_worker_ = out_pipe[0];
    if (rc != 0) {
        ::close(to_worker_);
        ::close(from_worker_);
        pid_ = -1;
        throw worker_error("posix_spawn " + exe + ": " + std::strerror(rc));
    }
}

worker_process::worker_process(worker_process&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      to_worker_(std::exchange(other.to_worker_, -1)),
      from_worker_(std::exchange(other.from_worker_, -1)),
      buffered_(std::move(other.buffered_)) {}

worker_process::~worker_process() {
    if (to_worker_ >= 0) ::close(to_worker_);  // end of input: the worker exits
    if (from_worker_ >= 0) ::close(from_worker_);
    if (pid_ > 0 && !reap(pid_, std::chrono::seconds(1))) {
        ::kill(pid_, SIGKILL);
        reap(pid_, std::chrono::seconds(5));
    }
}

void worker_process::kill_now() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    reap(pid_, std::chrono::seconds(5));
    pid_ = -1;
}

void worker_process::send(const std::string& line) {
    std::string data = line + "\n";
    const char* p = data.data();
    std::size_t left = data.size();
    while (left > 0) {
        const ssize_t n = ::write(to_worker_, p, left);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw worker_error(errno_text("write to worker") + " (pid " + std::to_string(pid_) + ")");
        p += n;
        left -= static_cast<std::size_t>(n);
    }
}

std::string worker_process::read_line(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
        const auto newline = buffered_.find('\n');
        if (newline != std::string::npos) {
            std::string line = buffered_.substr(0, newline);
            buffered_.erase(0, newline + 1);
            return line;
        }
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) throw worker_error("worker " + std::to_string(pid_) + " did not answer in " + std::to_string(timeout.count()) + " ms");
        pollfd p{from_worker_, POLLIN, 0};
        const int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) continue;
        char chunk[65536];
        const ssize_t n = ::read(from_worker_, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw worker_error("worker " + std::to_string(pid_) + " closed its output (exited; see workers.log)");
        buffered_.append(chunk, static_cast<std::size_t>(n));
    }
}

void worker_process::wait_ready(std::chrono::milliseconds timeout) {
    const std::string line = read_line(timeout);
    if (line.rfind(worker_protocol::ready, 0) != 0) throw worker_error("worker did not start: " + line);
}

std::string worker_process::receive(std::chrono::milliseconds timeout) {
    const std::string line = read_line(timeout);
    if (line == "ok") return "";
    if (line.rfind("ok ", 0) == 0) return line.substr(3);
    throw worker_error("worker " + std::to_string(pid_) + ": " + line);
}

worker_group::worker_group(int count, const std::filesystem::path& executable, const std::filesystem::path& config,
                           const std::filesystem::path& log, std::chrono::milliseconds ready_timeout) {
    workers_.reserve(static_cast<std::size_t>(count));
    for (int i = 0; i < count; ++i) workers_.emplace_back(executable, config, log);
    for (auto& w : workers_) w.wait_ready(ready_timeout);
}

std::vector<std::string> worker_group::broadcast(const std::string& line, std::chrono::milliseconds timeout) {
    return scatter(std::vector<std::string>(workers_.size(), line), timeout);
}

std::vector<std::string> worker_group::scatter(const std::vector<std::string>& lines, std::chrono::milliseconds timeout) {
    for (std::size_t i = 0; i < workers_.size(); ++i) workers_[i].send(lines[i]);
    std::vector<std::string> answers;
    answers.reserve(workers_.size());
    for (auto& w : workers_) answers.push_back(w.receive(timeout));
    return answers;
}

}  // namespace dlock::bench

#include "support.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <poll.h>
#include <spawn.h>
#include <sstream>
#include <stdexcept>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace dlock::test {

child_process::child_process(const std::vector<std::string>& argv, bool capture_stdout,
                             const std::vector<std::string>& extra_env, bool feed_stdin) {
    std::vector<std::string> args = argv;
    std::vector<char*> cargv;
    for (auto& a : args) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    for (const auto& e : extra_env) env.push_back(e);
    std::vector<char*> cenv;
    for (auto& e : env) cenv.push_back(e.data());
    cenv.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    int pipe_fds[2] = {-1, -1};
    if (capture_stdout) {
        if (pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
        posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
    }
    int stdin_fds[2] = {-1, -1};
    if (feed_stdin) {
        if (pipe2(stdin_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
        posix_spawn_file_actions_adddup2(&actions, stdin_fds[0], STDIN_FILENO);
    }
    const int err = posix_spawnp(&pid_, cargv[0], &actions, nullptr, cargv.data(), cenv.data());
    posix_spawn_file_actions_destroy(&actions);
    if (feed_stdin) {
        close(stdin_fds[0]);
        stdin_fd_ = stdin_fds[1];
    }
    if (capture_stdout) {
        close(pipe_fds[1]);
        stdout_fd_ = pipe_fds[0];
    }
    if (err != 0) throw std::runtime_error(fmt::format("cannot spawn {}: {}", argv[0], std::strerror(err)));
}

child_process::~child_process() {
    if (!reaped_) {
        ::kill(pid_, SIGKILL);
        wait();
    }
    if (stdout_fd_ >= 0) close(stdout_fd_);
    if (stdin_fd_ >= 0) close(stdin_fd_);
}

void child_process::write_line(const std::string& line) {
    const std::string text = line + "\n";
    if (write(stdin_fd_, text.data(), text.size()) != ssize_t(text.size())) throw std::runtime_error("write to child failed");
}

bool child_process::read_line(std::string& line, int timeout_ms) {
    for (;;) {
        const size_t nl = buffer_.find('\n');
        if (nl != std::string::npos) {
            line = buffer_.substr(0, nl);
            buffer_.erase(0, nl + 1);
            return true;
        }
        pollfd p{stdout_fd_, POLLIN, 0};
        if (poll(&p, 1, timeout_ms) <= 0) return false;
        char chunk[512];
        const ssize_t n = read(stdout_fd_, chunk, sizeof chunk);
        if (n <= 0) return false;
        buffer_.append(chunk, size_t(n));
    }
}

int child_process::wait() {
    if (reaped_) return status_;
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return status_;
}

void child_process::kill(int signo) { ::kill(pid_, signo); }

void read_history(const std::string& path, history& into) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot read history " + path);
    for (std::string line; std::getline(in, line);) {
        std::istringstream words(line);
        std::string kind;
        words >> kind;
        if (kind == "ok") {
            interval i;
            words >> i.fence >> i.acquired_ns >> i.released_ns >> i.valid_until_ns;
            std::string kind_word;
            if (words >> kind_word && !kind_word.empty()) i.kind = kind_word[0];
            i.who = path;
            into.held.push_back(i);
        } else if (kind == "timeout") {
            ++into.timeouts;
        } else {
            into.failures.push_back(line);
        }
    }
}

verdict check_mutual_exclusion(std::vector<interval> intervals, bool check_fences) {
    verdict v;
    v.intervals = intervals.size();
    std::sort(intervals.begin(), intervals.end(), [](const interval& a, const interval& b) { return a.acquired_ns < b.acquired_ns; });
    int64_t latest_end = INT64_MIN;
    const interval* latest_holder = nullptr;
    uint64_t highest_fence = 0;
    for (const auto& i : intervals) {
        const int64_t end = std::min(i.released_ns, i.valid_until_ns);
        if (latest_holder && i.acquired_ns < latest_end) {
            ++v.overlaps;
            if (v.first_problem.empty())
                v.first_problem = fmt::format("overlap: holder with fence {} ({}) acquired {} ns before the holder with fence {} "
                                              "({}) released",
                                              i.fence, i.who, latest_end - i.acquired_ns, latest_holder->fence, latest_holder->who);
        }
        if (check_fences && i.fence <= highest_fence) {
            ++v.fence_inversions;
            if (v.first_problem.empty())
                v.first_problem = fmt::format("fence inversion: token {} issued after token {}", i.fence, highest_fence);
        }
        highest_fence = std::max(highest_fence, i.fence);
        if (end > latest_end) {
            latest_end = end;
            latest_holder = &i;
        }
    }
    return v;
}

std::string verdict::summary() const {
    return fmt::format("checker: {} critical sections, {} overlaps, {} fencing-token inversions{}", intervals, overlaps,
                       fence_inversions, first_problem.empty() ? "" : "; first: " + first_problem);
}

namespace {

// Walks the intervals' begin and end instants in time order (an end before a begin at the same
// instant) and asks `admit` whether each begin is allowed beside the holders present.
template <typename Admit>
count_verdict sweep(std::vector<interval> intervals, Admit admit) {
    count_verdict v;
    v.intervals = intervals.size();
    struct instant {
        int64_t at;
        bool begins;
        const interval* which;
    };
    std::vector<instant> instants;
    for (const auto& i : intervals) {
        const int64_t end = std::min(i.released_ns, i.valid_until_ns);
        if (end <= i.acquired_ns) continue;  // no time held: nothing to judge
        instants.push_back({i.acquired_ns, true, &i});
        instants.push_back({end, false, &i});
    }
    std::sort(instants.begin(), instants.end(), [](const instant& a, const instant& b) {
        return a.at != b.at ? a.at < b.at : (!a.begins && b.begins);
    });
    size_t exclusive = 0, shared = 0;
    for (const auto& e : instants) {
        const bool is_shared = e.which->kind == 's';
        if (!e.begins) {
            --(is_shared ? shared : exclusive);
            continue;
        }
        if (const std::string problem = admit(*e.which, exclusive, shared); !problem.empty()) {
            ++v.violations;
            if (v.first_problem.empty()) v.first_problem = problem;
        }
        ++(is_shared ? shared : exclusive);
        v.max_holders = std::max(v.max_holders, exclusive + shared);
        v.max_shared = std::max(v.max_shared, shared);
    }
    return v;
}

}  // namespace

count_verdict check_at_most(std::vector<interval> intervals, size_t limit) {
    return sweep(std::move(intervals), [limit](const interval& i, size_t exclusive, size_t shared) {
        const size_t present = exclusive + shared;
        return present < limit ? std::string()
                               : fmt::format("holder with fence {} ({}) began while {} of {} permits were held", i.fence,
                                             i.who, present, limit);
    });
}

count_verdict check_shared_exclusion(std::vector<interval> intervals) {
    return sweep(std::move(intervals), [](const interval& i, size_t exclusive, size_t shared) {
        if (exclusive > 0)
            return fmt::format("{} holder with fence {} ({}) began beside an exclusive holder", i.kind == 's' ? "shared" : "exclusive",
                               i.fence, i.who);
        if (i.kind != 's' && shared > 0)
            return fmt::format("exclusive holder with fence {} ({}) began beside {} shared holder(s)", i.fence, i.who, shared);
        return std::string();
    });
}

std::string count_verdict::summary() const {
    return fmt::format("count checker: {} holds, at most {} at once ({} shared), {} violations{}", intervals, max_holders,
                       max_shared, violations, first_problem.empty() ? "" : "; first: " + first_problem);
}

scratch_dir::scratch_dir(const std::string& prefix) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "-XXXXXX";
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
}

scratch_dir::~scratch_dir() {
    const std::string command = "rm -rf '" + path_ + "'";
    [[maybe_unused]] int rc = std::system(command.c_str());
}

}  // namespace dlock::test

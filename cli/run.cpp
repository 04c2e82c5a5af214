// dlock run NAME -- COMMAND: run a command while holding a lock. The steps, in order: check the
// options (plan), block the signals to forward, take the lease, spawn the command, supervise it
// (forward signals; on a lost lease SIGTERM, then SIGKILL after --kill-after), release, and turn
// what happened into dlock's exit status.
#include "cli.hpp"

#include <dlock/dlock_admin.hpp>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <iostream>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace dlock::cli {

namespace {

// The option values of `dlock run`, parsed. Checked before the backend is touched, so a bad value
// is a usage error that takes no lock.
struct run_plan {
    dlock::acquire_options options;
    std::chrono::milliseconds kill_after{};
};

// Throws std::system_error; dlock_last_error() then names the option and what is wrong with it.
run_plan plan_run(const run_args& args) {
    run_plan plan;
    plan.options.wait = args.wait.empty() ? dlock::forever : dlock::parse_duration(args.wait, true, "--wait");
    if (!args.ttl.empty()) plan.options.ttl = dlock::parse_duration(args.ttl, false, "--ttl");
    plan.kill_after = dlock::parse_duration(args.kill_after, false, "--kill-after");
    plan.options.permits = args.permits;
    plan.options.shared = args.shared;
    return plan;
}

// The signals dlock forwards to the command. They are blocked before the client exists, so the
// client's threads inherit the mask and never take them; dlock reads them from a signalfd.
class forwarded_signals {
public:
    forwarded_signals() {
        sigemptyset(&set_);
        for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&set_, s);
        pthread_sigmask(SIG_BLOCK, &set_, &original_);
    }
    const sigset_t& set() const { return set_; }
    // The mask before, for the command (set between fork and exec).
    const sigset_t& original() const { return original_; }

private:
    sigset_t set_;
    sigset_t original_;
};

// Opens the client and takes the lease; on failure prints why and returns the exit status.
int take_lease(const std::string& config, const run_args& args, const run_plan& plan, dlock::client& client,
               dlock::lease& lease) {
    std::error_code ec;
    client = dlock::client::open(config, ec);
    if (ec) {
        std::cerr << "dlock: " << dlock_last_error() << "\n";
        return exit_code_for(ec);
    }
    lease = client.acquire(args.name, plan.options, ec);
    if (ec) {
        if (ec == dlock::errc::timeout) std::cerr << "dlock: lock `" << args.name << "` not acquired: " << dlock_last_error() << "\n";
        else std::cerr << "dlock: " << dlock_last_error() << "\n";
        return exit_code_for(ec);
    }
    return 0;
}

// An eventfd that becomes readable when the lease is lost (written from dlock's callback thread).
int watch_for_loss(dlock::lease& lease) {
    const int lost_fd = eventfd(0, EFD_CLOEXEC);
    lease.on_lost([lost_fd] {
        const uint64_t one = 1;
        [[maybe_unused]] ssize_t n = write(lost_fd, &one, sizeof one);
    });
    return lost_fd;
}

// Closes watch_for_loss's eventfd once no callback can write to it any more: replacing the callback
// waits for a run of the old one to return, so a late loss never writes to a closed (or reused)
// descriptor.
void stop_watching_for_loss(dlock::lease& lease, int lost_fd) {
    try {
        lease.on_lost([] {});
    } catch (const std::system_error&) {  // not expected: on_lost answers OK for any live handle
    }
    close(lost_fd);
}

// The command's argv and environment (ours plus the lease's identity), built before fork: the
// child may only call async-signal-safe functions.
struct command_image {
    std::vector<std::string> argv_storage, env_storage;
    std::vector<char*> argv, envp;

    command_image(const run_args& args, const dlock::lease& lease) : argv_storage(args.command) {
        for (char** e = environ; *e; ++e) {
            const std::string entry(*e);
            if (entry.rfind("DLOCK_NAME=", 0) == 0 || entry.rfind("DLOCK_FENCING_TOKEN=", 0) == 0 ||
                entry.rfind("DLOCK_OWNER=", 0) == 0)
                continue;
            env_storage.push_back(entry);
        }
        env_storage.push_back("DLOCK_NAME=" + std::string(lease.name()));
        env_storage.push_back("DLOCK_FENCING_TOKEN=" + std::to_string(lease.fencing_token()));
        env_storage.push_back("DLOCK_OWNER=" + std::string(lease.owner()));
        for (auto& e : env_storage) envp.push_back(e.data());
        envp.push_back(nullptr);
        for (auto& a : argv_storage) argv.push_back(a.data());
        argv.push_back(nullptr);
    }
};

int wait_child(pid_t pid) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return exit_dlock_error;
}

// What spawn did: the child's pid, or the exit status to end with (the command never ran).
struct spawned {
    pid_t child = -1;
    int exit_status = 0;
};

// vfork + exec rather than posix_spawn: the child asks for SIGTERM when dlock dies, so a command
// never outlives the process whose death released its lock. vfork rather than fork: copying the
// address space of a process with a gRPC client (its threads, their arenas, ~60 libraries) and the
// copy-on-write faults that follow cost about 2 ms per `dlock run` on etcd. The child borrows this
// thread's memory and stack until it execs or exits (this thread waits meanwhile; dlock's other
// threads run on but never touch what the child uses), so between vfork and exec it only makes
// system calls through their libc wrappers (prctl, getppid, sigaction, sigprocmask, exec, write,
// _exit) and writes nothing but errno; an exec failure travels back through a pipe.
spawned spawn(const command_image& image, const forwarded_signals& signals, const std::string& command) {
    int exec_error_pipe[2];
    if (pipe2(exec_error_pipe, O_CLOEXEC) != 0) {
        std::cerr << "dlock: pipe failed: " << std::strerror(errno) << "\n";
        return {-1, exit_dlock_error};
    }
    const pid_t parent = getpid();
    // Every signal blocked across vfork, as posix_spawn does: no handler of dlock's may run in the
    // child on the memory it borrows; the child unblocks only after resetting the handlers.
    sigset_t all_signals, mask_before;
    sigfillset(&all_signals);
    pthread_sigmask(SIG_SETMASK, &all_signals, &mask_before);
    const pid_t child = vfork();
    if (child != 0) pthread_sigmask(SIG_SETMASK, &mask_before, nullptr);
    if (child < 0) {
        std::cerr << "dlock: vfork failed: " << std::strerror(errno) << "\n";
        close(exec_error_pipe[0]);
        close(exec_error_pipe[1]);
        return {-1, exit_dlock_error};
    }
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(exit_lost);  // dlock died before the request took effect
        for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) signal(s, SIG_DFL);
        pthread_sigmask(SIG_SETMASK, &signals.original(), nullptr);
        execvpe(image.argv[0], image.argv.data(), image.envp.data());
        const int e = errno;
        [[maybe_unused]] ssize_t n = write(exec_error_pipe[1], &e, sizeof e);
        _exit(127);
    }
    close(exec_error_pipe[1]);
    int exec_errno = 0;
    const bool exec_failed = read(exec_error_pipe[0], &exec_errno, sizeof exec_errno) == ssize_t(sizeof exec_errno);
    close(exec_error_pipe[0]);
    if (exec_failed) {
        wait_child(child);
        std::cerr << "dlock: cannot run `" << command << "`: " << std::strerror(exec_errno) << "\n";
        return {-1, exec_errno == ENOENT ? 127 : 126};
    }
    return {child, 0};
}

struct supervised {
    int exit_status = -1;  // the command's, 128+N for signal N
    bool lost = false;     // the lease was lost while it ran (it was sent SIGTERM)
};

// Waits for the command to end. Forwards the blocked signals to it; when the lease is lost, sends
// it SIGTERM, and SIGKILL if it is still running `kill_after` later.
supervised supervise(pid_t child, int lost_fd, const forwarded_signals& signals, const run_args& args,
                     std::chrono::milliseconds kill_after) {
    const int pid_fd = int(syscall(SYS_pidfd_open, child, 0));
    const int signal_fd = signalfd(-1, &signals.set(), SFD_CLOEXEC);
    supervised out;
    while (out.exit_status < 0) {
        pollfd fds[3] = {{pid_fd, POLLIN, 0}, {lost_fd, POLLIN, 0}, {signal_fd, POLLIN, 0}};
        const int timeout_ms = out.lost ? int(std::min<int64_t>(kill_after.count(), INT32_MAX)) : -1;
        const int ready = poll(fds, 3, timeout_ms);
        if (ready < 0 && errno == EINTR) continue;
        if (ready == 0 && out.lost) {  // the command ignored SIGTERM for --kill-after
            kill(child, SIGKILL);
            continue;
        }
        if (fds[0].revents) out.exit_status = wait_child(child);
        if (fds[1].revents && !out.lost) {
            out.lost = true;
            std::cerr << "dlock: the lease on `" << args.name << "` was lost; sending SIGTERM to the command\n";
            kill(child, SIGTERM);
        }
        if (fds[2].revents) {
            signalfd_siginfo info{};
            if (read(signal_fd, &info, sizeof info) == ssize_t(sizeof info)) kill(child, int(info.ssi_signo));
        }
    }
    close(pid_fd);
    close(signal_fd);
    return out;
}

// Releases the lease and gives dlock's exit status: the command's, unless the lease was lost.
int release_and_exit_status(dlock::lease& lease, const supervised& run, const run_args& args) {
    std::error_code ec;
    const dlock::release_outcome outcome = lease.release(ec);
    if (run.lost) return exit_lost;
    if (outcome == dlock::release_outcome::already_lost) {
        std::cerr << "dlock: the lease on `" << args.name << "` was lost before the command finished\n";
        return exit_lost;
    }
    if (outcome == dlock::release_outcome::unknown)
        std::cerr << "dlock: warning: release of `" << args.name << "` not confirmed: " << dlock_last_error() << "\n";
    return run.exit_status;
}

}  // namespace

int run(const std::string& config, const run_args& args) {
    run_plan plan;
    try {
        plan = plan_run(args);
    } catch (const std::system_error&) {
        std::cerr << "dlock run: " << dlock_last_error() << "; see `dlock run --help`\n";
        return exit_usage;
    }
    const forwarded_signals signals;
    dlock::client client;
    dlock::lease lease;
    if (const int status = take_lease(config, args, plan, client, lease)) return status;
    const int lost_fd = watch_for_loss(lease);
    const command_image image(args, lease);
    const spawned started = spawn(image, signals, args.command[0]);
    if (started.child < 0) {
        std::error_code ec;
        lease.release(ec);
        stop_watching_for_loss(lease, lost_fd);
        return started.exit_status;
    }
    const supervised ran = supervise(started.child, lost_fd, signals, args, plan.kill_after);
    const int status = release_and_exit_status(lease, ran, args);
    stop_watching_for_loss(lease, lost_fd);
    return status;
}

}  // namespace dlock::cli

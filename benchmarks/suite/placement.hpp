// placement.hpp — where the comparison suite's client and a target's servers run while S1, its
// floor and the peers are measured. On loopback a round trip costs very different amounts when the
// client thread and the server's serving thread run on one CPU or wake each other across two, and
// the scheduler's choice sticks to a connection; fixing the CPUs (sched_setaffinity) makes S1, the
// floor and a peer, each on its own connection, measure the same way every run.
#pragma once

#include "dlock/lab/lab.hpp"

#include <sched.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dlock::bench {

enum class placement_mode {
    unpinned,     // the scheduler decides, as for S2–S6
    same_cpu,     // client and servers on one CPU: a round trip is two context switches
    across_cpus,  // client on one CPU, servers on another: each round trip wakes the other CPU
};
// "none", "same", "across" (the command-line spelling) and back; nullopt for anything else.
std::optional<placement_mode> parse_placement(const std::string& text);
const char* placement_name(placement_mode mode);

// The CPUs of a fixed placement.
struct cpu_plan {
    int client_cpu = -1;
    int server_cpu = -1;
};
// Chosen among `allowed` (the CPUs this process may run on): same_cpu puts both on the highest
// (CPU 0 usually takes more of the machine's interrupts); across_cpus puts the client on the
// highest and the servers on the lowest. nullopt for unpinned, for an empty set, and for
// across_cpus with fewer than two CPUs.
std::optional<cpu_plan> plan_for(placement_mode mode, const cpu_set_t& allowed);

// For its lifetime, every thread of this process (so the measuring thread, the client library's
// threads, and the processes this process starts meanwhile, which inherit their forking thread's
// mask) runs on plan.client_cpu, and every thread of each process in `server_roots` and of their
// descendants (PostgreSQL's backends, forked by the postmaster, inherit its mask) on
// plan.server_cpu. The destructor gives every one of those threads still alive the mask it had
// (a thread that appeared meanwhile gets its process's first recorded mask). A thread that could
// not be pinned is recorded in problems(), never thrown: the report says so, the run goes on.
class placement_guard {
public:
    placement_guard(cpu_plan plan, std::vector<pid_t> server_roots);
    ~placement_guard();
    placement_guard(const placement_guard&) = delete;
    placement_guard& operator=(const placement_guard&) = delete;

    // Pins threads and processes that appeared since construction (or the last call).
    void reapply();
    // Gives the threads their masks back (what the destructor does); idempotent.
    void restore();
    // Threads that could not be pinned or restored, with the reason; empty when all were.
    const std::vector<std::string>& problems() const { return problems_; }
    const cpu_plan& plan() const { return plan_; }

private:
    struct saved_thread {
        pid_t process;
        pid_t thread;
        cpu_set_t mask;
    };
    // The live processes of the servers: each with the root it descends from.
    std::vector<std::pair<pid_t, pid_t>> server_processes() const;
    void pin_process(pid_t process, int cpu);
    void restore_process(pid_t process, pid_t root);
    const cpu_set_t* saved_mask(pid_t process, pid_t thread) const;
    void problem(pid_t process, pid_t thread, const char* call, int error);

    cpu_plan plan_;
    std::vector<pid_t> server_roots_;
    std::vector<saved_thread> saved_;
    std::vector<std::string> problems_;
    bool restored_ = false;
};

// The threads of a process (/proc/<pid>/task); empty when it is gone.
std::vector<pid_t> threads_of(pid_t process);

// The server processes placed for `target` (a dlock-compare target name); empty for those left to
// the scheduler (see placement.cpp for which and why).
std::vector<pid_t> placed_servers(const std::string& target, dlock::lab::lab& lab);

}  // namespace dlock::bench

// placement.cpp — CPU placement of the suite's client and a target's servers (placement.hpp).
#include "placement.hpp"

#include "dlock/lab/mariadb_server.hpp"
#include "dlock/lab/postgres_server.hpp"
#include "dlock/lab/process.hpp"
#include "dlock/lab/redis_server.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace dlock::bench {

std::optional<placement_mode> parse_placement(const std::string& text) {
    if (text == "none") return placement_mode::unpinned;
    if (text == "same") return placement_mode::same_cpu;
    if (text == "across") return placement_mode::across_cpus;
    return std::nullopt;
}

const char* placement_name(placement_mode mode) {
    switch (mode) {
        case placement_mode::unpinned: return "none";
        case placement_mode::same_cpu: return "same";
        case placement_mode::across_cpus: return "across";
    }
    return "none";
}

std::optional<cpu_plan> plan_for(placement_mode mode, const cpu_set_t& allowed) {
    if (mode == placement_mode::unpinned) return std::nullopt;
    int lowest = -1, highest = -1;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
        if (CPU_ISSET(cpu, &allowed)) {
            if (lowest < 0) lowest = cpu;
            highest = cpu;
        }
    if (highest < 0) return std::nullopt;
    if (mode == placement_mode::same_cpu) return cpu_plan{highest, highest};
    if (lowest == highest) return std::nullopt;
    return cpu_plan{highest, lowest};
}

std::vector<pid_t> threads_of(pid_t process) {
    std::vector<pid_t> out;
    std::error_code ec;
    for (std::filesystem::directory_iterator it("/proc/" + std::to_string(process) + "/task", ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (!name.empty() && std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }))
            out.push_back(static_cast<pid_t>(std::stol(name)));
    }
    return out;
}

placement_guard::placement_guard(cpu_plan plan, std::vector<pid_t> server_roots) : plan_(plan), server_roots_(std::move(server_roots)) {
    server_roots_.erase(std::remove_if(server_roots_.begin(), server_roots_.end(), [](pid_t p) { return p <= 0; }), server_roots_.end());
    // Every mask as it was, before any is changed: a thread seen only later was made while pinned.
    std::vector<pid_t> processes{::getpid()};
    for (const auto& [process, root] : server_processes()) processes.push_back(process);
    for (pid_t process : processes)
        for (pid_t thread : threads_of(process)) {
            saved_thread s{process, thread, {}};
            if (::sched_getaffinity(thread, sizeof s.mask, &s.mask) == 0) saved_.push_back(s);
        }
    reapply();
}

placement_guard::~placement_guard() { restore(); }

void placement_guard::restore() {
    if (restored_) return;
    restored_ = true;
    restore_process(::getpid(), ::getpid());
    for (const auto& [process, root] : server_processes()) restore_process(process, root);
}

void placement_guard::reapply() {
    if (restored_) return;
    pin_process(::getpid(), plan_.client_cpu);
    for (const auto& [process, root] : server_processes()) pin_process(process, plan_.server_cpu);
}

std::vector<std::pair<pid_t, pid_t>> placement_guard::server_processes() const {
    std::vector<std::pair<pid_t, pid_t>> out;
    for (pid_t root : server_roots_) {
        if (!dlock::lab::process_alive(root)) continue;
        out.emplace_back(root, root);
        for (const auto& d : dlock::lab::live_descendants(root)) out.emplace_back(d.pid, root);
    }
    return out;
}

void placement_guard::problem(pid_t process, pid_t thread, const char* call, int error) {
    // A thread that exited between the listing and the call is not a problem.
    if (error == ESRCH) return;
    problems_.push_back(fmt::format("process {} thread {}: {}: {}", process, thread, call, std::strerror(error)));
}

void placement_guard::pin_process(pid_t process, int cpu) {
    cpu_set_t mask;
    CPU_ZERO(&mask);
    CPU_SET(cpu, &mask);
    for (pid_t thread : threads_of(process))
        if (::sched_setaffinity(thread, sizeof mask, &mask) != 0) problem(process, thread, "sched_setaffinity", errno);
}

const cpu_set_t* placement_guard::saved_mask(pid_t process, pid_t thread) const {
    for (const auto& s : saved_)
        if (s.process == process && s.thread == thread) return &s.mask;
    return nullptr;
}

void placement_guard::restore_process(pid_t process, pid_t root) {
    // A thread or process made while pinned gets its process's mask as it was, else its root's.
    const cpu_set_t* fallback = saved_mask(process, process);
    if (!fallback) fallback = saved_mask(root, root);
    for (pid_t thread : threads_of(process)) {
        const cpu_set_t* mask = saved_mask(process, thread);
        if (!mask) mask = fallback;
        if (!mask) continue;
        if (::sched_setaffinity(thread, sizeof *mask, mask) != 0) problem(process, thread, "sched_setaffinity (restore)", errno);
    }
}

std::vector<pid_t> placed_servers(const std::string& target, dlock::lab::lab& lab) {
    // Redis, Redlock's nodes, PostgreSQL (postmaster and its backends) and MariaDB (every mysqld
    // thread) serve a request on one thread of their own per connection (or one event loop):
    // placed. ZooKeeper and etcd are left to the scheduler: multi-threaded servers (JVM, Go) whose
    // commits wait on their own fsync and replication threads, which pinning to one CPU would
    // serialise behind the request path; file has no server.
    if (target == "redis") return {lab.redis().pid()};
    if (target == "redlock") {
        std::vector<pid_t> nodes;
        for (std::size_t i = 0; i < lab.redlock().size(); ++i) nodes.push_back(lab.redlock().node(i).pid());
        return nodes;
    }
    if (target == "sql_lease" || target == "sql_advisory") return {lab.sql().pid()};
    if (target == "mysql_lease" || target == "mysql_named") return {lab.mariadb().pid()};
    return {};
}

}  // namespace dlock::bench

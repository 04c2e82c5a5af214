// probes.hpp — what the comparison suite needs to know about each backend that the C++ API cannot
// tell it: the floor (the backend's own server driven through the same client library with the
// minimum round trips of docs/design/benchmarks.md), the server's own count of commands per cycle, Redlock's
// S7, and the peers (S8) on the same servers. One implementation file per backend family
// (probes_file.cpp, probes_redis.cpp, probes_zookeeper.cpp, probes_etcd.cpp, probes_sql.cpp);
// the driver (main.cpp) calls only what is declared here.
#pragma once

#include "stats.hpp"

#include "dlock/lab/lab.hpp"

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dlock::bench {

// How much to measure. quick: the README's main job (a few minutes for every backend together);
// full: docs/design/benchmarks.md's sizes (>= 10 000 S1 cycles per backend, every client count).
enum class run_size { quick, full };

// One backend configuration under test. name is one of: file, redis, redlock, zookeeper, etcd,
// sql_lease, sql_advisory. config is a YAML file dlock::client opens; the lab's servers behind it
// are reached through `lab` (file has none).
struct target {
    std::string name;
    std::filesystem::path config;
    std::filesystem::path scratch;  // a directory this target may write into (file locks, peers' files)
};

// The floor of one backend in this run.
struct calibration {
    // Each calibrated server operation through the same client library the plugin uses, e.g.
    // {"PING", ...}, {"EVALSHA acquire", ...}, {"prepared SELECT 1", ...}, {"fcntl F_OFD_SETLK", ...}.
    std::vector<std::pair<std::string, distribution>> operations;
    // The cost of one fsync where the server's durability needs one per write (etcd, ZooKeeper,
    // PostgreSQL commit), measured on the lab's data directory; NaN where none is involved.
    double fsync_us = NAN;
    int min_round_trips = 0;  // docs/design/benchmarks.md: redis 2, redlock 2, zookeeper 3, etcd 2, sql 2, file 2 syscalls
    // One cycle of exactly those operations (acquire+release done by hand), measured like S1.
    distribution floor;
    std::string method;  // one sentence: what a floor cycle sends
};
// How the driver measures the floor cycle: runs `floor_cycle` (one acquire+release made of the
// floor's operations) in blocks interleaved with blocks of S1, so that load from elsewhere on a
// shared machine falls on both alike, and returns the floor's samples of every block merged. An
// empty interleaver measures the floor on its own, in one block.
using floor_interleaver = std::function<distribution(const std::function<void()>& floor_cycle)>;
calibration calibrate(const target& t, dlock::lab::lab& lab, run_size size, const floor_interleaver& interleave = {});

// The server's own count of the commands (requests, statements, RPCs) one acquire+release sends:
// reads the server's counters, calls run_cycles(cycles) (the driver runs that many uncontended
// acquire+release cycles through dlock), reads them again. `minimum` is docs/design/benchmarks.md's.
struct command_count {
    double per_cycle = NAN;
    int minimum = 0;
    std::string source;  // "INFO commandstats", "mntr packets_received", "etcd metrics", "pg_stat_statements", ...
};
command_count count_server_commands(const target& t, dlock::lab::lab& lab,
                                    const std::function<void(int cycles)>& run_cycles);

// The algorithm's minimum of server operations (as count_server_commands counts them) per
// contended cycle of `t`: what one handoff needs when only the next waiter is woken; 0 for file
// (no server). `counted` is count_server_commands' answer for the same run (its uncontended
// minimum gives Redlock's node count). S3's herd detector compares its count with this.
int contended_minimum(const target& t, const command_count& counted);

// S3 seats many waiters as threads sharing their process's client (scenarios.hpp, s3_layout). On
// the SQL targets each waiting thread keeps a server connection of the client's pool (a turnstile
// session, an advisory or GET_LOCK wait, a polling statement), and a thread that finds the pool
// busy waits for a connection (until its deadline: the plugin's documented pool_size behaviour)
// instead of for the lock. s3_config gives S3's worker processes t.config with `pool_size` raised
// to the thread count (the plugin's default 32 at least), written into t.scratch; other targets'
// configs are returned as they are.
std::filesystem::path s3_config(const target& t, int threads);
// The most server connections one S3 worker process of target `name` opens with s3_config's pool
// for `threads` threads: sql_lease 2 pools (sessions, queue sessions) and its LISTEN connection;
// sql_advisory, mysql_lease and mysql_named one pool. 0 for the targets without a SQL server.
int s3_server_connections_per_process(const std::string& name, int threads);

// S7: redlock with N = 3 and N = 5 nodes, healthy and with one node paused (SIGSTOP), against single
// redis, all uncontended acquire+release through the C++ API.
struct redlock_row {
    int nodes = 0;
    bool one_paused = false;
    distribution s1;
    bool ok = true;
    std::string error;
};
std::vector<redlock_row> run_redlock_s7(dlock::lab::lab& lab, run_size size, const std::filesystem::path& scratch);

// S8: one peer library on the same server in the same run. Each peer runs with its default settings
// and with tuned ones (the shortest sleep/retry it allows). A peer that fails is returned with
// ok = false and its error, never dropped.
struct peer_result {
    std::string backend;   // the target name it is compared with
    std::string peer;      // "redis-py Lock", "tooz redis", "kazoo Lock", "Curator InterProcessMutex", "etcdctl lock", ...
    std::string settings;  // "default" or "tuned: <what was changed>"
    std::string version;   // the peer's package version
    bool ok = false;
    std::string error;
    distribution s1;                      // uncontended acquire+release
    std::optional<distribution> handoff;  // S4 ping-pong handoff, where the peer was measured on it
    // dlock's S1 on the same target measured right around this peer (so load from elsewhere falls
    // on both); the report's ratio is peer.s1.p50 / dlock_around.p50.
    distribution dlock_around;
    // For a Python peer (a Debian python3-* package): dlock's own Python package's S1 on the same
    // target, run right before and right after the peer (benchmarks/peers/dlock_python.py), so
    // the binding is compared with the peer in the same window; empty when not measured.
    distribution dlock_python_around;
    std::string dlock_python_error;
};
std::vector<peer_result> run_peers(const target& t, dlock::lab::lab& lab, run_size size);

// The name of the S8 row of dlock's own Python package (python/): not a peer to beat but the
// binding measured beside the Python peers; the report compares it with each of them.
inline constexpr const char* dlock_python_peer = "dlock (Python)";

}  // namespace dlock::bench

// probes_support.hpp — private to the probes: each backend family's probe functions (defined in
// probes_<family>.cpp, dispatched on the target's name by probes_common.cpp) and the helpers every
// family shares (defined in probes_common.cpp).
#pragma once

#include "probes.hpp"

#include <dlock/dlock.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace dlock::bench::family {
calibration calibrate_file(const target& t, run_size size, const floor_interleaver& interleave);
calibration calibrate_redis(const target& t, dlock::lab::lab& lab, run_size size, const floor_interleaver& interleave);
calibration calibrate_zookeeper(const target& t, dlock::lab::lab& lab, run_size size, const floor_interleaver& interleave);
calibration calibrate_etcd(const target& t, dlock::lab::lab& lab, run_size size, const floor_interleaver& interleave);
calibration calibrate_sql(const target& t, dlock::lab::lab& lab, run_size size, const floor_interleaver& interleave);
calibration calibrate_mysql(const target& t, dlock::lab::lab& lab, run_size size, const floor_interleaver& interleave);

command_count count_file(const std::function<void(int)>& run_cycles);
command_count count_redis(const target& t, dlock::lab::lab& lab, const std::function<void(int)>& run_cycles);
command_count count_zookeeper(const target& t, dlock::lab::lab& lab, const std::function<void(int)>& run_cycles);
command_count count_etcd(const target& t, dlock::lab::lab& lab, const std::function<void(int)>& run_cycles);
command_count count_sql(const target& t, dlock::lab::lab& lab, const std::function<void(int)>& run_cycles);
command_count count_mysql(const target& t, dlock::lab::lab& lab, const std::function<void(int)>& run_cycles);

std::vector<peer_result> peers_file(const target& t, run_size size);
std::vector<peer_result> peers_redis(const target& t, dlock::lab::lab& lab, run_size size);
std::vector<peer_result> peers_zookeeper(const target& t, dlock::lab::lab& lab, run_size size);
std::vector<peer_result> peers_etcd(const target& t, dlock::lab::lab& lab, run_size size);
std::vector<peer_result> peers_sql(const target& t, dlock::lab::lab& lab, run_size size);
std::vector<peer_result> peers_mysql(const target& t, dlock::lab::lab& lab, run_size size);
// dlock's own Python package on any target (probes_python.cpp); named dlock_python_peer in reports.
std::vector<peer_result> peers_dlock_python(const target& t, run_size size);
}  // namespace dlock::bench::family

namespace dlock::bench::support {
using clock_type = std::chrono::steady_clock;
double us_since(clock_type::time_point start);
distribution time_cycles(int cycles, int warmup, const std::function<void()>& cycle);
// The floor cycle's samples: through `interleave` when the driver gave one, else `cycles` timed
// cycles after `warmup` untimed ones.
distribution floor_samples(const floor_interleaver& interleave, int cycles, int warmup, const std::function<void()>& cycle);
int calibration_cycles(run_size size);
distribution dlock_s1(dlock::client& client, const std::string& name, int cycles, int warmup);
distribution merged(const std::vector<distribution>& parts);
double fsync_us(const std::filesystem::path& dir, int count);
std::string package_version(const std::string& package);
std::string tail_of(const std::string& text, std::size_t lines);
nlohmann::json run_peer_process(const std::vector<std::string>& argv, const std::filesystem::path& log, std::chrono::seconds timeout);
void read_peer_json(const nlohmann::json& j, peer_result& r);
peer_result peer_with_dlock_around(peer_result r, const std::filesystem::path& config, int cycles,
                                   const std::function<nlohmann::json()>& peer);
std::string peers_dir();
// dlock's Python package's S1 (`cycles` try-once acquire+release cycles) on `config`, in a fresh
// /usr/bin/python3 process (probes_python.cpp); throws with the driver's error.
distribution dlock_python_s1(const std::filesystem::path& config, int cycles, const std::filesystem::path& log);
const char* debian_python();
int peer_cycles(run_size size);
int peer_handoffs(run_size size);
}  // namespace dlock::bench::support

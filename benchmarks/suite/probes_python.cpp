// probes_python.cpp — "dlock (Python)", the package in python/ (ctypes over libdlock's C ABI), as
// one more row of S8 on every target, measured like the Python peers (benchmarks/peers/
// dlock_python.py, Debian's /usr/bin/python3, dlock's C++ S1 right around it), so the report shows
// the binding's cost next to redis-py, kazoo, python-etcd3 and tooz in the same run; and the same
// driver's S1 alone, which peer_with_dlock_around runs before and after each Python peer.
#include "probes_support.hpp"

#include <chrono>
#include <stdexcept>

namespace dlock::bench::support {

distribution dlock_python_s1(const std::filesystem::path& config, int cycles, const std::filesystem::path& log) {
    const nlohmann::json j = run_peer_process({debian_python(), peers_dir() + "/dlock_python.py", DLOCK_BENCH_LIBDLOCK,
                                               config.string(), std::to_string(cycles), "0"},
                                              log, std::chrono::seconds(300));
    peer_result r;
    read_peer_json(j, r);
    if (!r.ok) throw std::runtime_error("dlock (Python): " + r.error);
    return r.s1;
}

}  // namespace dlock::bench::support

namespace dlock::bench::family {

std::vector<peer_result> peers_dlock_python(const target& t, run_size size) {
    peer_result r;
    r.backend = t.name;
    r.peer = dlock_python_peer;
    r.settings = "default (ctypes over libdlock)";
    r.version = "dlock (python/) on libdlock " + std::string(dlock_version());
    const int cycles = support::peer_cycles(size), handoffs = support::peer_handoffs(size);
    const auto log = t.scratch / "peer-dlock-python.log";
    return {support::peer_with_dlock_around(r, t.config, cycles, [&] {
        return support::run_peer_process({support::debian_python(), support::peers_dir() + "/dlock_python.py",
                                          DLOCK_BENCH_LIBDLOCK, t.config.string(), std::to_string(cycles),
                                          std::to_string(handoffs)},
                                         log, std::chrono::seconds(300));
    })};
}

}  // namespace dlock::bench::family

// probes_file.cpp — the file backend's probes: the floor (an OFD fcntl lock and unlock on an open
// descriptor, the two syscalls of a cycle), no server to count commands on, and tooz's file driver
// as its peer.
#include "probes_support.hpp"

#include <dlock/dlock.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <stdexcept>

#include <fcntl.h>
#include <unistd.h>

namespace dlock::bench::family {
namespace {

// F_OFD_SETLK of the whole file (`type` F_WRLCK or F_UNLCK); throws when the kernel refuses.
void ofd_setlk(int fd, short type) {
    struct flock request {};
    request.l_type = type;
    request.l_whence = SEEK_SET;
    if (::fcntl(fd, F_OFD_SETLK, &request) != 0) throw std::runtime_error("fcntl F_OFD_SETLK failed");
}

}  // namespace

calibration calibrate_file(const target& t, run_size size) {
    calibration c;
    c.min_round_trips = 2;
    const int cycles = support::calibration_cycles(size), warmup = std::min(cycles, 1000);
    const std::filesystem::path path = t.scratch / "floor.lock";
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) throw std::runtime_error("calibrate file: cannot open " + path.string());
    std::vector<double> lock_us, unlock_us;
    support::time_cycles(0, warmup, [&] {
        ofd_setlk(fd, F_WRLCK);
        ofd_setlk(fd, F_UNLCK);
    });
    for (int i = 0; i < cycles; ++i) {
        auto start = support::clock_type::now();
        ofd_setlk(fd, F_WRLCK);
        lock_us.push_back(support::us_since(start));
        start = support::clock_type::now();
        ofd_setlk(fd, F_UNLCK);
        unlock_us.push_back(support::us_since(start));
    }
    c.operations.emplace_back("fcntl F_OFD_SETLK F_WRLCK", summarize(lock_us));
    c.operations.emplace_back("fcntl F_OFD_SETLK F_UNLCK", summarize(unlock_us));
    c.floor = support::time_cycles(cycles, warmup, [&] {
        ofd_setlk(fd, F_WRLCK);
        ofd_setlk(fd, F_UNLCK);
    });
    ::close(fd);
    c.method = "fcntl F_OFD_SETLK write lock + unlock on an already open descriptor (2 syscalls)";
    return c;
}

command_count count_file(const std::function<void(int)>&) {
    command_count r;
    r.minimum = 2;
    r.source = "n/a";  // no server: the floor is 2 syscalls, nothing counts them server-side
    return r;
}

std::vector<peer_result> peers_file(const target& t, run_size size) {
    const int cycles = support::peer_cycles(size);
    const std::filesystem::path dir = t.scratch / "tooz-file";
    std::filesystem::create_directories(dir);
    peer_result r;
    r.backend = t.name;
    r.peer = "tooz file";
    r.settings = "default (fasteners' polling delay is not exposed by tooz)";
    r.version = support::package_version("python3-tooz");
    return {support::peer_with_dlock_around(r, t.config, cycles, [&] {
        return support::run_peer_process({support::debian_python(), support::peers_dir() + "/file_tooz.py", dir.string(),
                                          std::to_string(cycles)},
                                         t.scratch / "peer-file.log", std::chrono::seconds(300));
    })};
}

}  // namespace dlock::bench::family

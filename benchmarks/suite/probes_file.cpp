// probes_file.cpp — the file backend's probes: the floor (the system calls of a safe cycle on an
// open descriptor: lock, check that the path still names the locked file, read and write the
// fencing counter kept in the file, unlock), no server to count commands on, and tooz's file driver
// as its peer.
#include "probes_support.hpp"

#include <dlock/dlock.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <stdexcept>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dlock::bench::family {
namespace {

// F_OFD_SETLK of the lock file's first byte (`type` F_WRLCK or F_UNLCK), as the plugin locks it;
// throws when the kernel refuses.
void ofd_setlk(int fd, short type) {
    struct flock request {};
    request.l_type = type;
    request.l_whence = SEEK_SET;
    request.l_len = 1;
    if (::fcntl(fd, F_OFD_SETLK, &request) != 0) throw std::runtime_error("fcntl F_OFD_SETLK failed");
}

// The minimum a file lock with a fencing counter that survives a deleted or replaced lock file
// needs per cycle (plugins/file/file_plugin.cpp does these and nothing else on a reused
// descriptor): 5 system calls.
struct floor_cycle {
    int directory_fd = -1;
    int fd = -1;
    const char* file_name = "floor.lock";
    struct stat opened {};
    uint64_t fence = 0;

    explicit floor_cycle(const std::filesystem::path& directory) {
        directory_fd = ::open(directory.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (directory_fd < 0) throw std::runtime_error("calibrate file: cannot open " + directory.string());
        fd = ::openat(directory_fd, file_name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0 || ::fstat(fd, &opened) != 0) throw std::runtime_error("calibrate file: cannot open " + (directory / file_name).string());
        const char header[128] = {};
        if (::pwrite(fd, header, sizeof header, 0) != ssize_t(sizeof header)) throw std::runtime_error("calibrate file: cannot write");
    }
    ~floor_cycle() {
        if (fd >= 0) ::close(fd);
        if (directory_fd >= 0) ::close(directory_fd);
    }
    floor_cycle(const floor_cycle&) = delete;
    floor_cycle& operator=(const floor_cycle&) = delete;

    void lock() { ofd_setlk(fd, F_WRLCK); }
    void check_path() {
        struct stat at_path {};
        if (::fstatat(directory_fd, file_name, &at_path, AT_SYMLINK_NOFOLLOW) != 0 || at_path.st_ino != opened.st_ino)
            throw std::runtime_error("calibrate file: the floor's lock file was replaced");
    }
    void read_fence() {
        struct {
            char magic[8];
            uint64_t fence;
        } start{};
        if (::pread(fd, &start, sizeof start, 0) != ssize_t(sizeof start)) throw std::runtime_error("calibrate file: pread failed");
        fence = start.fence;
    }
    void write_fence() {
        struct {
            uint64_t fence;
            char holder[40];
            int64_t holder_pid;
        } fields{};
        fields.fence = fence + 1;
        if (::pwrite(fd, &fields, sizeof fields, 8) != ssize_t(sizeof fields)) throw std::runtime_error("calibrate file: pwrite failed");
    }
    void unlock() { ofd_setlk(fd, F_UNLCK); }
    void cycle() {
        lock();
        check_path();
        read_fence();
        write_fence();
        unlock();
    }
};

}  // namespace

calibration calibrate_file(const target& t, run_size size, const floor_interleaver& interleave) {
    calibration c;
    c.min_round_trips = 5;
    const int cycles = support::calibration_cycles(size), warmup = std::min(cycles, 1000);
    floor_cycle f(t.scratch);
    support::time_cycles(0, warmup, [&] { f.cycle(); });
    std::vector<double> samples[5];
    for (int i = 0; i < cycles; ++i) {
        auto start = support::clock_type::now();
        const auto lap = [&](std::vector<double>& into) {
            into.push_back(support::us_since(start));
            start = support::clock_type::now();
        };
        f.lock();
        lap(samples[0]);
        f.check_path();
        lap(samples[1]);
        f.read_fence();
        lap(samples[2]);
        f.write_fence();
        lap(samples[3]);
        f.unlock();
        lap(samples[4]);
    }
    const char* names[5] = {"fcntl F_OFD_SETLK F_WRLCK", "fstatat (the path still names the locked file)", "pread fencing counter",
                            "pwrite fencing counter + holder", "fcntl F_OFD_SETLK F_UNLCK"};
    for (int i = 0; i < 5; ++i) c.operations.emplace_back(names[i], summarize(samples[i]));
    c.floor = support::floor_samples(interleave, cycles, warmup, [&] { f.cycle(); });
    c.method = "on an already open descriptor: OFD write lock, fstatat of the path (not deleted or replaced), pread + pwrite "
               "of the fencing counter, unlock (5 system calls)";
    return c;
}

command_count count_file(const std::function<void(int)>&) {
    command_count r;
    r.minimum = 5;
    r.source = "n/a";  // no server: the floor is 5 system calls, nothing counts them server-side
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

// file backend vs its floor, measured in one run: an uncontended acquire+release through the C++
// API (ABI, core, plugin, fencing counter) against the system calls a safe cycle needs on an open
// descriptor (OFD lock, fstatat of the path — the file was not deleted or replaced —, pread and
// pwrite of the fencing counter kept in the file, unlock), and against the bare OFD lock+unlock.
// Prints the ratios at the end (target <= 1.10 against the safe cycle: the layers above the system
// calls cost a small fraction of them).
#include <dlock/dlock.hpp>

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <fcntl.h>
#include <map>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace {

std::string scratch() {
    static const std::string dir = [] {
        char pattern[] = "/tmp/dlock-bench-XXXXXX";
        return std::string(mkdtemp(pattern));
    }();
    return dir;
}

void raw_ofd_fcntl(benchmark::State& state) {
    const std::string path = scratch() + "/raw.lock";
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    struct flock lock {};
    lock.l_whence = SEEK_SET;
    lock.l_len = 1;
    for (auto _ : state) {
        lock.l_type = F_WRLCK;
        if (fcntl(fd, F_OFD_SETLK, &lock) != 0) state.SkipWithError("lock failed");
        lock.l_type = F_UNLCK;
        fcntl(fd, F_OFD_SETLK, &lock);
    }
    close(fd);
}

void raw_safe_file_cycle(benchmark::State& state) {
    const std::string dir = scratch() + "/raw-safe";
    mkdir(dir.c_str(), 0700);
    const int dir_fd = open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    const int fd = openat(dir_fd, "raw.lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    const char header[128] = {};
    if (pwrite(fd, header, sizeof header, 0) != ssize_t(sizeof header)) state.SkipWithError("write failed");
    struct flock lock {};
    lock.l_whence = SEEK_SET;
    lock.l_len = 1;
    struct {
        uint64_t fence;
        char holder[40];
        int64_t pid;
    } fields{};
    for (auto _ : state) {
        lock.l_type = F_WRLCK;
        if (fcntl(fd, F_OFD_SETLK, &lock) != 0) state.SkipWithError("lock failed");
        struct stat at_path {};
        fstatat(dir_fd, "raw.lock", &at_path, AT_SYMLINK_NOFOLLOW);
        uint64_t start[2];
        if (pread(fd, start, sizeof start, 0) != ssize_t(sizeof start)) state.SkipWithError("pread failed");
        fields.fence = start[1] + 1;
        if (pwrite(fd, &fields, sizeof fields, 8) != ssize_t(sizeof fields)) state.SkipWithError("pwrite failed");
        lock.l_type = F_UNLCK;
        fcntl(fd, F_OFD_SETLK, &lock);
    }
    close(fd);
    close(dir_fd);
}

void dlock_cpp_acquire_release(benchmark::State& state) {
    auto client = dlock::client::from_yaml("backend: file\noptions: {directory: " + scratch() + "/dlock}\n");
    const auto options = dlock::acquire_options().with_wait(std::chrono::milliseconds(0));
    for (auto _ : state) {
        dlock::lease lease = client.acquire("bench", options);
        benchmark::DoNotOptimize(lease.fencing_token());
    }  // released by the lease's destructor
}

void dlock_c_acquire_release(benchmark::State& state) {
    dlock_client* client = nullptr;
    const std::string yaml = "backend: file\noptions: {directory: " + scratch() + "/dlock-c}\n";
    dlock_client_open_yaml(yaml.c_str(), "bench", &client);
    dlock_acquire_options options = DLOCK_ACQUIRE_OPTIONS_INIT;
    options.wait_ms = 0;
    for (auto _ : state) {
        dlock_lease* lease = nullptr;
        if (dlock_acquire(client, "bench", &options, &lease) != DLOCK_OK) state.SkipWithError(dlock_last_error());
        dlock_lease_release(lease);
        dlock_lease_destroy(lease);
    }
    dlock_client_close(client);
}

// Records each benchmark's time per iteration to print the ratios after the console report.
class ratio_reporter : public benchmark::ConsoleReporter {
public:
    void ReportRuns(const std::vector<Run>& runs) override {
        ConsoleReporter::ReportRuns(runs);
        for (const auto& r : runs)
            if (r.run_type == Run::RT_Iteration || r.aggregate_name == "median") {
                ns_[r.run_name.function_name] = r.GetAdjustedRealTime();
                cpu_ns_[r.run_name.function_name] = r.GetAdjustedCPUTime();
            }
    }
    std::map<std::string, double> ns_, cpu_ns_;
};

}  // namespace

BENCHMARK(raw_ofd_fcntl);
BENCHMARK(raw_safe_file_cycle);
BENCHMARK(dlock_cpp_acquire_release);
BENCHMARK(dlock_c_acquire_release);

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    ratio_reporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    // Wall time and the thread's CPU time: on a loaded shared machine the CPU-time ratio is the
    // steadier one (a descheduled iteration inflates wall time, not CPU time).
    for (const char* floor : {"raw_safe_file_cycle", "raw_ofd_fcntl"}) {
        const double raw = reporter.ns_[floor], raw_cpu = reporter.cpu_ns_[floor];
        if (raw <= 0 || raw_cpu <= 0) continue;
        for (const char* name : {"dlock_cpp_acquire_release", "dlock_c_acquire_release"})
            if (reporter.ns_.count(name))
                std::printf("ratio %s / %s: wall %.2f (%.0f vs %.0f ns), cpu %.2f (%.0f vs %.0f ns)%s\n", name, floor,
                            reporter.ns_[name] / raw, reporter.ns_[name], raw, reporter.cpu_ns_[name] / raw_cpu, reporter.cpu_ns_[name],
                            raw_cpu, std::string(floor) == "raw_safe_file_cycle" ? "; target <= 1.10" : " (the bare lock, for scale)");
    }
    std::system(("rm -rf " + scratch()).c_str());
    benchmark::Shutdown();
    return 0;
}

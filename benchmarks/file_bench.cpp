// file backend vs its floor, measured in one run: an uncontended acquire+release through the C++
// API (ABI, core, plugin, fencing counter) against the raw OFD fcntl lock+unlock it is built on.
// Prints the ratio at the end (target <= 1.5: the layers cost well under a microsecond).
#include <dlock/dlock.hpp>

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <map>
#include <string>
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
BENCHMARK(dlock_cpp_acquire_release);
BENCHMARK(dlock_c_acquire_release);

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    ratio_reporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    // Wall time and the thread's CPU time: on a loaded shared machine the CPU-time ratio is the
    // steadier one (a descheduled iteration inflates wall time, not CPU time).
    const double raw = reporter.ns_["raw_ofd_fcntl"], raw_cpu = reporter.cpu_ns_["raw_ofd_fcntl"];
    if (raw > 0 && raw_cpu > 0) {
        for (const char* name : {"dlock_cpp_acquire_release", "dlock_c_acquire_release"})
            if (reporter.ns_.count(name))
                std::printf("ratio %s / raw_ofd_fcntl: wall %.2f (%.0f vs %.0f ns), cpu %.2f (%.0f vs %.0f ns); target <= 1.50\n",
                            name, reporter.ns_[name] / raw, reporter.ns_[name], raw, reporter.cpu_ns_[name] / raw_cpu,
                            reporter.cpu_ns_[name], raw_cpu);
    }
    std::system(("rm -rf " + scratch()).c_str());
    benchmark::Shutdown();
    return 0;
}

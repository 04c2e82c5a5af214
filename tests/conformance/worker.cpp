// conformance_worker — a separate process driving a backend through the C++ API for the
// conformance suite's cross-process tests.
//
//   conformance_worker contend CONFIG NAME ITERATIONS HISTORY COUNTER SEED
//       ITERATIONS times: acquire NAME (a random mix of try-once, a 20 ms wait and a 5 s wait),
//       then inside the critical section a read-sleep-write increment of the 8-byte counter in
//       file COUNTER (a lost update there betrays an overlap), then release. Appends one history
//       line per attempt to HISTORY:
//         ok FENCE T_ACQUIRED T_RELEASE_INVOKED VALID_UNTIL   (CLOCK_MONOTONIC ns)
//         timeout | fail STATUS
//   conformance_worker modes CONFIG NAME MODE ITERATIONS HISTORY OCCUPANCY SEED
//       As contend, for a semaphore (MODE `permits:N`: each acquire takes one of N permits) or a
//       shared lock (MODE `shared`: two acquires in three shared, one exclusive). Inside the
//       critical section it enters itself in OCCUPANCY, a 24-byte file mapped by every worker
//       (holders now, the most holders seen, violations seen), and counts a violation when it
//       finds itself beyond N holders or an exclusive holder beside anyone. History lines end
//       with the kind held: p, s or x.
//   conformance_worker hold CONFIG NAME TTL_MS [MODE]
//       acquires NAME (MODE as above: one permit, or shared), prints "held FENCE" on stdout, then
//       sleeps until killed.
//   conformance_worker script CONFIG NAME TTL_MS
//       acquires NAME, prints "held FENCE OWNER", then obeys stdin, one word a line, answering
//       one line each: `state` -> held|suspect|lost|released; `token` -> FENCE (what it would
//       send to a fenced resource); `release` -> released|already_lost|unknown; `exit`.
//       A test pauses it (SIGSTOP) between commands to play a holder stalled after its check.
#include <dlock/dlock.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <fcntl.h>
#include <random>
#include <sys/mman.h>
#include <string>
#include <thread>
#include <time.h>
#include <unistd.h>

namespace {

int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

int64_t to_ns(std::chrono::steady_clock::time_point t) {
    if (t == std::chrono::steady_clock::time_point::max()) return INT64_MAX;
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

int contend(int argc, char** argv) {
    if (argc != 8) return 2;
    const std::string config = argv[2], name = argv[3];
    const int iterations = std::atoi(argv[4]);
    FILE* history = std::fopen(argv[5], "w");
    const int counter = open(argv[6], O_RDWR | O_CLOEXEC);
    if (!history || counter < 0) { std::perror("open"); return 2; }
    std::mt19937 rng(static_cast<unsigned>(std::atoi(argv[7])));
    auto client = dlock::client::open(config);
    for (int i = 0; i < iterations; ++i) {
        dlock::acquire_options options;
        switch (rng() % 3) {
        case 0: options.with_wait(std::chrono::milliseconds(0)); break;
        case 1: options.with_wait(std::chrono::milliseconds(20)); break;
        default: options.with_wait(std::chrono::seconds(5)); break;
        }
        std::error_code ec;
        dlock::lease lease = client.acquire(name, options, ec);
        if (ec == dlock::errc::timeout) { std::fprintf(history, "timeout\n"); continue; }
        if (ec) { std::fprintf(history, "fail %s %s\n", ec.message().c_str(), dlock_last_error()); continue; }
        const int64_t acquired = now_ns();
        uint64_t value = 0;
        if (pread(counter, &value, sizeof value, 0) != sizeof value) value = 0;
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
        ++value;
        if (pwrite(counter, &value, sizeof value, 0) != sizeof value) std::perror("pwrite");
        const int64_t release_invoked = now_ns();
        const int64_t valid_until = to_ns(lease.valid_until());
        lease.release(ec);
        std::fprintf(history, "ok %llu %lld %lld %lld\n", static_cast<unsigned long long>(lease.fencing_token()),
                     static_cast<long long>(acquired), static_cast<long long>(release_invoked),
                     static_cast<long long>(valid_until));
    }
    std::fclose(history);
    return 0;
}

// MODE of `modes` and `hold`: "" (an exclusive lock), "permits:N" or "shared". False if malformed.
bool parse_mode(const std::string& mode, dlock::acquire_options& options) {
    if (mode.empty()) return true;
    if (mode == "shared") {
        options.with_shared(true);
        return true;
    }
    if (mode.rfind("permits:", 0) == 0) {
        const long n = std::atol(mode.c_str() + 8);
        if (n < 1) return false;
        options.with_permits(static_cast<uint32_t>(n));
        return true;
    }
    return false;
}

// The live census of holders that every worker of one test maps: each holder enters on taking
// the lock and leaves before releasing it, so a holder that finds more holders than allowed
// reports a violation independently of the history's timestamps. The word `present` counts
// exclusive holders in its high 32 bits and shared holders (or permits) in its low 32.
struct occupancy {
    std::atomic<uint64_t> present;
    std::atomic<uint64_t> most;
    std::atomic<uint64_t> violations;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the census is shared between processes");

int modes(int argc, char** argv) {
    if (argc != 9) return 2;
    const std::string config = argv[2], name = argv[3], mode = argv[4];
    const int iterations = std::atoi(argv[5]);
    dlock::acquire_options base;
    if (!parse_mode(mode, base)) { std::fprintf(stderr, "bad mode %s\n", mode.c_str()); return 2; }
    const uint64_t limit = base.permits;  // 0: a shared lock
    FILE* history = std::fopen(argv[6], "w");
    const int census_fd = open(argv[7], O_RDWR | O_CLOEXEC);
    if (!history || census_fd < 0) { std::perror("open"); return 2; }
    void* mapped = mmap(nullptr, sizeof(occupancy), PROT_READ | PROT_WRITE, MAP_SHARED, census_fd, 0);
    if (mapped == MAP_FAILED) { std::perror("mmap"); return 2; }
    auto* census = static_cast<occupancy*>(mapped);
    std::mt19937 rng(static_cast<unsigned>(std::atoi(argv[8])));
    auto client = dlock::client::open(config);
    for (int i = 0; i < iterations; ++i) {
        dlock::acquire_options options = base;
        const bool exclusive = limit == 0 && rng() % 3 == 0;
        if (exclusive) options.with_shared(false);
        switch (rng() % 3) {
        case 0: options.with_wait(std::chrono::milliseconds(0)); break;
        case 1: options.with_wait(std::chrono::milliseconds(20)); break;
        default: options.with_wait(std::chrono::seconds(5)); break;
        }
        std::error_code ec;
        dlock::lease lease = client.acquire(name, options, ec);
        if (ec == dlock::errc::timeout) { std::fprintf(history, "timeout\n"); continue; }
        if (ec) { std::fprintf(history, "fail %s %s\n", ec.message().c_str(), dlock_last_error()); continue; }
        const int64_t acquired = now_ns();
        const uint64_t me = exclusive ? uint64_t(1) << 32 : 1;
        const uint64_t now_present = census->present.fetch_add(me) + me;
        const uint64_t exclusives = now_present >> 32, others = now_present & 0xffffffffu;
        const bool violation = limit != 0 ? others > limit : exclusives > 1 || (exclusives == 1 && others > 0);
        if (violation) census->violations.fetch_add(1);
        for (uint64_t seen = census->most.load(); (exclusives + others) > seen && !census->most.compare_exchange_weak(seen, exclusives + others);) {
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200 + rng() % 800));
        census->present.fetch_sub(me);
        const int64_t release_invoked = now_ns();
        const int64_t valid_until = to_ns(lease.valid_until());
        lease.release(ec);
        std::fprintf(history, "ok %llu %lld %lld %lld %c\n", static_cast<unsigned long long>(lease.fencing_token()),
                     static_cast<long long>(acquired), static_cast<long long>(release_invoked),
                     static_cast<long long>(valid_until), limit != 0 ? 'p' : exclusive ? 'x' : 's');
    }
    std::fclose(history);
    return 0;
}

int hold(int argc, char** argv) {
    if (argc != 5 && argc != 6) return 2;
    dlock::acquire_options options;
    if (!parse_mode(argc == 6 ? argv[5] : "", options)) return 2;
    auto client = dlock::client::open(argv[2]);
    auto lease = client.acquire(argv[3], options.with_wait(dlock::forever).with_ttl(std::chrono::milliseconds(std::atoll(argv[4]))));
    std::printf("held %llu\n", static_cast<unsigned long long>(lease.fencing_token()));
    std::fflush(stdout);
    for (;;) pause();
}

const char* state_name(dlock::lease_state s) {
    switch (s) {
    case dlock::lease_state::held: return "held";
    case dlock::lease_state::suspect: return "suspect";
    case dlock::lease_state::lost: return "lost";
    default: return "released";
    }
}

int scripted(int argc, char** argv) {
    if (argc != 5) return 2;
    auto client = dlock::client::open(argv[2]);
    auto lease = client.acquire(argv[3], dlock::acquire_options()
                                             .with_wait(std::chrono::seconds(30))
                                             .with_ttl(std::chrono::milliseconds(std::atoll(argv[4]))));
    std::printf("held %llu %s\n", static_cast<unsigned long long>(lease.fencing_token()), std::string(lease.owner()).c_str());
    std::fflush(stdout);
    char line[64];
    while (std::fgets(line, sizeof line, stdin)) {
        const std::string word(line, std::strcspn(line, "\n"));
        if (word == "state") std::printf("%s\n", state_name(lease.state()));
        else if (word == "token") std::printf("%llu\n", static_cast<unsigned long long>(lease.fencing_token()));
        else if (word == "release") {
            std::error_code ec;
            const auto outcome = lease.release(ec);
            std::printf("%s\n", outcome == dlock::release_outcome::released       ? "released"
                                 : outcome == dlock::release_outcome::already_lost ? "already_lost"
                                                                                   : "unknown");
        } else if (word == "exit") break;
        std::fflush(stdout);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        if (argc >= 2 && std::string(argv[1]) == "contend") return contend(argc, argv);
        if (argc >= 2 && std::string(argv[1]) == "modes") return modes(argc, argv);
        if (argc >= 2 && std::string(argv[1]) == "hold") return hold(argc, argv);
        if (argc >= 2 && std::string(argv[1]) == "script") return scripted(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "conformance_worker: %s\n", e.what());
        return 1;
    }
    std::fprintf(stderr, "usage: conformance_worker contend|modes|hold|script ...\n");
    return 2;
}

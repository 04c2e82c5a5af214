// fault_worker — a worker process of the fault suite. It drives a backend through the C++ API
// (dlock.hpp) and appends every acquire/release/lost event to its own history file (history.hpp).
// Every duration it measures is on CLOCK_MONOTONIC (steady_clock); it never reads the wall clock.
//
//   fault_worker contend --config C --name N --history H --label L [--resource SOCKET]
//       [--cycles K | --duration-ms D | --acquisitions A] [--hold-ms 2] [--ttl-ms T] [--renew 1]
//       [--seed S] [--try-percent 30] [--short-percent 30] [--short-wait-ms 20] [--long-wait-ms 10000]
//     Tries N K times (or until D passes; with A > 0, until it acquired A times and D passed)
//     with a random mix of try-once, a short and a long wait; inside each critical section: a
//     fenced write to the resource (when the backend has fencing) and a read-sleep(hold)-write
//     increment of the resource's counter; then releases.
//       [--permits N | --shared-percent P]
//     Exit 0 when it ran to the end (acquire errors are history events, not exit failures).
//     With --permits N each acquisition takes one of the N permits of the semaphore N names; with
//     --shared-percent P, P % of the acquisitions hold the lock shared, the rest exclusively. In
//     these modes the critical section also enters and leaves the resource's census (enter/leave,
//     resource_server.cpp); shared holders and permits make a `fence` access instead of a `write`,
//     and only exclusive holders increment the counter (concurrent permits or readers may).
//
//   fault_worker holder --config C --history H --label L [--resource SOCKET]
//     Prints "ready", then obeys stdin, one command a line, one answer line each:
//       acquire NAME WAIT_MS TTL_MS RENEW(0|1) [KIND(x|s|p) PERMITS]
//                                             -> ok TOKEN VALID_UNTIL OWNER T_INVOKE T_RETURN
//                                                | timeout T_INVOKE T_RETURN
//                                                | error STATUS T_INVOKE T_RETURN MESSAGE…
//       state NAME   -> held|suspect|lost|released|none
//       token NAME   -> TOKEN
//       release NAME -> released|already_lost|unknown|none
//       write NAME   -> accepted HIGHEST | rejected HIGHEST   (fenced write with the lease's token;
//                       a shared hold or a permit makes the resource's `fence` access)
//       enter NAME   -> ok INSIDE | over INSIDE   (the resource's census: this lease enters its
//                       critical section)
//       leave NAME   -> ok
//       incr NAME SLEEP_MS -> VALUE   (read-sleep-write of the counter, unfenced)
//       lost NAME    -> lost T | lost -   (when the on_lost callback ran)
//       release_previous NAME -> like release, for the lease NAME had before its latest acquire
//       probe_open PATH -> ok | error STATUS MESSAGE…   (opens and closes a client of config PATH)
//       probe_acquire HEXNAME WAIT_MS TTL_MS|default -> ok | timeout | error STATUS MESSAGE…
//                       (the name is hex-encoded, "-" for empty, so any bytes pass; a lease got
//                       is released at once)
//       wallclock    -> seconds since the epoch by this process's wall clock (to see a clock shift)
//       quit         -> bye (releases what it holds, logged; closes the client; exits 0)
//
// With DLOCK_FAULT_NETNS=<name> in its environment, the worker first enters the network namespace
// /run/netns/<name> (the client side of a lab::partition, docs/design/faults.md §16), before any socket exists.
// With DLOCK_FAULT_STOP_ON_LOST=1, a holder behaves as an application that stops using a lock the
// moment it is told LOST: its on_lost callback also logs a release invoke (status
// "stopped_on_lost"), which ends the hold for the checkers; the later `release` is logged as usual.
#include <dlock/dlock.hpp>

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include "history.hpp"
#include "resource_client.hpp"

namespace {

using namespace dlock::faults;
using std::chrono::milliseconds;

using arguments = std::map<std::string, std::string>;

arguments parse_arguments(int argc, char** argv, int first) {
    arguments args;
    for (int i = first; i + 1 < argc; i += 2) {
        std::string key = argv[i];
        if (key.rfind("--", 0) == 0) key = key.substr(2);
        args[key] = argv[i + 1];
    }
    return args;
}

std::string get(const arguments& args, const std::string& key, const std::string& fallback = "") {
    const auto it = args.find(key);
    return it == args.end() ? fallback : it->second;
}

long long number(const arguments& args, const std::string& key, long long fallback) {
    const auto it = args.find(key);
    return it == args.end() ? fallback : std::atoll(it->second.c_str());
}

int64_t to_ns(std::chrono::steady_clock::time_point t) {
    if (t == std::chrono::steady_clock::time_point::max()) return INT64_MAX;
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

const char* state_word(dlock::lease_state s) {
    switch (s) {
    case dlock::lease_state::held: return "held";
    case dlock::lease_state::suspect: return "suspect";
    case dlock::lease_state::lost: return "lost";
    case dlock::lease_state::released: return "released";
    }
    return "?";
}

// How a lease holds its name: an exclusive lock ('x'), a shared hold ('s'), or one of `permits`
// permits of a semaphore ('p').
struct hold_mode {
    char kind = 'x';
    uint32_t permits = 0;
    void apply(dlock::acquire_options& options) const {
        if (kind == 'p') options.with_permits(permits);
        if (kind == 's') options.with_shared(true);
    }
};

// The resource requests of a hold in its mode (resource_server.cpp).
std::string fenced_request(const std::string& name, const std::string& owner, uint64_t token, const hold_mode& mode) {
    if (mode.kind == 'x') return "write " + name + " " + owner + " " + std::to_string(token);
    return "fence " + name + " " + owner + " " + std::to_string(token) + " " + mode.kind + " " + std::to_string(mode.permits);
}
std::string enter_request(const std::string& name, const std::string& owner, const hold_mode& mode) {
    return "enter " + name + " " + owner + " " + mode.kind + " " + std::to_string(mode.permits);
}

const char* outcome_word(dlock::release_outcome o) {
    switch (o) {
    case dlock::release_outcome::released: return "released";
    case dlock::release_outcome::already_lost: return "already_lost";
    case dlock::release_outcome::unknown: return "unknown";
    }
    return "?";
}

// The history of this process, shared by the main thread and the keeper's lost callbacks.
class shared_history {
public:
    shared_history(const std::string& path, const std::string& label) : writer_(path, label) {}
    void append(history_event e) {
        std::lock_guard<std::mutex> guard(mutex_);
        writer_.append(std::move(e));
    }

private:
    std::mutex mutex_;
    history_writer writer_;
};

history_event event(const std::string& op, const std::string& type, const std::string& name) {
    history_event e;
    e.t_ns = monotonic_now_ns();
    e.op = op;
    e.type = type;
    e.name = name;
    return e;
}

// Logs the acquire outcome; returns the lease (empty unless ok).
dlock::lease logged_acquire(dlock::client& client, shared_history& history, const std::string& name,
                            const dlock::acquire_options& options, std::error_code& ec, int64_t& invoked_ns,
                            int64_t& returned_ns, const hold_mode& mode = {}) {
    invoked_ns = monotonic_now_ns();
    history_event invoke = event("acquire", "invoke", name);
    invoke.kind = mode.kind;
    invoke.permits = mode.permits;
    history.append(invoke);
    dlock::lease lease = client.acquire(name, options, ec);
    returned_ns = monotonic_now_ns();
    history_event e = event("acquire", "ok", name);
    e.t_ns = returned_ns;
    e.kind = mode.kind;
    e.permits = mode.permits;
    if (!ec) {
        e.owner = std::string(lease.owner());
        e.token = lease.fencing_token();
        e.valid_until_ns = to_ns(lease.valid_until());
    } else if (ec == dlock::make_error_code(dlock::errc::timeout)) {
        e.type = "fail";
        e.status = "timeout";
    } else {
        e.type = ec.value() == DLOCK_UNKNOWN ? "unknown" : "fail";
        e.status = dlock_status_name(ec.value());
        // The history keeps the status; the message, for whoever reads why, goes to stderr.
        std::fprintf(stderr, "fault_worker: acquire %s: %s: %s\n", name.c_str(), e.status.c_str(), dlock_last_error());
    }
    history.append(std::move(e));
    return lease;
}

dlock::release_outcome logged_release(dlock::lease& lease, shared_history& history) {
    const std::string name(lease.name()), owner(lease.owner());
    history_event invoke = event("release", "invoke", name);
    invoke.owner = owner;
    history.append(invoke);
    std::error_code ec;
    const auto outcome = lease.release(ec);
    history_event done = event("release", outcome == dlock::release_outcome::unknown ? "unknown" : "ok", name);
    done.owner = owner;
    done.status = outcome_word(outcome);
    history.append(done);
    return outcome;
}

// Writes a "lost" event when the keeper reports the lease LOST.
void log_lost(dlock::lease& lease, shared_history& history) {
    const std::string name(lease.name()), owner(lease.owner());
    lease.on_lost([&history, name, owner] {
        history_event e = event("lost", "ok", name);
        e.owner = owner;
        history.append(e);
    });
}

// The read-sleep-write increment an application trusting the lock alone would do.
int64_t increment_counter(resource_client& resource, const std::string& name, const std::string& owner, milliseconds sleep) {
    const std::string answer = resource.request("read " + name);
    const int64_t seen = std::atoll(answer.c_str() + answer.find(' ') + 1);
    if (sleep.count() > 0) std::this_thread::sleep_for(sleep);
    resource.request("incr " + name + " " + owner + " " + std::to_string(seen) + " " + std::to_string(seen + 1));
    return seen + 1;
}

int contend(const arguments& args) {
    const std::string name = get(args, "name");
    shared_history history(get(args, "history"), get(args, "label", "contend"));
    std::error_code open_error;
    dlock::client client = dlock::client::open(get(args, "config"), open_error);
    if (open_error) {
        std::fprintf(stderr, "fault_worker: open %s: %s\n", get(args, "config").c_str(), dlock_last_error());
        return 2;
    }
    std::unique_ptr<resource_client> resource;
    if (!get(args, "resource").empty()) resource = std::make_unique<resource_client>(get(args, "resource"));
    const bool fencing = client.has(DLOCK_CAP_FENCING);

    const long long cycles = number(args, "cycles", 20);
    const milliseconds duration(number(args, "duration-ms", 0));
    const long long wanted_acquisitions = number(args, "acquisitions", 0);
    const milliseconds hold(number(args, "hold-ms", 2));
    const int try_percent = int(number(args, "try-percent", 30));
    const int short_percent = int(number(args, "short-percent", 30));
    const milliseconds short_wait(number(args, "short-wait-ms", 20));
    const milliseconds long_wait(number(args, "long-wait-ms", 10000));
    std::mt19937_64 rng(uint64_t(number(args, "seed", 1)));
    dlock::acquire_options base;
    if (number(args, "ttl-ms", 0) > 0) base.with_ttl(milliseconds(number(args, "ttl-ms", 0)));
    base.with_renew(number(args, "renew", 1) != 0);
    const auto permits = uint32_t(number(args, "permits", 0));
    const int shared_percent = int(number(args, "shared-percent", 0));
    const bool census = permits > 0 || shared_percent > 0;

    const auto start = std::chrono::steady_clock::now();
    long long acquired = 0;
    for (long long i = 0;; ++i) {
        const bool time_is_up = std::chrono::steady_clock::now() - start >= duration;
        if (wanted_acquisitions > 0 ? acquired >= wanted_acquisitions && time_is_up
            : duration.count() > 0  ? time_is_up
                                    : i >= cycles)
            break;
        dlock::acquire_options options = base;
        const int pick = int(rng() % 100);
        options.with_wait(pick < try_percent ? milliseconds(0) : pick < try_percent + short_percent ? short_wait : long_wait);
        hold_mode mode;
        if (permits > 0) mode = {'p', permits};
        else if (int(rng() % 100) < shared_percent) mode.kind = 's';
        mode.apply(options);
        std::error_code ec;
        int64_t invoked = 0, returned = 0;
        dlock::lease lease = logged_acquire(client, history, name, options, ec, invoked, returned, mode);
        if (ec) {
            // A try that found the lock taken is the common case; after an error, back off a
            // little so a server fault does not turn into a busy loop.
            if (ec != dlock::make_error_code(dlock::errc::timeout)) std::this_thread::sleep_for(milliseconds(20));
            else if (options.wait == milliseconds(0)) std::this_thread::sleep_for(milliseconds(1));
            continue;
        }
        ++acquired;
        log_lost(lease, history);
        const std::string owner(lease.owner());
        if (resource) {
            try {
                if (fencing) resource->request(fenced_request(name, owner, lease.fencing_token(), mode));
                if (census) resource->request(enter_request(name, owner, mode));
                if (mode.kind == 'x') increment_counter(*resource, name, owner, hold);
                else if (hold.count() > 0) std::this_thread::sleep_for(hold);
                if (census) resource->request("leave " + name + " " + owner);
            } catch (const std::exception& e) {
                std::fprintf(stderr, "fault_worker: %s\n", e.what());
                return 3;
            }
        } else if (hold.count() > 0) {
            std::this_thread::sleep_for(hold);
        }
        logged_release(lease, history);
    }
    return 0;
}

// The scripted holder: one client, one lease per name, commands on stdin.
class holder_process {
public:
    holder_process(const arguments& args) : history_(get(args, "history"), get(args, "label", "holder")) {
        std::error_code ec;
        client_ = dlock::client::open(get(args, "config"), ec);
        if (ec) throw std::runtime_error(std::string("open: ") + dlock_last_error());
        if (!get(args, "resource").empty()) resource_ = std::make_unique<resource_client>(get(args, "resource"));
    }

    std::string obey(const std::string& line) {
        std::istringstream words(line);
        std::string verb, name;
        words >> verb >> name;
        if (verb == "acquire") return acquire(name, words);
        if (verb == "quit") {
            // Release what is still held, logged, so the history shows where each hold ended.
            for (auto* leases : {&leases_, &previous_})
                for (auto& [held_name, lease] : *leases)
                    if (lease && lease.held()) logged_release(lease, history_);
            return "bye";
        }
        if (verb == "wallclock")  // what this process's wall clock says (seconds since the epoch)
            return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                      std::chrono::system_clock::now().time_since_epoch()).count());
        if (verb == "probe_open") return probe_open(name);
        if (verb == "probe_acquire") return probe_acquire(name, words);
        if (verb == "release_previous") {
            const auto previous = previous_.find(name);
            if (previous == previous_.end()) return "none";
            return outcome_word(logged_release(previous->second, history_));
        }
        const auto it = leases_.find(name);
        if (verb == "lost") {
            std::lock_guard<std::mutex> guard(lost_mutex_);
            const auto lost = lost_at_.find(name);
            return lost == lost_at_.end() ? "lost -" : "lost " + std::to_string(lost->second);
        }
        if (it == leases_.end()) return verb == "incr" ? "error no lease" : "none";
        dlock::lease& lease = it->second;
        if (verb == "state") return state_word(lease.state());
        if (verb == "token") return std::to_string(lease.fencing_token());
        if (verb == "release") return outcome_word(logged_release(lease, history_));
        if (!resource_) return "error no resource";
        const hold_mode mode = modes_[name];
        if (verb == "write") return resource_->request(fenced_request(name, std::string(lease.owner()), lease.fencing_token(), mode));
        if (verb == "enter") return resource_->request(enter_request(name, std::string(lease.owner()), mode));
        if (verb == "leave") return resource_->request("leave " + name + " " + std::string(lease.owner()));
        if (verb == "incr") {
            long long sleep_ms = 0;
            words >> sleep_ms;
            return std::to_string(increment_counter(*resource_, name, std::string(lease.owner()), milliseconds(sleep_ms)));
        }
        return "error unknown command `" + verb + "`";
    }

private:
    static std::string one_line(std::string text) {
        for (char& c : text)
            if (c == '\n' || c == '\r') c = ' ';
        return text;
    }

    static std::string failure(const std::error_code& ec) {
        return std::string("error ") + dlock_status_name(ec.value()) + " " + one_line(dlock_last_error());
    }

    std::string probe_open(const std::string& path) {
        std::error_code ec;
        dlock::client probe = dlock::client::open(path, ec);
        return ec ? failure(ec) : "ok";
    }

    std::string probe_acquire(const std::string& hex, std::istringstream& words) {
        long long wait_ms = 0;
        std::string ttl_word;
        words >> wait_ms >> ttl_word;
        std::string name;
        for (size_t i = 0; i + 1 < hex.size(); i += 2) name += char(std::stoi(hex.substr(i, 2), nullptr, 16));
        if (hex == "-") name.clear();
        dlock::acquire_options options;
        options.with_wait(milliseconds(wait_ms));
        // ttl_ms is passed through as given (0, negative, huge): the library must judge it.
        if (ttl_word != "default") options.ttl = milliseconds(std::stoll(ttl_word));
        std::error_code ec;
        dlock::lease lease = client_.acquire(name, options, ec);
        if (ec == dlock::make_error_code(dlock::errc::timeout)) return "timeout";
        if (ec) return failure(ec);
        lease.release(ec);
        return "ok";
    }

    std::string acquire(const std::string& name, std::istringstream& words) {
        long long wait_ms = 0, ttl_ms = 0, renew = 1;
        words >> wait_ms >> ttl_ms >> renew;
        hold_mode mode;
        std::string kind;
        if (words >> kind >> mode.permits) mode.kind = kind.empty() ? 'x' : kind[0];
        if (mode.kind != 'p') mode.permits = 0;
        dlock::acquire_options options;
        options.with_wait(milliseconds(wait_ms)).with_renew(renew != 0);
        if (ttl_ms > 0) options.with_ttl(milliseconds(ttl_ms));
        mode.apply(options);
        std::error_code ec;
        int64_t invoked = 0, returned = 0;
        dlock::lease lease = logged_acquire(client_, history_, name, options, ec, invoked, returned, mode);
        const std::string times = std::to_string(invoked) + " " + std::to_string(returned);
        if (ec == dlock::make_error_code(dlock::errc::timeout)) return "timeout " + times;
        if (ec) {
            std::string message = dlock_last_error();
            for (char& c : message)
                if (c == '\n') c = ' ';
            return std::string("error ") + dlock_status_name(ec.value()) + " " + times + " " + message;
        }
        const std::string owner(lease.owner());
        {
            std::lock_guard<std::mutex> guard(lost_mutex_);
            lost_at_.erase(name);
        }
        lease.on_lost([this, name, owner] {
            const int64_t now = monotonic_now_ns();
            {
                std::lock_guard<std::mutex> guard(lost_mutex_);
                lost_at_[name] = now;
            }
            history_event e = event("lost", "ok", name);
            e.t_ns = now;
            e.owner = owner;
            history_.append(e);
            if (stop_on_lost_) {
                // The application stops acting as the holder here; its release call comes later.
                history_event stop = event("release", "invoke", name);
                stop.t_ns = now;
                stop.owner = owner;
                stop.status = "stopped_on_lost";
                history_.append(stop);
            }
        });
        const std::string answer = "ok " + std::to_string(lease.fencing_token()) + " " +
                                   std::to_string(to_ns(lease.valid_until())) + " " + owner + " " + times;
        const auto current = leases_.find(name);
        if (current != leases_.end()) previous_[name] = std::move(current->second);
        leases_[name] = std::move(lease);
        modes_[name] = mode;
        return answer;
    }

    // Declared so that the leases go first (their destructors wait for a running lost callback,
    // which uses the history and lost_at_), then the client.
    shared_history history_;
    const bool stop_on_lost_ = [] {
        const char* v = std::getenv("DLOCK_FAULT_STOP_ON_LOST");
        return v && std::string(v) == "1";
    }();
    std::mutex lost_mutex_;
    std::map<std::string, int64_t> lost_at_;
    dlock::client client_;
    std::unique_ptr<resource_client> resource_;
    std::map<std::string, dlock::lease> previous_;
    std::map<std::string, dlock::lease> leases_;
    std::map<std::string, hold_mode> modes_;  // how each lease in leases_ holds its name
};

int holder(const arguments& args) {
    std::unique_ptr<holder_process> process;
    try {
        process = std::make_unique<holder_process>(args);
    } catch (const std::exception& e) {
        std::printf("error %s\n", e.what());
        std::fflush(stdout);
        return 2;
    }
    std::printf("ready\n");
    std::fflush(stdout);
    for (std::string line; std::getline(std::cin, line);) {
        std::string answer;
        try {
            answer = process->obey(line);
        } catch (const std::exception& e) {
            answer = std::string("error ") + e.what();
        }
        std::printf("%s\n", answer.c_str());
        std::fflush(stdout);
        if (answer == "bye") break;
    }
    process.reset();  // closes the client before exit
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: fault_worker contend|holder --key value ...\n");
        return 2;
    }
    // Die with the suite: a worker left behind would hold locks and CPU after a crashed run.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const std::string mode = argv[1];
    const arguments args = parse_arguments(argc, argv, 2);
    if (!get(args, "stderr").empty()) std::freopen(get(args, "stderr").c_str(), "a", stderr);
    if (const char* ns = std::getenv("DLOCK_FAULT_NETNS"); ns && *ns) {
        const std::string path = std::string("/run/netns/") + ns;
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) {
            std::fprintf(stderr, "fault_worker: cannot enter network namespace %s: %s\n", path.c_str(), std::strerror(errno));
            return 4;
        }
        ::close(fd);
    }
    try {
        if (mode == "contend") return contend(args);
        if (mode == "holder") return holder(args);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "fault_worker %s: %s\n", mode.c_str(), e.what());
        return 3;
    }
    std::fprintf(stderr, "fault_worker: unknown mode %s\n", mode.c_str());
    return 2;
}

// suite.hpp — the scenario API of the fault-injection safety suite (docs/design/faults.md): how a
// scenario registers itself, what it gets when it runs (the lab, the target backend, workers, the
// fenced resource, the checkers), and what it records into its cell of the guarantees table.
//
// How to write a scenario
// -----------------------
// 1. Make a file tests/faults/scenarios_<topic>.cpp (CMake compiles every such file into
//    `fault_suite`). Include only this header (plus the lab's, if you drive servers directly).
// 2. Register each scenario with a static registrar at namespace scope:
//
//      static const dlock::faults::registrar holder_killed{{
//          2, "", "holder killed (SIGKILL)",
//          {{"file", dlock::faults::verdict::safe}, {"redis", dlock::faults::verdict::safe}},
//          [](dlock::faults::context& ctx) {
//              auto holder = ctx.spawn_holder("victim");
//              holder->acquire(ctx.lock_name("x"));
//              ...
//          }}};
//
//    `number` is the docs/design/faults.md number; `variant` ("", "a", "b", …) tells apart several scenarios
//    of one number ("6a" without persistence, "6b" with appendfsync always). The targets list is
//    the cells: each target the scenario applies to, with the verdict its documentation claims.
// 3. In the run function, make the fault happen, then judge it:
//      - workers write histories into ctx.history_dir(); ctx.check_histories() runs the overlap,
//        token and fenced-resource checkers over them and adds what they found to the result;
//      - anything else you verify yourself goes through ctx.violation() (a safety violation: it
//        makes the found verdict EV) or ctx.require() (a check that must hold whatever the
//        verdict: a false one fails the cell);
//      - record what you measured: ctx.record_liveness(), ctx.record_lost_detection(),
//        ctx.fault() for each fault injected, ctx.note() for what was demonstrated.
//    The found verdict is EV when any violation was recorded, else SAFE. The cell passes when the
//    found verdict equals the expected one and every require() held and nothing threw. An exception
//    out of run() makes the cell ERROR (its message is recorded).
// 4. Keep the CI size short (ctx.ci_or_soak(ci, soak) picks a count); the whole suite's CI size
//    must stay within ~6 minutes on a 2-core machine.
// Cells run one at a time; the lab is shared by all cells and is reset (reset_backend) between
// cells, so use ctx.lock_name() for names, and restore any server you stopped or paused.
//
// Stability: this header is the contract with scenario files written by other engineers. Changes
// are additive only.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <dlock/dlock.hpp>

#include "dlock/lab/lab.hpp"

namespace dlock::faults {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

// CLOCK_MONOTONIC now, in nanoseconds: the clock of every history event (shared by every process
// of the machine).
int64_t monotonic_ns();

// ---- what a scenario declares ------------------------------------------------------------------

// The verdict of a cell: SAFE (no violation found) or EV (expected violation: demonstrated and
// recorded, as the backend's documentation says it happens).
enum class verdict { safe, ev };
std::string_view verdict_name(verdict v);  // "SAFE" / "EV"

enum class run_size { ci, soak };

// Target names the framework knows: file, redis, redlock, zookeeper, zookeeper_ensemble, etcd,
// etcd_cluster, sql_lease, sql_advisory, mysql_lease, mysql_named.
const std::vector<std::string>& all_target_names();

struct expectation {
    std::string target;  // one of all_target_names()
    verdict expected = verdict::safe;
};

class context;

struct scenario {
    int number = 0;          // docs/design/faults.md number, 1..15
    std::string variant;     // "" or "a", "b", … when one number has several scenarios
    std::string title;       // short: "holder paused past its ttl"
    std::vector<expectation> targets;
    std::function<void(context&)> run;
    // DLOCK_CAP_* bits the target's client must report for a (scenario, target) pair to be a cell
    // (e.g. DLOCK_CAP_SEMAPHORE): a target without them is listed as "not a cell" in the table.
    uint64_t requires_capabilities = 0;

    std::string id() const { return std::to_string(number) + variant; }  // "6a"
};

// Registers a scenario at static-initialisation time. Two scenarios with the same id are an error
// reported by the runner at start.
struct registrar {
    explicit registrar(scenario s);
};

// Every registered scenario, sorted by (number, variant).
std::vector<const scenario*> registered_scenarios();

// ---- what a scenario gets: the target ----------------------------------------------------------

struct target {
    std::string name;                        // "redis", "sql_advisory", …
    std::string plugin;                      // the dlock plugin: "redis", "sql", …
    std::vector<lab::backend> servers;       // lab backends it runs on (empty for file)
    std::filesystem::path config;            // the dlock YAML that reaches it
    uint64_t capabilities = 0;               // DLOCK_CAP_* bits, read from a client at start

    // Nominal ttl scenarios use for this target (short, so ttl faults resolve quickly). For
    // zookeeper and etcd the lease length is set by the server session (see docs/backends), which
    // this value reflects.
    milliseconds ttl{1000};
    // Documented time from a holder's death to the lock being free again (docs/design/faults.md §2): 0 for
    // session-bound backends (file, sql_advisory), ttl for redis/redlock/sql_lease/etcd, the session
    // timeout + tickTime for zookeeper (+ tickTime/2 on an ensemble; runner.cpp says why). Checks
    // compare with generous margins (liveness_limit()).
    milliseconds liveness_bound{0};
    // Where a measured liveness must fall: bound + max(2 s, bound / 2). Noise on a shared 2-core
    // machine is large; the margin is for noise, not for a wrong bound.
    milliseconds liveness_limit() const;

    bool fencing() const { return (capabilities & DLOCK_CAP_FENCING) != 0; }
    bool has_ttl() const { return (capabilities & DLOCK_CAP_TTL) != 0; }
    bool session_bound() const { return (capabilities & DLOCK_CAP_SESSION_BOUND) != 0; }
};

// ---- workers -------------------------------------------------------------------------------------

// Contending workers (fault_worker contend): `processes` processes, each doing `cycles`
// acquisitions (or until `duration` passes, when set) of one name with a random mix of waits,
// a critical section of `hold`, then release. Inside the critical section each worker does a
// fenced write to the resource (when the resource is running) and a read-sleep-write increment of
// the resource's counter (unfenced, so a lost update betrays an overlap). One history file each.
struct contend_options {
    std::string name;                 // the lock name (use ctx.lock_name()); required
    int processes = 4;
    int cycles = 20;                  // per process; ignored when duration > 0
    milliseconds duration{0};         // run until this passes (soak)
    long long acquisitions = 0;       // > 0: run until each process acquired this many times
                                      // and `duration` passed (cycles ignored)
    milliseconds hold{2};             // critical-section length (the read-sleep-write sleep)
    milliseconds ttl{0};              // 0: the target's ttl
    // Wait mix per acquisition, chosen at random: try once, a short wait, a long wait.
    int try_percent = 30;
    int short_wait_percent = 30;      // the rest wait `long_wait`
    milliseconds short_wait{20};
    milliseconds long_wait{10000};
    bool renew = true;
    std::string label = "contend";    // history files are <label>-<i>.jsonl
    // NAME=VALUE entries added to each worker's environment (e.g. DLOCK_FAULT_NETNS, to run it on
    // the client side of a lab::partition).
    std::vector<std::string> extra_env;
    // The mode of every acquisition: permits N > 0 takes one of N permits of the semaphore `name`;
    // else shared_percent % of the acquisitions hold the lock shared, the rest exclusively. In these
    // modes the critical section enters and leaves the resource's census (resource_server.cpp), and
    // only exclusive holders increment the counter.
    uint32_t permits = 0;
    int shared_percent = 0;
};

// A group of running contend workers. The destructor SIGKILLs whatever still runs.
class worker_group {
public:
    virtual ~worker_group() = default;
    virtual std::size_t size() const = 0;
    virtual pid_t pid(std::size_t index) const = 0;
    virtual void kill(std::size_t index) = 0;            // SIGKILL
    virtual void pause(std::size_t index) = 0;           // SIGSTOP
    virtual void resume(std::size_t index) = 0;          // SIGCONT
    // Waits for every worker to exit, at most `limit`; returns true when all exited with status 0.
    // Workers still running after `limit` are killed (and that counts as failure).
    virtual bool wait(milliseconds limit) = 0;
    // One line per worker that did not exit 0 (status and the tail of its stderr), for messages.
    virtual std::string failures() const = 0;
    // True while at least one worker has not exited (looks without reaping; wait() still reaps).
    virtual bool running() const = 0;
};

// The outcome of a scripted holder's acquire.
struct acquire_result {
    bool ok = false;
    std::string status;             // "ok", "timeout", or the dlock status name ("DLOCK_UNAVAILABLE")
    std::string message;            // dlock_last_error() text when not ok
    uint64_t token = 0;             // fencing token (0 without fencing)
    std::string owner;
    int64_t valid_until_ns = 0;     // INT64_MAX for leases without ttl
    int64_t invoked_ns = 0, returned_ns = 0;  // monotonic, as the holder saw them
};

// How a scripted holder holds a name: an exclusive lock, a shared hold, or one of `permits` permits
// of the semaphore of that name.
struct hold_mode {
    enum class kind { exclusive, shared, permit } how = kind::exclusive;
    uint32_t permits = 0;  // permit: the semaphore's limit N
    static hold_mode exclusive() { return {}; }
    static hold_mode shared() { return {kind::shared, 0}; }
    static hold_mode permit(uint32_t n) { return {kind::permit, n}; }
};

// What the resource answered to a write.
struct write_result {
    bool accepted = false;
    uint64_t highest = 0;           // highest token the resource had seen for that resource
};

// A process holding locks on command (fault_worker holder): one client, at most one lease per
// name. Each call sends one line and waits for the answer (up to `reply_limit`, else it throws
// std::runtime_error naming the command; a paused holder cannot answer, so resume it first).
// Every acquire/release/write/lost event lands in its history file <label>.jsonl. The destructor
// SIGKILLs the process.
class holder {
public:
    virtual ~holder() = default;
    virtual const std::string& label() const = 0;
    virtual pid_t pid() const = 0;

    // wait 0 = try once. ttl 0 = the target's ttl. renew false: the lease is not renewed.
    virtual acquire_result acquire(const std::string& name, milliseconds wait = milliseconds(0),
                                   milliseconds ttl = milliseconds(0), bool renew = true) = 0;
    // The same in a mode: a shared hold or a permit. Its fenced_write() is then the resource's
    // `fence` access for that mode (resource_server.cpp states the rule), and enter()/leave() put
    // it in and out of the resource's census of who is inside a critical section.
    virtual acquire_result acquire_as(const std::string& name, const hold_mode& mode, milliseconds wait = milliseconds(0),
                                      milliseconds ttl = milliseconds(0), bool renew = true) = 0;
    // "ok" when the census admits it, "over" when it entered beside holders its mode forbids (a
    // violation the resource confirms; counted in resource_report::over_limit).
    virtual std::string enter(const std::string& name) = 0;
    virtual void leave(const std::string& name) = 0;
    // "held", "suspect", "lost", "released" or "none" (no lease on that name).
    virtual std::string state(const std::string& name) = 0;
    virtual uint64_t token(const std::string& name) = 0;
    // "released", "already_lost", "unknown" (or "none").
    virtual std::string release(const std::string& name) = 0;
    // A fenced write to the resource `name` with this lease's token (the resource must run).
    virtual write_result fenced_write(const std::string& name) = 0;
    // A read-sleep-write increment of the resource's counter for `name`, unfenced: what an
    // application that trusts the lock alone would do. Returns the value it wrote.
    virtual int64_t counter_increment(const std::string& name, milliseconds sleep = milliseconds(0)) = 0;
    // Monotonic time at which the on_lost callback ran for `name`; nullopt when it has not.
    virtual std::optional<int64_t> lost_at_ns(const std::string& name) = 0;

    // Releases the lease this holder had on `name` before its latest acquire of `name` (kept, not
    // destroyed, when it re-acquired): "reusing an old lease". "released", "already_lost",
    // "unknown" or "none".
    virtual std::string release_previous(const std::string& name) = 0;
    // Sends one raw command line of the fault_worker holder protocol (worker.cpp) and returns the
    // answer line, for commands this interface does not wrap (probe_open, probe_acquire).
    virtual std::string raw(const std::string& line) = 0;

    virtual void kill() = 0;    // SIGKILL (and reap)
    virtual void pause() = 0;   // SIGSTOP
    virtual void resume() = 0;  // SIGCONT
    virtual bool alive() = 0;
    // Asks it to exit and reaps it: it releases every lease it still holds (logged in its
    // history, so the checkers see where each hold ended), then closes its client.
    virtual void quit() = 0;

    milliseconds reply_limit{20000};
};

// ---- the fenced resource -----------------------------------------------------------------------

// What the fenced resource saw, per resource name and in total.
struct resource_report {
    uint64_t writes_accepted = 0;
    uint64_t writes_rejected = 0;         // stale tokens refused (a good thing)
    uint64_t token_inversions = 0;        // an accepted token lower than one accepted before (never)
    uint64_t shared_tokens = 0;           // one token used by two different owners (a violation)
    uint64_t counter_increments = 0;
    uint64_t lost_updates = 0;            // a counter write whose read was stale (an overlap)
    uint64_t counter_value = 0;           // sum over resources
    uint64_t over_limit = 0;              // census: an enter beside holders its mode forbids (a violation)
    uint64_t max_inside = 0;              // census: the most holders inside one resource at once
};

// A small server on a Unix-domain socket (the `fenced_resource` executable; its protocol is
// described at the top of resource_server.cpp). Started by context::resource(); every write is logged with owner, token and
// whether it was accepted.
class fenced_resource {
public:
    virtual ~fenced_resource() = default;
    virtual const std::filesystem::path& socket_path() const = 0;
    virtual std::filesystem::path log_path() const = 0;
    virtual resource_report report() = 0;
};

// ---- the checkers ------------------------------------------------------------------------------

// What the checkers found over a set of histories (and the resource's log).
struct check_report {
    std::size_t histories = 0;         // history files read
    std::size_t acquisitions = 0;      // acquire-ok events
    std::size_t overlaps = 0;          // pairs overlapping with intervals cut at valid_until; for a
                                       // semaphore or a shared lock: holds that began where the count
                                       // checker forbids (more than N; an exclusive beside anyone)
    std::size_t overlaps_uncut = 0;    // pairs overlapping as acquire-ok … release-invoke (what an
                                       // application that does not check validity experiences)
    std::size_t token_inversions = 0;  // a later acquisition with a token not above an earlier one
    std::size_t duplicate_tokens = 0;  // two acquisitions with one fencing token
    std::size_t unknowns = 0;          // acquire or release outcomes the worker could not tell
    std::size_t failures = 0;          // acquire errors (not timeouts)
    std::size_t timeouts = 0;
    std::size_t max_holders = 0;       // semaphores and shared locks: the most holds at one instant
    resource_report resource;          // zero when no resource ran
    std::string first_problem;         // a human-readable example, "" when clean
};

// ---- what a cell records ----------------------------------------------------------------------

struct violation_counts {
    uint64_t overlaps = 0;               // two holders at once (as the scenario defines it)
    uint64_t stale_writes_accepted = 0;  // a resource accepted a write from a stale holder
    uint64_t lost_updates = 0;
    uint64_t token_inversions = 0;       // incl. one token given to two holders
    uint64_t false_successes = 0;        // acquire/release/state said held/ok when it was not
    uint64_t other = 0;
    uint64_t total() const {
        return overlaps + stale_writes_accepted + lost_updates + token_inversions + false_successes + other;
    }
};

enum class violation_kind { overlap, stale_write_accepted, lost_update, token_inversion, false_success, other };

struct cell_result {
    std::string scenario_id;        // "3", "6a"
    int scenario_number = 0;
    std::string title;
    std::string target;
    verdict expected = verdict::safe;
    verdict found = verdict::safe;
    bool errored = false;           // run() threw
    std::string error;
    std::vector<std::string> failed_requirements;
    bool passed() const { return !errored && failed_requirements.empty() && found == expected; }

    uint64_t acquisitions = 0;      // acquisitions checked
    uint64_t histories = 0;         // history files checked
    uint64_t faults = 0;            // faults injected
    std::vector<std::string> fault_kinds;
    std::map<std::string, uint64_t> faults_by_kind;  // how many of each kind were injected
    violation_counts violations;
    std::vector<std::string> violation_examples;  // first few, human-readable
    uint64_t stale_writes_rejected = 0;
    uint64_t writes_accepted = 0;

    std::vector<double> liveness_ms;           // measured holder-death → next acquisition
    std::optional<double> liveness_bound_ms;
    std::vector<double> lost_detection_ms;     // measured fault → on_lost callback
    std::optional<double> lost_detection_bound_ms;  // ttl/3 + one round trip
    std::string note;
    double seconds = 0;
};

// ---- the context a scenario runs in -----------------------------------------------------------

class context {
public:
    virtual ~context() = default;

    virtual const target& tgt() const = 0;
    // The shared lab (throws std::logic_error for a server of a backend not started).
    virtual lab::lab& lab() = 0;
    virtual run_size size() const = 0;
    bool soak() const { return size() == run_size::soak; }
    template <typename T>
    T ci_or_soak(T ci, T soak_value) const { return soak() ? soak_value : ci; }
    // This cell's own scratch directory (kept under the --out directory for inspection).
    virtual const std::filesystem::path& dir() const = 0;
    virtual const std::filesystem::path& history_dir() const = 0;
    virtual std::mt19937_64& rng() = 0;
    // A lock name unique to this cell: "faults/<scenario id>/<target>/<base>".
    virtual std::string lock_name(std::string_view base) const = 0;

    // A client of the target, in this process (not history-logged: use holders/workers for
    // anything the checkers should see).
    virtual dlock::client open_client() = 0;
    // Writes a copy of the target's config with `extra_yaml` appended (top-level keys, e.g.
    // "defaults: {ttl: 2s}\n"; the target's config has no `defaults` or `locks` section) into
    // dir(), and returns its path. To reach servers through a lab::tcp_proxy, write a config with
    // lab::write_config(path, backend, {proxy.listen_endpoint()}) instead.
    virtual std::filesystem::path write_config(const std::string& extra_yaml) = 0;

    // The fenced resource, started on first use (one per cell).
    virtual fenced_resource& resource() = 0;

    // Workers and holders, using `config` (empty: the target's config). Workers see the resource
    // when it was started before them.
    virtual std::unique_ptr<worker_group> contend(const contend_options& options,
                                                  const std::filesystem::path& config = {}) = 0;
    virtual std::unique_ptr<holder> spawn_holder(const std::string& label,
                                                 const std::filesystem::path& config = {}) = 0;
    // The same, with further NAME=VALUE environment entries for the holder process (e.g.
    // LD_PRELOAD of the suite's clock-shift shim: clock_shift_library()).
    virtual std::unique_ptr<holder> spawn_holder_with_env(const std::string& label, const std::filesystem::path& config,
                                                          const std::vector<std::string>& extra_env) = 0;

    // Runs the checkers over every history in history_dir() (and the resource's log, when the
    // resource runs) and adds the findings to the result: acquisitions and histories checked;
    // overlaps (cut at valid_until; uncut ones too when count_uncut_overlaps), token inversions
    // and duplicate tokens (when the target has fencing), lost updates, and stale writes accepted
    // (tokens that went down at the resource) as violations; writes rejected as stale. Call once,
    // after every worker and holder wrote its last event (or was killed).
    virtual check_report check_histories(bool count_uncut_overlaps = false) = 0;

    // Recording.
    virtual cell_result& result() = 0;
    virtual void fault(const std::string& kind) = 0;  // one fault injected: "SIGKILL holder", …
    virtual void violation(violation_kind kind, const std::string& example, uint64_t count = 1) = 0;
    // A check that must hold whatever the verdict; false adds `what` to failed_requirements.
    virtual bool require(bool ok, const std::string& what) = 0;
    virtual void record_liveness(milliseconds measured) = 0;  // bound = tgt().liveness_bound
    virtual void record_lost_detection(nanoseconds measured, nanoseconds bound) = 0;
    virtual void note(const std::string& text) = 0;  // appended, "; "-separated
    // A progress line on the runner's output, prefixed with the cell.
    virtual void log(const std::string& text) = 0;

    // One round trip to the target's server(s) as the client sees it: the median of a few
    // inspect() calls (0 for file). For lost-detection bounds: ttl/3 + round_trip().
    virtual nanoseconds round_trip() = 0;
};

// The LD_PRELOAD shim that shifts a process's wall clock (CLOCK_REALTIME, gettimeofday, time) by
// the number of seconds written in the file named by $DLOCK_FAULT_CLOCK_SHIFT_FILE, re-read on
// every call; monotonic clocks are untouched. Empty when the build has none.
std::string clock_shift_library();
// The directory of the loader tests' fake plugins (too old, too new, …); empty when not built.
std::string fake_plugin_dir();

// Polls `condition` every `step` until it is true or `limit` passes; returns its last value.
bool wait_until(const std::function<bool()>& condition, milliseconds limit, milliseconds step = milliseconds(5));

}  // namespace dlock::faults

// suite.cpp — the machinery behind suite.hpp: the scenario registry, the cell context, and the
// handles on worker processes, scripted holders and the fenced resource.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "framework.hpp"
#include "history.hpp"
#include "resource_client.hpp"
#include "support.hpp"

#ifndef DLOCK_FAULT_WORKER
#error "DLOCK_FAULT_WORKER (path of fault_worker) must be defined by the build"
#endif
#ifndef DLOCK_FENCED_RESOURCE
#error "DLOCK_FENCED_RESOURCE (path of fenced_resource) must be defined by the build"
#endif

namespace dlock::faults {

int64_t monotonic_ns() { return monotonic_now_ns(); }

std::string_view verdict_name(verdict v) { return v == verdict::safe ? "SAFE" : "EV"; }

const std::vector<std::string>& all_target_names() {
    static const std::vector<std::string> names = {"file", "redis", "redlock", "zookeeper", "zookeeper_ensemble",
                                                   "etcd", "etcd_cluster", "sql_lease", "sql_advisory",
                                                   "mysql_lease", "mysql_named"};
    return names;
}

milliseconds target::liveness_limit() const {
    return liveness_bound + std::max(milliseconds(2000), liveness_bound / 2);
}

std::string clock_shift_library() {
#ifdef DLOCK_FAULT_CLOCK_SHIFT
    return DLOCK_FAULT_CLOCK_SHIFT;
#else
    return "";
#endif
}

std::string fake_plugin_dir() {
#ifdef DLOCK_TEST_PLUGIN_DIR
    return DLOCK_TEST_PLUGIN_DIR;
#else
    return "";
#endif
}

bool wait_until(const std::function<bool()>& condition, milliseconds limit, milliseconds step) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
        if (condition()) return true;
        if (std::chrono::steady_clock::now() >= deadline) return condition();
        std::this_thread::sleep_for(step);
    }
}

// ---- registry -----------------------------------------------------------------------------------

namespace {

std::vector<scenario>& registry() {
    static std::vector<scenario> scenarios;  // function-local: safe from static-init order
    return scenarios;
}

}  // namespace

registrar::registrar(scenario s) { registry().push_back(std::move(s)); }

std::vector<const scenario*> registered_scenarios() {
    std::vector<const scenario*> out;
    for (const auto& s : registry()) out.push_back(&s);
    std::sort(out.begin(), out.end(), [](const scenario* a, const scenario* b) {
        return std::tie(a->number, a->variant) < std::tie(b->number, b->variant);
    });
    return out;
}

namespace {

// When each worker label was SIGKILLed: the checkers end that worker's open holds there.
class kill_registry {
public:
    void killed(const std::string& label) {
        std::lock_guard<std::mutex> guard(mutex_);
        killed_at_[label] = monotonic_ns();
    }
    std::map<std::string, int64_t> snapshot() const {
        std::lock_guard<std::mutex> guard(mutex_);
        return killed_at_;
    }

private:
    mutable std::mutex mutex_;
    std::map<std::string, int64_t> killed_at_;
};

std::string tail_of(const std::filesystem::path& path, size_t max_chars = 600) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    std::string s = text.str();
    if (s.size() > max_chars) s = "…" + s.substr(s.size() - max_chars);
    for (char& c : s)
        if (c == '\n') c = '|';
    return s;
}

// ---- fenced resource ----------------------------------------------------------------------------

class resource_process final : public fenced_resource {
public:
    explicit resource_process(const std::filesystem::path& dir) : log_(dir / "resource.jsonl") {
        socket_ = dir / "resource.sock";
        if (socket_.string().size() > 100) {  // sun_path holds 108 bytes
            char pattern[] = "/tmp/dlock-fr-XXXXXX";
            if (!mkdtemp(pattern)) throw std::runtime_error("mkdtemp for the resource socket failed");
            socket_ = std::filesystem::path(pattern) / "resource.sock";
        }
        process_ = std::make_unique<test::child_process>(
            std::vector<std::string>{DLOCK_FENCED_RESOURCE, socket_.string(), log_.string()}, true);
        std::string line;
        if (!process_->read_line(line, 10000) || line != "ready")
            throw std::runtime_error("the fenced resource did not start (" + line + ")");
    }

    const std::filesystem::path& socket_path() const override { return socket_; }
    std::filesystem::path log_path() const override { return log_; }

    resource_report report() override {
        resource_client client(socket_.string());
        const auto j = nlohmann::json::parse(client.request("report"));
        resource_report r;
        r.writes_accepted = j.value("writes_accepted", uint64_t(0));
        r.writes_rejected = j.value("writes_rejected", uint64_t(0));
        r.shared_tokens = j.value("shared_tokens", uint64_t(0));
        r.counter_increments = j.value("counter_increments", uint64_t(0));
        r.lost_updates = j.value("lost_updates", uint64_t(0));
        r.counter_value = j.value("counter_value", uint64_t(0));
        r.over_limit = j.value("over_limit", uint64_t(0));
        r.max_inside = j.value("max_inside", uint64_t(0));
        return r;
    }

private:
    std::filesystem::path socket_, log_;
    std::unique_ptr<test::child_process> process_;
};

// ---- contend workers ----------------------------------------------------------------------------

class contend_group final : public worker_group {
public:
    contend_group(const contend_options& o, const target& t, const std::filesystem::path& config,
                  const std::filesystem::path& history_dir, const std::filesystem::path& log_dir,
                  const std::string& resource_socket, std::mt19937_64& rng, std::shared_ptr<kill_registry> kills)
        : kills_(std::move(kills)) {
        if (o.name.empty()) throw std::invalid_argument("contend_options.name is required");
        for (int i = 0; i < o.processes; ++i) {
            const std::string label = fmt::format("{}-{}", o.label, i);
            labels_.push_back(label);
            stderr_paths_.push_back(log_dir / (label + ".stderr"));
            std::vector<std::string> argv = {
                DLOCK_FAULT_WORKER, "contend", "--config", config.string(), "--name", o.name,
                "--history", (history_dir / (label + ".jsonl")).string(), "--label", label,
                "--cycles", std::to_string(o.cycles), "--duration-ms", std::to_string(o.duration.count()),
                "--acquisitions", std::to_string(o.acquisitions),
                "--hold-ms", std::to_string(o.hold.count()),
                "--ttl-ms", std::to_string((o.ttl.count() > 0 ? o.ttl : t.ttl).count()),
                "--renew", o.renew ? "1" : "0", "--seed", std::to_string(rng()),
                "--try-percent", std::to_string(o.try_percent), "--short-percent", std::to_string(o.short_wait_percent),
                "--short-wait-ms", std::to_string(o.short_wait.count()), "--long-wait-ms", std::to_string(o.long_wait.count()),
                "--stderr", stderr_paths_.back().string(),
                "--permits", std::to_string(o.permits), "--shared-percent", std::to_string(o.shared_percent)};
            if (!resource_socket.empty()) {
                argv.push_back("--resource");
                argv.push_back(resource_socket);
            }
            workers_.push_back(std::make_unique<test::child_process>(argv, false, o.extra_env));
            status_.push_back(-1);
        }
    }

    std::size_t size() const override { return workers_.size(); }
    pid_t pid(std::size_t i) const override { return workers_.at(i)->pid(); }
    void kill(std::size_t i) override {
        // The time is taken before the signal: the kernel may free the lock (file, advisory) the
        // moment the process dies, before this thread runs again.
        kills_->killed(labels_.at(i));
        workers_.at(i)->kill(SIGKILL);
    }
    void pause(std::size_t i) override { workers_.at(i)->kill(SIGSTOP); }
    void resume(std::size_t i) override { workers_.at(i)->kill(SIGCONT); }

    bool wait(milliseconds limit) override {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        bool all_ok = true;
        for (size_t i = 0; i < workers_.size(); ++i) {
            if (status_[i] < 0) {
                const pid_t pid = workers_[i]->pid();
                for (;;) {
                    // Look without reaping (WNOWAIT), so that child_process reaps it and knows.
                    siginfo_t info{};
                    const int r = waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT);
                    if (r != 0 || info.si_pid == pid) {
                        status_[i] = workers_[i]->wait();
                        break;
                    }
                    if (std::chrono::steady_clock::now() >= deadline) {
                        workers_[i]->kill(SIGCONT);
                        kill(i);
                        workers_[i]->wait();
                        status_[i] = 1000;  // did not finish in time
                        break;
                    }
                    std::this_thread::sleep_for(milliseconds(10));
                }
            }
            if (status_[i] != 0) all_ok = false;
        }
        return all_ok;
    }

    bool running() const override {
        for (size_t i = 0; i < workers_.size(); ++i) {
            if (status_[i] >= 0) continue;
            siginfo_t info{};
            const pid_t pid = workers_[i]->pid();
            if (waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid != pid) return true;
        }
        return false;
    }

    std::string failures() const override {
        std::string out;
        for (size_t i = 0; i < workers_.size(); ++i) {
            if (status_[i] == 0) continue;
            out += fmt::format("{}: {} {}; ", labels_[i],
                               status_[i] == 1000 ? "did not finish in time" : status_[i] < 0 ? "still running" : "exit " + std::to_string(status_[i]),
                               tail_of(stderr_paths_[i], 300));
        }
        return out;
    }

    ~contend_group() override {
        for (size_t i = 0; i < workers_.size(); ++i) {
            if (status_[i] < 0) {
                kills_->killed(labels_[i]);
                workers_[i]->kill(SIGKILL);
                workers_[i]->kill(SIGCONT);
                workers_[i]->wait();
            }
        }
    }

private:
    std::shared_ptr<kill_registry> kills_;
    std::vector<std::string> labels_;
    std::vector<std::filesystem::path> stderr_paths_;
    std::vector<std::unique_ptr<test::child_process>> workers_;
    std::vector<int> status_;
};

// ---- scripted holder ----------------------------------------------------------------------------

class holder_process final : public holder {
public:
    holder_process(const std::string& label, const target& t, const std::filesystem::path& config,
                   const std::filesystem::path& history_dir, const std::filesystem::path& log_dir,
                   const std::string& resource_socket, std::shared_ptr<kill_registry> kills,
                   const std::vector<std::string>& extra_env)
        : label_(label), ttl_(t.ttl), kills_(std::move(kills)), stderr_path_(log_dir / (label + ".stderr")) {
        std::vector<std::string> argv = {DLOCK_FAULT_WORKER, "holder", "--config", config.string(),
                                         "--history", (history_dir / (label + ".jsonl")).string(),
                                         "--label", label, "--stderr", stderr_path_.string()};
        if (!resource_socket.empty()) {
            argv.push_back("--resource");
            argv.push_back(resource_socket);
        }
        process_ = std::make_unique<test::child_process>(argv, true, extra_env, true);
        std::string line;
        if (!process_->read_line(line, 30000) || line != "ready")
            throw std::runtime_error(fmt::format("holder {} did not start: {} {}", label, line, tail_of(stderr_path_)));
    }

    ~holder_process() override {
        if (alive_) {
            kills_->killed(label_);
            process_->kill(SIGKILL);
            process_->kill(SIGCONT);
            process_->wait();
        }
    }

    const std::string& label() const override { return label_; }
    pid_t pid() const override { return process_->pid(); }

    acquire_result acquire(const std::string& name, milliseconds wait, milliseconds ttl, bool renew) override {
        return acquire_as(name, hold_mode::exclusive(), wait, ttl, renew);
    }

    acquire_result acquire_as(const std::string& name, const hold_mode& mode, milliseconds wait, milliseconds ttl,
                              bool renew) override {
        const auto limit = std::max(reply_limit, wait + milliseconds(20000));
        const char kind = mode.how == hold_mode::kind::permit ? 'p' : mode.how == hold_mode::kind::shared ? 's' : 'x';
        const std::string mode_words = kind == 'x' ? std::string() : fmt::format(" {} {}", kind, mode.permits);
        const std::string answer = ask(fmt::format("acquire {} {} {} {}{}", name, wait.count(),
                                                   (ttl.count() > 0 ? ttl : ttl_).count(), renew ? 1 : 0, mode_words), limit);
        std::istringstream words(answer);
        acquire_result r;
        words >> r.status;
        if (r.status == "ok") {
            r.ok = true;
            words >> r.token >> r.valid_until_ns >> r.owner >> r.invoked_ns >> r.returned_ns;
        } else if (r.status == "timeout") {
            words >> r.invoked_ns >> r.returned_ns;
        } else if (r.status == "error") {
            words >> r.status >> r.invoked_ns >> r.returned_ns;
            std::getline(words, r.message);
        } else {
            throw std::runtime_error(fmt::format("holder {}: unexpected answer to acquire: {}", label_, answer));
        }
        return r;
    }

    std::string state(const std::string& name) override { return ask("state " + name, reply_limit); }
    uint64_t token(const std::string& name) override { return std::stoull(ask("token " + name, reply_limit)); }
    std::string release(const std::string& name) override { return ask("release " + name, reply_limit); }
    std::string release_previous(const std::string& name) override { return ask("release_previous " + name, reply_limit); }
    std::string raw(const std::string& line) override { return ask(line, reply_limit); }

    write_result fenced_write(const std::string& name) override {
        const std::string answer = ask("write " + name, reply_limit);
        std::istringstream words(answer);
        std::string outcome;
        write_result w;
        words >> outcome >> w.highest;
        if (outcome != "accepted" && outcome != "rejected")
            throw std::runtime_error(fmt::format("holder {}: write {}: {}", label_, name, answer));
        w.accepted = outcome == "accepted";
        return w;
    }

    std::string enter(const std::string& name) override {
        const std::string answer = ask("enter " + name, reply_limit);
        if (answer.rfind("ok ", 0) != 0 && answer.rfind("over ", 0) != 0)
            throw std::runtime_error(fmt::format("holder {}: enter {}: {}", label_, name, answer));
        return answer.substr(0, answer.find(' '));
    }

    void leave(const std::string& name) override {
        const std::string answer = ask("leave " + name, reply_limit);
        if (answer != "ok") throw std::runtime_error(fmt::format("holder {}: leave {}: {}", label_, name, answer));
    }

    int64_t counter_increment(const std::string& name, milliseconds sleep) override {
        const std::string answer = ask(fmt::format("incr {} {}", name, sleep.count()), reply_limit + sleep);
        if (answer.rfind("error", 0) == 0) throw std::runtime_error(fmt::format("holder {}: incr {}: {}", label_, name, answer));
        return std::stoll(answer);
    }

    std::optional<int64_t> lost_at_ns(const std::string& name) override {
        const std::string answer = ask("lost " + name, reply_limit);
        if (answer == "lost -") return std::nullopt;
        return std::stoll(answer.substr(5));
    }

    void kill() override {
        if (!alive_) return;
        kills_->killed(label_);  // before the signal (see contend_group::kill)
        process_->kill(SIGKILL);
        process_->kill(SIGCONT);
        process_->wait();
        alive_ = false;
    }
    void pause() override { process_->kill(SIGSTOP); }
    void resume() override { process_->kill(SIGCONT); }
    bool alive() override { return alive_ && ::kill(process_->pid(), 0) == 0; }
    void quit() override {
        if (!alive_) return;
        process_->kill(SIGCONT);
        std::string problem;
        try {
            ask("quit", reply_limit);
        } catch (const std::exception& e) {
            problem = e.what();
        }
        // Closing the client must end; a holder stuck in it is killed and reported.
        if (problem.empty() && !exited_within(reply_limit))
            problem = fmt::format("holder {} did not exit within {} ms of `quit` (its client close hangs)", label_,
                                  reply_limit.count());
        if (!problem.empty()) {
            kills_->killed(label_);
            process_->kill(SIGKILL);
        }
        process_->wait();
        alive_ = false;
        if (!problem.empty()) throw std::runtime_error(problem);
    }

private:
    // Polls (without reaping, so child_process still reaps it) until the process exited.
    bool exited_within(milliseconds limit) {
        return wait_until(
            [&] {
                siginfo_t info{};
                const int r = waitid(P_PID, id_t(process_->pid()), &info, WEXITED | WNOHANG | WNOWAIT);
                return r != 0 || info.si_pid == process_->pid();
            },
            limit, milliseconds(10));
    }

    std::string ask(const std::string& line, milliseconds limit) {
        if (!alive_) throw std::runtime_error(fmt::format("holder {} is not running (asked: {})", label_, line));
        process_->write_line(line);
        std::string answer;
        if (!process_->read_line(answer, int(std::min<int64_t>(limit.count(), INT32_MAX))))
            throw std::runtime_error(fmt::format("holder {}: no answer to `{}` within {} ms; stderr: {}", label_, line,
                                                 limit.count(), tail_of(stderr_path_)));
        return answer;
    }

    std::string label_;
    milliseconds ttl_;
    std::shared_ptr<kill_registry> kills_;
    std::filesystem::path stderr_path_;
    std::unique_ptr<test::child_process> process_;
    bool alive_ = true;
};

// ---- the cell context ---------------------------------------------------------------------------

class cell_context final : public context {
public:
    explicit cell_context(const cell_setup& setup)
        : setup_(setup), dir_(setup.dir), history_dir_(setup.dir / "histories"), rng_(setup.seed),
          kills_(std::make_shared<kill_registry>()) {
        std::filesystem::create_directories(history_dir_);
        std::filesystem::create_directories(dir_ / "logs");
        result_.scenario_id = setup.which->id();
        result_.scenario_number = setup.which->number;
        result_.title = setup.which->title;
        result_.target = setup.tgt->name;
        result_.expected = setup.expected.expected;
    }

    ~cell_context() override {
        // Workers and holders the scenario still owns are destroyed by it; the resource goes last.
        in_process_client_.close();
    }

    const target& tgt() const override { return *setup_.tgt; }
    lab::lab& lab() override {
        if (!setup_.lab) throw std::logic_error("this run started no lab");
        return *setup_.lab;
    }
    run_size size() const override { return setup_.size; }
    const std::filesystem::path& dir() const override { return dir_; }
    const std::filesystem::path& history_dir() const override { return history_dir_; }
    std::mt19937_64& rng() override { return rng_; }
    std::string lock_name(std::string_view base) const override {
        return fmt::format("faults/{}/{}/{}", setup_.which->id(), setup_.tgt->name, base);
    }

    dlock::client open_client() override { return dlock::client::open(setup_.tgt->config.string()); }

    std::filesystem::path write_config(const std::string& extra_yaml) override {
        std::ifstream in(setup_.tgt->config);
        std::stringstream text;
        text << in.rdbuf();
        const auto path = dir_ / fmt::format("config-{}.yaml", ++configs_written_);
        std::ofstream(path) << text.str() << extra_yaml;
        return path;
    }

    fenced_resource& resource() override {
        if (!resource_) resource_ = std::make_unique<resource_process>(dir_);
        return *resource_;
    }

    std::unique_ptr<worker_group> contend(const contend_options& options, const std::filesystem::path& config) override {
        return std::make_unique<contend_group>(options, tgt(), config.empty() ? tgt().config : config, history_dir_,
                                               dir_ / "logs", resource_socket(), rng_, kills_);
    }

    std::unique_ptr<holder> spawn_holder(const std::string& label, const std::filesystem::path& config) override {
        return spawn_holder_with_env(label, config, {});
    }

    std::unique_ptr<holder> spawn_holder_with_env(const std::string& label, const std::filesystem::path& config,
                                                  const std::vector<std::string>& extra_env) override {
        return std::make_unique<holder_process>(label, tgt(), config.empty() ? tgt().config : config, history_dir_,
                                                dir_ / "logs", resource_socket(), kills_, extra_env);
    }

    check_report check_histories(bool count_uncut_overlaps) override {
        check_inputs in;
        in.history_dir = history_dir_;
        in.killed_at = kills_->snapshot();
        in.fencing = tgt().fencing();
        in.now_ns = monotonic_ns();
        if (resource_) {
            in.resource_log = resource_->log_path();
            in.resource = resource_->report();
        }
        const auto found = run_checkers(in);
        const auto& r = found.report;
        result_.acquisitions += r.acquisitions;
        result_.histories += r.histories;
        result_.writes_accepted += r.resource.writes_accepted;
        result_.stale_writes_rejected += r.resource.writes_rejected;
        const std::string example = found.examples.empty() ? "" : found.examples.front();
        if (r.overlaps) violation(violation_kind::overlap, "overlap within valid_until: " + example, r.overlaps);
        if (count_uncut_overlaps && r.overlaps_uncut > r.overlaps)
            violation(violation_kind::overlap, "holders overlapping (acquire-ok … release-invoke): " + example,
                      r.overlaps_uncut - r.overlaps);
        if (r.token_inversions) violation(violation_kind::token_inversion, example, r.token_inversions);
        if (r.resource.shared_tokens) violation(violation_kind::token_inversion, "one token accepted from two owners", r.resource.shared_tokens);
        if (r.resource.lost_updates)
            violation(violation_kind::lost_update, "read-sleep-write counter lost an update", r.resource.lost_updates);
        if (r.resource.over_limit)
            violation(violation_kind::overlap, "the resource's census saw a holder enter beside holders its mode forbids",
                      r.resource.over_limit);
        if (found.stale_writes_accepted)
            violation(violation_kind::stale_write_accepted, example, found.stale_writes_accepted);
        return r;
    }

    cell_result& result() override { return result_; }

    void fault(const std::string& kind) override {
        ++result_.faults;
        ++result_.faults_by_kind[kind];
        if (std::find(result_.fault_kinds.begin(), result_.fault_kinds.end(), kind) == result_.fault_kinds.end())
            result_.fault_kinds.push_back(kind);
    }

    void violation(violation_kind kind, const std::string& example, uint64_t count) override {
        auto& v = result_.violations;
        switch (kind) {
        case violation_kind::overlap: v.overlaps += count; break;
        case violation_kind::stale_write_accepted: v.stale_writes_accepted += count; break;
        case violation_kind::lost_update: v.lost_updates += count; break;
        case violation_kind::token_inversion: v.token_inversions += count; break;
        case violation_kind::false_success: v.false_successes += count; break;
        case violation_kind::other: v.other += count; break;
        }
        if (result_.violation_examples.size() < 5 && !example.empty()) result_.violation_examples.push_back(example);
    }

    bool require(bool ok, const std::string& what) override {
        if (!ok) {
            result_.failed_requirements.push_back(what);
            log("REQUIREMENT FAILED: " + what);
        }
        return ok;
    }

    void record_liveness(milliseconds measured) override {
        result_.liveness_ms.push_back(double(measured.count()));
        result_.liveness_bound_ms = double(tgt().liveness_bound.count());
    }

    void record_lost_detection(nanoseconds measured, nanoseconds bound) override {
        result_.lost_detection_ms.push_back(double(measured.count()) / 1e6);
        result_.lost_detection_bound_ms = double(bound.count()) / 1e6;
    }

    void note(const std::string& text) override {
        result_.note += (result_.note.empty() ? "" : "; ") + text;
    }

    void log(const std::string& text) override {
        if (setup_.log) setup_.log(fmt::format("[{} {}] {}", setup_.which->id(), tgt().name, text));
    }

    nanoseconds round_trip() override {
        if (!in_process_client_) in_process_client_ = open_client();
        std::vector<int64_t> samples;
        for (int i = 0; i < 5; ++i) {
            const int64_t start = monotonic_ns();
            try {
                in_process_client_.inspect(lock_name("round-trip"));
            } catch (const std::exception&) {
                return nanoseconds(0);
            }
            samples.push_back(monotonic_ns() - start);
        }
        std::sort(samples.begin(), samples.end());
        return nanoseconds(samples[samples.size() / 2]);
    }

private:
    std::string resource_socket() const { return resource_ ? resource_->socket_path().string() : ""; }

    cell_setup setup_;
    std::filesystem::path dir_, history_dir_;
    std::mt19937_64 rng_;
    std::shared_ptr<kill_registry> kills_;
    cell_result result_;
    std::unique_ptr<resource_process> resource_;
    dlock::client in_process_client_;
    int configs_written_ = 0;
};

}  // namespace

cell_result run_cell(const cell_setup& setup) {
    const int64_t start = monotonic_ns();
    cell_result result;
    {
        cell_context ctx(setup);
        try {
            setup.which->run(ctx);
        } catch (const std::exception& e) {
            ctx.result().errored = true;
            ctx.result().error = e.what();
            ctx.log(std::string("ERROR: ") + e.what());
        }
        result = ctx.result();
    }
    result.found = result.violations.total() > 0 ? verdict::ev : verdict::safe;
    result.seconds = double(monotonic_ns() - start) / 1e9;
    return result;
}

}  // namespace dlock::faults

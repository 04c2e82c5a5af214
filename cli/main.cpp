// dlock — the command-line tool: run a command under a lock, inspect a lock, list backends,
// check a config. Human-readable output by default, --json for scripts.
//
// Exit codes (sysexits.h values, so they rarely collide with a command's own):
//   64 (EX_USAGE)    the command line is wrong (unknown subcommand or option, missing or extra
//                    argument, an option value that does not parse); one line on stderr;
//   78 (EX_CONFIG)   the config is invalid;
//   69 (EX_UNAVAILABLE) another dlock error (backend unreachable, plugin missing, ...);
//   70 (EX_SOFTWARE) an internal error (a bug: please report it).
// `dlock run` also exits with:
//   the command's own status (128+N when it died of signal N);
//   75 (EX_TEMPFAIL) the lock was not acquired within --wait;
//   76 (EX_PROTOCOL) the lease was lost while the command ran: it was sent SIGTERM;
//   126/127          the command could not be executed / was not found.
// `dlock inspect` exits 0 when the lock is held and 1 when it is free, so scripts can test it.
#include "dlock_internal/config.hpp"
#include "dlock_internal/loader.hpp"

#include <dlock/dlock.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <iostream>
#include <poll.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace {

constexpr int exit_usage = 64;
constexpr int exit_software = 70;
constexpr int exit_not_acquired = 75;
constexpr int exit_lost = 76;
constexpr int exit_config = 78;
constexpr int exit_dlock_error = 69;
constexpr int exit_inspect_free = 1;

using nlohmann::json;

int exit_code_for(const std::error_code& ec) {
    if (ec == dlock::errc::timeout) return exit_not_acquired;
    if (ec == dlock::errc::config || ec == dlock::errc::invalid_argument) return exit_config;
    if (ec == dlock::errc::lost) return exit_lost;
    return exit_dlock_error;
}

int report(const std::system_error& e) {
    std::cerr << "dlock: " << dlock_last_error() << " [" << e.code().message() << "]\n";
    return exit_code_for(e.code());
}

std::string capability_names(uint64_t caps) {
    static const std::pair<uint64_t, const char*> names[] = {
        {DLOCK_CAP_FENCING, "FENCING"}, {DLOCK_CAP_FAIR, "FAIR"},          {DLOCK_CAP_PUSH_WAIT, "PUSH_WAIT"},
        {DLOCK_CAP_TTL, "TTL"},         {DLOCK_CAP_SESSION_BOUND, "SESSION_BOUND"}, {DLOCK_CAP_QUORUM, "QUORUM"},
        {DLOCK_CAP_REENTRANT, "REENTRANT"}};
    std::string out;
    for (const auto& [bit, name] : names)
        if (caps & bit) out += (out.empty() ? "" : " ") + std::string(name);
    return out.empty() ? "none" : out;
}

json capability_list(uint64_t caps) {
    json list = json::array();
    std::stringstream words(capability_names(caps));
    for (std::string w; words >> w;)
        if (w != "none") list.push_back(w);
    return list;
}

std::chrono::milliseconds parse_cli_duration(const std::string& text, bool allow_forever, const char* flag) {
    const int64_t ms = dlock::config::parse_duration_ms(text, allow_forever, flag);
    return ms == INT64_MAX ? dlock::forever : std::chrono::milliseconds(ms);
}

// ---- dlock run -------------------------------------------------------------------------------

struct run_args {
    std::string name;
    std::string wait;
    std::string ttl;
    std::string kill_after = "10s";
    std::vector<std::string> command;
};

// The option values of `dlock run`, parsed. Checked before the backend is touched, so a bad value
// is a usage error that takes no lock.
struct run_plan {
    dlock::acquire_options options;
    std::chrono::milliseconds kill_after{};
};

// Throws std::exception with a one-line message that names the option.
run_plan plan_run(const run_args& args) {
    run_plan plan;
    plan.options.wait = args.wait.empty() ? dlock::forever : parse_cli_duration(args.wait, true, "--wait");
    if (!args.ttl.empty()) plan.options.ttl = parse_cli_duration(args.ttl, false, "--ttl");
    plan.kill_after = parse_cli_duration(args.kill_after, false, "--kill-after");
    return plan;
}

int wait_child(pid_t pid) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return exit_dlock_error;
}

int run_command(const std::string& config, const run_args& args, const run_plan& plan) {
    // Signals are received through a signalfd and forwarded to the command. Blocking them before
    // the client exists means the client's threads inherit the mask and never take them.
    sigset_t forwarded;
    sigemptyset(&forwarded);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&forwarded, s);
    sigset_t original;
    pthread_sigmask(SIG_BLOCK, &forwarded, &original);

    const dlock::acquire_options& options = plan.options;
    const std::chrono::milliseconds kill_after = plan.kill_after;

    std::error_code ec;
    dlock::client client = dlock::client::open(config, ec);
    if (ec) {
        std::cerr << "dlock: " << dlock_last_error() << "\n";
        return exit_code_for(ec);
    }
    dlock::lease lease = client.acquire(args.name, options, ec);
    if (ec) {
        if (ec == dlock::errc::timeout) std::cerr << "dlock: lock `" << args.name << "` not acquired: " << dlock_last_error() << "\n";
        else std::cerr << "dlock: " << dlock_last_error() << "\n";
        return exit_code_for(ec);
    }

    const int lost_fd = eventfd(0, EFD_CLOEXEC);
    lease.on_lost([lost_fd] {
        const uint64_t one = 1;
        [[maybe_unused]] ssize_t n = write(lost_fd, &one, sizeof one);
    });

    // The command's environment: ours plus the lease's identity.
    std::vector<std::string> env_storage;
    for (char** e = environ; *e; ++e) {
        const std::string entry(*e);
        if (entry.rfind("DLOCK_NAME=", 0) == 0 || entry.rfind("DLOCK_FENCING_TOKEN=", 0) == 0 || entry.rfind("DLOCK_OWNER=", 0) == 0)
            continue;
        env_storage.push_back(entry);
    }
    env_storage.push_back("DLOCK_NAME=" + std::string(lease.name()));
    env_storage.push_back("DLOCK_FENCING_TOKEN=" + std::to_string(lease.fencing_token()));
    env_storage.push_back("DLOCK_OWNER=" + std::string(lease.owner()));
    std::vector<char*> envp;
    for (auto& e : env_storage) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_storage = args.command;
    std::vector<char*> argv;
    for (auto& a : argv_storage) argv.push_back(a.data());
    argv.push_back(nullptr);

    // fork + exec rather than posix_spawn: the child asks for SIGTERM when dlock dies, so a command
    // never outlives the process whose death released its lock. Between fork and exec the child
    // calls only async-signal-safe functions; an exec failure travels back through a pipe.
    int exec_error_pipe[2];
    if (pipe2(exec_error_pipe, O_CLOEXEC) != 0) {
        std::cerr << "dlock: pipe failed: " << std::strerror(errno) << "\n";
        return exit_dlock_error;
    }
    const pid_t parent = getpid();
    const pid_t child = fork();
    if (child < 0) {
        std::cerr << "dlock: fork failed: " << std::strerror(errno) << "\n";
        return exit_dlock_error;
    }
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(exit_lost);  // dlock died before the request took effect
        for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) signal(s, SIG_DFL);
        pthread_sigmask(SIG_SETMASK, &original, nullptr);
        execvpe(argv[0], argv.data(), envp.data());
        const int e = errno;
        [[maybe_unused]] ssize_t n = write(exec_error_pipe[1], &e, sizeof e);
        _exit(127);
    }
    close(exec_error_pipe[1]);
    int exec_errno = 0;
    const bool exec_failed = read(exec_error_pipe[0], &exec_errno, sizeof exec_errno) == ssize_t(sizeof exec_errno);
    close(exec_error_pipe[0]);
    if (exec_failed) {
        wait_child(child);
        std::cerr << "dlock: cannot run `" << args.command[0] << "`: " << std::strerror(exec_errno) << "\n";
        lease.release(ec);
        return exec_errno == ENOENT ? 127 : 126;
    }

    const int pid_fd = int(syscall(SYS_pidfd_open, child, 0));
    const int signal_fd = signalfd(-1, &forwarded, SFD_CLOEXEC);
    bool lost = false;
    int exit_status = -1;
    while (exit_status < 0) {
        pollfd fds[3] = {{pid_fd, POLLIN, 0}, {lost_fd, POLLIN, 0}, {signal_fd, POLLIN, 0}};
        const int timeout_ms = lost ? int(std::min<int64_t>(kill_after.count(), INT32_MAX)) : -1;
        const int ready = poll(fds, 3, timeout_ms);
        if (ready < 0 && errno == EINTR) continue;
        if (ready == 0 && lost) {  // the command ignored SIGTERM for --kill-after
            kill(child, SIGKILL);
            continue;
        }
        if (fds[0].revents) exit_status = wait_child(child);
        if (fds[1].revents && !lost) {
            lost = true;
            std::cerr << "dlock: the lease on `" << args.name << "` was lost; sending SIGTERM to the command\n";
            kill(child, SIGTERM);
        }
        if (fds[2].revents) {
            signalfd_siginfo info{};
            if (read(signal_fd, &info, sizeof info) == ssize_t(sizeof info)) kill(child, int(info.ssi_signo));
        }
    }
    close(pid_fd);
    close(signal_fd);
    const dlock::release_outcome outcome = lease.release(ec);
    close(lost_fd);
    if (lost) return exit_lost;
    if (outcome == dlock::release_outcome::already_lost) {
        std::cerr << "dlock: the lease on `" << args.name << "` was lost before the command finished\n";
        return exit_lost;
    }
    if (outcome == dlock::release_outcome::unknown)
        std::cerr << "dlock: warning: release of `" << args.name << "` not confirmed: " << dlock_last_error() << "\n";
    return exit_status;
}

// ---- dlock inspect ---------------------------------------------------------------------------

int inspect_lock(const std::string& config, const std::string& name, bool as_json) {
    try {
        dlock::client client = dlock::client::open(config);
        const dlock::lock_info info = client.inspect(name);
        if (as_json) {
            json out = {{"name", name}, {"backend", std::string(client.backend())}, {"held", info.held},
                        {"holder", info.holder}, {"fencing_token", info.fencing_token}};
            out["ttl_left_ms"] = info.ttl_left ? json(info.ttl_left->count()) : json(nullptr);
            std::cout << out.dump() << "\n";
        } else {
            std::cout << fmt::format("lock:          {}\nbackend:       {}\nheld:          {}\n", name, client.backend(),
                                     info.held ? "yes" : "no");
            if (info.held) std::cout << "holder:        " << (info.holder.empty() ? "(unknown)" : info.holder) << "\n";
            std::cout << "fencing token: " << info.fencing_token << (info.held ? " (current holder's)" : " (last issued)") << "\n";
            if (info.ttl_left) std::cout << "ttl left:      " << info.ttl_left->count() << " ms\n";
        }
        return info.held ? 0 : exit_inspect_free;
    } catch (const std::system_error& e) {
        return report(e);
    }
}

// ---- dlock backends --------------------------------------------------------------------------

const char* type_name(uint32_t type) {
    switch (type) {
    case DLOCK_OPTION_STRING: return "string";
    case DLOCK_OPTION_INT: return "int";
    case DLOCK_OPTION_BOOL: return "bool";
    case DLOCK_OPTION_DURATION: return "duration";
    case DLOCK_OPTION_STRING_LIST: return "list";
    default: return "?";
    }
}

int list_backends(const std::string& config, const std::string& describe, bool as_json) {
    std::vector<std::string> plugin_path;
    try {
        if (!config.empty() && !dlock::config::looks_like_dsn(config)) plugin_path = dlock::config::load_yaml_file(config).plugin_path;
    } catch (const std::exception& e) {
        std::cerr << "dlock: " << e.what() << "\n";
        return exit_config;
    }
    std::vector<std::string> failures;
    const auto modules = dlock::loader::discover(plugin_path, failures);
    json out = json::array();
    bool described = false;
    for (const auto& m : modules) {
        if (!describe.empty() && m->name != describe) continue;
        described = true;
        const uint64_t caps = m->table->capabilities(nullptr) | DLOCK_CAP_REENTRANT;
        json entry = {{"name", m->name}, {"path", m->path}, {"abi_version", m->version},
                      {"capabilities", capability_list(caps)}, {"description", m->table->description ? m->table->description : ""}};
        json options = json::array();
        for (size_t i = 0; i < m->table->option_count; ++i) {
            const dlock_option_desc& o = m->table->options[i];
            options.push_back({{"name", o.name}, {"type", type_name(o.type)}, {"required", (o.flags & DLOCK_OPTION_REQUIRED) != 0},
                               {"secret", (o.flags & DLOCK_OPTION_SECRET) != 0},
                               {"default", o.default_value ? json(o.default_value) : json(nullptr)}, {"doc", o.doc ? o.doc : ""}});
        }
        entry["options"] = options;
        out.push_back(entry);
        if (as_json) continue;
        std::cout << fmt::format("{:<10} ABI v{}  {}\n           capabilities: {}\n", m->name, m->version, m->path,
                                 capability_names(caps));
        if (!describe.empty()) {
            std::cout << "           " << (m->table->description ? m->table->description : "") << "\n\n  options:\n";
            for (size_t i = 0; i < m->table->option_count; ++i) {
                const dlock_option_desc& o = m->table->options[i];
                std::cout << fmt::format("    {:<18} {:<9} {}{}\n        {}\n", o.name, type_name(o.type),
                                         (o.flags & DLOCK_OPTION_REQUIRED) ? "required" : fmt::format("default: {}", o.default_value ? o.default_value : "(none)"),
                                         (o.flags & DLOCK_OPTION_SECRET) ? fmt::format("  secret (or `{}_file: PATH`)", o.name) : "",
                                         o.doc ? o.doc : "");
            }
        }
    }
    if (as_json) {
        json doc = {{"backends", out}, {"failures", failures}};
        std::cout << doc.dump(2) << "\n";
    } else {
        for (const auto& f : failures) std::cout << "not loadable: " << f << "\n";
    }
    if (!describe.empty() && !described) {
        std::cerr << "dlock: no backend `" << describe << "` found (run `dlock backends` to list them)\n";
        return exit_dlock_error;
    }
    return 0;
}

// ---- dlock check -----------------------------------------------------------------------------

int check_config(const std::string& config, bool as_json) {
    const auto started = std::chrono::steady_clock::now();
    try {
        dlock::client client = dlock::client::open(config);
        client.inspect("dlock-check");  // one real round trip to the backend
        const auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
        if (as_json) {
            std::cout << json{{"ok", true}, {"backend", std::string(client.backend())},
                              {"capabilities", capability_list(client.capabilities())}, {"elapsed_ms", ms}}.dump()
                      << "\n";
        } else {
            std::cout << fmt::format("ok: backend `{}` reached in {:.1f} ms; capabilities: {}\n", client.backend(), ms,
                                     capability_names(client.capabilities()));
        }
        return 0;
    } catch (const std::system_error& e) {
        if (as_json) {
            std::cout << json{{"ok", false}, {"status", e.code().message()}, {"error", dlock_last_error()}}.dump() << "\n";
            return exit_code_for(e.code());
        }
        return report(e);
    }
}

// Reports a command-line mistake on one line, names the subcommand it concerns and where its help is.
int usage_error(CLI::App& app, const CLI::ParseError& e) {
    std::string command = "dlock";
    for (const CLI::App* sub : app.get_subcommands()) command += " " + sub->get_name();
    std::string what = e.what();
    if (app.get_subcommands().empty()) {
        // CLI11 says only "A subcommand is required" when the word given is not a subcommand.
        for (const std::string& word : app.remaining())
            if (!word.empty() && word[0] != '-') {
                what = fmt::format("`{}` is not a subcommand (run, inspect, backends, check)", word);
                break;
            }
    }
    if (command == "dlock run" && dynamic_cast<const CLI::ExtrasError*>(&e))
        what += " (options of the command go after `--`: dlock run NAME -- COMMAND ARGS)";
    std::cerr << command << ": " << what << "; see `" << command << " --help`\n";
    return exit_usage;
}

int dlock_main(int argc, char** argv) {
    CLI::App app{"dlock: one way to take a distributed lock, whatever runs behind it"};
    app.require_subcommand(1);
    // Options a subcommand does not know fall through to the top level, so the global options
    // (--config, --json) may also follow the subcommand, as in `dlock run --config FILE NAME -- CMD`.
    app.fallthrough();
    app.footer("Exit status: 64 usage error; 78 bad config; 69 other dlock errors; see each subcommand's --help.");
    std::string config;
    bool as_json = false;
    app.add_option("-c,--config", config, "Config file or DSN (default: $DLOCK_CONFIG, else the embedded `file` backend)");
    app.add_flag("--json", as_json, "Machine-readable output");

    run_args run;
    auto* run_cmd = app.add_subcommand("run", "Run a command while holding a lock; exports DLOCK_NAME, DLOCK_FENCING_TOKEN, DLOCK_OWNER");
    run_cmd->add_option("--wait", run.wait, "Give up after this long (e.g. 10s, 0 = try once, forever; default forever)");
    run_cmd->add_option("--ttl", run.ttl, "Lease length (e.g. 30s; default from the config)");
    run_cmd->add_option("--kill-after", run.kill_after, "After SIGTERM on a lost lease, SIGKILL the command after this long")
        ->capture_default_str();
    run_cmd->add_option("name", run.name, "Lock name")->required();
    run_cmd->add_option("command", run.command, "Command and arguments (after --)")->required();
    run_cmd->footer("Exit status: the command's; 75 not acquired in time; 76 lease lost (command got SIGTERM); "
                    "64 usage error; 78 bad config; 69 other dlock errors; 126/127 command not executable/not found.");

    std::string inspect_name;
    auto* inspect_cmd = app.add_subcommand("inspect", "Show who holds a lock, its fencing token and ttl left");
    inspect_cmd->add_option("name", inspect_name, "Lock name")->required();
    inspect_cmd->footer("Exit status: 0 held; 1 free; 64 usage error; 78 bad config; 69 other dlock errors.");

    std::string describe;
    auto* backends_cmd = app.add_subcommand("backends", "List the backends found, their ABI versions and capabilities");
    backends_cmd->add_option("--describe", describe, "Also print the options of this backend");

    auto* check_cmd = app.add_subcommand("check", "Validate the config and reach the backend");

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return app.exit(e);  // --help
        return usage_error(app, e);
    }
    if (*run_cmd) {
        run_plan plan;
        try {
            plan = plan_run(run);
        } catch (const std::exception& e) {
            std::cerr << "dlock run: " << e.what() << "; see `dlock run --help`\n";
            return exit_usage;
        }
        return run_command(config, run, plan);
    }
    if (*inspect_cmd) return inspect_lock(config, inspect_name, as_json);
    if (*backends_cmd) return list_backends(config, describe, as_json);
    if (*check_cmd) return check_config(config, as_json);
    return exit_usage;
}

}  // namespace

int main(int argc, char** argv) {
    // Each subcommand reports its own errors; this is the last firewall, so that no exception ends
    // dlock with a signal.
    try {
        return dlock_main(argc, argv);
    } catch (const std::exception& e) {
        std::cerr << "dlock: internal error: " << e.what() << "\n";
    } catch (...) {
        std::cerr << "dlock: internal error\n";
    }
    return exit_software;
}

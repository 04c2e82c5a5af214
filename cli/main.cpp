// dlock — the command-line tool: run a command under a lock (or a permit, or shared), inspect a
// lock or semaphore, list what is held, break a lock, list backends, check a config. Human-readable output by default, --json for scripts.
//
// Exit codes (sysexits.h values, so they rarely collide with a command's own):
//   64 (EX_USAGE)    the command line is wrong (unknown subcommand or option, missing or extra
//                    argument, an option value that does not parse); one line on stderr;
//   78 (EX_CONFIG)   the config is invalid;
//   77 (EX_NOPERM)   the server refused the operation to this identity (DLOCK_PERMISSION);
//   69 (EX_UNAVAILABLE) another dlock error (backend unreachable, plugin missing, an operation the
//                    backend does not offer, ...);
//   70 (EX_SOFTWARE) an internal error (a bug: please report it).
// `dlock run` also exits with:
//   the command's own status (128+N when it died of signal N);
//   75 (EX_TEMPFAIL) the lock was not acquired within --wait;
//   76 (EX_PROTOCOL) the lease was lost while the command ran: it was sent SIGTERM;
//   126/127          the command could not be executed / was not found.
// `dlock inspect` exits 0 when the lock is held and 1 when it is free, so scripts can test it.
// `dlock list` and `dlock break` exit 0 on success.
// It uses dlock's public API only (dlock.hpp, dlock_admin.hpp), so a tool of one's own can do what
// it does. The subcommands live in a file each (run.cpp, inspect.cpp, admin.cpp for list and break,
// backends.cpp, check.cpp);
// this file parses the command line and dispatches.
#include "cli.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <iostream>
#include <limits>

namespace {

namespace cli = dlock::cli;
using cli::exit_software;
using cli::exit_usage;

// Reports a command-line mistake on one line, names the subcommand it concerns and where its help is.
int usage_error(CLI::App& app, const CLI::ParseError& e) {
    std::string command = "dlock";
    for (const CLI::App* sub : app.get_subcommands()) command += " " + sub->get_name();
    std::string what = e.what();
    if (app.get_subcommands().empty()) {
        // CLI11 says only "A subcommand is required" when the word given is not a subcommand.
        for (const std::string& word : app.remaining())
            if (!word.empty() && word[0] != '-') {
                what = fmt::format("`{}` is not a subcommand (run, inspect, list, break, backends, check)", word);
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
    app.footer("Exit status: 64 usage error; 78 bad config; 77 permission denied; 69 other dlock errors; "
               "see each subcommand's --help.");
    std::string config;
    bool as_json = false;
    app.add_option("-c,--config", config, "Config file or DSN (default: $DLOCK_CONFIG, else the embedded `file` backend)");
    app.add_flag("--json", as_json, "Machine-readable output");

    cli::run_args run;
    auto* run_cmd = app.add_subcommand("run", "Run a command while holding a lock; exports DLOCK_NAME, DLOCK_FENCING_TOKEN, DLOCK_OWNER");
    run_cmd->add_option("--wait", run.wait, "Give up after this long (e.g. 10s, 0 = try once, forever; default forever)");
    run_cmd->add_option("--ttl", run.ttl, "Lease length (e.g. 30s; default from the config)");
    run_cmd->add_option("--kill-after", run.kill_after, "After SIGTERM on a lost lease, SIGKILL the command after this long")
        ->capture_default_str();
    auto* permits_opt = run_cmd->add_option("--permits", run.permits, "Hold one of the N permits of the semaphore NAME")
                            ->check(CLI::Range(uint32_t(1), std::numeric_limits<uint32_t>::max()));
    run_cmd->add_flag("--shared", run.shared, "Hold NAME shared, beside other shared holders (an exclusive holder excludes them all)")
        ->excludes(permits_opt);
    run_cmd->add_option("name", run.name, "Lock name")->required();
    run_cmd->add_option("command", run.command, "Command and arguments (after --)")->required();
    run_cmd->footer("Exit status: the command's; 75 not acquired in time; 76 lease lost (command got SIGTERM); "
                    "64 usage error; 78 bad config; 77 permission denied; 69 other dlock errors (the backend has "
                    "no semaphores or shared locks, ...); 126/127 command not executable/not found.");

    std::string inspect_name;
    bool inspect_semaphore = false;
    auto* inspect_cmd = app.add_subcommand("inspect", "Show who holds a lock (every holder), fencing tokens and ttl left");
    inspect_cmd->add_option("name", inspect_name, "Lock name")->required();
    inspect_cmd->add_flag("--semaphore", inspect_semaphore, "NAME is a semaphore: show its permit holders");
    inspect_cmd->footer("Exit status: 0 held; 1 free; 64 usage error; 78 bad config; 77 permission denied; 69 other dlock errors.");

    std::string list_prefix;
    auto* list_cmd = app.add_subcommand("list", "List the holders of every lock and semaphore whose name starts with PREFIX");
    list_cmd->add_option("prefix", list_prefix, "Name prefix (default: everything)");
    list_cmd->footer("Exit status: 0 listed; 64 usage error; 78 bad config; 77 permission denied; "
                     "69 other dlock errors (the backend cannot list its locks, ...).");

    std::string break_name;
    bool break_semaphore = false;
    auto* break_cmd = app.add_subcommand("break", "Force-release every holder of a lock (fenced: the next holder's token is higher; without tokens, as on redlock, the name stays taken until the broken lease's validity ends)");
    break_cmd->add_option("name", break_name, "Lock name")->required();
    break_cmd->add_flag("--semaphore", break_semaphore, "NAME is a semaphore: release all its permits");
    break_cmd->footer("Exit status: 0 done (stdout says how many holds were broken); 64 usage error; 78 bad config; "
                      "77 permission denied; 69 other dlock errors.");

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
    if (*run_cmd) return cli::run(config, run);
    if (*inspect_cmd) return cli::inspect(config, inspect_name, inspect_semaphore, as_json);
    if (*list_cmd) return cli::list(config, list_prefix, as_json);
    if (*break_cmd) return cli::break_lock(config, break_name, break_semaphore, as_json);
    if (*backends_cmd) return cli::backends(config, describe, as_json);
    if (*check_cmd) return cli::check(config, as_json);
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

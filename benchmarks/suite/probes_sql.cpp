// probes_sql.cpp — the sql probes (sql_lease, sql_advisory): the floor through the plugin's own
// session code (plugins/sql/pg_client.cpp: libpqxx connection and settings, prepared statements) and
// SQL text (sql_statements.hpp), server statements counted from PostgreSQL's statement log, and the
// peer tooz postgresql (S8).
#include "pg_client.hpp"
#include "sql_statements.hpp"

#include "probes_support.hpp"

#include <dlock/dlock.hpp>

#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

#include <chrono>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <thread>

#include <unistd.h>

namespace dlock::bench::family {
namespace {

using namespace std::chrono_literals;

bool lease_mode(const target& t) { return t.name == "sql_lease"; }

// The two statements of a cycle through the plugin's own session, on scratch tables that have the
// plugin's DDL, plus `SELECT 1` prepared the same way for reference.
class floor_client {
public:
    floor_client(const std::string& dsn, bool lease) : lease_(lease) {
        dlock::sql::settings settings;
        settings.dsn = dsn;
        settings.mode = lease ? dlock::sql::lock_mode::lease : dlock::sql::lock_mode::advisory;
        dlock::sql::resolve(settings);
        dlock::sql::statements sql{"bench_floor", "bench_floor_advisory", "bench_floor_schema", "bench_floor_holders"};
        auto statements = lease ? sql.lease() : sql.advisory();
        statements.emplace_back("select1", "SELECT 1");
        session_ = std::make_unique<dlock::sql::session>(settings, statements);
        pqxx::nontransaction tx(session_->connection());
        for (const auto& create : sql.tables()) tx.exec(create);
        tx.commit();
    }
    void acquire() {
        if (lease_) session_->run("acquire", std::string("bench/floor"), owner_, int64_t(30000), std::string("bench"), 0, int64_t(50), int64_t(0));
        else session_->run("try_lock", int64_t(42), std::string("bench/floor"), owner_, std::string("bench"));
    }
    void release() {
        if (lease_) session_->run("release", std::string("bench/floor"), owner_, std::string("dlock_floor"));
        else session_->run("unlock", int64_t(42));
    }
    void select1() { session_->run("select1"); }

private:
    bool lease_;
    std::unique_ptr<dlock::sql::session> session_;
    std::string owner_ = "0123456789abcdef0123456789abcdef";
};

// The statements PostgreSQL logged (log_statement = all: "LOG:  statement: ..." for simple queries,
// "LOG:  execute <name>: ..." for prepared ones) between two marker statements of the admin session.
long long logged_statements_between(const std::filesystem::path& log, const std::string& begin, const std::string& end) {
    std::ifstream in(log);
    long long count = 0;
    bool inside = false;
    for (std::string line; std::getline(in, line);) {
        if (line.find(begin) != std::string::npos) {
            inside = true;
            count = 0;
            continue;
        }
        if (line.find(end) != std::string::npos) return inside ? count : -1;
        if (inside && (line.find("LOG:  statement: ") != std::string::npos || line.find("LOG:  execute ") != std::string::npos)) ++count;
    }
    return -1;
}

}  // namespace

calibration calibrate_sql(const target& t, dlock::lab::lab& lab, run_size size, const floor_interleaver& interleave) {
    calibration c;
    c.min_round_trips = 2;
    const int cycles = support::calibration_cycles(size), warmup = std::min(cycles, 1000);
    floor_client f(lab.sql().dsn(), lease_mode(t));
    c.operations.emplace_back("prepared SELECT 1", support::time_cycles(cycles, warmup, [&] { f.select1(); }));
    support::time_cycles(0, warmup, [&] {
        f.acquire();
        f.release();
    });
    std::vector<double> acquire_us, release_us;
    for (int i = 0; i < cycles; ++i) {
        auto start = support::clock_type::now();
        f.acquire();
        acquire_us.push_back(support::us_since(start));
        start = support::clock_type::now();
        f.release();
        release_us.push_back(support::us_since(start));
    }
    const bool lease = lease_mode(t);
    c.operations.emplace_back(lease ? "prepared acquire (INSERT ... ON CONFLICT ... RETURNING fence)" : "prepared try_lock (pg_try_advisory_lock + fence upsert)",
                              summarize(acquire_us));
    c.operations.emplace_back(lease ? "prepared release (UPDATE owner = NULL + pg_notify)" : "prepared unlock (pg_advisory_unlock)",
                              summarize(release_us));
    c.floor = support::floor_samples(interleave, cycles, warmup, [&] {
        f.acquire();
        f.release();
    });
    c.method = lease ? "the plugin's acquire + release prepared statements (autocommit) through its libpqxx session code"
                     : "the plugin's try_lock + unlock prepared statements (autocommit) through its libpqxx session code";
    // The lab's PostgreSQL runs with fsync=off unless durable: then a commit flushes the WAL.
    if (lab.options().sql.durable) c.fsync_us = support::fsync_us(lab.sql().dir(), 200);
    return c;
}

// PostgreSQL's own count, without a restart: log_statement = all (a reload, which every session
// picks up before its next command), the cycles between two marker statements, then back to the
// default. pg_stat_statements would need shared_preload_libraries, so a restart that breaks the
// driver's open sessions.
command_count count_sql(const target& t, dlock::lab::lab& lab, const std::function<void(int)>& run_cycles) {
    (void)t;
    command_count r;
    r.minimum = 2;
    r.source = "PostgreSQL statement log (log_statement = all)";
    auto admin = lab.sql().client();
    const int cycles = 1000;
    const std::string mark = "dlock-probe-mark-" + std::to_string(::getpid()) + "-" + std::to_string(support::clock_type::now().time_since_epoch().count());
    admin.execute("ALTER SYSTEM SET log_statement = 'all'");
    admin.execute("SELECT pg_reload_conf()");
    std::this_thread::sleep_for(300ms);
    admin.execute("SELECT '" + mark + "-begin'");
    try {
        run_cycles(cycles);
    } catch (...) {
        admin.execute("ALTER SYSTEM RESET log_statement");
        admin.execute("SELECT pg_reload_conf()");
        throw;
    }
    admin.execute("SELECT '" + mark + "-end'");
    admin.execute("ALTER SYSTEM RESET log_statement");
    admin.execute("SELECT pg_reload_conf()");
    const long long logged = logged_statements_between(lab.sql().log_path(), mark + "-begin", mark + "-end");
    if (logged >= 0) r.per_cycle = double(logged) / cycles;
    else r.source += ": markers not found in " + lab.sql().log_path().string();
    return r;
}

std::vector<peer_result> peers_sql(const target& t, dlock::lab::lab& lab, run_size size) {
    std::vector<peer_result> out;
    const int cycles = support::peer_cycles(size);
    const std::string dsn = lab.sql().dsn();
    for (const std::string variant : {"blocking", "try"}) {
        peer_result r;
        r.backend = t.name;
        r.peer = "tooz postgresql";
        r.settings = variant == "blocking" ? "default (acquire() blocking: pg_advisory_lock)"
                                           : "tuned: acquire(blocking=False), pg_try_advisory_lock";
        r.version = support::package_version("python3-tooz");
        out.push_back(support::peer_with_dlock_around(r, t.config, cycles, [&] {
            return support::run_peer_process({support::debian_python(), support::peers_dir() + "/sql_tooz.py", dsn, std::to_string(cycles), variant},
                                             t.scratch / "peer-sql.log", 300s);
        }));
    }
    return out;
}

}  // namespace dlock::bench::family

// probes_mysql.cpp — the MySQL probes (mysql_lease, mysql_named) on the lab's MariaDB: the floor
// through the plugin's own client code (plugins/sql/mysql_client.cpp: MariaDB Connector/C
// connection, prepared statements) and SQL text (mysql_statements.hpp), server statements counted by
// MariaDB's Questions status counter, and the peer tooz mysql (S8, python3-pymysql).
#include "mysql_client.hpp"
#include "mysql_statements.hpp"

#include "probes_support.hpp"

#include <chrono>
#include <memory>
#include <string>

namespace dlock::bench::family {
namespace {

using namespace std::chrono_literals;
namespace my = dlock::sql::mysql;

bool lease_mode(const target& t) { return t.name == "mysql_lease"; }

my::settings settings_for(const dlock::lab::mariadb_server& server, bool lease) {
    my::settings s;
    my::parse_dsn(server.dsn(), s);
    s.mode = lease ? dlock::sql::lock_mode::lease : dlock::sql::lock_mode::advisory;
    return s;
}

// The two statements of a cycle through the plugin's own connection code, on scratch tables that
// have the plugin's DDL, plus `SELECT 1` prepared the same way for reference.
class floor_client {
public:
    floor_client(const dlock::lab::mariadb_server& server, bool lease) : lease_(lease), settings_(settings_for(server, lease)) {
        my::statements sql{"bench_floor", "bench_floor_named", "bench_floor_schema", "bench_floor_holders"};
        statements_ = lease ? sql.lease() : sql.named();
        statements_.emplace_back("select1", "SELECT 1");
        connection_ = std::make_unique<my::connection>(settings_, statements_, nullptr, INT64_MAX);
        for (const auto& create : sql.tables()) connection_->query(create);
    }
    void acquire() {
        if (lease_) connection_->run("acquire", {std::string("bench/floor"), owner_, int64_t(30'000'000), std::string("bench")});
        else connection_->run("lock", {std::string("bench/floor"), owner_, std::string("bench"), std::string("dlock:bench/floor"), std::string("0")});
    }
    void release() {
        if (lease_) connection_->run("release", {std::string("bench/floor"), owner_});
        else connection_->run("unlock", {std::string("dlock:bench/floor")});
    }
    void select1() { connection_->run("select1", {}); }

private:
    bool lease_;
    my::settings settings_;
    std::vector<std::pair<std::string, std::string>> statements_;
    std::unique_ptr<my::connection> connection_;
    std::string owner_ = "0123456789abcdef0123456789abcdef";
};

}  // namespace

calibration calibrate_mysql(const target& t, dlock::lab::lab& lab, run_size size, const floor_interleaver& interleave) {
    calibration c;
    c.min_round_trips = 2;
    const int cycles = support::calibration_cycles(size), warmup = std::min(cycles, 1000);
    const bool lease = lease_mode(t);
    floor_client f(lab.mariadb(), lease);
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
    c.operations.emplace_back(lease ? "prepared acquire (INSERT ... ON DUPLICATE KEY UPDATE, fence in LAST_INSERT_ID)"
                                    : "prepared lock (INSERT ... SELECT ... WHERE GET_LOCK(), fence upsert)",
                              summarize(acquire_us));
    c.operations.emplace_back(lease ? "prepared release (UPDATE owner = NULL)" : "prepared unlock (RELEASE_LOCK)", summarize(release_us));
    c.floor = support::floor_samples(interleave, cycles, warmup, [&] {
        f.acquire();
        f.release();
    });
    c.method = lease ? "the plugin's acquire + release prepared statements (autocommit) through its Connector/C code"
                     : "the plugin's lock (GET_LOCK, timeout 0) + unlock prepared statements through its Connector/C code";
    return c;
}

// MariaDB's Questions counter (statements clients ran: COM_QUERY and COM_STMT_EXECUTE, not pings or
// prepares), read before and after; each read is one statement of its own, taken off.
command_count count_mysql(const target& t, dlock::lab::lab& lab, const std::function<void(int)>& run_cycles) {
    (void)t;
    command_count r;
    r.minimum = 2;
    r.source = "MariaDB Questions (SHOW GLOBAL STATUS)";
    auto questions = [&] {
        auto admin = lab.mariadb().client();
        return std::stoll(admin.query_value("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = "
                                            "'QUESTIONS'")
                              .value_or("0"));
    };
    const int cycles = 1000;
    const long long before = questions();
    run_cycles(cycles);
    const long long after = questions();
    r.per_cycle = double(after - before - 1) / cycles;  // the second read counted itself
    return r;
}

std::vector<peer_result> peers_mysql(const target& t, dlock::lab::lab& lab, run_size size) {
    std::vector<peer_result> out;
    const int cycles = support::peer_cycles(size);
    const std::string dsn = lab.mariadb().dsn();
    for (const std::string variant : {"blocking", "try"}) {
        peer_result r;
        r.backend = t.name;
        r.peer = "tooz mysql";
        r.settings = variant == "blocking" ? "default (acquire() blocking: GET_LOCK with a timeout)"
                                           : "tuned: acquire(blocking=False), GET_LOCK(name, 0)";
        r.version = support::package_version("python3-tooz");
        out.push_back(support::peer_with_dlock_around(r, t.config, cycles, [&] {
            return support::run_peer_process({support::debian_python(), support::peers_dir() + "/sql_tooz.py", dsn, std::to_string(cycles), variant},
                                             t.scratch / "peer-mysql.log", 300s);
        }));
    }
    return out;
}

}  // namespace dlock::bench::family

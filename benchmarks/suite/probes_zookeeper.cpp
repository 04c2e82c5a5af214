// probes_zookeeper.cpp — the zookeeper probes: the floor through libzookeeper_mt (the C client the
// plugin uses: create EPHEMERAL_SEQUENTIAL + get_children + delete), server requests from `mntr`,
// and the peers kazoo Lock, tooz's zookeeper driver and Curator's InterProcessMutex (S8).
#ifndef THREADED
#define THREADED  // the C client's synchronous calls (libzookeeper_mt)
#endif
#include <zookeeper/zookeeper.h>

#include "probes_support.hpp"

#include "dlock/lab/faults.hpp"

#include <dlock/dlock.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace dlock::bench::family {
namespace {

using namespace std::chrono_literals;

// A plain session of the C client with synchronous calls, set up as the plugin sets its own.
class raw_session {
public:
    explicit raw_session(const std::string& connect) {
        zh_ = zookeeper_init(connect.c_str(), [](zhandle_t*, int, int, const char*, void*) {}, 10000, nullptr, nullptr, 0);
        if (!zh_) throw std::runtime_error("zookeeper_init failed for " + connect);
        zoo_set_servers_resolution_delay(zh_, -1);  // as the plugin does: no name resolution per request
        const auto until = support::clock_type::now() + 10s;
        while (zoo_state(zh_) != ZOO_CONNECTED_STATE) {
            if (support::clock_type::now() > until) throw std::runtime_error("no ZooKeeper session with " + connect);
            std::this_thread::sleep_for(5ms);
        }
    }
    ~raw_session() { zookeeper_close(zh_); }
    raw_session(const raw_session&) = delete;
    raw_session& operator=(const raw_session&) = delete;
    zhandle_t* handle() const { return zh_; }

private:
    zhandle_t* zh_ = nullptr;
};

void check(int rc, const char* what) {
    if (rc != ZOK) throw std::runtime_error(std::string("zookeeper floor: ") + what + ": " + zerror(rc));
}

// One step of the recipe's uncontended cycle.
struct floor_cycle {
    raw_session& zk;
    char path[256] = {};
    void create() {
        Stat stat{};
        check(zoo_create2(zk.handle(), "/bench-floor/_c_0123456789abcdef0123456789abcdef-lock-", "", 0, &ZOO_OPEN_ACL_UNSAFE,
                          ZOO_EPHEMERAL_SEQUENTIAL, path, sizeof path, &stat),
              "create");
    }
    void children() {
        String_vector names{};
        check(zoo_get_children(zk.handle(), "/bench-floor", 0, &names), "get_children");
        deallocate_String_vector(&names);
    }
    void remove() { check(zoo_delete(zk.handle(), path, -1), "delete"); }
    void exists() {
        Stat stat{};
        check(zoo_exists(zk.handle(), "/bench-floor", 0, &stat), "exists");
    }

    // What the plugin sends for one acquire (zookeeper_plugin.cpp, acquisition::enqueue): the
    // create and, pipelined behind it on the same session, the children listing with its watch;
    // one round trip for both. The replies come on the C client's completion thread.
    void create_and_list() {
        replies r;
        check(zoo_acreate2(zk.handle(), "/bench-floor/_c_0123456789abcdef0123456789abcdef-lock-", "", 0, &ZOO_OPEN_ACL_UNSAFE,
                           ZOO_EPHEMERAL_SEQUENTIAL, &replies::created, &r),
              "acreate2");
        check(zoo_awget_children(zk.handle(), "/bench-floor", [](zhandle_t*, int, int, const char*, void*) {}, nullptr,
                                 &replies::listed, &r),
              "awget_children");
        std::unique_lock<std::mutex> lock(r.mutex);
        r.done.wait(lock, [&] { return r.pending == 0; });
        check(r.create_rc, "create");
        check(r.list_rc, "get_children");
        std::snprintf(path, sizeof path, "%s", r.path.c_str());
    }

private:
    struct replies {
        std::mutex mutex;
        std::condition_variable done;
        int pending = 2;
        int create_rc = ZOK, list_rc = ZOK;
        std::string path;
        void finish() {
            std::lock_guard<std::mutex> lock(mutex);
            if (--pending == 0) done.notify_one();
        }
        static void created(int rc, const char* value, const Stat*, const void* data) {
            auto* self = static_cast<replies*>(const_cast<void*>(data));
            {
                std::lock_guard<std::mutex> lock(self->mutex);
                self->create_rc = rc;
                if (rc == ZOK && value) self->path = value;
            }
            self->finish();
        }
        static void listed(int rc, const String_vector*, const void* data) {
            auto* self = static_cast<replies*>(const_cast<void*>(data));
            {
                std::lock_guard<std::mutex> lock(self->mutex);
                self->list_rc = rc;
            }
            self->finish();
        }
    };
};

std::map<std::string, long long> mntr(const dlock::lab::endpoint& server) {
    std::map<std::string, long long> out;
    std::istringstream lines(dlock::lab::zookeeper_four_letter_word(server, "mntr"));
    for (std::string line; std::getline(lines, line);) {
        const std::size_t tab = line.find('\t');
        if (tab == std::string::npos) continue;
        try {
            out[line.substr(0, tab)] = std::stoll(line.substr(tab + 1));
        } catch (const std::exception&) {  // a text value (zk_version, zk_server_state): not a counter
        }
    }
    return out;
}

}  // namespace

calibration calibrate_zookeeper(const target& t, dlock::lab::lab& lab, run_size size, const floor_interleaver& interleave) {
    (void)t;
    calibration c;
    c.min_round_trips = 2;  // 3 requests
    const int cycles = support::calibration_cycles(size), warmup = std::min(cycles, 1000);
    const std::string connect = lab.zookeeper().client_endpoint().to_string();
    raw_session zk(connect);
    const int made = zoo_create(zk.handle(), "/bench-floor", "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, nullptr, 0);
    if (made != ZOK && made != ZNODEEXISTS) check(made, "create /bench-floor");
    floor_cycle f{zk};
    c.operations.emplace_back("exists", support::time_cycles(cycles, warmup, [&] { f.exists(); }));
    std::vector<double> create_us, children_us, delete_us;
    for (int i = 0; i < cycles; ++i) {
        auto start = support::clock_type::now();
        f.create();
        create_us.push_back(support::us_since(start));
        start = support::clock_type::now();
        f.children();
        children_us.push_back(support::us_since(start));
        start = support::clock_type::now();
        f.remove();
        delete_us.push_back(support::us_since(start));
    }
    c.operations.emplace_back("create EPHEMERAL_SEQUENTIAL", summarize(create_us));
    c.operations.emplace_back("get_children", summarize(children_us));
    c.operations.emplace_back("delete", summarize(delete_us));
    std::vector<double> pair_us;
    for (int i = 0; i < cycles; ++i) {
        const auto start = support::clock_type::now();
        f.create_and_list();
        pair_us.push_back(support::us_since(start));
        f.remove();
    }
    c.operations.emplace_back("create + get_children (watch), pipelined", summarize(pair_us));
    c.floor = support::floor_samples(interleave, cycles, warmup, [&] {
        f.create_and_list();
        f.remove();
    });
    c.method = "create(EPHEMERAL_SEQUENTIAL) and get_children (with a watch) pipelined on one session (one round trip, as the "
               "plugin sends them), then delete: 3 requests in 2 round trips through libzookeeper_mt";
    // The lab's ZooKeeper syncs its transaction log per write only when durable (forceSync=yes).
    if (lab.options().zookeeper.durable) c.fsync_us = support::fsync_us(lab.zookeeper().dir(), 200);
    return c;
}

command_count count_zookeeper(const target& t, dlock::lab::lab& lab, const std::function<void(int)>& run_cycles) {
    (void)t;
    command_count r;
    r.minimum = 3;
    r.source = "mntr zk_packets_received";
    const auto server = lab.zookeeper().client_endpoint();
    const int cycles = 1000;
    const long long before = mntr(server)["zk_packets_received"];
    run_cycles(cycles);
    const long long after = mntr(server)["zk_packets_received"];
    r.per_cycle = double(after - before) / cycles;  // session pings (one per 1/3 session timeout) included
    return r;
}

std::vector<peer_result> peers_zookeeper(const target& t, dlock::lab::lab& lab, run_size size) {
    std::vector<peer_result> out;
    const std::string server = lab.zookeeper().client_endpoint().to_string();
    const int cycles = support::peer_cycles(size);
    const std::string count = std::to_string(cycles), warmup = std::to_string(std::max(100, cycles / 10));
    const std::string py = support::debian_python(), dir = support::peers_dir();
    const auto log = t.scratch / "peer-zookeeper.log";
    auto run = [&](std::string peer, std::string version, const std::function<nlohmann::json()>& body) {
        peer_result r;
        r.backend = t.name;
        r.peer = std::move(peer);
        r.settings = "default (waits on watches: no sleep/retry knob)";
        r.version = std::move(version);
        out.push_back(support::peer_with_dlock_around(r, t.config, cycles, body));
    };
    run("kazoo Lock", support::package_version("python3-kazoo"),
        [&] { return support::run_peer_process({py, dir + "/zookeeper_kazoo.py", server, count, warmup}, log, 300s); });
    run("tooz zookeeper", support::package_version("python3-tooz"),
        [&] { return support::run_peer_process({py, dir + "/zookeeper_tooz.py", server, count, warmup}, log, 300s); });

    // Curator: compiled now against Debian's jars, into the scratch directory.
    std::string classpath;
    for (const char* jar : {"curator-client", "curator-framework", "curator-recipes", "zookeeper", "zookeeper-jute", "guava",
                            "slf4j-api", "slf4j-nop"})
        classpath += std::string(classpath.empty() ? "" : ":") + "/usr/share/java/" + jar + ".jar";
    const std::filesystem::path classes = t.scratch / "curator-classes";
    std::filesystem::create_directories(classes);
    run("Curator InterProcessMutex", support::package_version("libcurator-recipes-java"), [&]() -> nlohmann::json {
        std::string javac_output;
        const int javac = dlock::lab::run_command({"javac", "-d", classes.string(), "-cp", classpath, dir + "/curator/CuratorBench.java"},
                                                  &javac_output);
        if (javac != 0) return {{"error", "javac failed (status " + std::to_string(javac) + "): " + support::tail_of(javac_output, 4)}};
        // The JIT needs more untimed cycles than the Python peers.
        return support::run_peer_process({"java", "-cp", classes.string() + ":" + classpath, "CuratorBench", server, count,
                                          std::to_string(std::max(2000, cycles))},
                                         log, 300s);
    });
    return out;
}

}  // namespace dlock::bench::family

#include "backends.hpp"

#include <cstdlib>
#include <fstream>

#ifdef DLOCK_WITH_LAB
#include "dlock/lab/gtest.hpp"
#include "dlock/lab/secured.hpp"
#endif

namespace dlock::conformance {

namespace {

#ifdef DLOCK_WITH_LAB
// A config the lab wrote for one of its backends.
std::function<std::string(const std::string&)> lab_config(const std::string& server) {
    return [server](const std::string&) {
        return lab::lab_environment::instance().config_path(*lab::parse_backend(server)).string();
    };
}

// Tenant A of a secured server (TLS and authentication on; A holds only the privileges
// docs/backends/*.md list). The server starts on first use; when it cannot, the test fails.
std::function<std::string(const std::string&)> secured_config(lab::secured_backend which) {
    return [which](const std::string&) { return lab::shared_secured_server(which).tenant_a().config.string(); };
}
#endif

}  // namespace

std::vector<backend_case> backend_cases() {
    std::vector<backend_case> cases;
    cases.push_back({"file", {}, [](const std::string& scratch) {
                         const std::string path = scratch + "/file.yaml";
                         std::ofstream(path) << "backend: file\noptions:\n  directory: " << scratch << "/locks\n";
                         return path;
                     }});
#ifdef DLOCK_WITH_LAB
    cases.push_back({"redis", {"redis"}, lab_config("redis")});
    cases.push_back({"redlock", {"redlock"}, lab_config("redlock")});
    cases.push_back({"redis_secured", {}, secured_config(lab::secured_backend::redis_acl)});
#endif
#ifdef DLOCK_HAVE_ZOOKEEPER
    // A holder's session outlives its death by up to the session timeout.
    cases.push_back({"zookeeper", {"zookeeper"}, lab_config("zookeeper"), std::chrono::milliseconds(8000)});
    cases.push_back({"zookeeper_ensemble", {"zookeeper-ensemble"}, lab_config("zookeeper-ensemble"), std::chrono::milliseconds(8000)});
    cases.push_back({"zookeeper_secured", {}, secured_config(lab::secured_backend::zookeeper), std::chrono::milliseconds(8000)});
#endif
#ifdef DLOCK_HAVE_ETCD
    cases.push_back({"etcd", {"etcd"}, lab_config("etcd"), std::chrono::milliseconds(4000)});
    cases.push_back({"etcd_cluster", {"etcd-cluster"}, lab_config("etcd-cluster"), std::chrono::milliseconds(4000)});
    cases.push_back({"etcd_secured", {}, secured_config(lab::secured_backend::etcd), std::chrono::milliseconds(4000)});
#endif
#ifdef DLOCK_HAVE_SQL
    cases.push_back({"sql_lease", {"sql"}, lab_config("sql")});
    cases.push_back({"sql_advisory", {"sql"}, [](const std::string& scratch) {
                         const std::string path = scratch + "/sql-advisory.yaml";
                         std::ofstream(path) << "backend: sql\noptions:\n  dsn: \""
                                             << lab::lab_environment::instance().access(lab::backend::sql).dsn
                                             << "\"\n  mode: advisory\n";
                         return path;
                     }});
    // The MySQL dialect on the lab's MariaDB (opt-in: only these cases start it).
    cases.push_back({"mysql_lease", {"mariadb"}, lab_config("mariadb")});
    cases.push_back({"mysql_named", {"mariadb"}, [](const std::string& scratch) {
                         const std::string path = scratch + "/mysql-named.yaml";
                         std::ofstream(path) << "backend: sql\noptions:\n  dsn: \""
                                             << lab::lab_environment::instance().access(lab::backend::mariadb).dsn
                                             << "\"\n  mode: named\n";
                         return path;
                     }});
    cases.push_back({"sql_secured", {}, secured_config(lab::secured_backend::postgres)});
#endif
    return cases;
}

bool running_in_ci() {
    const char* ci = std::getenv("CI");
    return ci && (std::string(ci) == "true" || std::string(ci) == "1");
}

std::string missing_servers(const backend_case& c) {
#ifdef DLOCK_WITH_LAB
    for (const auto& s : c.servers)
        if (auto why = lab::missing_backend(*lab::parse_backend(s))) return *why;
#else
    if (!c.servers.empty()) return "this build has no lab (DLOCK_BUILD_LAB=OFF)";
#endif
    return "";
}

}  // namespace dlock::conformance

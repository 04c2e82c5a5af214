#include "backends.hpp"

#include <cstdlib>
#include <fstream>

#ifdef DLOCK_WITH_LAB
#include "dlock/lab/gtest.hpp"
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
#endif
#ifdef DLOCK_HAVE_ZOOKEEPER
    // A holder's session outlives its death by up to the session timeout.
    cases.push_back({"zookeeper", {"zookeeper"}, lab_config("zookeeper"), std::chrono::milliseconds(8000)});
    cases.push_back({"zookeeper_ensemble", {"zookeeper-ensemble"}, lab_config("zookeeper-ensemble"), std::chrono::milliseconds(8000)});
#endif
#ifdef DLOCK_HAVE_ETCD
    cases.push_back({"etcd", {"etcd"}, lab_config("etcd"), std::chrono::milliseconds(4000)});
    cases.push_back({"etcd_cluster", {"etcd-cluster"}, lab_config("etcd-cluster"), std::chrono::milliseconds(4000)});
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

#include "backends.hpp"

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
    return cases;
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

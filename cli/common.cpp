// Exit codes, error reports and capability names shared by the subcommands.
#include "cli.hpp"

#include <iostream>
#include <sstream>
#include <utility>

namespace dlock::cli {

int exit_code_for(const std::error_code& ec) {
    if (ec == errc::timeout) return exit_not_acquired;
    if (ec == errc::config || ec == errc::invalid_argument) return exit_config;
    if (ec == errc::lost) return exit_lost;
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

nlohmann::json capability_list(uint64_t caps) {
    nlohmann::json list = nlohmann::json::array();
    std::stringstream words(capability_names(caps));
    for (std::string w; words >> w;)
        if (w != "none") list.push_back(w);
    return list;
}

}  // namespace dlock::cli

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
    if (ec == errc::permission) return exit_permission;
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
        {DLOCK_CAP_REENTRANT, "REENTRANT"}, {DLOCK_CAP_SEMAPHORE, "SEMAPHORE"}, {DLOCK_CAP_SHARED, "SHARED"},
        {DLOCK_CAP_LIST, "LIST"},           {DLOCK_CAP_BREAK, "BREAK"}};
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

const char* kind_name(dlock::hold_kind kind) {
    switch (kind) {
    case dlock::hold_kind::shared: return "shared";
    case dlock::hold_kind::permit: return "permit";
    default: return "exclusive";
    }
}

nlohmann::json holder_json(const dlock::holder_info& h) {
    nlohmann::json out = {{"name", h.name}, {"kind", kind_name(h.kind)}, {"holder", h.holder}, {"fencing_token", h.fencing_token}};
    out["permits"] = h.kind == dlock::hold_kind::permit ? nlohmann::json(h.permits) : nlohmann::json(nullptr);
    out["ttl_left_ms"] = h.ttl_left ? nlohmann::json(h.ttl_left->count()) : nlohmann::json(nullptr);
    return out;
}

}  // namespace dlock::cli

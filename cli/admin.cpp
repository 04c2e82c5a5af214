// dlock list [PREFIX] and dlock break NAME [--semaphore]: what is held under a prefix, and an
// administrator's forced release (fenced: the next holder's token is higher).
#include "cli.hpp"

#include <fmt/format.h>

#include <iostream>

namespace dlock::cli {

int list(const std::string& config, const std::string& prefix, bool as_json) {
    using nlohmann::json;
    try {
        dlock::client client = dlock::client::open(config);
        const auto holders = client.list(prefix);
        if (as_json) {
            json list = json::array();
            for (const auto& h : holders) list.push_back(holder_json(h));
            std::cout << json{{"backend", std::string(client.backend())}, {"prefix", prefix}, {"holders", list}}.dump() << "\n";
            return 0;
        }
        if (holders.empty()) {
            std::cout << (prefix.empty() ? std::string("nothing is held\n") : fmt::format("nothing is held under `{}`\n", prefix));
            return 0;
        }
        std::cout << fmt::format("{:<32} {:<9} {:<32} {:>13} {:>12}\n", "NAME", "KIND", "HOLDER", "FENCING TOKEN", "TTL LEFT");
        for (const auto& h : holders) {
            const std::string kind = h.kind == dlock::hold_kind::permit && h.permits
                                         ? fmt::format("permit/{}", h.permits) : std::string(kind_name(h.kind));
            std::cout << fmt::format("{:<32} {:<9} {:<32} {:>13} {:>12}\n", h.name, kind, h.holder.empty() ? "(unknown)" : h.holder,
                                     h.fencing_token, h.ttl_left ? fmt::format("{} ms", h.ttl_left->count()) : std::string("-"));
        }
        return 0;
    } catch (const std::system_error& e) {
        return report(e);
    }
}

int break_lock(const std::string& config, const std::string& name, bool semaphore, bool as_json) {
    using nlohmann::json;
    try {
        dlock::client client = dlock::client::open(config);
        const size_t broken = client.break_lock(name, semaphore);
        if (as_json) {
            std::cout << json{{"name", name}, {"semaphore", semaphore}, {"broken", broken}}.dump() << "\n";
        } else {
            std::cout << fmt::format("broke {} hold{} of {} `{}`\n", broken, broken == 1 ? "" : "s", semaphore ? "semaphore" : "lock",
                                     name);
        }
        return 0;
    } catch (const std::system_error& e) {
        return report(e);
    }
}

}  // namespace dlock::cli

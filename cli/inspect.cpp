// dlock inspect NAME: who holds a lock, its fencing token and ttl left; exit 0 held, 1 free.
#include "cli.hpp"

#include <fmt/format.h>

#include <iostream>

namespace dlock::cli {

int inspect(const std::string& config, const std::string& name, bool as_json) {
    using nlohmann::json;
    try {
        dlock::client client = dlock::client::open(config);
        const dlock::lock_info info = client.inspect(name);
        if (as_json) {
            json out = {{"name", name}, {"backend", std::string(client.backend())}, {"held", info.held},
                        {"holder", info.holder}, {"fencing_token", info.fencing_token}};
            out["ttl_left_ms"] = info.ttl_left ? json(info.ttl_left->count()) : json(nullptr);
            std::cout << out.dump() << "\n";
        } else {
            std::cout << fmt::format("lock:          {}\nbackend:       {}\nheld:          {}\n", name, client.backend(),
                                     info.held ? "yes" : "no");
            if (info.held) std::cout << "holder:        " << (info.holder.empty() ? "(unknown)" : info.holder) << "\n";
            std::cout << "fencing token: " << info.fencing_token << (info.held ? " (current holder's)" : " (last issued)") << "\n";
            if (info.ttl_left) std::cout << "ttl left:      " << info.ttl_left->count() << " ms\n";
        }
        return info.held ? 0 : exit_inspect_free;
    } catch (const std::system_error& e) {
        return report(e);
    }
}

}  // namespace dlock::cli

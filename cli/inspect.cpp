// dlock inspect NAME [--semaphore]: who holds a lock (every holder, where the backend can enumerate
// them), its fencing token and ttl left; or the permit holders of a semaphore. Exit 0 held, 1 free.
#include "cli.hpp"

#include <fmt/format.h>

#include <iostream>
#include <optional>

namespace dlock::cli {

namespace {

// Every holder, or nullopt when the backend cannot enumerate them (then dlock_inspect's single
// holder is all there is to show).
std::optional<std::vector<dlock::holder_info>> holders_if_listed(dlock::client& client, const std::string& name, bool semaphore) {
    try {
        return client.holders(name, semaphore);
    } catch (const std::system_error& e) {
        if (e.code() == dlock::errc::not_supported && !semaphore) return std::nullopt;
        throw;
    }
}

void print_holders(const std::vector<dlock::holder_info>& holders) {
    std::cout << "holders:       " << holders.size() << "\n";
    for (const auto& h : holders) {
        std::cout << fmt::format("  {:<9} {}  fencing token {}", kind_name(h.kind), h.holder.empty() ? "(unknown)" : h.holder,
                                 h.fencing_token);
        if (h.ttl_left) std::cout << "  ttl left " << h.ttl_left->count() << " ms";
        std::cout << "\n";
    }
}

}  // namespace

int inspect(const std::string& config, const std::string& name, bool semaphore, bool as_json) {
    using nlohmann::json;
    try {
        dlock::client client = dlock::client::open(config);
        const auto holders = holders_if_listed(client, name, semaphore);
        // A semaphore has no dlock_inspect of its own: its holders are everything known of it.
        const dlock::lock_info info = semaphore ? dlock::lock_info{} : client.inspect(name);
        const bool held = info.held || (holders && !holders->empty());
        if (as_json) {
            json out = {{"name", name}, {"backend", std::string(client.backend())}, {"semaphore", semaphore}, {"held", held}};
            if (!semaphore) {
                out["holder"] = info.holder;
                out["fencing_token"] = info.fencing_token;
                out["ttl_left_ms"] = info.ttl_left ? json(info.ttl_left->count()) : json(nullptr);
            }
            if (holders) {
                json list = json::array();
                for (const auto& h : *holders) list.push_back(holder_json(h));
                out["holders"] = list;
            }
            std::cout << out.dump() << "\n";
        } else if (semaphore) {
            std::cout << fmt::format("semaphore:     {}\nbackend:       {}\nheld:          {}\n", name, client.backend(),
                                     held ? "yes" : "no");
            if (!holders->empty() && holders->front().permits)
                std::cout << "permits:       " << holders->front().permits << "\n";
            print_holders(*holders);
        } else {
            std::cout << fmt::format("lock:          {}\nbackend:       {}\nheld:          {}\n", name, client.backend(),
                                     held ? "yes" : "no");
            if (info.held) std::cout << "holder:        " << (info.holder.empty() ? "(unknown)" : info.holder) << "\n";
            std::cout << "fencing token: " << info.fencing_token << (info.held ? " (current holder's)" : " (last issued)") << "\n";
            if (info.ttl_left) std::cout << "ttl left:      " << info.ttl_left->count() << " ms\n";
            if (holders) print_holders(*holders);
        }
        return held ? 0 : exit_inspect_free;
    } catch (const std::system_error& e) {
        return report(e);
    }
}

}  // namespace dlock::cli

// dlock check: validate the config and reach the backend once.
#include "cli.hpp"

#include <fmt/format.h>

#include <chrono>
#include <iostream>

namespace dlock::cli {

int check(const std::string& config, bool as_json) {
    using nlohmann::json;
    const auto started = std::chrono::steady_clock::now();
    try {
        dlock::client client = dlock::client::open(config);
        client.inspect("dlock-check");  // one real round trip to the backend
        const auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
        if (as_json) {
            std::cout << json{{"ok", true}, {"backend", std::string(client.backend())},
                              {"capabilities", capability_list(client.capabilities())}, {"elapsed_ms", ms}}.dump()
                      << "\n";
        } else {
            std::cout << fmt::format("ok: backend `{}` reached in {:.1f} ms; capabilities: {}\n", client.backend(), ms,
                                     capability_names(client.capabilities()));
        }
        return 0;
    } catch (const std::system_error& e) {
        if (as_json) {
            std::cout << json{{"ok", false}, {"status", e.code().message()}, {"error", dlock_last_error()}}.dump() << "\n";
            return exit_code_for(e.code());
        }
        return report(e);
    }
}

}  // namespace dlock::cli

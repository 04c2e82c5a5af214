// dlock backends [--describe NAME]: the backends found, their ABI versions, capabilities and
// options, through the public admin API (dlock_admin.hpp).
#include "cli.hpp"

#include <dlock/dlock_admin.hpp>

#include <fmt/format.h>

#include <iostream>

namespace dlock::cli {

int backends(const std::string& config, const std::string& describe, bool as_json) {
    using nlohmann::json;
    std::error_code ec;
    const dlock::backend_catalog catalog = dlock::find_backends(config, ec);
    if (ec) {
        std::cerr << "dlock: " << dlock_last_error() << "\n";
        return exit_code_for(ec);
    }
    json out = json::array();
    bool described = false;
    for (const auto& b : catalog.backends) {
        if (!describe.empty() && b.name != describe) continue;
        described = true;
        json entry = {{"name", b.name}, {"path", b.path}, {"abi_version", b.abi_version},
                      {"capabilities", capability_list(b.capabilities)}, {"description", b.description}};
        json options = json::array();
        for (const auto& o : b.options)
            options.push_back({{"name", o.name}, {"type", o.type}, {"required", o.required}, {"secret", o.secret},
                               {"default", o.default_value ? json(*o.default_value) : json(nullptr)}, {"doc", o.doc}});
        entry["options"] = options;
        out.push_back(entry);
        if (as_json) continue;
        std::cout << fmt::format("{:<10} ABI v{}  {}\n           capabilities: {}\n", b.name, b.abi_version, b.path,
                                 capability_names(b.capabilities));
        // What the backend is (for sql: both of its dialects), also in the plain listing.
        if (describe.empty() && !b.description.empty()) std::cout << "           " << b.description << "\n";
        if (!describe.empty()) {
            std::cout << "           " << b.description << "\n\n  options:\n";
            for (const auto& o : b.options)
                std::cout << fmt::format("    {:<18} {:<9} {}{}\n        {}\n", o.name, o.type,
                                         o.required ? "required" : fmt::format("default: {}", o.default_value.value_or("(none)")),
                                         o.secret ? fmt::format("  secret (or `{}_file: PATH`)", o.name) : "",
                                         o.doc);
        }
    }
    if (as_json) {
        json doc = {{"backends", out}, {"failures", catalog.failures}};
        std::cout << doc.dump(2) << "\n";
    } else {
        for (const auto& f : catalog.failures) std::cout << "not loadable: " << f << "\n";
    }
    if (!describe.empty() && !described) {
        std::cerr << "dlock: no backend `" << describe << "` found (run `dlock backends` to list them)\n";
        return exit_dlock_error;
    }
    return 0;
}

}  // namespace dlock::cli

// The built-in backends and the catalog of the backends a config can reach.
#include "dlock_internal/backends.hpp"

#include "file_plugin.hpp"

namespace dlock::core {

namespace {

const char* option_type_name(uint32_t type) {
    switch (type) {
    case DLOCK_OPTION_STRING: return "string";
    case DLOCK_OPTION_INT: return "int";
    case DLOCK_OPTION_BOOL: return "bool";
    case DLOCK_OPTION_DURATION: return "duration";
    case DLOCK_OPTION_STRING_LIST: return "list";
    default: return "?";
    }
}

}  // namespace

namespace {
// `file`, and the backends a test added (testing::add_builtin_backend) before opening its clients.
std::vector<loader::builtin>& builtins() {
    static std::vector<loader::builtin> list{{"file", &dlock_file_plugin_negotiate}};
    return list;
}
}  // namespace

const std::vector<loader::builtin>& builtin_backends() { return builtins(); }

void testing::add_builtin_backend(loader::builtin backend) { builtins().push_back(std::move(backend)); }

backend_catalog::backend_catalog(const config::client_config& config) {
    modules_ = loader::discover(config.plugin_path, builtin_backends(), failures_);
    options_.reserve(modules_.size());
    infos_.reserve(modules_.size());
    for (const auto& m : modules_) {
        const dlock_plugin& t = *m->table;
        auto& options = options_.emplace_back();
        for (size_t i = 0; i < t.option_count; ++i) {
            const dlock_option_desc& o = t.options[i];
            options.push_back({o.name, option_type_name(o.type), (o.flags & DLOCK_OPTION_REQUIRED) ? 1 : 0, (o.flags & DLOCK_OPTION_SECRET) ? 1 : 0,
                               o.default_value, o.doc ? o.doc : ""});
        }
        dlock_backend_info info{};
        info.struct_size = sizeof info;
        info.name = m->name.c_str();
        info.path = m->path.c_str();
        info.abi_version = m->version;
        info.capabilities = effective_capabilities(t, t.capabilities(nullptr));
        info.description = t.description ? t.description : "";
        info.option_count = options.size();
        info.options = options.data();
        infos_.push_back(info);
    }
}

uint64_t effective_capabilities(const dlock_plugin& table, uint64_t reported) {
    if (table.version < 2) reported &= ~(DLOCK_CAP_SEMAPHORE | DLOCK_CAP_SHARED | DLOCK_CAP_LIST | DLOCK_CAP_BREAK);
    return reported | DLOCK_CAP_REENTRANT;
}

}  // namespace dlock::core

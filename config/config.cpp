// YAML and DSN configuration: parsing, interpolation, durations, policies and option binding.
#include "dlock_internal/config.hpp"

#include "dlock_internal/common.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fnmatch.h>
#include <fstream>
#include <set>
#include <sstream>
#include <sys/stat.h>

namespace dlock::config {

using detail::error;

namespace {

[[noreturn]] void fail(const std::string& message) { throw error(DLOCK_CONFIG, message); }

std::string where(const std::string& origin, const YAML::Node& node) {
    const YAML::Mark mark = node.Mark();
    if (mark.is_null()) return origin;
    return fmt::format("{}:{}:{}", origin, mark.line + 1, mark.column + 1);
}

std::string where(const std::string& origin, const YAML::Mark& mark) {
    return fmt::format("{}:{}:{}", origin, mark.line + 1, mark.column + 1);
}

bool is_env_name(std::string_view name) {
    if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_')) return false;
    return std::all_of(name.begin(), name.end(),
                       [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// Expands ${VAR}, ${VAR:-fallback} and $$ in a scalar. A malformed reference is reported by its
// byte offset, never by quoting the value: a stray `${` is as likely to sit inside a password.
std::string interpolate(const std::string& text, const std::string& location) {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] != '$' || i + 1 >= text.size()) { out += text[i]; continue; }
        if (text[i + 1] == '$') { out += '$'; ++i; continue; }
        if (text[i + 1] != '{') { out += '$'; continue; }
        const size_t close = text.find('}', i + 2);
        if (close == std::string::npos)
            fail(fmt::format("{}: unterminated `${{` at byte {} of the value (not shown: it may be a secret); "
                             "close it with `}}`, or write `$${{` for a literal `${{`",
                             location, i + 1));
        const std::string expr = text.substr(i + 2, close - i - 2);
        const size_t sep = expr.find(":-");
        const std::string name = expr.substr(0, sep);
        if (!is_env_name(name))
            fail(fmt::format("{}: `${{` at byte {} of the value does not start a valid environment variable reference "
                             "(the value is not shown: it may be a secret); write ${{NAME}} or ${{NAME:-fallback}} with "
                             "NAME of letters, digits and `_`, or `$${{` for a literal `${{`",
                             location, i + 1));
        if (const char* value = std::getenv(name.c_str())) {
            out += value;
        } else if (sep != std::string::npos) {
            out += expr.substr(sep + 2);
        } else {
            fail(fmt::format("{}: environment variable `{}` is not set (write ${{{}:-fallback}} to give a fallback)",
                             location, name, name));
        }
        i = close;
    }
    return out;
}

std::string scalar_of(const YAML::Node& node, const std::string& origin, const std::string& key) {
    if (!node.IsScalar())
        fail(fmt::format("{}: `{}` must be a single value, not a {}", where(origin, node), key,
                         node.IsMap() ? "mapping" : node.IsSequence() ? "list" : "null"));
    return interpolate(node.Scalar(), where(origin, node));
}

bool parse_bool(const std::string& text, const std::string& what) {
    std::string lower(text);
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (lower == "true" || lower == "yes" || lower == "on" || lower == "1") return true;
    if (lower == "false" || lower == "no" || lower == "off" || lower == "0") return false;
    fail(fmt::format("{}: `{}` is not a boolean (use true or false)", what, text));
}

int64_t parse_int(const std::string& text, const std::string& what) {
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno == ERANGE || std::isspace(static_cast<unsigned char>(text[0])))
        fail(fmt::format("{}: `{}` is not an integer", what, text));
    return v;
}

constexpr int64_t max_ttl_ms = 365LL * 24 * 3600 * 1000;

policy parse_policy(const YAML::Node& node, const std::string& origin, const std::string& context) {
    if (!node.IsMap()) fail(fmt::format("{}: `{}` must be a mapping of ttl, wait, renew, fair, reentrant", where(origin, node), context));
    policy p;
    std::set<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
        const std::string key = it->first.Scalar();
        const std::string loc = where(origin, it->first);
        if (!seen.insert(key).second) fail(fmt::format("{}: duplicate key `{}` in `{}`", loc, key, context));
        const std::string full = context + "." + key;
        const std::string value = scalar_of(it->second, origin, full);
        const std::string vloc = where(origin, it->second) + ": `" + full + "`";
        if (key == "ttl") {
            const int64_t ttl = parse_duration_ms(value, false, vloc);
            if (ttl < 1) fail(fmt::format("{}: ttl must be at least 1ms", vloc));
            if (ttl > max_ttl_ms) fail(fmt::format("{}: ttl {} is longer than the limit of 365 days", vloc, value));
            p.ttl_ms = ttl;
        } else if (key == "wait") {
            p.wait_ms = parse_duration_ms(value, true, vloc);
        } else if (key == "renew") {
            p.renew = parse_bool(value, vloc);
        } else if (key == "fair") {
            p.fair = parse_bool(value, vloc);
        } else if (key == "reentrant") {
            p.reentrant = parse_bool(value, vloc);
        } else {
            fail(fmt::format("{}: unknown key `{}` in `{}` (known: ttl, wait, renew, fair, reentrant)", loc, key, context));
        }
    }
    return p;
}

std::string percent_decode(std::string_view text, const std::string& what) {
    std::string out;
    for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '%') {
            if (i + 2 >= text.size() + 0 || !std::isxdigit(static_cast<unsigned char>(text[i + 1])) ||
                !std::isxdigit(static_cast<unsigned char>(text[i + 2])))
                fail(fmt::format("DSN: bad percent-escape in {}", what));
            out += char(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16));
            i += 2;
        } else {
            out += text[i];
        }
    }
    return out;
}

bool is_policy_key(const std::string& key) {
    return key == "ttl" || key == "wait" || key == "renew" || key == "fair" || key == "reentrant";
}

}  // namespace

int64_t parse_duration_ms(std::string_view text, bool allow_forever, const std::string& what) {
    if (allow_forever && text == "forever") return INT64_MAX;
    if (text == "0") return 0;
    size_t digits = 0;
    while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
    const std::string_view unit = text.substr(digits);
    int64_t scale = 0;
    if (unit == "ms") scale = 1;
    else if (unit == "s") scale = 1000;
    else if (unit == "m") scale = 60'000;
    else if (unit == "h") scale = 3'600'000;
    const char* hint = allow_forever ? " (e.g. 250ms, 30s, 5m, 1h, 0 or forever)" : " (e.g. 250ms, 30s, 5m, 1h)";
    if (digits == 0 || scale == 0) {
        if (!text.empty() && text[0] == '-') fail(fmt::format("{}: `{}` is negative; durations are >= 0", what, text));
        if (digits == text.size()) fail(fmt::format("{}: `{}` has no unit{}", what, text, hint));
        fail(fmt::format("{}: `{}` is not a duration{}", what, text, hint));
    }
    int64_t value = 0;
    for (size_t i = 0; i < digits; ++i) {
        if (__builtin_mul_overflow(value, 10, &value) || __builtin_add_overflow(value, text[i] - '0', &value))
            fail(fmt::format("{}: `{}` is too large", what, text));
    }
    int64_t ms;
    if (__builtin_mul_overflow(value, scale, &ms) || ms >= INT64_MAX / detail::ns_per_ms)
        fail(fmt::format("{}: `{}` is too large", what, text));
    return ms;
}

std::string parse_metrics_listen(const std::string& text, const std::string& what) {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0)
        fail(fmt::format("{}: `{}` is not HOST:PORT (e.g. 127.0.0.1:9464 or [::1]:9464)", what, text));
    const std::string host = text.substr(0, colon);
    const std::string port = text.substr(colon + 1);
    unsigned char address[16];
    const bool ipv6 = host.size() > 2 && host.front() == '[' && host.back() == ']';
    const bool literal = ipv6 ? inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), address) == 1
                              : inet_pton(AF_INET, host.c_str(), address) == 1;
    if (!literal)
        fail(fmt::format("{}: host `{}` is not an IP address literal; write an IPv4 address (127.0.0.1, or 0.0.0.0 for "
                         "every interface) or a bracketed IPv6 one ([::1]): the exporter does not resolve names",
                         what, host));
    const bool digits = !port.empty() && port.size() <= 5 &&
                        std::all_of(port.begin(), port.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (!digits || std::stoi(port) < 1 || std::stoi(port) > 65535)
        fail(fmt::format("{}: port `{}` is not a number from 1 to 65535", what, port));
    return text;
}

client_config parse_yaml(const std::string& text, const std::string& origin) {
    YAML::Node root;
    try {
        root = YAML::Load(text);
    } catch (const YAML::ParserException& e) {
        fail(fmt::format("{}: malformed YAML: {}", where(origin, e.mark), e.msg));
    }
    if (!root.IsMap()) fail(fmt::format("{}: the config must be a YAML mapping with at least `backend:`", origin));

    client_config config;
    config.origin = origin;
    std::set<std::string> seen;
    for (auto it = root.begin(); it != root.end(); ++it) {
        const std::string key = it->first.Scalar();
        // yaml-cpp's iterator hands out a temporary proxy: copy the node, never bind to its members.
        const YAML::Node value = it->second;
        const std::string loc = where(origin, it->first);
        if (!seen.insert(key).second) fail(fmt::format("{}: duplicate key `{}`", loc, key));
        if (key == "backend") {
            config.backend = scalar_of(value, origin, key);
        } else if (key == "plugin_path") {
            if (value.IsSequence()) {
                for (const auto& item : value) config.plugin_path.push_back(scalar_of(item, origin, key));
            } else {
                config.plugin_path.push_back(scalar_of(value, origin, key));
            }
        } else if (key == "defaults") {
            config.defaults = parse_policy(value, origin, "defaults");
        } else if (key == "options") {
            if (value.IsNull()) continue;
            if (!value.IsMap()) fail(fmt::format("{}: `options` must be a mapping of the backend's options", where(origin, value)));
            std::set<std::string> option_keys;
            for (auto o = value.begin(); o != value.end(); ++o) {
                raw_option raw;
                raw.key = o->first.Scalar();
                raw.location = where(origin, o->first);
                if (!option_keys.insert(raw.key).second) fail(fmt::format("{}: duplicate option `{}`", raw.location, raw.key));
                const YAML::Node option = o->second;
                if (option.IsSequence()) {
                    raw.is_list = true;
                    for (const auto& item : option) raw.list.push_back(scalar_of(item, origin, "options." + raw.key));
                } else {
                    raw.scalar = scalar_of(option, origin, "options." + raw.key);
                    raw.literal = option.IsScalar() && option.Scalar().find("${") == std::string::npos;
                }
                config.options.push_back(std::move(raw));
            }
        } else if (key == "locks") {
            if (value.IsNull()) continue;
            if (!value.IsMap()) fail(fmt::format("{}: `locks` must map name patterns to policies", where(origin, value)));
            std::set<std::string> patterns;
            for (auto l = value.begin(); l != value.end(); ++l) {
                const std::string pattern = l->first.Scalar();
                if (!patterns.insert(pattern).second) fail(fmt::format("{}: duplicate lock pattern `{}`", where(origin, l->first), pattern));
                config.locks.push_back({pattern, parse_policy(l->second, origin, "locks." + pattern)});
            }
        } else if (key == "metrics") {
            if (!value.IsMap()) fail(fmt::format("{}: `metrics` must be a mapping, e.g. `metrics: {{ listen: 127.0.0.1:9464 }}`", where(origin, value)));
            for (auto m = value.begin(); m != value.end(); ++m) {
                const std::string metrics_key = m->first.Scalar();
                if (metrics_key != "listen")
                    fail(fmt::format("{}: unknown key `{}` in `metrics` (known: listen)", where(origin, m->first), metrics_key));
                config.metrics_listen = parse_metrics_listen(scalar_of(m->second, origin, "metrics.listen"),
                                                             where(origin, m->second) + ": `metrics.listen`");
            }
            if (config.metrics_listen.empty())
                fail(fmt::format("{}: `metrics` needs `listen: HOST:PORT` (e.g. 127.0.0.1:9464); leave `metrics` out to turn metrics off",
                                 where(origin, value)));
        } else {
            fail(fmt::format("{}: unknown key `{}` (known: backend, plugin_path, defaults, options, locks, metrics)", loc, key));
        }
    }
    if (config.backend.empty()) fail(fmt::format("{}: `backend` is missing (file, redis, redlock, zookeeper, etcd or sql)", origin));
    return config;
}

client_config load_yaml_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) fail(fmt::format("cannot read config file `{}`: {}", path, std::strerror(errno)));
    std::stringstream text;
    text << in.rdbuf();
    client_config config = parse_yaml(text.str(), path);
    config.file = path;
    return config;
}

bool looks_like_dsn(std::string_view text) {
    const size_t sep = text.find("://");
    if (sep == std::string_view::npos || sep == 0) return false;
    return std::all_of(text.begin(), text.begin() + long(sep), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
    });
}

client_config parse_dsn(const std::string& dsn) {
    if (!looks_like_dsn(dsn)) fail(fmt::format("`{}` is not a DSN of the form scheme://host/...", dsn));
    client_config config;
    config.origin = "DSN";
    config.from_dsn = true;
    const size_t sep = dsn.find("://");
    std::string scheme = dsn.substr(0, sep);
    std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (scheme == "postgres" || scheme == "postgresql" || scheme == "mysql" || scheme == "mariadb") config.backend = "sql";
    else if (scheme == "zk") config.backend = "zookeeper";
    else config.backend = scheme;

    std::string rest = dsn.substr(sep + 3);
    std::string query;
    if (const size_t q = rest.find('?'); q != std::string::npos) {
        query = rest.substr(q + 1);
        rest.resize(q);
    }
    std::string authority = rest;
    if (const size_t slash = rest.find('/'); slash != std::string::npos) {
        authority = rest.substr(0, slash);
        config.dsn_path = percent_decode(rest.substr(slash), "the path");
    }
    if (const size_t at = authority.rfind('@'); at != std::string::npos) {
        const std::string userinfo = authority.substr(0, at);
        authority = authority.substr(at + 1);
        const size_t colon = userinfo.find(':');
        config.dsn_user = percent_decode(userinfo.substr(0, colon), "the user name");
        config.dsn_has_user = !config.dsn_user.empty();
        if (colon != std::string::npos) {
            config.dsn_password = percent_decode(userinfo.substr(colon + 1), "the password");
            config.dsn_has_password = true;
        }
    }
    config.dsn_hosts = authority;

    // dlock's own query keys become defaults; the others stay in the URL and become options.
    std::string kept_query;
    size_t start = 0;
    while (start <= query.size() && !query.empty()) {
        size_t amp = query.find('&', start);
        if (amp == std::string::npos) amp = query.size();
        const std::string item = query.substr(start, amp - start);
        start = amp + 1;
        if (item.empty()) continue;
        const size_t eq = item.find('=');
        const std::string key = percent_decode(item.substr(0, eq), "a query key");
        const std::string value = eq == std::string::npos ? "" : percent_decode(item.substr(eq + 1), "a query value");
        const std::string loc = fmt::format("DSN query key `{}`", key);
        if (is_policy_key(key)) {
            YAML::Node node;
            node[key] = value;
            const policy p = parse_policy(node, "DSN", "query");
            if (p.ttl_ms) config.defaults.ttl_ms = p.ttl_ms;
            if (p.wait_ms) config.defaults.wait_ms = p.wait_ms;
            if (p.renew) config.defaults.renew = p.renew;
            if (p.fair) config.defaults.fair = p.fair;
            if (p.reentrant) config.defaults.reentrant = p.reentrant;
        } else if (key == "plugin_path") {
            config.plugin_path.push_back(value);
        } else if (key == "metrics_listen") {
            config.metrics_listen = parse_metrics_listen(value, loc);
        } else {
            raw_option raw;
            raw.key = key;
            raw.location = loc;
            raw.scalar = value;
            config.options.push_back(std::move(raw));
            kept_query += (kept_query.empty() ? "" : "&") + item;
        }
        if (amp == query.size()) break;
    }
    config.dsn_url = dsn.substr(0, dsn.find('?')) + (kept_query.empty() ? "" : "?" + kept_query);
    return config;
}

client_config embedded_default() {
    client_config config;
    config.origin = "embedded default";
    config.backend = "file";  // whose default directory is the user's runtime directory
    return config;
}

client_config open_spec(const std::string& spec) {
    if (spec.empty()) return from_environment();
    if (looks_like_dsn(spec)) return parse_dsn(spec);
    return load_yaml_file(spec);
}

client_config from_environment() {
    if (const char* env = std::getenv("DLOCK_CONFIG"); env && *env) return open_spec(env);
    return embedded_default();
}

resolved_policy resolve(const client_config& config, std::string_view name) {
    resolved_policy out;
    const policy* rule = nullptr;
    if (!config.locks.empty()) {
        const std::string name_z(name);  // fnmatch wants a C string
        for (const auto& r : config.locks) {
            if (fnmatch(r.pattern.c_str(), name_z.c_str(), 0) == 0) { rule = &r.settings; break; }
        }
    }
    auto pick = [&](auto member, auto& field) {
        if (rule && (rule->*member)) field = *(rule->*member);
        else if (config.defaults.*member) field = *(config.defaults.*member);
    };
    pick(&policy::ttl_ms, out.ttl_ms);
    pick(&policy::wait_ms, out.wait_ms);
    pick(&policy::renew, out.renew);
    pick(&policy::fair, out.fair);
    pick(&policy::reentrant, out.reentrant);
    return out;
}

namespace {

// "0644" when others may read `path`; "" when they may not or it cannot be told.
std::string readable_by_others(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !(st.st_mode & S_IROTH)) return "";
    return fmt::format("{:04o}", st.st_mode & 07777);
}

// Whether a literal value of a secret option holds a secret: a URL without a password
// ("postgresql://app@db/x") does not.
bool holds_secret(const dlock_option_desc& desc, const std::string& value) {
    if (value.empty()) return false;
    if (desc.dsn_part != DLOCK_DSN_URL) return true;
    const size_t scheme = value.find("://");
    if (scheme == std::string::npos) return value.find("password") != std::string::npos;  // keyword=value form
    const size_t at = value.find('@', scheme + 3), slash = value.find('/', scheme + 3);
    return (at != std::string::npos && (slash == std::string::npos || at < slash) &&
            value.substr(scheme + 3, at - scheme - 3).find(':') != std::string::npos) ||
           value.find("password=") != std::string::npos;
}

// The content of a secret file, without its final line break. The content is never quoted in
// an error.
std::string read_secret_file(const raw_option& raw) {
    const std::string& path = raw.scalar;
    if (raw.is_list || path.empty()) fail(fmt::format("{}: option `{}` takes the path of one file", raw.location, raw.key));
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(fmt::format("{}: option `{}`: cannot read `{}`: {}", raw.location, raw.key, path, std::strerror(errno)));
    std::stringstream text;
    text << in.rdbuf();
    std::string secret = text.str();
    if (!secret.empty() && secret.back() == '\n') secret.pop_back();
    if (!secret.empty() && secret.back() == '\r') secret.pop_back();
    if (secret.empty()) fail(fmt::format("{}: option `{}`: `{}` is empty", raw.location, raw.key, path));
    return secret;
}

// The value the DSN gives option `desc` (its dsn_part of the URL), into `source`; false when the DSN
// has no such part.
bool source_from_dsn(const client_config& config, const dlock_option_desc& desc, raw_option& source) {
    bool found = false;
    switch (desc.dsn_part) {
    case DLOCK_DSN_HOSTS:
        if (!config.dsn_hosts.empty()) { source.scalar = config.dsn_hosts; found = true; }
        break;
    case DLOCK_DSN_USER:
        if (config.dsn_has_user) { source.scalar = config.dsn_user; found = true; }
        break;
    case DLOCK_DSN_PASSWORD:
        if (config.dsn_has_password) { source.scalar = config.dsn_password; found = true; }
        break;
    case DLOCK_DSN_PATH:
        if (!config.dsn_path.empty() && config.dsn_path != "/") {
            // A path fills a string whole ("/var/lock/x"), a number without its slash ("/3").
            source.scalar = desc.type == DLOCK_OPTION_STRING ? config.dsn_path : config.dsn_path.substr(1);
            found = true;
        }
        break;
    case DLOCK_DSN_URL:
        source.scalar = config.dsn_url;
        found = true;
        break;
    default:
        break;
    }
    if (!found) return false;
    source.key = desc.name;
    source.location = fmt::format("DSN ({} of the URL)", desc.name);
    if (desc.type == DLOCK_OPTION_STRING_LIST && desc.dsn_part == DLOCK_DSN_HOSTS) {
        source.is_list = true;
        std::stringstream hosts(source.scalar);
        for (std::string h; std::getline(hosts, h, ',');)
            if (!h.empty()) source.list.push_back(h);
    }
    return true;
}

}  // namespace

bound_options bind_options(const client_config& config, const dlock_plugin& plugin) {
    const std::string backend = plugin.name ? plugin.name : config.backend;
    bool has_url_part = false;
    std::vector<std::string> known;
    for (size_t i = 0; i < plugin.option_count; ++i) {
        known.emplace_back(plugin.options[i].name);
        has_url_part |= plugin.options[i].dsn_part == DLOCK_DSN_URL;
    }
    auto describe = [&](const std::string& key) -> const dlock_option_desc* {
        for (size_t i = 0; i < plugin.option_count; ++i)
            if (key == plugin.options[i].name) return &plugin.options[i];
        return nullptr;
    };
    // `X_file` for every secret option X.
    auto secret_of_file_key = [&](const std::string& key) -> const dlock_option_desc* {
        const std::string suffix = "_file";
        if (key.size() <= suffix.size() || key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0) return nullptr;
        const dlock_option_desc* d = describe(key.substr(0, key.size() - suffix.size()));
        return d && (d->flags & DLOCK_OPTION_SECRET) ? d : nullptr;
    };
    for (const auto& raw : config.options) {
        if (describe(raw.key) || secret_of_file_key(raw.key)) continue;
        if (config.from_dsn && has_url_part) continue;  // stays in the URL for the backend's own client
        fail(fmt::format("{}: unknown option `{}` for backend `{}` (known: {})", raw.location, raw.key, backend,
                         known.empty() ? std::string("none") : fmt::format("{}", fmt::join(known, ", "))));
    }

    bound_options out;
    auto keep = [&](std::string s) {
        out.strings_.push_back(std::make_unique<std::string>(std::move(s)));
        return out.strings_.back()->c_str();
    };
    for (size_t i = 0; i < plugin.option_count; ++i) {
        const dlock_option_desc& desc = plugin.options[i];
        dlock_option_value value{};
        value.name = desc.name;
        value.type = desc.type;

        // Source: the config, then the DSN part, then the default.
        raw_option source;
        bool found = false;
        for (const auto& raw : config.options)
            if (raw.key == desc.name) { source = raw; found = true; }
        if (desc.flags & DLOCK_OPTION_SECRET) {
            const std::string file_key = std::string(desc.name) + "_file";
            for (const auto& raw : config.options) {
                if (raw.key != file_key) continue;
                if (found)
                    fail(fmt::format("{}: options `{}` and `{}` are both set; keep one", raw.location, desc.name, file_key));
                if (const std::string mode = readable_by_others(raw.scalar); !mode.empty())
                    out.warnings_.push_back(fmt::format("secret file `{}` (option `{}`) can be read by other users (mode {}); "
                                                        "run `chmod o-r {}`", raw.scalar, file_key, mode, raw.scalar));
                source = raw;
                source.scalar = read_secret_file(raw);
                source.literal = false;
                source.location = fmt::format("{} (the file of `{}`)", raw.location, file_key);
                found = true;
            }
            if (found && source.literal && !config.file.empty() && holds_secret(desc, source.scalar) &&
                std::none_of(out.warnings_.begin(), out.warnings_.end(),
                             [&](const std::string& w) { return w.rfind("config file", 0) == 0; })) {
                if (const std::string mode = readable_by_others(config.file); !mode.empty())
                    out.warnings_.push_back(fmt::format(
                        "config file `{}` holds the secret option `{}` and can be read by other users (mode {}); run "
                        "`chmod o-r {}`, or move the secret out of it with `{}: PATH` or `{}: ${{ENV_VAR}}`",
                        config.file, desc.name, mode, config.file, file_key, desc.name));
            }
        }
        if (!found && config.from_dsn) found = source_from_dsn(config, desc, source);
        if (!found && desc.default_value) {
            source.key = desc.name;
            source.location = fmt::format("default of option `{}`", desc.name);
            source.scalar = desc.default_value;
            found = true;
        }
        if (!found) {
            if (desc.flags & DLOCK_OPTION_REQUIRED)
                fail(fmt::format("{}: backend `{}` needs option `{}`: {}", config.origin, backend, desc.name,
                                 desc.doc ? desc.doc : ""));
            out.values_.push_back(value);
            continue;
        }
        value.is_set = 1;
        const std::string what = fmt::format("{}: option `{}`", source.location, desc.name);
        if (source.is_list && desc.type != DLOCK_OPTION_STRING_LIST)
            fail(fmt::format("{} takes one value, not a list", what));
        switch (desc.type) {
        case DLOCK_OPTION_STRING:
            value.string_value = keep(source.scalar);
            break;
        case DLOCK_OPTION_INT:
            value.int_value = parse_int(source.scalar, what);
            break;
        case DLOCK_OPTION_BOOL:
            value.int_value = parse_bool(source.scalar, what) ? 1 : 0;
            break;
        case DLOCK_OPTION_DURATION:
            value.int_value = parse_duration_ms(source.scalar, false, what);
            break;
        case DLOCK_OPTION_STRING_LIST: {
            auto list = std::make_unique<std::vector<const char*>>();
            if (source.is_list) {
                for (auto& item : source.list) list->push_back(keep(item));
            } else if (!source.scalar.empty()) {
                list->push_back(keep(source.scalar));
            }
            value.list_values = list->data();
            value.list_count = list->size();
            out.lists_.push_back(std::move(list));
            break;
        }
        default:
            throw error(DLOCK_PLUGIN, fmt::format("backend `{}` describes option `{}` with unknown type {}", backend,
                                                  desc.name, desc.type));
        }
        out.values_.push_back(value);
    }
    return out;
}

}  // namespace dlock::config

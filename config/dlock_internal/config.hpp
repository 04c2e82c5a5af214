// config.hpp — dlock's configuration: the YAML format of docs/config.md and the DSN form, parsed and
// validated with messages that give the origin (file:line:column) and the key at fault.
//
//   backend: redis                  # which plugin
//   plugin_path: [/opt/dlock/plugins]
//   defaults: { ttl: 30s, wait: 10s, renew: true, fair: true, reentrant: false }
//   options: { endpoint: 127.0.0.1:6379, password: ${REDIS_PASSWORD} }
//   locks: { "orders/*": { ttl: 10s, wait: 2s } }   # first glob match wins
//   metrics: { listen: 127.0.0.1:9464 }             # Prometheus exporter; off when absent
//
// Every scalar may use ${VAR} or ${VAR:-fallback}; "$$" is a literal "$". Durations are integers
// with a unit (ms, s, m, h); `wait` also takes `forever`, and 0 means "try once".
#pragma once

#include <dlock/plugin.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlock::config {

// Settings of an acquisition; unset fields fall through rule -> defaults -> built-in.
struct policy {
    std::optional<int64_t> ttl_ms;
    std::optional<int64_t> wait_ms;  // INT64_MAX = forever
    std::optional<bool> renew;
    std::optional<bool> fair;
    std::optional<bool> reentrant;
};

// Built-in defaults: ttl 30s, wait forever, renew on, fair on, reentrant off.
struct resolved_policy {
    int64_t ttl_ms = 30'000;
    int64_t wait_ms = INT64_MAX;
    bool renew = true;
    bool fair = true;
    bool reentrant = false;
};

struct lock_rule {
    std::string pattern;  // fnmatch glob; `*` also matches `/`
    policy settings;
};

// One backend option as written, before it is checked against the plugin's description.
struct raw_option {
    std::string key;
    std::string location;  // "file:line:col" or "DSN query key `k`"
    bool is_list = false;
    std::string scalar;
    std::vector<std::string> list;
    bool literal = true;  // written out in the config, not taken from ${ENV}
};

struct client_config {
    std::string origin;  // where it came from, for messages
    std::string file;    // the YAML file it was read from; "" for text and DSNs
    std::string backend;
    std::vector<std::string> plugin_path;
    policy defaults;
    std::vector<lock_rule> locks;
    std::vector<raw_option> options;
    // DSN parts, for options whose description names a dlock_dsn_part.
    bool from_dsn = false;
    std::string dsn_url, dsn_hosts, dsn_user, dsn_password, dsn_path;
    bool dsn_has_user = false, dsn_has_password = false;
    // Where the Prometheus exporter listens ("127.0.0.1:9464", "[::1]:9464"); "" = metrics off.
    // Checked by parse_metrics_listen.
    std::string metrics_listen;
};

// Parses YAML text. Throws detail::error(DLOCK_CONFIG) with "origin:line:col: ..." messages.
client_config parse_yaml(const std::string& text, const std::string& origin);
// Reads and parses a YAML file.
client_config load_yaml_file(const std::string& path);
// Parses "scheme://[user[:password]@]host[,host...][/path][?key=value&...]".
client_config parse_dsn(const std::string& dsn);
// True for "<scheme>://..." strings.
bool looks_like_dsn(std::string_view text);
// No config: the `file` backend in the runtime directory.
client_config embedded_default();
// What dlock_client_open(NULL) uses: $DLOCK_CONFIG (path or DSN) if set, else embedded_default().
client_config from_environment();
// Opens a path or DSN (the rule of dlock_client_open).
client_config open_spec(const std::string& spec);

// Checks a metrics listen address: an IPv4 literal or a bracketed IPv6 literal, a colon and a port
// 1..65535 (host names are refused: the exporter binds to literals only). Returns it unchanged.
// Throws detail::error(DLOCK_CONFIG) "<what>: ..." giving the reason.
std::string parse_metrics_listen(const std::string& text, const std::string& what);

// The policy for `name`: first matching rule, then defaults, then built-in values.
resolved_policy resolve(const client_config& config, std::string_view name);

// Durations: "250ms", "30s", "5m", "1h", "0"; "forever" when allow_forever. Throws
// detail::error(DLOCK_CONFIG) naming `what`.
int64_t parse_duration_ms(std::string_view text, bool allow_forever, const std::string& what);

// The plugin's options, checked and converted: one dlock_option_value per description, in order,
// pointing into storage owned by this object.
class bound_options {
public:
    const dlock_option_value* data() const { return values_.data(); }
    size_t size() const { return values_.size(); }
    // One line per file holding a secret that other users can read, saying how to fix it.
    const std::vector<std::string>& warnings() const { return warnings_; }

private:
    friend bound_options bind_options(const client_config&, const dlock_plugin&);
    std::vector<dlock_option_value> values_;
    std::vector<std::unique_ptr<std::string>> strings_;
    std::vector<std::unique_ptr<std::vector<const char*>>> lists_;
    std::vector<std::string> warnings_;
};

// Checks every configured option against the plugin's description (unknown keys, types, required
// ones) and fills defaults. Throws detail::error(DLOCK_CONFIG).
// A secret option X (DLOCK_OPTION_SECRET) may instead be given as `X_file: PATH`: the file's
// content, without its final newline, is the value. A secret written out in a config file, or a
// secret file, that other users can read (mode o+r) gives one warning line naming it and the fix.
bound_options bind_options(const client_config& config, const dlock_plugin& plugin);

}  // namespace dlock::config

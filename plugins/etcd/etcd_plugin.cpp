// The `etcd` backend's plugin entry points: its options and their parsing, create/destroy, the C
// table and its negotiation. The algorithm is described in etcd_backend.hpp.
#include "etcd_backend.hpp"

#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>

void dlock_backend::interrupt() {
    interrupted = true;
    conn->interrupt();
    dlock::plugin_kit::lock_guard lock(state_mutex);
    for (const auto& a : queued) {
        dlock::plugin_kit::lock_guard signal(a->m);
        a->cancelled = true;
        a->cv.notify_all();
    }
}

void dlock_backend::shut_down() {
    {
        dlock::plugin_kit::lock_guard lock(state_mutex);
        janitor_stop = true;
        janitor_wake.notify_all();
    }
    if (janitor.joinable()) janitor.join();
    sessions->stop();
    watches->stop();
}

namespace {

const dlock_option_desc etcd_options[] = {
    {"endpoints", DLOCK_OPTION_STRING_LIST, 0, DLOCK_DSN_HOSTS, "127.0.0.1:2379",
     "etcd members, host:port (or http://host:port, https://host:port); calls fail over to the next when one is unreachable."},
    {"username", DLOCK_OPTION_STRING, 0, DLOCK_DSN_USER, nullptr, "User for etcd authentication; empty: none."},
    {"password", DLOCK_OPTION_STRING, DLOCK_OPTION_SECRET, DLOCK_DSN_PASSWORD, nullptr, "Password of `username`."},
    {"tls", DLOCK_OPTION_BOOL, 0, DLOCK_DSN_NONE, "false", "Use TLS (implied by https:// endpoints and by `ca_file`)."},
    {"ca_file", DLOCK_OPTION_STRING, 0, DLOCK_DSN_NONE, nullptr, "PEM file of the CA that signed the members' certificates; empty: the system's roots."},
    {"cert_file", DLOCK_OPTION_STRING, 0, DLOCK_DSN_NONE, nullptr, "PEM client certificate (with `key_file`) for client-certificate authentication."},
    {"key_file", DLOCK_OPTION_STRING, 0, DLOCK_DSN_NONE, nullptr, "PEM private key of `cert_file`."},
    {"key_prefix", DLOCK_OPTION_STRING, 0, DLOCK_DSN_PATH, "dlock/", "Prefix of every key dlock writes (a `/` is appended when missing; empty: keys at the top of the keyspace)."},
    {"session_ttl", DLOCK_OPTION_DURATION, 0, DLOCK_DSN_NONE, nullptr,
     "TTL of the client's session lease (whole seconds, raised to the server's minimum); unset: the ttl of the acquire that grants it."},
    {"dial_timeout", DLOCK_OPTION_DURATION, 0, DLOCK_DSN_NONE, "2s", "Bound on connecting to one member (and on the check at open)."},
    {"request_timeout", DLOCK_OPTION_DURATION, 0, DLOCK_DSN_NONE, "5s", "Bound on one request to one member before trying the next; an acquire's requests also end at its deadline, a try-once's after one request_timeout in all."},
};

std::string read_pem(const char* option, const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(DLOCK_CONFIG, fmt::format("etcd: option `{}`: cannot read `{}`", option, path));
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

// A client certificate that is not valid now is refused by the server during the handshake, and
// gRPC reports only a failed connection: say at open which file to renew instead.
void check_certificate_validity(const std::string& path, const std::string& pem) {
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), int(pem.size())), &BIO_free);
    std::unique_ptr<X509, decltype(&X509_free)> cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr,
                                                     &X509_free);
    if (!cert) fail(DLOCK_CONFIG, fmt::format("etcd: option `cert_file`: `{}` holds no PEM certificate", path));
    auto text_of = [](const ASN1_TIME* t) {
        std::unique_ptr<BIO, decltype(&BIO_free)> out(BIO_new(BIO_s_mem()), &BIO_free);
        if (!out || ASN1_TIME_print(out.get(), t) != 1) return std::string("?");
        char* data = nullptr;
        const long n = BIO_get_mem_data(out.get(), &data);
        return std::string(data, size_t(n));
    };
    if (X509_cmp_current_time(X509_get0_notAfter(cert.get())) <= 0)
        fail(DLOCK_CONFIG, fmt::format("etcd: option `cert_file`: the certificate in `{}` expired on {}; renew it (and "
                                       "`key_file`)", path, text_of(X509_get0_notAfter(cert.get()))));
    if (X509_cmp_current_time(X509_get0_notBefore(cert.get())) > 0)
        fail(DLOCK_CONFIG, fmt::format("etcd: option `cert_file`: the certificate in `{}` is not valid before {}; check "
                                       "this machine's clock", path, text_of(X509_get0_notBefore(cert.get()))));
}

settings parse_settings(const dlock_option_value* values, size_t count) {
    settings s;
    bool https = false, http = false;
    if (const auto* v = find_option(values, count, "endpoints")) {
        for (size_t i = 0; i < v->list_count; ++i) {
            std::string e = v->list_values[i];
            if (e.rfind("https://", 0) == 0) {
                https = true;
                e = e.substr(8);
            } else if (e.rfind("http://", 0) == 0) {
                http = true;
                e = e.substr(7);
            }
            while (!e.empty() && e.back() == '/') e.pop_back();
            const size_t colon = e.rfind(':');
            if (e.empty() || colon == std::string::npos || colon == 0 || colon + 1 == e.size() ||
                e.find_first_not_of("0123456789", colon + 1) != std::string::npos)
                fail(DLOCK_CONFIG, fmt::format("etcd: endpoint `{}` is not host:port", v->list_values[i]));
            if (std::find(s.endpoints.begin(), s.endpoints.end(), e) != s.endpoints.end())
                fail(DLOCK_CONFIG, fmt::format("etcd: endpoint `{}` is listed twice", e));
            s.endpoints.push_back(e);
        }
    }
    if (s.endpoints.empty()) fail(DLOCK_CONFIG, "etcd: option `endpoints` lists no member");
    if (https && http) fail(DLOCK_CONFIG, "etcd: `endpoints` mix http:// and https://; use one scheme");
    if (const auto* v = find_option(values, count, "username")) s.username = v->string_value;
    if (const auto* v = find_option(values, count, "password")) s.password = v->string_value;
    if (!s.password.empty() && s.username.empty()) fail(DLOCK_CONFIG, "etcd: `password` is set without `username`");
    s.tls = https;
    if (const auto* v = find_option(values, count, "tls")) s.tls = s.tls || v->int_value != 0;
    if (const auto* v = find_option(values, count, "ca_file"); v && *v->string_value) {
        s.ca_pem = read_pem("ca_file", v->string_value);
        s.tls = true;
    }
    const auto* cert = find_option(values, count, "cert_file");
    const auto* key = find_option(values, count, "key_file");
    const bool has_cert = cert && *cert->string_value, has_key = key && *key->string_value;
    if (has_cert != has_key) fail(DLOCK_CONFIG, "etcd: `cert_file` and `key_file` go together");
    if (has_cert) {
        s.cert_pem = read_pem("cert_file", cert->string_value);
        check_certificate_validity(cert->string_value, s.cert_pem);
        s.key_pem = read_pem("key_file", key->string_value);
        s.tls = true;
    }
    if (http && s.tls) fail(DLOCK_CONFIG, "etcd: TLS options are set but `endpoints` use http://");
    if (const auto* v = find_option(values, count, "key_prefix")) s.key_prefix = v->string_value;
    if (!s.key_prefix.empty() && s.key_prefix.back() != '/') s.key_prefix += '/';
    if (const auto* v = find_option(values, count, "session_ttl")) {
        if (v->int_value < 1) fail(DLOCK_CONFIG, "etcd: `session_ttl` must be at least 1s");
        s.session_ttl_ms = v->int_value;
    }
    if (const auto* v = find_option(values, count, "dial_timeout")) s.dial_timeout_ms = v->int_value;
    if (const auto* v = find_option(values, count, "request_timeout")) s.request_timeout_ms = v->int_value;
    if (s.dial_timeout_ms < 1 || s.request_timeout_ms < 1)
        fail(DLOCK_CONFIG, "etcd: `dial_timeout` and `request_timeout` must be at least 1ms");
    return s;
}

int etcd_create(const dlock_option_value* values, size_t count, const dlock_plugin_host* host, dlock_backend** out,
                dlock_plugin_error* error) {
    return guarded(error, "etcd", [&] {
        auto b = std::make_unique<dlock_backend>();
        dlock::plugin_kit::copy_in(b->host, host, DLOCK_PLUGIN_HOST_V1_SIZE);  // the part its struct_size covers
        b->config = parse_settings(values, count);
        b->conn = std::make_unique<connection>(b->config);
        b->watches = std::make_unique<watcher>(*b->conn);
        b->sessions = std::make_unique<session_keeper>(*b->conn, *b);
        // Connect at open: a wrong endpoint, password or permission is an error here, not at the first acquire.
        b->conn->check_reachable();
        *out = b.release();
        return DLOCK_OK;
    });
}

void etcd_destroy(dlock_backend* b) {
    if (!b) return;
    guarded(nullptr, "etcd", [&] {
        b->shut_down();
        return DLOCK_OK;
    });
    delete b;
}

uint64_t etcd_capabilities(dlock_backend* b) {
    uint64_t caps = DLOCK_CAP_FENCING | DLOCK_CAP_FAIR | DLOCK_CAP_PUSH_WAIT | DLOCK_CAP_TTL | DLOCK_CAP_SEMAPHORE |
                    DLOCK_CAP_SHARED | DLOCK_CAP_LIST | DLOCK_CAP_BREAK;
    if (b && b->config.endpoints.size() > 1) caps |= DLOCK_CAP_QUORUM;
    return caps;
}

void etcd_interrupt(dlock_backend* b) {
    guarded(nullptr, "etcd", [&] {
        b->interrupt();
        return DLOCK_OK;
    });
}

int etcd_acquire(dlock_backend* b, const dlock_acquire_request* request, dlock_hold** out_hold, dlock_grant* grant,
                 dlock_plugin_error* error) {
    return guarded(error, "etcd", [&] { return b->acquire(*request, out_hold, grant); });
}

int etcd_release(dlock_backend* b, dlock_hold* h, dlock_plugin_error* error) {
    return guarded(error, "etcd", [&] { return b->release(h, error); });
}

void etcd_hold_destroy(dlock_backend* b, dlock_hold* h) {
    guarded(nullptr, "etcd", [&] {
        b->hold_destroy(h);
        return DLOCK_OK;
    });
}

int etcd_renew(dlock_backend* b, dlock_renewal* renewals, size_t count, dlock_plugin_error* error) {
    return guarded(error, "etcd", [&] { return b->renew(renewals, count); });
}

int etcd_inspect(dlock_backend* b, const char* name, dlock_lock_info* info, dlock_plugin_error* error) {
    return guarded(error, "etcd", [&] { return b->inspect(name, info); });
}

int etcd_holders(dlock_backend* b, const char* name, int semaphore, dlock_holder_visitor visit, void* user_data,
                 dlock_plugin_error* error) {
    return guarded(error, "etcd", [&] { return b->holders(name, semaphore, visit, user_data); });
}

int etcd_list(dlock_backend* b, const char* prefix, dlock_holder_visitor visit, void* user_data, dlock_plugin_error* error) {
    return guarded(error, "etcd", [&] { return b->list(prefix, visit, user_data); });
}

int etcd_break_lock(dlock_backend* b, const char* name, int semaphore, size_t* out_broken, dlock_plugin_error* error) {
    return guarded(error, "etcd", [&] { return b->break_lock(name, semaphore, out_broken); });
}

const dlock_plugin etcd_plugin = {
    sizeof(dlock_plugin),
    2,
    "etcd",
    "etcd v3 over gRPC: one session lease per client on one keepalive stream; the etcd mutex algorithm (lowest "
    "create_revision holds, each waiter watches its predecessor); fencing token = the key's create_revision. "
    "Semaphores (the lowest N create_revisions hold) and shared locks (shared keys in the lock's queue).",
    etcd_options,
    sizeof etcd_options / sizeof etcd_options[0],
    etcd_create,
    etcd_destroy,
    etcd_capabilities,
    etcd_interrupt,
    etcd_acquire,
    etcd_release,
    etcd_hold_destroy,
    etcd_renew,
    etcd_inspect,
    etcd_holders,
    etcd_list,
    etcd_break_lock,
};

const dlock_plugin etcd_plugin_v1_view = dlock::plugin_kit::as_version_1(etcd_plugin);

}  // namespace

extern "C" DLOCK_PLUGIN_EXPORT int dlock_plugin_negotiate(uint32_t host_max_version, const dlock_plugin** out,
                                                          uint32_t* out_min_version) {
    return dlock::plugin_kit::negotiate_v2(host_max_version, &etcd_plugin, &etcd_plugin_v1_view, out, out_min_version);
}

// Implements the etcd connection layer (connection.hpp).
#include "connection.hpp"

#include "tls_probe.hpp"

#include <fmt/format.h>

#include <absl/base/internal/sysinfo.h>
#include <grpc/support/time.h>

#include <algorithm>

#include <time.h>

namespace dlock::etcd {

std::string lease_hex(int64_t id) { return fmt::format("{:016x}", uint64_t(id)); }

namespace {

bool contains(const std::string& text, const char* fragment) { return text.find(fragment) != std::string::npos; }

// absl measures the CPU's clock rate once per process, by sleeping 1 ms, 2 ms, 4 ms... until two
// measurements agree (3 ms at best, more on a loaded machine), the first time a thread queues on an
// absl::Mutex that another thread already waits for. In a process with one client that is the close:
// tearing gRPC down quiesces its event engine's thread pool, and the closing thread sleeps through the
// measurement (docs/backends/etcd.md, "Threads"). Started by the first connection of the process, in
// a thread of its own, the measurement runs while that client connects and works. absl offers it only
// in base/internal; it is thread-safe and computed once, so a caller that needs it meanwhile waits for
// this one's result. An empty thread when the measurement was started before, or cannot be started.
std::thread measure_cpu_clock_once() {
    static std::atomic<bool> started{false};
    if (started.exchange(true)) return {};
    try {
        return std::thread([] { (void)absl::base_internal::NominalCPUFrequency(); });
    } catch (const std::system_error&) {  // no thread: the measurement happens where absl needs it
        return {};
    }
}

}  // namespace

std::string prefix_end(std::string prefix) {
    while (!prefix.empty()) {
        if (static_cast<unsigned char>(prefix.back()) < 0xff) {
            prefix.back() = char(static_cast<unsigned char>(prefix.back()) + 1);
            return prefix;
        }
        prefix.pop_back();
    }
    return std::string(1, '\0');  // every key
}

connection::connection(settings config) : config_(std::move(config)) {
    grpc::ChannelArguments args;
    // A member that comes back is reconnected to within a second, not after gRPC's default backoff
    // (up to two minutes).
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    // gRPC also takes the minimum backoff as the bound on one connection attempt: dial_timeout.
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, int(std::min<int64_t>(config_.dial_timeout_ms, INT32_MAX)));
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    // Each client has its own connections: one client's failover never moves another's traffic.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    if (config_.tls) {
        grpc::SslCredentialsOptions tls;
        tls.pem_root_certs = config_.ca_pem;
        tls.pem_cert_chain = config_.cert_pem;
        tls.pem_private_key = config_.key_pem;
        credentials = grpc::SslCredentials(tls);
    } else {
        credentials = grpc::InsecureChannelCredentials();
    }
    for (const auto& address : config_.endpoints) {
        auto m = std::make_unique<member>();
        m->address = address;
        m->channel = grpc::CreateCustomChannel(address, credentials, args);
        m->kv = pb::KV::NewStub(m->channel);
        m->lease = pb::Lease::NewStub(m->channel);
        m->watch = pb::Watch::NewStub(m->channel);
        m->auth = pb::Auth::NewStub(m->channel);
        members_.push_back(std::move(m));
    }
    cpu_clock_measurement_ = measure_cpu_clock_once();  // last: nothing after it may throw
}

connection::~connection() {
    // Before the channels go: when this connection is the last, their destruction tears gRPC down.
    if (cpu_clock_measurement_.joinable()) cpu_clock_measurement_.join();
}

void connection::fail_over(size_t failed) {
    size_t expected = failed;
    current_.compare_exchange_strong(expected, (failed + 1) % members_.size());
}

std::string connection::endpoint_list() const {
    std::string out;
    for (const auto& m : members_) out += (out.empty() ? "" : ", ") + m->address;
    return out;
}

bool connection::wait_connected(size_t index) {
    return members_.at(index)->channel->WaitForConnected(
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(config_.dial_timeout_ms, GPR_TIMESPAN)));
}

std::string connection::token() const {
    plugin_kit::lock_guard lock(token_mutex_);
    return token_;
}

void connection::prepare(grpc::ClientContext& context, int64_t timeout_ms) {
    // A deadline on the monotonic clock: a wall-clock jump never cuts a call short or stretches it.
    if (timeout_ms > 0)
        context.set_deadline(gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(timeout_ms, GPR_TIMESPAN)));
    const std::string t = token();
    if (!t.empty()) context.AddMetadata("token", t);
}

void connection::prepare_stream(grpc::ClientContext& context) {
    prepare(context, 0);
    context.AddMetadata("hasleader", "true");
}

bool connection::member_unusable(const grpc::Status& status) {
    // etcd answers UNAVAILABLE for "no leader", "leader changed" and "request timed out" too: another
    // member may be in the majority, and every request dlock sends is idempotent.
    return status.error_code() == grpc::StatusCode::UNAVAILABLE || status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

std::string connection::tls_hint(const std::string& errors) const {
    if (!config_.tls) return "";
    if (contains(errors, "certificate verify failed")) {
        std::string reasons;
        for (const std::string& address : config_.endpoints) {
            const size_t colon = address.rfind(':');
            if (colon == std::string::npos) continue;
            std::string host = address.substr(0, colon);
            if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
            const std::string reason = tls_probe::server_certificate_problem(
                host, uint16_t(std::stoi(address.substr(colon + 1))), true, config_.ca_pem, tls_probe::preamble::none,
                int(std::min<int64_t>(config_.dial_timeout_ms, 2000)));
            if (!reason.empty()) reasons += "; " + reason;
        }
        if (!reasons.empty()) return reasons;
    }
    // gRPC words a refused handshake as a failed connection ("Ssl handshake failed", "Endpoint read
    // failed"): name the settings that cause it.
    return "; with TLS, `ca_file` must hold the CA that signed the members' certificates, which must name the host "
           "in `endpoints`, and the members must trust the CA of `cert_file`";
}

failure connection::failure_of(const grpc::Status& status, const std::string& address, const char* what) const {
    const std::string& message = status.error_message();
    const std::string where = fmt::format("etcd {}: {}", address, what);
    switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
        return {DLOCK_UNAVAILABLE, fmt::format("{} failed: {}; check that etcd runs there and that a majority of its "
                                               "cluster is up{}", where, message, tls_hint(message))};
    case grpc::StatusCode::DEADLINE_EXCEEDED:
        return {DLOCK_UNAVAILABLE, fmt::format("{}: no answer within {} ms (the member may be paused, overloaded or cut "
                                               "off); raise `request_timeout` if it is merely slow", where,
                                               config_.request_timeout_ms)};
    case grpc::StatusCode::CANCELLED:
        return {DLOCK_CANCELLED, fmt::format("{}: cancelled (the client is closing)", where)};
    case grpc::StatusCode::PERMISSION_DENIED:
        return {DLOCK_PERMISSION, fmt::format("{}: permission denied for user `{}` ({}); grant its role readwrite on the "
                                           "key prefix, e.g. `etcdctl role grant-permission ROLE --prefix=true readwrite "
                                           "{}`", where, config_.username, message, config_.key_prefix)};
    case grpc::StatusCode::UNAUTHENTICATED:
        return {DLOCK_CONFIG, fmt::format("{}: not authenticated ({}); {}", where, message,
                                          config_.username.empty() ? "authentication is enabled on this cluster: set "
                                                                     "`username` and `password`"
                                                                   : "check `username` and `password`")};
    case grpc::StatusCode::INVALID_ARGUMENT:
        if (contains(message, "user name is empty"))
            return {DLOCK_CONFIG, fmt::format("{}: authentication is enabled on this cluster ({}); set `username` and "
                                              "`password`", where, message)};
        if (contains(message, "authentication failed"))
            return {DLOCK_CONFIG, fmt::format("{}: authentication failed for user `{}` ({}); check `username` and "
                                              "`password`", where, config_.username, message)};
        return {DLOCK_BACKEND, fmt::format("{}: the server refused the request: {}", where, message)};
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
        return {DLOCK_BACKEND, fmt::format("{}: {} (a full database needs compaction and defragmentation; too many "
                                           "requests need fewer clients)", where, message)};
    default:
        return {DLOCK_BACKEND, fmt::format("{}: {} (gRPC status {})", where, message, int(status.error_code()))};
    }
}

void connection::call(const char* what, const rpc_function& rpc, call_options options) {
    if (options.cancel_on_interrupt && interrupted_) fail(DLOCK_CANCELLED, "etcd: the client is closing");
    const int64_t timeout_ms = options.timeout_ms > 0 ? options.timeout_ms : config_.request_timeout_ms;
    const size_t n = members_.size();
    const size_t start = current();
    std::string errors;
    bool renewed_token = false;
    auto out_of_time = [&] {
        const std::string tried = errors.empty() ? std::string() : fmt::format(" ({})", errors);
        if (options.out_of_time_status == DLOCK_TIMEOUT)
            fail(DLOCK_TIMEOUT, fmt::format("etcd: {}: not done before the deadline{}", what, tried));
        fail(options.out_of_time_status, fmt::format("etcd: {}: no answer in time{}; check that etcd runs at {} and that a "
                                                     "majority of its cluster is up", what, tried, endpoint_list()));
    };
    for (size_t attempt = 0; attempt < n; ++attempt) {
        const size_t index = (start + attempt) % n;
        member& m = *members_[index];
        for (;;) {
            // The attempt's bound: request_timeout, or less when the caller's time ends sooner.
            int64_t attempt_ms = timeout_ms;
            bool capped = false;
            if (options.deadline_ns != forever_ns) {
                const int64_t left_ns = options.deadline_ns - now_ns();
                if (left_ns <= 0) out_of_time();
                const int64_t left_ms = (left_ns + ns_per_ms - 1) / ns_per_ms;
                if (left_ms < attempt_ms) {
                    attempt_ms = left_ms;
                    capped = true;
                }
            }
            grpc::ClientContext context;
            prepare(context, attempt_ms);
            if (options.cancel_on_interrupt) {
                plugin_kit::lock_guard lock(in_flight_mutex_);
                if (interrupted_) fail(DLOCK_CANCELLED, "etcd: the client is closing");
                in_flight_.insert(&context);
            }
            const int64_t sent_ns = now_ns();
            grpc::Status status = rpc(m, context);
            // etcd ends a request whose deadline passed while it waited (a linearizable read waiting
            // for its read index, a write for its commit) with the bare context error, which its gRPC
            // server sends as UNKNOWN "context deadline exceeded": the same as our own deadline firing.
            if (status.error_code() == grpc::StatusCode::UNKNOWN && contains(status.error_message(), "context deadline exceeded"))
                status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, status.error_message());
            if (options.cancel_on_interrupt) {
                plugin_kit::lock_guard lock(in_flight_mutex_);
                in_flight_.erase(&context);
            }
            if (status.ok()) {
                if (index != start) {
                    size_t expected = start;
                    current_.compare_exchange_strong(expected, index);
                }
                return;
            }
            if ((member_unusable(status) || status.error_code() == grpc::StatusCode::CANCELLED) &&
                options.unanswered_sent_ns && *options.unanswered_sent_ns == 0)
                *options.unanswered_sent_ns = sent_ns;
            if (options.cancel_on_interrupt && interrupted_) fail(DLOCK_CANCELLED, "etcd: the client is closing");
            const bool token_rejected =
                status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
                (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT && contains(status.error_message(), "auth store is old"));
            if (token_rejected && !config_.username.empty() && !renewed_token) {
                renewed_token = true;  // the token expired (or the auth store changed): once more with a new one
                authenticate();
                continue;
            }
            if (member_unusable(status)) {
                errors += fmt::format("{}{}: {}", errors.empty() ? "" : "; ", m.address,
                                      status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                                          ? fmt::format("no answer within {} ms", attempt_ms)
                                          : status.error_message());
                // Cut short by the caller's deadline, not by the member: do not move off it. etcd
                // also answers a write whose deadline passed before it committed with UNAVAILABLE
                // "request timed out", which may reach us before our own deadline fires.
                if (capped && (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED || now_ns() >= options.deadline_ns))
                    out_of_time();
                fail_over(index);
                break;
            }
            throw failure_of(status, m.address, what);
        }
    }
    fail(DLOCK_UNAVAILABLE, fmt::format("etcd: {} failed on every endpoint ({}); check that etcd runs at {} and that a "
                                        "majority of its cluster is up{}", what, errors, endpoint_list(), tls_hint(errors)));
}

void connection::authenticate() {
    if (config_.username.empty()) return;
    pb::AuthenticateRequest request;
    request.set_name(config_.username);
    request.set_password(config_.password);
    const size_t n = members_.size();
    const size_t start = current();
    std::string errors;
    for (size_t attempt = 0; attempt < n; ++attempt) {
        member& m = *members_[(start + attempt) % n];
        grpc::ClientContext context;
        // No token on this call; bcrypt makes it slow on purpose, so it gets a little more time.
        context.set_deadline(gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                          gpr_time_from_millis(std::max<int64_t>(config_.request_timeout_ms, 2000), GPR_TIMESPAN)));
        pb::AuthenticateResponse response;
        const grpc::Status status = m.auth->Authenticate(&context, request, &response);
        if (status.ok()) {
            plugin_kit::lock_guard lock(token_mutex_);
            token_ = response.token();
            ++token_generation_;
            return;
        }
        if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION && contains(status.error_message(), "not enabled")) {
            plugin_kit::lock_guard lock(token_mutex_);
            token_.clear();  // authentication is off on this cluster: calls go without a token
            return;
        }
        if (member_unusable(status)) {
            errors += fmt::format("{}{}: {}", errors.empty() ? "" : "; ", m.address, status.error_message());
            continue;
        }
        throw failure_of(status, m.address, "authenticate");
    }
    fail(DLOCK_UNAVAILABLE, fmt::format("etcd: authenticate failed on every endpoint ({}); check that etcd runs at {}{}",
                                        errors, endpoint_list(), tls_hint(errors)));
}

void connection::check_reachable() {
    authenticate();
    pb::RangeRequest request;
    // One key, not the prefix's range: etcd 3.4 visits every key of a range before it applies the
    // limit, so a read of the whole prefix cost the server O(keys under it) at every open (2 ms at
    // 20 000 keys, in every `dlock run`). The prefix itself is a key inside the range dlock's role
    // must be allowed to read, so a refused read still says so at open. etcd refuses an empty key:
    // with an empty prefix, "\0".
    request.set_key(config_.key_prefix.empty() ? std::string(1, '\0') : config_.key_prefix);
    request.set_keys_only(true);
    request.set_serializable(true);
    pb::RangeResponse response;
    call("connect (read of the key prefix)",
         [&](member& m, grpc::ClientContext& context) { return m.kv->Range(&context, request, &response); },
         call_options{false, config_.dial_timeout_ms});
}

void connection::interrupt() {
    plugin_kit::lock_guard lock(in_flight_mutex_);
    interrupted_ = true;
    for (grpc::ClientContext* context : in_flight_) context->TryCancel();
}

}  // namespace dlock::etcd

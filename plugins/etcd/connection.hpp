// connection.hpp — the etcd plugin's connection layer: the configured members (one gRPC channel and
// stub set each), failover to the next member when one is unreachable, optional TLS, user/password
// authentication with re-authentication when the token expires, and the mapping of gRPC/etcd errors
// to dlock statuses with messages that name the backend, the member and what to do.
//
// Shared by the plugin and benchmarks/etcd_bench (which calibrates its floor through this code).
// Thread-safe: any number of threads may run calls at once.
#pragma once

#include "etcd/etcdserverpb/rpc.grpc.pb.h"

#include <dlock/plugin.h>
#include <dlock/plugin_kit.hpp>
#include <dlock/plugin_kit/thread_safety.hpp>

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace dlock::etcd {

namespace pb = ::etcdserverpb;

// The plugin kit: failure and fail() (thrown inside the plugin, caught by guarded() at each entry
// point), the clock (now_ns, forever_ns, ns_per_ms, steady_time, drift_ns).
using namespace plugin_kit;

// The backend's options, validated.
struct settings {
    std::vector<std::string> endpoints;  // "host:port", scheme removed
    bool tls = false;
    std::string ca_pem, cert_pem, key_pem;  // file contents; empty: system roots / no client cert
    std::string username, password;         // empty username: no authentication
    std::string key_prefix = "dlock/";      // ends with '/'
    int64_t session_ttl_ms = 0;             // 0: the ttl of the acquire that grants the session
    int64_t dial_timeout_ms = 2000;
    int64_t request_timeout_ms = 5000;
};

// One member: its address, channel and stubs.
struct member {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<pb::KV::Stub> kv;
    std::unique_ptr<pb::Lease::Stub> lease;
    std::unique_ptr<pb::Watch::Stub> watch;
    std::unique_ptr<pb::Auth::Stub> auth;
};

// How one unary call behaves.
struct call_options {
    // Cancelled by interrupt() (acquire's calls); release, renew and clean-up calls are not.
    bool cancel_on_interrupt = false;
    // Per member tried; 0: settings.request_timeout_ms.
    int64_t timeout_ms = 0;
    // The end of the caller's time on CLOCK_MONOTONIC (forever_ns: none). Each attempt gets at most
    // the time left and none starts after it; a call out of time throws `out_of_time_status`
    // (DLOCK_TIMEOUT for an acquire's deadline, DLOCK_UNAVAILABLE for a try-once's budget).
    int64_t deadline_ns = forever_ns;
    int out_of_time_status = DLOCK_TIMEOUT;
    // When set, receives the send time of the first attempt that got no answer from etcd (it timed
    // out, the connection failed, or it was cancelled): that request may have been carried out.
    // Untouched while every attempt was answered; written before call() returns or throws.
    int64_t* unanswered_sent_ns = nullptr;
};

class connection {
public:
    // Builds one channel per endpoint; connects lazily (see check_reachable()).
    explicit connection(settings config);
    ~connection();
    connection(const connection&) = delete;
    connection& operator=(const connection&) = delete;

    const settings& config() const { return config_; }
    size_t size() const { return members_.size(); }
    member& at(size_t index) { return *members_.at(index); }
    // The member calls and streams go to now.
    size_t current() const { return current_.load(); }
    // Moves calls and streams off member `failed` to the next one (no effect when they already moved).
    void fail_over(size_t failed);
    // "127.0.0.1:2379, 127.0.0.1:22379"
    std::string endpoint_list() const;

    // Waits (at most dial_timeout) until member `index` has a connection; true when it has. Streams
    // call this before opening, because opening blocks while the channel connects.
    bool wait_connected(size_t index);

    // Fills a context for a call or stream to a member: deadline (0: none) and the auth token.
    void prepare(grpc::ClientContext& context, int64_t timeout_ms);
    // Fills a context for a long-lived stream (keepalive, watch): the auth token, no deadline, and
    // etcd's `hasleader` requirement, as etcd's own client sends it (WithRequireLeader): a member
    // that has no leader refuses the stream, and ends it when it loses its leader for three
    // election timeouts ("etcdserver: no leader"). Without it a member cut off from the others
    // keeps the stream open and silent: no event, no keepalive answer, until the client times out.
    void prepare_stream(grpc::ClientContext& context);

    // Runs one unary call, `rpc(member, context)`, with failover: a member that is unreachable
    // (UNAVAILABLE) or does not answer in time (DEADLINE_EXCEEDED) is left for the next one, so only
    // idempotent requests may be sent through here (every request dlock sends is: see
    // etcd_backend.hpp). An expired auth token is renewed once and the call repeated. Throws
    // failure: DLOCK_UNAVAILABLE when no member answered, DLOCK_CANCELLED after interrupt(),
    // options.out_of_time_status when options.deadline_ns passed, else the mapped etcd error (see
    // failure_of).
    using rpc_function = std::function<grpc::Status(member&, grpc::ClientContext&)>;
    void call(const char* what, const rpc_function& rpc, call_options options = {});

    // Authenticates with the configured user (no-op without one) and keeps the token for later
    // calls. Throws failure (DLOCK_CONFIG for bad credentials).
    void authenticate();
    // One read of a single key (the key prefix) on the first member that answers: the endpoints,
    // the credentials and the read permission are checked at open, not at the first acquire.
    void check_reachable();

    // Cancels every call in flight made with cancel_on_interrupt, and makes later ones fail with
    // DLOCK_CANCELLED.
    void interrupt();

    // The dlock status and message for a failed call `what` on member `address`.
    failure failure_of(const grpc::Status& status, const std::string& address, const char* what) const;
    // With TLS on: what to check when a member cannot be reached ("" without TLS). When `errors`
    // (gRPC's messages) say the server's certificate was refused, the reason found by probing
    // each member's certificate (tls_probe.hpp): expired, another host's, an unknown CA's.
    std::string tls_hint(const std::string& errors) const;
    // True for errors that mean "this member cannot serve now; another may".
    static bool member_unusable(const grpc::Status& status);

private:
    std::string token() const;

    settings config_;
    std::vector<std::unique_ptr<member>> members_;
    std::atomic<size_t> current_{0};
    mutable plugin_kit::mutex token_mutex_;
    std::string token_ DLOCK_GUARDED_BY(token_mutex_);  // empty: none
    uint64_t token_generation_ DLOCK_GUARDED_BY(token_mutex_) = 0;  // bumped by each authenticate()
    plugin_kit::mutex in_flight_mutex_;
    std::set<grpc::ClientContext*> in_flight_ DLOCK_GUARDED_BY(in_flight_mutex_);  // cancellable calls running
    std::atomic<bool> interrupted_{false};
    // absl's one-off measurement of the CPU clock, when this connection started it (connection.cpp,
    // measure_cpu_clock_once); joined at destruction.
    std::thread cpu_clock_measurement_;
};

// The end of the prefix range: every key starting with `prefix` is in [prefix, prefix_end(prefix)).
std::string prefix_end(std::string prefix);

// Lease ids as etcd prints them (lowercase hex, 16 digits).
std::string lease_hex(int64_t id);

}  // namespace dlock::etcd

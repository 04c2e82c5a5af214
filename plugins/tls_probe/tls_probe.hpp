// tls_probe.hpp — why a TLS server's certificate is refused, in words that say what to fix.
//
// gRPC and libpq report a refused server certificate as "certificate verify failed" and no more.
// After such a failure a plugin calls server_certificate_problem: it connects once more, runs the
// handshake with OpenSSL against the same CA, and returns the verifier's reason ("the certificate
// of 127.0.0.1:2379 (CN=etcd) expired on Nov 23 16:03:20 2026 GMT; ..."). Diagnosis only: it sends
// no credentials and its answer never decides anything.
#pragma once

#include <cstdint>
#include <string>

namespace dlock::tls_probe {

// What precedes the TLS handshake on the server's port.
enum class preamble {
    none,      // TLS from the first byte (etcd's gRPC)
    postgres,  // PostgreSQL's SSLRequest message, answered 'S'
};

// Connects to host:port (an IP address or a name) within `timeout_ms`, performs the handshake
// trusting the CA certificates in `ca_pem` (PEM text; empty: the system's) and, when `check_host`,
// expecting `host` in the server's certificate, and returns one sentence naming why its certificate is refused, or ""
// when it verifies or the probe could not tell (unreachable, no TLS, no answer in time). Never throws.
std::string server_certificate_problem(const std::string& host, uint16_t port, bool check_host, const std::string& ca_pem,
                                       preamble before, int timeout_ms);

}  // namespace dlock::tls_probe

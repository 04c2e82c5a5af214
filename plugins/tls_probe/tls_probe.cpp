// Names why a TLS server's certificate is refused (tls_probe.hpp).
#include "tls_probe.hpp"

#include <dlock/plugin_kit/scope_exit.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <chrono>
#include <memory>

namespace dlock::tls_probe {

namespace {

using clock = std::chrono::steady_clock;

int ms_left(clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
    return left > 0 ? int(left) : 0;
}

// Waits until `fd` is readable (POLLIN) or writable (POLLOUT) before the deadline.
bool wait_for(int fd, short events, clock::time_point deadline) {
    pollfd p{fd, events, 0};
    for (;;) {
        const int ready = ::poll(&p, 1, ms_left(deadline));
        if (ready > 0) return true;
        if (ready == 0 || errno != EINTR) return false;
    }
}

// A non-blocking TCP connection to host:port, or -1.
int connect_to(const std::string& host, uint16_t port, clock::time_point deadline) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found) return -1;
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, &::freeaddrinfo);
    const int fd = ::socket(found->ai_family, found->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, found->ai_protocol);
    if (fd < 0) return -1;
    if (::connect(fd, found->ai_addr, found->ai_addrlen) != 0 && errno != EINPROGRESS) {
        ::close(fd);
        return -1;
    }
    int error = 0;
    socklen_t size = sizeof error;
    if (!wait_for(fd, POLLOUT, deadline) || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0 || error != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

// PostgreSQL's SSLRequest (length 8, code 80877103); true when the server answers 'S'.
bool postgres_ssl_request(int fd, clock::time_point deadline) {
    const unsigned char request[8] = {0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f};
    if (::send(fd, request, sizeof request, MSG_NOSIGNAL) != ssize_t(sizeof request)) return false;
    char answer = 0;
    return wait_for(fd, POLLIN, deadline) && ::recv(fd, &answer, 1, 0) == 1 && answer == 'S';
}

std::string time_text(const ASN1_TIME* t) {
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), &BIO_free);
    if (!bio || ASN1_TIME_print(bio.get(), t) != 1) return "?";
    char* data = nullptr;
    const long n = BIO_get_mem_data(bio.get(), &data);
    return std::string(data, size_t(n));
}

std::string subject_text(X509* cert) {
    char buffer[256] = {};
    X509_NAME_oneline(X509_get_subject_name(cert), buffer, sizeof buffer);
    return buffer;
}

// The first verification failure the handshake met, recorded by the callback, which accepts every
// certificate so that the handshake goes on far enough to see the chain.
struct verdict {
    int error = X509_V_OK;
    std::string subject, not_before, not_after;
};
int verdict_index() {
    static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
    return index;
}
int record_failure(int ok, X509_STORE_CTX* store) {
    if (ok) return 1;
    auto* ssl = static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
    auto* v = static_cast<verdict*>(SSL_get_ex_data(ssl, verdict_index()));
    if (v && v->error == X509_V_OK) {
        v->error = X509_STORE_CTX_get_error(store);
        if (X509* cert = X509_STORE_CTX_get_current_cert(store)) {
            v->subject = subject_text(cert);
            v->not_before = time_text(X509_get0_notBefore(cert));
            v->not_after = time_text(X509_get0_notAfter(cert));
        }
    }
    return 1;
}

bool load_ca(SSL_CTX* ctx, const std::string& ca_pem) {
    if (ca_pem.empty()) return SSL_CTX_set_default_verify_paths(ctx) == 1;
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(ca_pem.data(), int(ca_pem.size())), &BIO_free);
    X509_STORE* store = SSL_CTX_get_cert_store(ctx);
    int loaded = 0;
    while (X509* cert = bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr) {
        loaded += X509_STORE_add_cert(store, cert) == 1;
        X509_free(cert);
    }
    ERR_clear_error();  // the end of the PEM text reads as an error
    return loaded > 0;
}

std::string sentence(const verdict& v, const std::string& where) {
    const std::string whose = fmt::format("the certificate of {} ({})", where, v.subject);
    switch (v.error) {
    case X509_V_ERR_CERT_HAS_EXPIRED:
        return fmt::format("{} expired on {}: the server's certificate must be renewed (or this machine's clock is wrong)",
                           whose, v.not_after);
    case X509_V_ERR_CERT_NOT_YET_VALID:
        return fmt::format("{} is not valid before {}: check the clocks of this machine and of the server", whose, v.not_before);
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
        return fmt::format("{} does not name the host `{}`: connect by a name it carries, or reissue it with this one",
                           whose, where.substr(0, where.rfind(':')));
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
        return fmt::format("{} is not signed by a CA this client trusts ({}): configure the CA that signed it",
                           whose, X509_verify_cert_error_string(v.error));
    default:
        return fmt::format("{} is refused: {}", whose, X509_verify_cert_error_string(v.error));
    }
}

}  // namespace

std::string server_certificate_problem(const std::string& host, uint16_t port, bool check_host, const std::string& ca_pem,
                                       preamble before, int timeout_ms) {
    try {
        const auto deadline = clock::now() + std::chrono::milliseconds(timeout_ms);
        const int fd = connect_to(host, port, deadline);
        if (fd < 0) return "";
        const auto close_fd = dlock::plugin_kit::scope_exit([fd] { ::close(fd); });
        if (before == preamble::postgres && !postgres_ssl_request(fd, deadline)) return "";

        std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()), &SSL_CTX_free);
        if (!ctx || !load_ca(ctx.get(), ca_pem)) return "";
        SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, record_failure);
        std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), &SSL_free);
        if (!ssl) return "";
        verdict v;
        SSL_set_ex_data(ssl.get(), verdict_index(), &v);
        X509_VERIFY_PARAM* param = SSL_get0_param(ssl.get());
        in6_addr ignored;
        const bool ip = inet_pton(AF_INET, host.c_str(), &ignored) == 1 || inet_pton(AF_INET6, host.c_str(), &ignored) == 1;
        if (!ip) SSL_set_tlsext_host_name(ssl.get(), host.c_str());
        if (check_host && ip) X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
        if (check_host && !ip) X509_VERIFY_PARAM_set1_host(param, host.c_str(), 0);
        SSL_set_fd(ssl.get(), fd);
        // The handshake: the server's certificate arrives, and is judged, in its first flight.
        for (;;) {
            const int done = SSL_connect(ssl.get());
            if (done == 1) break;
            const int want = SSL_get_error(ssl.get(), done);
            if (want == SSL_ERROR_WANT_READ && wait_for(fd, POLLIN, deadline)) continue;
            if (want == SSL_ERROR_WANT_WRITE && wait_for(fd, POLLOUT, deadline)) continue;
            break;  // refused for a reason of the server's (say, no client certificate), or out of time
        }
        ERR_clear_error();
        if (v.error == X509_V_OK) return "";
        return sentence(v, fmt::format("{}:{}", host, port));
    } catch (...) {
        return "";
    }
}

}  // namespace dlock::tls_probe

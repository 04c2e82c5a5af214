// Secured servers (tests/lab secured.hpp): TLS and authentication on, two tenants with least
// privileges each.
//   - Isolation: tenant B, pointed at tenant A's prefix/table/path with its own credentials, can
//     neither acquire, inspect nor delete A's lock: a precise DLOCK_PERMISSION, never "held"; B's
//     own territory works beside A's.
//   - Wrong password, untrusted server certificate, certificate for another host, expired client
//     certificate: each a precise error at open, within the connect timeout, naming what to fix —
//     and never echoing the password.
// One ctest per secured backend (--backend=NAME): each run starts only that server.
#include "backend_test.hpp"

#include <dlock/dlock.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "dlock/lab/clients.hpp"
#include "dlock/lab/faults.hpp"
#include "dlock/lab/secured.hpp"

using namespace std::chrono_literals;
using dlock::lab::secured_backend;
using dlock::lab::secured_server;
using dlock::lab::tenant;

namespace {

secured_backend chosen = secured_backend::redis_acl;

secured_server& server() { return dlock::lab::shared_secured_server(chosen); }

// Opens `yaml`; returns the status, the message, and how long the open took. Closes a client that opened.
struct open_result {
    int status = DLOCK_OK;
    std::string message;
    std::chrono::milliseconds took{0};
};
open_result open_yaml(const std::string& yaml) {
    dlock_client* c = nullptr;
    const auto start = std::chrono::steady_clock::now();
    open_result r;
    r.status = dlock_client_open_yaml(yaml.c_str(), "secured.yaml", &c);
    r.took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    r.message = dlock_last_error();
    if (c) dlock_client_close(c);
    return r;
}

// `text` names none of the secrets of either tenant.
void expect_no_secret(const std::string& text) {
    for (const tenant* t : {&server().tenant_a(), &server().tenant_b()})
        EXPECT_EQ(text.find(t->password), std::string::npos) << "a password leaked: " << text;
}

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

class Secured : public ::testing::Test {
protected:
    void SetUp() override {
        try {
            server();
        } catch (const std::exception& e) {
            FAIL() << "the secured server did not start: " << e.what();
        }
    }
    const tenant& a() { return server().tenant_a(); }
    const tenant& b() { return server().tenant_b(); }
    // Tenant B's credentials aimed at tenant A's territory.
    std::string b_on_a_territory() {
        const char* key = chosen == secured_backend::postgres    ? "table"
                          : chosen == secured_backend::zookeeper ? "base_path"
                                                                 : "key_prefix";
        return server().config_text(b(), {{key, quoted(a().territory)}});
    }
};

// ---- isolation -------------------------------------------------------------------------------------

TEST_F(Secured, TenantCannotTouchAnotherTenantsLocks) {
    auto holder = dlock::client::open(a().config.string());
    auto lease = holder.acquire("iso/x", dlock::acquire_options().with_wait(0ms).with_ttl(30s));
    ASSERT_TRUE(lease);

    dlock_client* intruder = nullptr;
    const int opened = dlock_client_open_yaml(b_on_a_territory().c_str(), "tenant-b.yaml", &intruder);
    const std::string open_message = dlock_last_error();
    expect_no_secret(open_message);
    if (opened != DLOCK_OK) {
        // Refused at open: nothing of A's was reachable.
        EXPECT_EQ(opened, DLOCK_PERMISSION) << open_message;
        EXPECT_NE(open_message.find(b().user), std::string::npos) << "names the identity: " << open_message;
        std::cout << "[" << dlock::lab::secured_backend_name(chosen) << "] at open: " << open_message << "\n";
    } else {
        dlock_lease* stolen = nullptr;
        dlock_acquire_options try_once = DLOCK_ACQUIRE_OPTIONS_INIT;
        try_once.wait_ms = 0;
        EXPECT_EQ(dlock_acquire(intruder, "iso/x", &try_once, &stolen), DLOCK_PERMISSION) << "acquire: " << dlock_last_error();
        EXPECT_EQ(stolen, nullptr) << "tenant B acquired tenant A's lock";
        expect_no_secret(dlock_last_error());
        std::cout << "[" << dlock::lab::secured_backend_name(chosen) << "] acquire: " << dlock_last_error() << "\n";
        dlock_lock_info info = DLOCK_LOCK_INFO_INIT;
        EXPECT_EQ(dlock_inspect(intruder, "iso/x", &info), DLOCK_PERMISSION) << "inspect: " << dlock_last_error();
        EXPECT_EQ(info.held, 0) << "never reported held";
        if (stolen) dlock_lease_destroy(stolen);
        dlock_client_close(intruder);
    }

    // B's raw client may not delete A's lock either: the privileges docs/backends/*.md list isolate.
    const std::string port = std::to_string(server().client_endpoint().port);
    switch (chosen) {
    case secured_backend::redis_acl: {
        dlock::lab::redis_client raw(server().client_endpoint());
        raw.checked({"AUTH", b().user, b().password});
        const auto reply = raw.command({"DEL", a().territory + "{iso/x}:lock"});
        EXPECT_EQ(reply.type, dlock::lab::redis_reply::kind::error);
        EXPECT_EQ(reply.text.rfind("NOPERM", 0), 0u) << reply.text;
        break;
    }
    case secured_backend::postgres: {
        dlock::lab::postgres_client raw("postgresql://" + b().user + ":" + b().password + "@127.0.0.1:" + port +
                                        "/postgres?sslmode=verify-full&sslrootcert=" + server().certificates().ca_cert().string());
        try {
            raw.execute("DELETE FROM " + a().territory);
            ADD_FAILURE() << "tenant B deleted tenant A's rows";
        } catch (const dlock::lab::client_error& e) {
            EXPECT_NE(std::string(e.what()).find("permission denied"), std::string::npos) << e.what();
        }
        break;
    }
    case secured_backend::etcd: {
        std::string output, cert, key;
        for (const auto& [option, value] : b().options) {
            if (option == "cert_file") cert = value.substr(1, value.size() - 2);  // unquoted
            if (option == "key_file") key = value.substr(1, value.size() - 2);
        }
        const int rc = dlock::lab::run_command(
            {"etcdctl", "--endpoints=https://127.0.0.1:" + port, "--cacert=" + server().certificates().ca_cert().string(),
             "--cert=" + cert, "--key=" + key, "--user=" + b().user + ":" + b().password, "del", "--prefix", a().territory},
            &output);
        EXPECT_NE(rc, 0) << output;
        EXPECT_NE(output.find("permission denied"), std::string::npos) << output;
        break;
    }
    case secured_backend::zookeeper:
        // The creator-only ACL of A's nodes: zookeeper_backend_test's DigestAclKeepsOtherIdentities….
        break;
    }

    // A still holds, B's own territory works beside it, and A releases normally.
    EXPECT_TRUE(holder.inspect("iso/x").held);
    auto neighbour = dlock::client::open(b().config.string());
    auto own = neighbour.acquire("iso/x", dlock::acquire_options().with_wait(0ms));
    EXPECT_TRUE(own) << "tenant B's own lock of the same name: " << dlock_last_error();
    EXPECT_EQ(own.release(), dlock::release_outcome::released);
    EXPECT_EQ(lease.release(), dlock::release_outcome::released);
}

// ---- wrong credentials and certificates ---------------------------------------------------------

// A generous bound on an open refused for bad credentials (every plugin's connect timeout is
// at most 5 s by default): it answers, it does not hang.
constexpr auto open_bound = 15s;

TEST_F(Secured, WrongPasswordIsAPreciseErrorAtOpen) {
    const std::string wrong = "wrong-" + a().password;
    const auto r = open_yaml(server().config_text(a(), {{"password", quoted(wrong)}}));
    // ZooKeeper accepts any digest at login: a wrong password shows only as an identity the ACL of
    // the base path does not grant.
    EXPECT_EQ(r.status, chosen == secured_backend::zookeeper ? DLOCK_PERMISSION : DLOCK_CONFIG) << r.message;
    EXPECT_LT(r.took, open_bound);
    EXPECT_TRUE(r.message.find("password") != std::string::npos || r.message.find("authentication") != std::string::npos)
        << "says what to fix: " << r.message;
    EXPECT_EQ(r.message.find(wrong), std::string::npos) << "the password is never echoed: " << r.message;
    expect_no_secret(r.message);
    std::cout << "[" << dlock::lab::secured_backend_name(chosen) << "] " << r.message << "\n";
}

// The TLS cases: etcd (server and client certificates) and PostgreSQL (server certificate).
bool has_tls() { return chosen == secured_backend::etcd || chosen == secured_backend::postgres; }
const char* ca_option() { return chosen == secured_backend::etcd ? "ca_file" : "sslrootcert"; }

TEST_F(Secured, UntrustedServerCertificateIsAPreciseErrorAtOpen) {
    if (!has_tls()) GTEST_SKIP() << "no TLS on this backend (docs/backends/*.md, TLS)";
    const auto r = open_yaml(server().config_text(a(), {{ca_option(), quoted(server().certificates().rogue_ca_cert().string())}}));
    EXPECT_NE(r.status, DLOCK_OK);
    EXPECT_LT(r.took, open_bound);
    EXPECT_NE(r.message.find("certificate"), std::string::npos) << "names the certificate: " << r.message;
    expect_no_secret(r.message);
    std::cout << "[" << dlock::lab::secured_backend_name(chosen) << "] " << r.message << "\n";
}

TEST_F(Secured, CertificateForAnotherHostIsAPreciseErrorAtOpen) {
    if (!has_tls()) GTEST_SKIP() << "no TLS on this backend (docs/backends/*.md, TLS)";
    // The server's certificate names 127.0.0.1 only; "localhost" reaches the same server.
    const std::string port = std::to_string(server().client_endpoint().port);
    const auto r = open_yaml(chosen == secured_backend::etcd
                                 ? server().config_text(a(), {{"endpoints", "[\"https://localhost:" + port + "\"]"}})
                                 : server().config_text(a(), {{"dsn", quoted("postgresql://" + a().user + "@localhost:" +
                                                                             port + "/postgres")}}));
    EXPECT_NE(r.status, DLOCK_OK);
    EXPECT_LT(r.took, open_bound);
    EXPECT_NE(r.message.find("localhost"), std::string::npos) << "names the host: " << r.message;
    EXPECT_NE(r.message.find("certificate"), std::string::npos) << "names the certificate: " << r.message;
    expect_no_secret(r.message);
    std::cout << "[" << dlock::lab::secured_backend_name(chosen) << "] " << r.message << "\n";
}

TEST_F(Secured, ExpiredClientCertificateIsAPreciseErrorAtOpen) {
    if (chosen != secured_backend::etcd) GTEST_SKIP() << "client certificates: etcd only here";
    const auto expired = server().certificates().issue("expired-tenant-a", a().user, {}, dlock::lab::pki::validity::expired);
    const auto r = open_yaml(server().config_text(a(), {{"cert_file", quoted(expired.cert.string())},
                                                        {"key_file", quoted(expired.key.string())}}));
    EXPECT_NE(r.status, DLOCK_OK);
    EXPECT_LT(r.took, open_bound);
    EXPECT_NE(r.message.find("certificate"), std::string::npos) << "names the certificate: " << r.message;
    expect_no_secret(r.message);
    std::cout << "[" << dlock::lab::secured_backend_name(chosen) << "] " << r.message << "\n";
}

// A server of this test's own (the shared one stays valid for the other tests) whose certificate
// has expired: open fails fast with a message that names the expiry and the certificate.
TEST_F(Secured, ExpiredServerCertificateIsAPreciseErrorAtOpen) {
    if (!has_tls()) GTEST_SKIP() << "no TLS on this backend (docs/backends/*.md, TLS)";
    dlock::test::scratch_dir dir("dlock-expired-server");
    // PostgreSQL runs as its own OS user under root: it must reach its directory in here.
    namespace fs = std::filesystem;
    fs::permissions(dir.path(), fs::perms::others_read | fs::perms::others_exec, fs::perm_options::add);
    std::optional<secured_server> expired;
    try {
        expired.emplace(chosen, dir.path() + "/server");
        expired->serve_expired_certificate();
    } catch (const std::exception& e) {
        FAIL() << "the expired-certificate server did not start: " << e.what();
    }
    const auto r = open_yaml(expired->config_text(expired->tenant_a()));
    EXPECT_NE(r.status, DLOCK_OK);
    EXPECT_LT(r.took, open_bound);
    EXPECT_NE(r.message.find("expired"), std::string::npos) << "names the expiry: " << r.message;
    EXPECT_NE(r.message.find("certificate"), std::string::npos) << "names the certificate: " << r.message;
    for (const tenant* t : {&expired->tenant_a(), &expired->tenant_b()})
        EXPECT_EQ(r.message.find(t->password), std::string::npos) << "a password leaked: " << r.message;
    std::cout << "[" << dlock::lab::secured_backend_name(chosen) << "] " << dlock_status_name(r.status) << " after "
              << r.took.count() << " ms: " << r.message << "\n";
}

TEST_F(Secured, PlainConnectionIsRefused) {
    if (chosen != secured_backend::postgres) GTEST_SKIP() << "PostgreSQL: hostssl only";
    const auto r = open_yaml(server().config_text(a(), {{"sslmode", "disable"}}));
    EXPECT_EQ(r.status, DLOCK_CONFIG) << r.message;
    EXPECT_LT(r.took, open_bound);
    expect_no_secret(r.message);
    std::cout << "[postgres_secure] " << r.message << "\n";
}

// ---- secrets ----------------------------------------------------------------------------------

// Every `dlock` subcommand, in text and --json, with the good config, a wrong password and an
// unreachable server, at log level debug: the password's bytes appear in no output.
TEST_F(Secured, NoSecretInAnyCliOutputOrLogLine) {
    const std::string plugin(server().plugin());
    const char* endpoint_key = chosen == secured_backend::etcd        ? "endpoints"
                               : chosen == secured_backend::postgres  ? "dsn"
                               : chosen == secured_backend::zookeeper ? "connect"
                                                                      : "endpoint";
    const std::string unreachable_value = chosen == secured_backend::etcd       ? "[\"https://127.0.0.1:1\"]"
                                          : chosen == secured_backend::postgres ? quoted("postgresql://" + a().user + "@127.0.0.1:1/postgres")
                                                                                : quoted("127.0.0.1:1");
    dlock::test::scratch_dir dir("dlock-secrets");
    auto write = [&](const std::string& stem, const std::string& text) {
        const std::string path = dir.path() + "/" + stem + ".yaml";
        std::ofstream(path) << text;
        std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
        return path;
    };
    std::vector<std::string> configs = {
        a().config.string(),
        write("wrong", server().config_text(a(), {{"password", quoted("wrong-" + a().password)}})),
        write("unreachable", server().config_text(a(), {{endpoint_key, unreachable_value}})),
    };
    if (chosen == secured_backend::redis_acl) {  // the DSN form carries the password in the URL
        const std::string hostport = server().client_endpoint().to_string();
        configs.push_back("redis://" + a().user + ":" + a().password + "@" + hostport);
        configs.push_back("redis://" + a().user + ":wrong-" + a().password + "@" + hostport);
        configs.push_back("redis://" + a().user + ":" + a().password + "@127.0.0.1:1");
    }
    int runs = 0;
    for (const auto& config : configs) {
        for (const bool json : {false, true}) {
            for (std::vector<std::string> command : std::vector<std::vector<std::string>>{
                     {"check"}, {"inspect", "secrets/x"}, {"backends", "--describe", plugin}, {"run", "secrets/x", "--", "true"}}) {
                std::vector<std::string> argv = {"env", "DLOCK_LOG=debug", DLOCK_CLI, "--config", config};
                if (json) argv.push_back("--json");
                argv.insert(argv.end(), command.begin(), command.end());
                std::string output;
                dlock::lab::run_command(argv, &output);
                ++runs;
                if (command[0] != "run") {
                    EXPECT_FALSE(output.empty()) << command[0];  // a run that worked says nothing
                }
                for (const tenant* t : {&a(), &b()})
                    EXPECT_EQ(output.find(t->password), std::string::npos)
                        << "`dlock " << command[0] << (json ? " --json" : "") << "` with config " << (config.find("://") == std::string::npos ? config : "<the DSN>")
                        << " printed the password:\n" << output;
            }
        }
    }
    std::cout << "[" << dlock::lab::secured_backend_name(chosen) << "] " << runs << " CLI runs, no secret in any output\n";
}

TEST_F(Secured, PasswordFileKeepsTheSecretOutOfTheConfig) {
    dlock::test::scratch_dir dir("dlock-password-file");
    const std::string secret_file = dir.path() + "/password";
    std::ofstream(secret_file) << a().password << "\n";
    std::filesystem::permissions(secret_file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    const std::string text = server().config_text(a(), {{"password", std::nullopt}, {"password_file", quoted(secret_file)}});
    ASSERT_EQ(text.find(a().password), std::string::npos);
    auto client = dlock::client::from_yaml(text);
    auto lease = client.acquire("secrets/file", dlock::acquire_options().with_wait(0ms));
    EXPECT_TRUE(lease);
    EXPECT_EQ(lease.release(), dlock::release_outcome::released);
}

TEST_F(Secured, WorldReadableConfigWithAPasswordGetsOneWarningLine) {
    dlock::test::scratch_dir dir("dlock-readable-config");
    const std::string path = dir.path() + "/readable.yaml";
    std::ofstream(path) << server().config_text(a());
    std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
                                           std::filesystem::perms::group_read | std::filesystem::perms::others_read);
    std::string output;
    EXPECT_EQ(dlock::lab::run_command({DLOCK_CLI, "--config", path, "check"}, &output), 0) << output;
    size_t warnings = 0;
    std::istringstream lines(output);
    for (std::string line; std::getline(lines, line);)
        if (line.find("config file `" + path + "`") != std::string::npos) {
            ++warnings;
            EXPECT_NE(line.find("chmod o-r " + path), std::string::npos) << line;
            EXPECT_NE(line.find("password_file"), std::string::npos) << line;
        }
    EXPECT_EQ(warnings, 1u) << output;
    expect_no_secret(output);
    std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    output.clear();
    EXPECT_EQ(dlock::lab::run_command({DLOCK_CLI, "--config", path, "check"}, &output), 0) << output;
    EXPECT_EQ(output.find("config file"), std::string::npos) << "no warning once private: " << output;
}

// The same with the log hook installed: the lines dlock and the plugin log while opening with a
// wrong password, an unreachable server and a config file others can read, and while locking,
// reach the handler and name no secret.
TEST_F(Secured, NoSecretInAnyLineGivenToTheLogHandler) {
    struct collected {
        std::mutex mutex;
        std::vector<std::string> lines;
    } log;
    ASSERT_EQ(dlock_set_log_handler(
                  [](int, const char* message, void* user_data) {
                      auto* c = static_cast<collected*>(user_data);
                      std::lock_guard<std::mutex> lock(c->mutex);
                      c->lines.emplace_back(message);
                  },
                  &log),
              DLOCK_OK);
    dlock::test::scratch_dir dir("dlock-log-hook");
    const std::string readable = dir.path() + "/readable.yaml";
    std::ofstream(readable) << server().config_text(a());
    std::filesystem::permissions(readable, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
                                               std::filesystem::perms::others_read);
    open_yaml(server().config_text(a(), {{"password", quoted("wrong-" + a().password)}}));
    {
        auto client = dlock::client::open(readable);
        auto lease = client.acquire("secrets/hook", dlock::acquire_options().with_wait(0ms));
        EXPECT_EQ(lease.release(), dlock::release_outcome::released);
    }
    ASSERT_EQ(dlock_set_log_handler(nullptr, nullptr), DLOCK_OK);
    std::lock_guard<std::mutex> lock(log.mutex);
    const bool warned = std::any_of(log.lines.begin(), log.lines.end(),
                                    [&](const std::string& line) { return line.find(readable) != std::string::npos; });
    EXPECT_TRUE(warned) << "the readable config's warning reached the handler";
    for (const auto& line : log.lines) {
        expect_no_secret(line);
        EXPECT_EQ(line.find("wrong-" + a().password), std::string::npos) << line;
    }
    std::cout << "[" << dlock::lab::secured_backend_name(chosen) << "] " << log.lines.size() << " lines to the handler, no secret\n";
}

}  // namespace

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    for (int i = 1; i < argc; ++i)
        if (std::strncmp(argv[i], "--backend=", 10) == 0) {
            const auto which = dlock::lab::parse_secured_backend(argv[i] + 10);
            if (!which) {
                std::cerr << "unknown --backend " << argv[i] + 10 << "\n";
                return 64;
            }
            chosen = *which;
        }
    return RUN_ALL_TESTS();
}

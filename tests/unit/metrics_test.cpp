// Metrics: a client with `metrics: { listen: ... }` serves Prometheus text on /metrics, scraped here
// over HTTP (libcurl) from a free loopback port; its counters, gauge and histograms move with
// acquires, timeouts, releases, failing renewals and losses (on the fake TTL backend). Without
// `metrics` a client starts no thread and opens no socket for them. Bad `listen` is a CONFIG error
// that says why. The fake is built into this program (FAKE_SIMULATED_CLOCK) so that the renewal test
// runs on simulated time (dlock_internal/clock.hpp); the other tests leave it on the real clock.
#include "dlock_internal/backends.hpp"
#include "dlock_internal/clock.hpp"

#include <dlock/dlock.hpp>
#include <dlock/plugin_kit/scope_exit.hpp>

#include <curl/curl.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

using namespace std::chrono_literals;

int fake_simulated_negotiate(uint32_t host_max_version, const dlock_plugin** out, uint32_t* out_min_version);

namespace {

const bool fake_registered = (dlock::core::testing::add_builtin_backend({"fake", &fake_simulated_negotiate}), true);

// A loopback port nobody listens on right now (the kernel's choice for an ephemeral bind).
int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    socklen_t size = sizeof address;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
    ::close(fd);
    return ntohs(address.sin_port);
}

std::string listen_address(int port) { return "127.0.0.1:" + std::to_string(port); }

dlock::client fake_client(const std::string& listen, const std::string& options = "") {
    std::string yaml = "backend: fake\nplugin_path: [" DLOCK_TEST_PLUGIN_DIR "]\n";
    if (!listen.empty()) yaml += "metrics: { listen: \"" + listen + "\" }\n";
    if (!options.empty()) yaml += "options:\n" + options;
    return dlock::client::from_yaml(yaml);
}

size_t append(char* data, size_t size, size_t count, void* out) {
    static_cast<std::string*>(out)->append(data, size * count);
    return size * count;
}

// GET http://ADDRESS/metrics; nullopt when nothing answers there.
std::optional<std::string> scrape(const std::string& address) {
    CURL* curl = curl_easy_init();
    std::string body;
    const std::string url = "http://" + address + "/metrics";
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(curl, CURLOPT_NOPROXY, "*");
    const CURLcode result = curl_easy_perform(curl);
    long code = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(curl);
    if (result != CURLE_OK) return std::nullopt;
    EXPECT_EQ(code, 200);
    return body;
}

using labels = std::map<std::string, std::string>;

// The value of the sample `name{labels}` in Prometheus text (labels in any order); nullopt if absent.
std::optional<double> sample(const std::string& text, const std::string& name, const labels& wanted) {
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
        if (line.empty() || line[0] == '#') continue;
        const size_t brace = line.find('{');
        const size_t space = line.rfind(' ');
        const std::string line_name = line.substr(0, std::min(brace, space));
        if (line_name != name) continue;
        labels found;
        if (brace != std::string::npos) {
            const std::string body = line.substr(brace + 1, line.rfind('}') - brace - 1);
            size_t at = 0;
            while (at < body.size()) {
                const size_t eq = body.find('=', at);
                const size_t close = body.find('"', eq + 2);
                found[body.substr(at, eq - at)] = body.substr(eq + 2, close - eq - 2);
                at = close + 2;  // past `",`
            }
        }
        bool match = true;
        for (const auto& [key, value] : wanted) match = match && found.count(key) && found[key] == value;
        if (match && found.size() == wanted.size()) return std::stod(line.substr(space + 1));
    }
    return std::nullopt;
}

double value_of(const std::string& text, const std::string& name, const labels& wanted) {
    const auto v = sample(text, name, wanted);
    EXPECT_TRUE(v.has_value()) << name << " with the labels asked for is missing from:\n" << text;
    return v.value_or(-1);
}

template <typename Predicate>
bool eventually(Predicate p, std::chrono::milliseconds limit = 10s) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
        if (p()) return true;
        std::this_thread::sleep_for(10ms);
    }
    return p();
}

// Threads of this process, and its open sockets.
size_t thread_count() {
    size_t n = 0;
    if (DIR* dir = ::opendir("/proc/self/task")) {
        while (const dirent* e = ::readdir(dir)) n += e->d_name[0] != '.';
        ::closedir(dir);
    }
    return n;
}

size_t socket_count() {
    size_t n = 0;
    if (DIR* dir = ::opendir("/proc/self/fd")) {
        while (const dirent* e = ::readdir(dir)) {
            char target[64] = {};
            const std::string path = std::string("/proc/self/fd/") + e->d_name;
            if (::readlink(path.c_str(), target, sizeof target - 1) > 0 && std::string(target).rfind("socket:", 0) == 0) ++n;
        }
        ::closedir(dir);
    }
    return n;
}

std::string config_error(const std::string& yaml) {
    dlock_client* client = nullptr;
    const int status = dlock_client_open_yaml(yaml.c_str(), "metrics.yaml", &client);
    EXPECT_EQ(status, DLOCK_CONFIG) << yaml;
    dlock_client_close(client);
    return dlock_last_error();
}

}  // namespace

TEST(Metrics, CountAcquisitionsTimeoutsReleasesAndLeasesHeld) {
    const std::string address = listen_address(free_port());
    auto client = fake_client(address);
    auto lease = client.acquire("orders", dlock::acquire_options().with_wait(0ms));
    EXPECT_FALSE(client.try_acquire("orders", dlock::acquire_options().with_wait(0ms)));     // busy: try-once timeout
    EXPECT_FALSE(client.try_acquire("orders", dlock::acquire_options().with_wait(200ms)));   // waited, timed out
    std::error_code ec;
    client.acquire("", {}, ec);  // bad name
    EXPECT_EQ(ec, dlock::errc::invalid_argument);

    auto text = scrape(address);
    ASSERT_TRUE(text) << "nothing answers on " << address;
    const labels fake{{"backend", "fake"}};
    EXPECT_EQ(value_of(*text, "dlock_leases_held", fake), 1);
    EXPECT_EQ(value_of(*text, "dlock_acquisitions_total", {{"backend", "fake"}, {"outcome", "acquired"}}), 1);
    EXPECT_EQ(value_of(*text, "dlock_acquisitions_total", {{"backend", "fake"}, {"outcome", "timeout"}}), 2);
    EXPECT_EQ(value_of(*text, "dlock_acquisitions_total", {{"backend", "fake"}, {"outcome", "invalid_argument"}}), 1);
    EXPECT_EQ(value_of(*text, "dlock_acquire_latency_seconds_count", {{"backend", "fake"}, {"outcome", "acquired"}}), 1);
    EXPECT_EQ(value_of(*text, "dlock_acquire_latency_seconds_count", {{"backend", "fake"}, {"outcome", "timeout"}}), 1);
    EXPECT_EQ(value_of(*text, "dlock_acquire_wait_seconds_count", {{"backend", "fake"}, {"outcome", "timeout"}}), 1);
    // The waited timeout lasted its 200 ms wait (and, under any load, less than a minute).
    const double waited = value_of(*text, "dlock_acquire_wait_seconds_sum", {{"backend", "fake"}, {"outcome", "timeout"}});
    EXPECT_GE(waited, 0.19);
    EXPECT_LT(waited, 60);
    EXPECT_EQ(value_of(*text, "dlock_releases_total", {{"backend", "fake"}, {"outcome", "released"}}), 0);

    EXPECT_EQ(lease.release(), dlock::release_outcome::released);
    text = scrape(address);
    ASSERT_TRUE(text);
    EXPECT_EQ(value_of(*text, "dlock_leases_held", fake), 0);
    EXPECT_EQ(value_of(*text, "dlock_releases_total", {{"backend", "fake"}, {"outcome", "released"}}), 1);
    // Histogram buckets are cumulative: the +Inf bucket holds every observation.
    EXPECT_EQ(value_of(*text, "dlock_acquire_latency_seconds_bucket", {{"backend", "fake"}, {"outcome", "acquired"}, {"le", "+Inf"}}), 1);
}

// On simulated time: a keeper late past the lease's validity (a loaded machine) would see it LOST
// without the SUSPECT between, which this test counts.
TEST(Metrics, FailingRenewalsCountSuspectAndLostTransitions) {
    const auto clock = std::make_shared<dlock::core::simulated_clock>();
    dlock::core::testing::use_clock(clock);
    const auto real_clock_again = dlock::plugin_kit::scope_exit([] { dlock::core::testing::use_clock(nullptr); });
    const std::string address = listen_address(free_port());
    auto client = fake_client(address, "  renew_status: 6\n");  // every renewal: DLOCK_UNAVAILABLE
    auto lease = client.acquire("unconfirmed", dlock::acquire_options().with_ttl(600ms));
    // The keeper settles back into waiting after each 10 ms; the lease is LOST at 600 ms.
    for (int step = 0; step < 60 && lease.state() != dlock::lease_state::lost; ++step) {
        ASSERT_TRUE(clock->wait_for_waiters(1));
        clock->advance(10'000'000);
    }
    ASSERT_TRUE(clock->wait_for_waiters(1));
    ASSERT_EQ(lease.state(), dlock::lease_state::lost);
    const auto text = scrape(address);
    ASSERT_TRUE(text);
    EXPECT_GE(value_of(*text, "dlock_renew_failures_total", {{"backend", "fake"}, {"status", "unavailable"}}), 1);
    EXPECT_EQ(value_of(*text, "dlock_lease_transitions_total", {{"backend", "fake"}, {"to", "suspect"}}), 1);
    EXPECT_EQ(value_of(*text, "dlock_lease_transitions_total", {{"backend", "fake"}, {"to", "lost"}}), 1);
    EXPECT_EQ(value_of(*text, "dlock_leases_held", {{"backend", "fake"}}), 0);
    EXPECT_EQ(lease.release(), dlock::release_outcome::already_lost);
}

TEST(Metrics, ClientsOnOneAddressShareOneExporterThatStopsWithTheLast) {
    const std::string address = listen_address(free_port());
    std::optional<dlock::client> first = fake_client(address);
    std::optional<dlock::client> second = fake_client(address);  // joins: a second bind would fail
    auto a = first->acquire("a");
    auto b = second->acquire("b");
    auto text = scrape(address);
    ASSERT_TRUE(text);
    EXPECT_EQ(value_of(*text, "dlock_leases_held", {{"backend", "fake"}}), 2);
    EXPECT_EQ(value_of(*text, "dlock_acquisitions_total", {{"backend", "fake"}, {"outcome", "acquired"}}), 2);
    a = dlock::lease();
    first.reset();
    text = scrape(address);
    ASSERT_TRUE(text) << "the exporter must serve while a client uses it";
    EXPECT_EQ(value_of(*text, "dlock_leases_held", {{"backend", "fake"}}), 1);
    b = dlock::lease();
    second.reset();
    EXPECT_FALSE(scrape(address)) << "the exporter must stop with its last client";
    // The port is free again: a new client starts a fresh exporter there.
    auto third = fake_client(address);
    text = scrape(address);
    ASSERT_TRUE(text);
    EXPECT_EQ(value_of(*text, "dlock_acquisitions_total", {{"backend", "fake"}, {"outcome", "acquired"}}), 0)
        << "a fresh exporter starts from zero";
}

TEST(Metrics, OffByDefaultStartsNoThreadAndOpensNoSocket) {
    // A first client may start threads of the runtime's own that stay (a sanitizer's): counted out.
    { auto warm_up = fake_client(""); }
    const size_t threads_before = thread_count();
    const size_t sockets_before = socket_count();
    size_t threads_off = 0;
    {
        auto client = fake_client("");
        threads_off = thread_count() - threads_before;
        EXPECT_EQ(socket_count(), sockets_before);
        auto lease = client.acquire("quiet");
    }
    ASSERT_TRUE(eventually([&] { return thread_count() == threads_before; }));
    auto client = fake_client(listen_address(free_port()));
    EXPECT_GT(thread_count() - threads_before, threads_off) << "the exporter's threads";
    EXPECT_GT(socket_count(), sockets_before) << "the exporter's listening socket";
}

TEST(Metrics, DsnQueryKeyMetricsListenTurnsThemOn) {
    char directory[] = "/tmp/dlock-metrics-dsn.XXXXXX";
    ASSERT_TRUE(::mkdtemp(directory));
    const std::string address = listen_address(free_port());
    {
        auto client = dlock::client::open(std::string("file://") + directory + "?metrics_listen=" + address);
        auto lease = client.acquire("dsn", dlock::acquire_options().with_wait(0ms));
        const auto text = scrape(address);
        ASSERT_TRUE(text);
        EXPECT_EQ(value_of(*text, "dlock_leases_held", {{"backend", "file"}}), 1);
    }
    dlock_client* client = nullptr;
    EXPECT_EQ(dlock_client_open((std::string("file://") + directory + "?metrics_listen=127.0.0.1:0").c_str(), &client), DLOCK_CONFIG);
    EXPECT_NE(std::string(dlock_last_error()).find("DSN query key `metrics_listen`: port `0`"), std::string::npos) << dlock_last_error();
    dlock_client_close(client);
    std::filesystem::remove_all(directory);
}

TEST(Metrics, BadListenIsAConfigErrorSayingWhy) {
    const std::string head = "backend: fake\nplugin_path: [" DLOCK_TEST_PLUGIN_DIR "]\n";
    EXPECT_NE(config_error(head + "metrics: { listen: \"localhost:9464\" }\n").find("host `localhost` is not an IP address literal"),
              std::string::npos) << dlock_last_error();
    EXPECT_NE(config_error(head + "metrics: { listen: \"127.0.0.1:0\" }\n").find("port `0` is not a number from 1 to 65535"),
              std::string::npos) << dlock_last_error();
    EXPECT_NE(config_error(head + "metrics: { listen: \"127.0.0.1:70000\" }\n").find("port `70000`"), std::string::npos)
        << dlock_last_error();
    EXPECT_NE(config_error(head + "metrics: { listen: \"127.0.0.1\" }\n").find("is not HOST:PORT"), std::string::npos)
        << dlock_last_error();
    EXPECT_NE(config_error(head + "metrics: { listen: \"[::1\" }\n").find("not an IP address literal"), std::string::npos)
        << dlock_last_error();
    EXPECT_NE(config_error(head + "metrics: { port: 9464 }\n").find("unknown key `port` in `metrics` (known: listen)"),
              std::string::npos) << dlock_last_error();
    EXPECT_NE(config_error(head + "metrics: {}\n").find("`metrics` needs `listen: HOST:PORT`"), std::string::npos)
        << dlock_last_error();
    EXPECT_NE(config_error(head + "metrics: 9464\n").find("`metrics` must be a mapping"), std::string::npos) << dlock_last_error();
    // The message gives the place in the file.
    EXPECT_NE(config_error(head + "metrics: { listen: \"localhost:1\" }\n").find("metrics.yaml:3:"), std::string::npos)
        << dlock_last_error();

    // An address that cannot be bound: taken by another socket.
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    ASSERT_EQ(::listen(fd, 1), 0);
    socklen_t size = sizeof address;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
    const std::string taken = listen_address(ntohs(address.sin_port));
    const std::string message = config_error(head + "metrics: { listen: \"" + taken + "\" }\n");
    EXPECT_NE(message.find("metrics.listen `" + taken + "`: cannot listen there"), std::string::npos) << message;
    ::close(fd);
}

// Config parsing: YAML shape, precise locations, interpolation, durations, DSNs, policies.
#include "dlock_internal/common.hpp"
#include "dlock_internal/config.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

using namespace dlock::config;

namespace {

std::string error_of(const std::string& yaml) {
    try {
        parse_yaml(yaml, "c.yaml");
    } catch (const dlock::detail::error& e) {
        EXPECT_EQ(e.status(), DLOCK_CONFIG);
        return e.what();
    }
    return "";
}

TEST(Config, FullExampleParses) {
    setenv("DLOCK_TEST_PW", "s3cret", 1);
    const auto c = parse_yaml(R"(backend: redis
defaults: { ttl: 30s, wait: 10s, renew: true }
options:
  endpoint: 127.0.0.1:6379
  password: ${DLOCK_TEST_PW}
  endpoints: [a:1, b:2]
locks:
  "orders/*": { ttl: 10s, wait: 2s }
  "*": { fair: false }
)", "c.yaml");
    EXPECT_EQ(c.backend, "redis");
    EXPECT_EQ(*c.defaults.ttl_ms, 30000);
    EXPECT_EQ(*c.defaults.wait_ms, 10000);
    ASSERT_EQ(c.options.size(), 3u);
    EXPECT_EQ(c.options[1].scalar, "s3cret");
    EXPECT_TRUE(c.options[2].is_list);
    const auto orders = resolve(c, "orders/17/x");
    EXPECT_EQ(orders.ttl_ms, 10000);
    EXPECT_EQ(orders.wait_ms, 2000);
    EXPECT_TRUE(orders.fair);  // first match wins: the "*" rule is not consulted
    const auto other = resolve(c, "users/1");
    EXPECT_EQ(other.ttl_ms, 30000);
    EXPECT_FALSE(other.fair);
}

TEST(Config, UnknownTopLevelKeyNamesLineColumnAndKey) {
    EXPECT_EQ(error_of("backend: file\nbakend: x\n"),
              "c.yaml:2:1: unknown key `bakend` (known: backend, plugin_path, defaults, options, locks, metrics)");
}

TEST(Config, UnknownPolicyKeyIsRejected) {
    EXPECT_NE(error_of("backend: file\ndefaults:\n  tll: 3s\n").find("c.yaml:3:3: unknown key `tll` in `defaults`"), std::string::npos);
}

TEST(Config, MalformedYamlGivesItsLocation) {
    EXPECT_NE(error_of("backend: file\noptions: [unclosed\n").find("c.yaml:3:1: malformed YAML"), std::string::npos)
        << error_of("backend: file\noptions: [unclosed\n");
}

TEST(Config, MissingBackendIsRejected) { EXPECT_NE(error_of("defaults: {ttl: 1s}\n").find("`backend` is missing"), std::string::npos); }

TEST(Config, DuplicateKeysAreRejected) {
    EXPECT_NE(error_of("backend: file\nbackend: redis\n").find("duplicate key `backend`"), std::string::npos);
}

TEST(Config, UnsetVariableIsAnErrorUnlessAFallbackIsGiven) {
    unsetenv("DLOCK_TEST_UNSET");
    EXPECT_NE(error_of("backend: ${DLOCK_TEST_UNSET}\n").find("c.yaml:1:10: environment variable `DLOCK_TEST_UNSET` is not set"),
              std::string::npos);
    EXPECT_EQ(parse_yaml("backend: ${DLOCK_TEST_UNSET:-file}\n", "c").backend, "file");
    EXPECT_EQ(parse_yaml("backend: file\noptions: {directory: a$$b}\n", "c").options[0].scalar, "a$b");
}

TEST(Config, MalformedReferenceNamesItsPlaceButNeverEchoesTheValue) {
    // A raw value with a stray `${` is often a password: the message points at it, never shows it.
    const std::string unterminated = error_of("backend: file\noptions:\n  password: hunter2${oops\n");
    EXPECT_NE(unterminated.find("c.yaml:3:13: unterminated `${` at byte 8 of the value"), std::string::npos) << unterminated;
    EXPECT_EQ(unterminated.find("hunter2"), std::string::npos) << unterminated;
    EXPECT_EQ(unterminated.find("oops"), std::string::npos) << unterminated;

    const std::string invalid = error_of("backend: file\noptions:\n  password: hunter2${ss word}\n");
    EXPECT_NE(invalid.find("c.yaml:3:13: `${` at byte 8 of the value does not start a valid environment variable reference"),
              std::string::npos) << invalid;
    EXPECT_EQ(invalid.find("hunter2"), std::string::npos) << invalid;
    EXPECT_EQ(invalid.find("ss word"), std::string::npos) << invalid;
}

TEST(Config, Durations) {
    EXPECT_EQ(parse_duration_ms("250ms", false, "d"), 250);
    EXPECT_EQ(parse_duration_ms("30s", false, "d"), 30000);
    EXPECT_EQ(parse_duration_ms("5m", false, "d"), 300000);
    EXPECT_EQ(parse_duration_ms("2h", false, "d"), 7200000);
    EXPECT_EQ(parse_duration_ms("0", false, "d"), 0);
    EXPECT_EQ(parse_duration_ms("forever", true, "d"), INT64_MAX);
    EXPECT_THROW(parse_duration_ms("forever", false, "d"), dlock::detail::error);
    EXPECT_THROW(parse_duration_ms("30", false, "d"), dlock::detail::error);
    EXPECT_THROW(parse_duration_ms("-1s", false, "d"), dlock::detail::error);
    EXPECT_THROW(parse_duration_ms("1.5s", false, "d"), dlock::detail::error);
    EXPECT_THROW(parse_duration_ms("99999999999999999999h", false, "d"), dlock::detail::error);
    EXPECT_THROW(parse_duration_ms("9999999999999h", false, "d"), dlock::detail::error);
}

TEST(Config, TtlBoundsAreChecked) {
    EXPECT_NE(error_of("backend: file\ndefaults: {ttl: 0}\n").find("ttl must be at least 1ms"), std::string::npos);
    EXPECT_NE(error_of("backend: file\ndefaults: {ttl: 9000h}\n").find("limit of 365 days"), std::string::npos);
    EXPECT_NE(error_of("backend: file\ndefaults: {ttl: 10}\n").find("has no unit"), std::string::npos);
}

TEST(Config, DsnPartsAndQuery) {
    const auto c = parse_dsn("redis://alice:p%40ss@h1:6379,h2:6380/3?ttl=10s&wait=forever&timeout=2s");
    EXPECT_EQ(c.backend, "redis");
    EXPECT_EQ(c.dsn_user, "alice");
    EXPECT_EQ(c.dsn_password, "p@ss");
    EXPECT_EQ(c.dsn_hosts, "h1:6379,h2:6380");
    EXPECT_EQ(c.dsn_path, "/3");
    EXPECT_EQ(*c.defaults.ttl_ms, 10000);
    EXPECT_EQ(*c.defaults.wait_ms, INT64_MAX);
    ASSERT_EQ(c.options.size(), 1u);
    EXPECT_EQ(c.options[0].key, "timeout");
    EXPECT_EQ(c.dsn_url, "redis://alice:p%40ss@h1:6379,h2:6380/3?timeout=2s");
    EXPECT_EQ(parse_dsn("postgresql://u@db/x").backend, "sql");
    EXPECT_EQ(parse_dsn("file:///var/lock/app").dsn_path, "/var/lock/app");
    EXPECT_THROW(parse_dsn("redis://h/?ttl=soon"), dlock::detail::error);
}

TEST(Config, DsnDetection) {
    EXPECT_TRUE(looks_like_dsn("redis://x"));
    EXPECT_TRUE(looks_like_dsn("file:///x"));
    EXPECT_FALSE(looks_like_dsn("/etc/dlock.yaml"));
    EXPECT_FALSE(looks_like_dsn("://x"));
    EXPECT_FALSE(looks_like_dsn("dir/with://inside"));
}

TEST(Config, MissingFileIsAPreciseError) {
    try {
        load_yaml_file("/nonexistent/dlock.yaml");
        FAIL();
    } catch (const dlock::detail::error& e) {
        EXPECT_STREQ(e.what(), "cannot read config file `/nonexistent/dlock.yaml`: No such file or directory");
    }
}

}  // namespace

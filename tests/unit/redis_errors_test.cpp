// Redis error replies become clear dlock errors, never "held" (docs/design/faults.md §14). The servers of the
// lab produce READONLY, OOM, WRONGTYPE and auth failures for real (tests/backends/redis_test.cpp);
// LOADING and MISCONF cannot be induced cheaply there, so their classification is checked here.
#include "redis_common.hpp"

#include <gtest/gtest.h>

using dlock::redis_common::classify_error_reply;

namespace {

void expect(const std::string& reply, int status, const std::string& fragment) {
    const auto f = classify_error_reply("127.0.0.1:6379", reply);
    EXPECT_EQ(f.status, status) << reply;
    EXPECT_NE(f.message.find(fragment), std::string::npos) << f.message;
    EXPECT_NE(f.message.find("127.0.0.1:6379"), std::string::npos) << "names the server: " << f.message;
}

TEST(RedisErrors, EachServerErrorIsNamedWithWhatToDo) {
    expect("READONLY You can't write against a read only replica.", DLOCK_BACKEND, "point dlock at the master");
    expect("OOM command not allowed when used memory > 'maxmemory'.", DLOCK_BACKEND, "out of memory");
    expect("LOADING Redis is loading the dataset in memory", DLOCK_UNAVAILABLE, "retry shortly");
    expect("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist", DLOCK_BACKEND,
           "cannot persist");
    expect("WRONGTYPE Operation against a key holding the wrong kind of value", DLOCK_BACKEND, "another type");
    expect("NOAUTH Authentication required.", DLOCK_CONFIG, "authentication failed");
    expect("WRONGPASS invalid username-password pair or user is disabled.", DLOCK_CONFIG, "authentication failed");
    expect("NOPERM this user has no permissions to run the 'evalsha' command", DLOCK_PERMISSION, "permission denied");
    // Redis 7 words an ACL refusal inside a script as an ERR.
    expect("ERR The user executing the script can't publish to the channel mentioned in the command script: c931de, on "
           "@user_script:4.",
           DLOCK_PERMISSION, "permission denied");
    expect("ERR something new", DLOCK_BACKEND, "answered with an error");
}

}  // namespace

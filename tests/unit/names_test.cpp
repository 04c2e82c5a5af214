// Name validation, owner tokens, and the `file` backend's non-aliasing file names.
#include "dlock_internal/common.hpp"
#include "dlock_internal/names.hpp"
#include "file_plugin.hpp"

#include <gtest/gtest.h>

#include <set>
#include <sys/wait.h>
#include <unistd.h>

using dlock::detail::validate_name;
using dlock::file_backend::lock_file_name;

namespace {

void expect_invalid(const std::string& name, const std::string& fragment) {
    try {
        validate_name(name);
        ADD_FAILURE() << "accepted an invalid name";
    } catch (const dlock::detail::error& e) {
        EXPECT_EQ(e.status(), DLOCK_INVALID_ARGUMENT);
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
}

TEST(Names, ValidNames) {
    for (const std::string& n : std::vector<std::string>{"a", "a/b", ".", "..", "/", "orders/17", "caf\xc3\xa9", "e\xcc\x81", "\x01\x7f", "\xf0\x9f\x94\x92",
                                std::string(1024, 'x')})
        EXPECT_NO_THROW(validate_name(n)) << n;
}

TEST(Names, InvalidNamesSayWhy) {
    expect_invalid("", "empty");
    expect_invalid(std::string(1025, 'x'), "1025 bytes long");
    expect_invalid(std::string(1 << 20, 'x'), "1048576 bytes long");
    expect_invalid(std::string("a\0b", 3), "NUL byte at offset 1");
    expect_invalid("\xff", "not UTF-8");
    expect_invalid("\xc0\xaf", "not UTF-8");           // overlong '/'
    expect_invalid("\xed\xa0\x80", "overlong, surrogate");  // surrogate
    expect_invalid("\xf4\x90\x80\x80", "out-of-range");   // > U+10FFFF
    expect_invalid("ab\xe2\x82", "truncated");
}

TEST(Names, OwnerTokensAreFreshRandomHex) {
    std::set<std::string> seen;
    for (int i = 0; i < 10000; ++i) {
        const std::string t = dlock::detail::new_owner_token().data();
        ASSERT_EQ(t.size(), 32u);
        ASSERT_EQ(t.find_first_not_of("0123456789abcdef"), std::string::npos);
        ASSERT_TRUE(seen.insert(t).second) << "repeated token";
    }
}

TEST(Names, ForkedChildNeverRepeatsItsParentsTokens) {
    (void)dlock::detail::new_owner_token();  // the parent has a partly used block of random bytes
    int pipe_fds[2];
    ASSERT_EQ(pipe(pipe_fds), 0);
    const pid_t child = fork();
    if (child == 0) {
        const std::string t = dlock::detail::new_owner_token().data();
        (void)!write(pipe_fds[1], t.data(), t.size());
        _exit(0);
    }
    const std::string parent_token = dlock::detail::new_owner_token().data();
    char buf[32];
    ASSERT_EQ(read(pipe_fds[0], buf, 32), 32);
    waitpid(child, nullptr, 0);
    EXPECT_NE(std::string(buf, 32), parent_token);
}

TEST(FileNames, DistinctNamesNeverAlias) {
    std::set<std::string> files;
    const std::vector<std::string> names = {
        "a", "a/b", "a%2Fb", "a_2Fb", ".", "..", "%2E", ".a", "a.", "A", "caf\xc3\xa9", "cafe\xcc\x81", "a b", "a\x01",
        "a.lock", "x~y", std::string(300, 'z'), std::string(299, 'z') + "y", std::string(300, '/'), std::string(1024, 'q')};
    for (const auto& n : names) {
        const std::string f = lock_file_name(n);
        EXPECT_TRUE(files.insert(f).second) << "alias: " << f;
        EXPECT_LE(f.size(), 255u);
        EXPECT_EQ(f.find('/'), std::string::npos);
        EXPECT_NE(f, ".");
        EXPECT_NE(f, "..");
        EXPECT_NE(f[0], '.');
    }
}

TEST(FileNames, ShortNamesStayReadable) {
    EXPECT_EQ(lock_file_name("orders/17"), "orders%2F17.lock");
    EXPECT_EQ(lock_file_name(".."), "%2E..lock");
    const std::string long_name = lock_file_name(std::string(300, 'z'));
    EXPECT_EQ(long_name.substr(0, 100), std::string(100, 'z'));
    EXPECT_NE(long_name.find('~'), std::string::npos);
}

}  // namespace

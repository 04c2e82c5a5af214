// The `etcd` plugin's name escaping without a server (plugins/etcd/names.hpp): a name becomes one
// element of its queue directory, and comes back from it.
#include "names.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using dlock::etcd::escape_name;
using dlock::etcd::unescape_name;

namespace {

TEST(Names, SlashPercentAndControlBytesAreEscapedTheRestStays) {
    EXPECT_EQ(escape_name("orders/17"), "orders%2F17");
    EXPECT_EQ(escape_name("50%"), "50%25");
    EXPECT_EQ(escape_name("a\x01\x7f"), "a%01%7F");
    EXPECT_EQ(escape_name("caf\xc3\xa9 .x"), "caf\xc3\xa9 .x");  // UTF-8 stays readable
    EXPECT_EQ(escape_name("a/b").find('/'), std::string::npos);
}

TEST(Names, DirectoriesOfDistinctNamesNeverCoverEachOther) {
    // `a/` would cover `a/b/`; escaped, `a/` and `a%2Fb/` are apart.
    EXPECT_NE(escape_name("a/b").rfind(escape_name("a") + "/", 0), 0u);
}

TEST(Names, UnescapeInvertsEscape) {
    for (const std::string& name : std::vector<std::string>{"a", "a/b", "%", "%2F", "caf\xc3\xa9", "\x1f\x7f", std::string(1024, 'z')}) {
        std::string back;
        ASSERT_TRUE(unescape_name(escape_name(name.c_str()), back)) << name;
        EXPECT_EQ(back, name);
    }
}

TEST(Names, UnescapeRefusesWhatEscapeCannotMake) {
    std::string name;
    EXPECT_FALSE(unescape_name("", name));
    EXPECT_FALSE(unescape_name("a%2", name));
    EXPECT_FALSE(unescape_name("a%2f", name));  // lowercase hex is never produced
    EXPECT_FALSE(unescape_name("%G0", name));
}

}  // namespace

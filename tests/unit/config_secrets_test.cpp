// Secrets in configs: `X_file` for a secret option X, and the warning for a config file (or a
// secret file) with a secret that other users can read.
#include "dlock_internal/common.hpp"
#include "dlock_internal/config.hpp"
#include "support.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

using namespace dlock::config;
namespace fs = std::filesystem;

namespace {

const dlock_option_desc options[] = {
    {"endpoint", DLOCK_OPTION_STRING, 0, DLOCK_DSN_HOSTS, "127.0.0.1:1", "where"},
    {"password", DLOCK_OPTION_STRING, DLOCK_OPTION_SECRET, DLOCK_DSN_PASSWORD, nullptr, "a secret"},
    {"dsn", DLOCK_OPTION_STRING, DLOCK_OPTION_SECRET, DLOCK_DSN_URL, nullptr, "a URL that may hold a password"},
};

dlock_plugin fake_plugin() {
    dlock_plugin p{};
    p.name = "fake";
    p.options = options;
    p.option_count = sizeof options / sizeof options[0];
    return p;
}

const char* const secret = "pw-Zq81-never-shown";

class ConfigSecrets : public ::testing::Test {
protected:
    std::string write(const std::string& name, const std::string& text, fs::perms mode) {
        const std::string path = dir_.path() + "/" + name;
        std::ofstream(path) << text;
        fs::permissions(path, mode);
        return path;
    }
    static constexpr fs::perms private_mode = fs::perms::owner_read | fs::perms::owner_write;
    static constexpr fs::perms world_readable = private_mode | fs::perms::group_read | fs::perms::others_read;
    // The bound value of `name`, or "" when unset.
    static std::string value_of(const bound_options& b, const std::string& name) {
        for (size_t i = 0; i < b.size(); ++i)
            if (name == b.data()[i].name && b.data()[i].is_set) return b.data()[i].string_value;
        return "";
    }
    static std::string bind_error(const client_config& c) {
        try {
            bind_options(c, fake_plugin());
        } catch (const dlock::detail::error& e) {
            EXPECT_EQ(e.status(), DLOCK_CONFIG);
            return e.what();
        }
        return "";
    }
    dlock::test::scratch_dir dir_{"dlock-config-secrets"};
};

TEST_F(ConfigSecrets, PasswordFileSuppliesTheSecretWithoutItsFinalNewline) {
    const std::string file = write("pw", std::string(secret) + "\n", private_mode);
    const auto config = load_yaml_file(write("c.yaml", "backend: fake\noptions:\n  password_file: " + file + "\n", private_mode));
    const auto bound = bind_options(config, fake_plugin());
    EXPECT_EQ(value_of(bound, "password"), secret);
    EXPECT_TRUE(bound.warnings().empty());
}

TEST_F(ConfigSecrets, SecretAndItsFileTogetherAreRefused) {
    const std::string file = write("pw", secret, private_mode);
    const std::string message =
        bind_error(parse_yaml("backend: fake\noptions:\n  password: " + std::string(secret) + "\n  password_file: " + file + "\n", "c.yaml"));
    EXPECT_NE(message.find("`password` and `password_file` are both set"), std::string::npos) << message;
    EXPECT_EQ(message.find(secret), std::string::npos) << message;
}

TEST_F(ConfigSecrets, UnreadableOrEmptySecretFileIsAPreciseError) {
    std::string message = bind_error(parse_yaml("backend: fake\noptions:\n  password_file: " + dir_.path() + "/missing\n", "c.yaml"));
    EXPECT_NE(message.find("c.yaml:3:3: option `password_file`: cannot read `" + dir_.path() + "/missing`"), std::string::npos)
        << message;
    const std::string empty = write("empty", "\n", private_mode);
    message = bind_error(parse_yaml("backend: fake\noptions:\n  password_file: " + empty + "\n", "c.yaml"));
    EXPECT_NE(message.find("is empty"), std::string::npos) << message;
}

TEST_F(ConfigSecrets, OnlySecretOptionsHaveAFileForm) {
    const std::string message = bind_error(parse_yaml("backend: fake\noptions:\n  endpoint_file: /x\n", "c.yaml"));
    EXPECT_NE(message.find("unknown option `endpoint_file`"), std::string::npos) << message;
}

TEST_F(ConfigSecrets, WorldReadableConfigWithASecretGetsOneWarningNamingTheFileAndTheFix) {
    const std::string text = "backend: fake\noptions:\n  password: " + std::string(secret) + "\n  dsn: \"postgresql://u:" +
                             secret + "@h/db\"\n";
    const std::string path = write("c.yaml", text, world_readable);
    const auto bound = bind_options(load_yaml_file(path), fake_plugin());
    ASSERT_EQ(bound.warnings().size(), 1u) << "one warning per file";
    const std::string& w = bound.warnings()[0];
    EXPECT_NE(w.find("config file `" + path + "`"), std::string::npos) << w;
    EXPECT_NE(w.find("(mode 0644)"), std::string::npos) << w;
    EXPECT_NE(w.find("chmod o-r " + path), std::string::npos) << w;
    EXPECT_NE(w.find("password_file"), std::string::npos) << w;
    EXPECT_EQ(w.find(secret), std::string::npos) << w;
}

TEST_F(ConfigSecrets, NoWarningWhenTheSecretIsNotInAReadableFile) {
    setenv("DLOCK_TEST_SECRET", secret, 1);
    const std::string file = write("pw", secret, private_mode);
    for (const std::string& options : {"  password: " + std::string(secret) + "\n",  // a private file: below
                                       std::string("  password: ${DLOCK_TEST_SECRET}\n"),
                                       "  password_file: " + file + "\n",
                                       std::string("  dsn: \"postgresql://app@h/db\"\n")}) {
        const bool readable = options.find("${") != std::string::npos || options.find("_file") != std::string::npos ||
                              options.find("dsn") != std::string::npos;
        const std::string path = write("c.yaml", "backend: fake\noptions:\n" + options, readable ? world_readable : private_mode);
        EXPECT_TRUE(bind_options(load_yaml_file(path), fake_plugin()).warnings().empty()) << options;
    }
    unsetenv("DLOCK_TEST_SECRET");
}

TEST_F(ConfigSecrets, ReadableSecretFileGetsAWarning) {
    const std::string file = write("pw", secret, world_readable);
    const auto bound = bind_options(load_yaml_file(write("c.yaml", "backend: fake\noptions:\n  password_file: " + file + "\n",
                                                         private_mode)),
                                    fake_plugin());
    ASSERT_EQ(bound.warnings().size(), 1u);
    EXPECT_NE(bound.warnings()[0].find("secret file `" + file + "`"), std::string::npos) << bound.warnings()[0];
    EXPECT_NE(bound.warnings()[0].find("chmod o-r " + file), std::string::npos) << bound.warnings()[0];
}

}  // namespace

// A plugin built against the frozen v1 headers under a host of plugin ABI version 2: plain locks
// work as before; semaphores, shared holds, holders, list and break answer DLOCK_NOT_SUPPORTED
// with a message naming the backend; the capabilities of its version 1 table never show the bits
// of version 2, even though the plugin sets them (as a careless plugin of then could). Compiled
// against today's headers (the caller side is new; the plugin is v1).
#include <dlock/dlock.hpp>
#include <dlock/dlock_admin.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <mutex>
#include <shared_mutex>
#include <string>

using namespace std::chrono_literals;

namespace {

std::string v1_config() { return std::string("backend: abi_v1\nplugin_path: [\"") + DLOCK_ABI_V1_PLUGIN_DIR + "\"]\n"; }

constexpr uint64_t version_2_bits = DLOCK_CAP_SEMAPHORE | DLOCK_CAP_SHARED | DLOCK_CAP_LIST | DLOCK_CAP_BREAK;

// Expects `call` to throw std::system_error with errc::not_supported, its message naming the backend.
template <typename F>
void expect_not_supported(F&& call, const std::string& what) {
    SCOPED_TRACE(what);
    try {
        call();
        ADD_FAILURE() << what << " did not fail";
    } catch (const std::system_error& e) {
        EXPECT_EQ(e.code(), dlock::errc::not_supported) << e.what();
        EXPECT_NE(std::string(e.what()).find("abi_v1"), std::string::npos) << e.what();
    }
}

TEST(AbiV1PluginModes, CapabilitiesOfAVersion1TableNeverShowTheVersion2Bits) {
    auto client = dlock::client::from_yaml(v1_config());
    EXPECT_EQ(client.capabilities() & version_2_bits, 0u) << "the client believed bits a version 1 table cannot mean";
    EXPECT_TRUE(client.has(DLOCK_CAP_FENCING));
    // The catalog reads a config file.
    const auto config_path = std::filesystem::temp_directory_path() / ("dlock-abi-v1-modes-" + std::to_string(getpid()) + ".yaml");
    std::ofstream(config_path) << v1_config();
    const auto catalog = dlock::find_backends(config_path.string());
    std::filesystem::remove(config_path);
    bool found = false;
    for (const auto& b : catalog.backends) {
        if (b.name != "abi_v1") continue;
        found = true;
        EXPECT_EQ(b.abi_version, 1u);
        EXPECT_EQ(b.capabilities & version_2_bits, 0u) << "the catalog (`dlock backends`) shows bits a version 1 table cannot mean";
    }
    EXPECT_TRUE(found) << "abi_v1 not in the catalog";
}

TEST(AbiV1PluginModes, PlainLocksWorkAndTheNewModesAreNotSupported) {
    auto client = dlock::client::from_yaml(v1_config());
    auto other = dlock::client::from_yaml(v1_config());
    {
        dlock::shared_mutex m(client, "abi/modes");
        std::unique_lock<dlock::shared_mutex> exclusive(m, std::try_to_lock);
        EXPECT_TRUE(exclusive.owns_lock()) << "the exclusive half of a shared_mutex is a plain lock";
        std::error_code ec;
        other.acquire("abi/modes", dlock::acquire_options().with_wait(0ms), ec);
        EXPECT_EQ(ec, dlock::errc::timeout);
    }
    auto plain = other.acquire("abi/modes", dlock::acquire_options().with_wait(0ms));
    EXPECT_TRUE(plain);
    plain.release();

    dlock::shared_mutex m(client, "abi/modes");
    expect_not_supported([&] { m.try_lock_shared(); }, "try_lock_shared");
    expect_not_supported([&] { std::shared_lock<dlock::shared_mutex> reader(m); }, "std::shared_lock");
    dlock::semaphore sem(client, "abi/sem", 3);
    expect_not_supported([&] { sem.try_acquire(); }, "semaphore::try_acquire");
    expect_not_supported([&] { client.acquire("abi/sem", dlock::acquire_options().with_permits(2).with_wait(0ms)); }, "acquire with permits");
    expect_not_supported([&] { client.holders("abi/modes"); }, "holders");
    expect_not_supported([&] { client.holders("abi/sem", true); }, "holders of a semaphore");
    expect_not_supported([&] { client.list(); }, "list");
    expect_not_supported([&] { client.break_lock("abi/modes"); }, "break");
    EXPECT_EQ(m.shared_holds(), 0u);
    // Nothing was left behind by the refusals: the names are free.
    auto again = other.acquire("abi/modes", dlock::acquire_options().with_wait(0ms));
    EXPECT_TRUE(again);
    auto sem_lock = other.acquire("abi/sem", dlock::acquire_options().with_wait(0ms));
    EXPECT_TRUE(sem_lock);
}

}  // namespace

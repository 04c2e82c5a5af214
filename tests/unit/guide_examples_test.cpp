// The C++ examples of docs/guide.md's sections "Semaphores", "Shared (read-write) locks" and
// "Listing and breaking locks", word for word inside functions, compiled and run on the `file`
// backend: an example that stops compiling fails the build. What the examples call that dlock does
// not provide (wash_car, read_catalog, write_catalog) is defined here. Where the backend lacks the
// capability an example needs, the run expects errc::not_supported.
#include "support.hpp"

#include <dlock/dlock.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <shared_mutex>

using namespace std::chrono_literals;

namespace {

void wash_car(uint64_t) {}
void read_catalog() {}
void write_catalog(uint64_t) {}

void semaphore_example(dlock::client& client) {
dlock::semaphore stalls(client, "stalls", 5);
if (std::optional<dlock::permit> p = stalls.try_acquire_for(10s)) {
    wash_car(p->fencing_token());
}   // the permit is released here
dlock::permit p = stalls.acquire();   // waits without limit
}

void shared_example(dlock::client& client) {
dlock::shared_mutex catalog(client, "catalog");
{
    std::shared_lock<dlock::shared_mutex> reading(catalog);   // beside other readers
    read_catalog();
}
{
    std::unique_lock<dlock::shared_mutex> writing(catalog, std::defer_lock);
    if (writing.try_lock_for(5s)) write_catalog(catalog.fencing_token());
}
}

void list_and_break_example(dlock::client& client) {
for (const dlock::holder_info& h : client.list("orders/"))
    std::cout << h.name << ' ' << h.holder << ' ' << h.fencing_token << '\n';
std::size_t broken = client.break_lock("orders/42");
(void)broken;
}

class GuideExamples : public ::testing::Test {
protected:
    void SetUp() override {
        const std::string config = dir_.path() + "/file.yaml";
        std::ofstream(config) << "backend: file\noptions:\n  directory: " << dir_.path() << "/locks\n";
        client_ = dlock::client::open(config);
    }
    // Runs `example`; without `capability` it must fail with errc::not_supported.
    template <typename F>
    void run(F&& example, uint64_t capability) {
        try {
            example(client_);
            EXPECT_TRUE(client_.has(capability)) << "ran without the capability it needs";
        } catch (const std::system_error& e) {
            EXPECT_FALSE(client_.has(capability)) << e.what();
            EXPECT_EQ(e.code(), dlock::errc::not_supported) << e.what();
        }
    }
    dlock::test::scratch_dir dir_{"dlock-guide-examples"};
    dlock::client client_;
};

TEST_F(GuideExamples, SemaphoreExampleRuns) { run(semaphore_example, DLOCK_CAP_SEMAPHORE); }
TEST_F(GuideExamples, SharedLockExampleRuns) { run(shared_example, DLOCK_CAP_SHARED); }
TEST_F(GuideExamples, ListAndBreakExampleRuns) { run(list_and_break_example, DLOCK_CAP_LIST | DLOCK_CAP_BREAK); }

}  // namespace

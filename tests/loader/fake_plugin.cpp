// A fake backend plugin, built several times from this one source with different -D defines, to
// test the loader's negative cases and the core's lease keeper:
//
//   (none)             `fake`: a working in-process TTL lock (not shared between processes).
//                      Options: `lose_after` (report the hold LOST through the host after this long),
//                      `renew_status` (the status every renewal returns; 0 = renew normally),
//                      `renew_delay` (each renewal call answers only after this long: a stuck keeper;
//                      with `renew_delay_prefix`, only calls renewing a name with that prefix),
//                      `lose_in_acquire` (report each hold LOST through the host from inside
//                      acquire, before acquire returns OK), `expired_grants` (the first N grants
//                      come back with their validity already over, as a late reply would),
//                      `drift` (grants and renewals end their validity this long before the
//                      fake's own expiry, as a real backend's ttl − drift does),
//                      `unanswered_releases` (the first N releases remove the lock but answer
//                      UNAVAILABLE, as a lost reply would; a retry that then finds the lock gone
//                      answers OK, the rule of the real backends for releases in doubt),
//                      `inspect_delay` (each inspect answers only after this long, counted in
//                      fake_inspects_running, which destroy records: a backend destroyed under a
//                      running inspect shows there; fake_interrupts counts interrupt calls).
//   FAKE_SIMULATED_CLOCK  `fake` built into a test program rather than loaded: it reads time and
//                      waits through the clock the test gave the core (dlock_internal/clock.hpp), so
//                      that its expiries, renew delays and lose_after move with the simulated time;
//                      its negotiation function is fake_simulated_negotiate, for the test to add as
//                      a built-in backend.
//   FAKE_NO_SYMBOL     exports no negotiation symbol
//   FAKE_TOO_OLD       answers ABI version 0
//   FAKE_TOO_NEW       refuses: needs ABI version 99
//   FAKE_BROKEN_TABLE  a function table too small for its version
//   FAKE_CREATE_FAILS  create returns DLOCK_CONFIG with a message
//   FAKE_THROWS        create throws a C++ exception across the C ABI
#include <dlock/plugin.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <set>
#include <vector>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <time.h>

#ifndef FAKE_NAME
#define FAKE_NAME "fake"
#endif

#ifdef FAKE_SIMULATED_CLOCK
#include "dlock_internal/clock.hpp"
#endif

namespace {

#ifdef FAKE_SIMULATED_CLOCK
int64_t now_ns() { return dlock::core::testing::clock_for_new_client()->now_ns(); }
void wait_until(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, int64_t deadline_ns) {
    dlock::core::testing::clock_for_new_client()->wait_until(lock, cv, deadline_ns);
}
void notify_all(std::condition_variable& cv) { dlock::core::testing::clock_for_new_client()->notify_all(cv); }
void pause_ms(int64_t ms) {
    const auto& clock = dlock::core::testing::clock_for_new_client();
    clock->sleep_until(clock->now_ns() + ms * 1'000'000);
}
#else
int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
void wait_until(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, int64_t deadline_ns) {
    cv.wait_until(lock, std::chrono::steady_clock::time_point(std::chrono::nanoseconds(deadline_ns)));
}
void notify_all(std::condition_variable& cv) { cv.notify_all(); }
void pause_ms(int64_t ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }
#endif

struct entry {
    std::string owner;
    int64_t expires_ns = 0;
    uint64_t fence = 0;
};

}  // namespace

// Inspects inside their inspect_delay, in every fake of this process; what it was when a backend
// was last destroyed.
static std::atomic<int> fake_inspects_running{0};
static std::atomic<int> fake_inspects_running_at_destroy{0};
static std::atomic<int> fake_interrupts{0};  // interrupt calls (a close begins with one)

struct fake_backend {
    dlock_plugin_host host{};
    int64_t inspect_delay_ms = 0;
    int64_t lose_after_ms = 0;
    int renew_status = 0;
    int64_t renew_delay_ms = 0;
    std::string renew_delay_prefix;
    bool lose_in_acquire = false;
    int64_t expired_grants = 0;  // (mutex) how many more grants to return already expired
    int64_t drift_ms = 0;
    int64_t unanswered_releases = 0;  // (mutex)
    std::mutex mutex;
    std::condition_variable changed;
    std::map<std::string, entry> locks;
    bool interrupted = false;
    // Reporting LOST: `report_mutex` is never taken by release or renew (the host contract), and a
    // hold's cookie is used only while the hold is alive.
    std::mutex report_mutex;
    std::condition_variable report_wake;
    std::set<void*> live_cookies;
    bool stopping = false;
    std::vector<std::thread> losers;
};

struct fake_hold {
    std::string name, owner;
    void* cookie;
    bool release_unanswered = false;  // (backend mutex) an earlier release removed the lock unanswered
};

// The ABI's opaque handles are this fake's objects, under names of its own: a test program builds
// the fake in beside the built-in `file` backend, whose `struct dlock_backend` and `struct dlock_hold`
// are other types (one name with two definitions in one program is undefined behaviour: the
// linker kept one destructor for both).
static fake_backend* of(dlock_backend* b) { return reinterpret_cast<fake_backend*>(b); }
static fake_hold* of(dlock_hold* h) { return reinterpret_cast<fake_hold*>(h); }
static dlock_hold* handle_of(fake_hold* h) { return reinterpret_cast<dlock_hold*>(h); }

namespace {

void set_error(dlock_plugin_error* e, const char* text) {
    std::strncpy(e->message, text, sizeof e->message - 1);
    e->message[sizeof e->message - 1] = 0;
}

const dlock_option_desc options[] = {
    {"lose_after", DLOCK_OPTION_DURATION, 0, DLOCK_DSN_NONE, "0ms", "Report each hold LOST this long after acquire (0 = never)."},
    {"renew_status", DLOCK_OPTION_INT, 0, DLOCK_DSN_NONE, "0", "Status every renewal returns (0 = renew normally)."},
    {"renew_delay", DLOCK_OPTION_DURATION, 0, DLOCK_DSN_NONE, "0ms", "Each renewal call answers only after this long."},
    {"inspect_delay", DLOCK_OPTION_DURATION, 0, DLOCK_DSN_NONE, "0ms", "Each inspect answers only after this long."},
    {"renew_delay_prefix", DLOCK_OPTION_STRING, 0, DLOCK_DSN_NONE, "", "Only renewals of names with this prefix are delayed (empty = all)."},
    {"lose_in_acquire", DLOCK_OPTION_BOOL, 0, DLOCK_DSN_NONE, "false", "Report each hold LOST from inside acquire."},
    {"expired_grants", DLOCK_OPTION_INT, 0, DLOCK_DSN_NONE, "0", "The first N grants arrive with their validity over."},
    {"drift", DLOCK_OPTION_DURATION, 0, DLOCK_DSN_NONE, "0ms", "Validity ends this long before the fake's own expiry."},
    {"unanswered_releases", DLOCK_OPTION_INT, 0, DLOCK_DSN_NONE, "0", "The first N releases remove the lock but answer UNAVAILABLE."},
    {"log_line", DLOCK_OPTION_STRING, 0, DLOCK_DSN_NONE, "", "Logged (at warn) through the host when the backend is created."},
    {"token", DLOCK_OPTION_STRING, DLOCK_OPTION_SECRET, DLOCK_DSN_NONE, "", "A secret the fake never uses or shows."},
};

int fake_create(const dlock_option_value* values, size_t count, const dlock_plugin_host* host, dlock_backend** out,
                dlock_plugin_error* error) {
#if defined(FAKE_CREATE_FAILS)
    (void)values; (void)count; (void)host; (void)out;
    set_error(error, "fake backend: endpoint `nowhere:1` refused the connection");
    return DLOCK_CONFIG;
#elif defined(FAKE_THROWS)
    (void)values; (void)count; (void)host; (void)out; (void)error;
    throw std::runtime_error("fake backend threw");
#else
    (void)error;
    auto* b = new fake_backend;
    b->host = *host;
    for (size_t i = 0; i < count; ++i) {
        if (!std::strcmp(values[i].name, "lose_after")) b->lose_after_ms = values[i].int_value;
        if (!std::strcmp(values[i].name, "renew_status")) b->renew_status = int(values[i].int_value);
        if (!std::strcmp(values[i].name, "renew_delay")) b->renew_delay_ms = values[i].int_value;
        if (!std::strcmp(values[i].name, "inspect_delay")) b->inspect_delay_ms = values[i].int_value;
        if (!std::strcmp(values[i].name, "renew_delay_prefix") && values[i].string_value)
            b->renew_delay_prefix = values[i].string_value;
        if (!std::strcmp(values[i].name, "lose_in_acquire")) b->lose_in_acquire = values[i].int_value != 0;
        if (!std::strcmp(values[i].name, "expired_grants")) b->expired_grants = values[i].int_value;
        if (!std::strcmp(values[i].name, "drift")) b->drift_ms = values[i].int_value;
        if (!std::strcmp(values[i].name, "unanswered_releases")) b->unanswered_releases = values[i].int_value;
        if (!std::strcmp(values[i].name, "log_line") && values[i].string_value && *values[i].string_value && host->log)
            host->log(host->context, 2, values[i].string_value);
    }
    *out = reinterpret_cast<dlock_backend*>(b);
    return DLOCK_OK;
#endif
}

void fake_destroy(dlock_backend* backend_handle) {
    fake_backend* b = of(backend_handle);

    fake_inspects_running_at_destroy = fake_inspects_running.load();
    {
        std::lock_guard<std::mutex> lock(b->report_mutex);
        b->stopping = true;
        notify_all(b->report_wake);
    }
    for (auto& t : b->losers) t.join();
    delete b;
}

uint64_t fake_capabilities(dlock_backend*) { return DLOCK_CAP_FENCING | DLOCK_CAP_TTL | DLOCK_CAP_PUSH_WAIT; }

void fake_interrupt(dlock_backend* backend_handle) {
    fake_backend* b = of(backend_handle);

    ++fake_interrupts;
    std::lock_guard<std::mutex> lock(b->mutex);
    b->interrupted = true;
    notify_all(b->changed);
}

int fake_acquire(dlock_backend* backend_handle, const dlock_acquire_request* r, dlock_hold** out_hold, dlock_grant* grant,
                 dlock_plugin_error* error) {
    fake_backend* b = of(backend_handle);
    std::unique_lock<std::mutex> lock(b->mutex);
    for (;;) {
        if (b->interrupted) { set_error(error, "fake: interrupted"); return DLOCK_CANCELLED; }
        entry& e = b->locks[r->name];
        const int64_t sent = now_ns();
        if (e.owner.empty() || e.expires_ns <= sent) {
            e.owner = r->owner;
            e.expires_ns = sent + r->ttl_ms * 1'000'000;
            ++e.fence;
            *out_hold = handle_of(new fake_hold{r->name, r->owner, r->host_lease});
            grant->fencing_token = e.fence;
            grant->valid_until_ns = e.expires_ns - b->drift_ms * 1'000'000;
            grant->ttl_ms = r->ttl_ms;
            if (b->expired_grants > 0) {
                --b->expired_grants;
                grant->valid_until_ns = sent;
            }
            if (b->lose_in_acquire) {
                lock.unlock();
                b->host.hold_state_changed(b->host.context, r->host_lease, DLOCK_LEASE_LOST, 0);
                return DLOCK_OK;
            }
            if (b->lose_after_ms > 0) {
                void* cookie = r->host_lease;
                const int64_t at = now_ns() + b->lose_after_ms * 1'000'000;
                {
                    std::lock_guard<std::mutex> report(b->report_mutex);
                    b->live_cookies.insert(cookie);
                }
                b->losers.emplace_back([b, cookie, at] {
                    std::unique_lock<std::mutex> report(b->report_mutex);
                    while (!b->stopping && now_ns() < at) wait_until(report, b->report_wake, at);
                    if (!b->stopping && b->live_cookies.count(cookie))
                        b->host.hold_state_changed(b->host.context, cookie, DLOCK_LEASE_LOST, 0);
                });
            }
            return DLOCK_OK;
        }
        if (r->deadline_ns == 0 || now_ns() >= r->deadline_ns) { set_error(error, "fake: held"); return DLOCK_TIMEOUT; }
        const int64_t until = std::min(r->deadline_ns, e.expires_ns);
        wait_until(lock, b->changed, until);
    }
}

int fake_release(dlock_backend* backend_handle, dlock_hold* hold_handle, dlock_plugin_error* error) {
    fake_backend* b = of(backend_handle);
    fake_hold* h = of(hold_handle);

    std::lock_guard<std::mutex> lock(b->mutex);
    entry& e = b->locks[h->name];
    if (e.owner != h->owner || e.expires_ns <= now_ns()) return h->release_unanswered ? DLOCK_OK : DLOCK_LOST;
    e.owner.clear();
    notify_all(b->changed);
    if (b->unanswered_releases > 0) {
        --b->unanswered_releases;
        h->release_unanswered = true;
        set_error(error, "fake: the release's answer was lost");
        return DLOCK_UNAVAILABLE;
    }
    return DLOCK_OK;
}

void fake_hold_destroy(dlock_backend* backend_handle, dlock_hold* hold_handle) {
    fake_backend* b = of(backend_handle);
    fake_hold* h = of(hold_handle);

    {
        std::lock_guard<std::mutex> report(b->report_mutex);
        b->live_cookies.erase(h->cookie);
    }
    delete h;
}

int fake_renew(dlock_backend* backend_handle, dlock_renewal* rs, size_t count, dlock_plugin_error*) {
    fake_backend* b = of(backend_handle);

    bool delayed = false;
    for (size_t i = 0; i < count && !delayed; ++i) delayed = of(rs[i].hold)->name.compare(0, b->renew_delay_prefix.size(), b->renew_delay_prefix) == 0;
    if (b->renew_delay_ms > 0 && delayed) pause_ms(b->renew_delay_ms);
    std::lock_guard<std::mutex> lock(b->mutex);
    for (size_t i = 0; i < count; ++i) {
        if (b->renew_status) { rs[i].status = b->renew_status; continue; }
        entry& e = b->locks[of(rs[i].hold)->name];
        const int64_t sent = now_ns();
        if (e.owner != of(rs[i].hold)->owner || e.expires_ns <= sent) { rs[i].status = DLOCK_LOST; continue; }
        e.expires_ns = sent + rs[i].ttl_ms * 1'000'000;
        rs[i].status = DLOCK_OK;
        rs[i].valid_until_ns = e.expires_ns - b->drift_ms * 1'000'000;
    }
    return DLOCK_OK;
}

int fake_inspect(dlock_backend* backend_handle, const char* name, dlock_lock_info* info, dlock_plugin_error*) {
    fake_backend* b = of(backend_handle);

    if (b->inspect_delay_ms > 0) {
        ++fake_inspects_running;
        pause_ms(b->inspect_delay_ms);
        --fake_inspects_running;
    }
    std::lock_guard<std::mutex> lock(b->mutex);
    entry& e = b->locks[name];
    const int64_t now = now_ns();
    info->held = !e.owner.empty() && e.expires_ns > now;
    if (info->held) {
        std::strncpy(info->holder, e.owner.c_str(), sizeof info->holder - 1);
        info->ttl_left_ms = (e.expires_ns - now) / 1'000'000;
    }
    info->fencing_token = e.fence;
    return DLOCK_OK;
}

const dlock_plugin table = {
#ifdef FAKE_BROKEN_TABLE
    40,
#else
    sizeof(dlock_plugin),
#endif
#ifdef FAKE_TOO_OLD
    0,
#else
    1,
#endif
    FAKE_NAME,
    "A fake in-process TTL backend for tests.",
    options,
    sizeof options / sizeof options[0],
    fake_create,
    fake_destroy,
    fake_capabilities,
    fake_interrupt,
    fake_acquire,
    fake_release,
    fake_hold_destroy,
    fake_renew,
    fake_inspect,
    nullptr,  // holders: a version 1 table ends at inspect
    nullptr,  // list
    nullptr,  // break_lock
};

}  // namespace

#if defined(FAKE_SIMULATED_CLOCK)
int fake_simulated_negotiate(uint32_t, const dlock_plugin** out, uint32_t*) {
    *out = &table;
    return DLOCK_OK;
}
int fake_inspects_running_when_destroyed() { return fake_inspects_running_at_destroy.load(); }
int fake_interrupts_so_far() { return fake_interrupts.load(); }
#elif !defined(FAKE_NO_SYMBOL)
extern "C" DLOCK_PLUGIN_EXPORT int dlock_plugin_negotiate(uint32_t host_max_version, const dlock_plugin** out,
                                                          uint32_t* out_min_version) {
#ifdef FAKE_TOO_NEW
    (void)host_max_version; (void)out;
    *out_min_version = 99;
    return DLOCK_NOT_SUPPORTED;
#else
    (void)host_max_version; (void)out_min_version;
    *out = &table;
    return DLOCK_OK;
#endif
}
#endif

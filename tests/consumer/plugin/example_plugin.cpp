// libdlock-example.so: locks that live in the memory of one process, as a backend plugin built
// outside dlock against the installed plugin kit. Each name has a holder flag and a fencing
// counter; a waiter sleeps on a condition variable until a release or its deadline.
#include <dlock/plugin_kit.hpp>

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace kit = dlock::plugin_kit;

struct dlock_backend {
    std::string greeting;  // the `greeting` option, logged at create
    std::mutex mutex;
    std::condition_variable released;
    std::map<std::string, uint64_t> fences;  // last token issued per name
    std::map<std::string, bool> held;
    bool closing = false;
};

struct dlock_hold {
    std::string name;
};

namespace {

const dlock_option_desc example_options[] = {
    {"greeting", DLOCK_OPTION_STRING, 0, DLOCK_DSN_NONE, "hello", "Logged when a client opens."},
};

int example_create(const dlock_option_value* values, size_t count, const dlock_plugin_host* host,
                   dlock_backend** out, dlock_plugin_error* error) {
    return kit::guarded(error, "example", [&] {
        auto b = std::make_unique<dlock_backend>();
        if (const dlock_option_value* v = kit::find_option(values, count, "greeting")) b->greeting = v->string_value;
        if (host && host->log) host->log(host->context, 1, b->greeting.c_str());
        *out = b.release();
        return DLOCK_OK;
    });
}

void example_destroy(dlock_backend* b) { delete b; }

uint64_t example_capabilities(dlock_backend*) { return DLOCK_CAP_FENCING; }

void example_interrupt(dlock_backend* b) {
    std::lock_guard<std::mutex> lock(b->mutex);
    b->closing = true;
    b->released.notify_all();
}

int example_acquire(dlock_backend* b, const dlock_acquire_request* request, dlock_hold** out_hold,
                    dlock_grant* grant, dlock_plugin_error* error) {
    return kit::guarded(error, "example", [&] {
        const std::string name = request->name;
        std::unique_lock<std::mutex> lock(b->mutex);
        auto free = [&] { return b->closing || !b->held[name]; };
        if (request->deadline_ns == kit::forever_ns) b->released.wait(lock, free);
        else b->released.wait_until(lock, kit::steady_time(request->deadline_ns), free);
        if (b->closing) kit::fail(DLOCK_CANCELLED, "example backend: the client is closing");
        if (b->held[name]) kit::fail(DLOCK_TIMEOUT, "example backend: `" + name + "` is held");
        b->held[name] = true;
        *out_hold = new dlock_hold{name};
        grant->fencing_token = ++b->fences[name];
        grant->valid_until_ns = kit::forever_ns;  // held until released
        grant->ttl_ms = request->ttl_ms;
        return DLOCK_OK;
    });
}

int example_release(dlock_backend* b, dlock_hold* h, dlock_plugin_error*) {
    std::lock_guard<std::mutex> lock(b->mutex);
    b->held[h->name] = false;
    b->released.notify_all();
    return DLOCK_OK;
}

void example_hold_destroy(dlock_backend*, dlock_hold* h) { delete h; }

int example_renew(dlock_backend*, dlock_renewal* renewals, size_t count, dlock_plugin_error*) {
    for (size_t i = 0; i < count; ++i) {
        renewals[i].status = DLOCK_OK;
        renewals[i].valid_until_ns = kit::forever_ns;
    }
    return DLOCK_OK;
}

const dlock_plugin example_plugin = {
    sizeof(dlock_plugin), 1, "example", "Locks in the memory of one process (an example plugin).",
    example_options, sizeof example_options / sizeof example_options[0],
    example_create, example_destroy, example_capabilities, example_interrupt, example_acquire,
    example_release, example_hold_destroy, example_renew,
    nullptr,  // inspect: not offered
};

}  // namespace

extern "C" DLOCK_PLUGIN_EXPORT int dlock_plugin_negotiate(uint32_t host_max_version, const dlock_plugin** out,
                                                          uint32_t* out_min_version) {
    return kit::negotiate_v1(host_max_version, &example_plugin, out, out_min_version);
}

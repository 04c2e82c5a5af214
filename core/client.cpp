// The core: clients, holds and leases: acquire, release, renew, on_lost, inspect, close. The lease
// keeper and the lost-callback dispatcher are in keeper.cpp.
#include "dlock_internal/client.hpp"

#include "dlock_internal/backends.hpp"
#include "dlock_internal/common.hpp"
#include "dlock_internal/keeper.hpp"
#include "dlock_internal/log.hpp"
#include "dlock_internal/names.hpp"
#include "dlock_internal/plugin_call.hpp"

#include <dlock/plugin_kit/scope_exit.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

namespace dlock::core {

using detail::error;
using detail::forever_ns;
using detail::monotonic_now_ns;

namespace {

constexpr int64_t max_ttl_ms = 365LL * 24 * 3600 * 1000;

// A wait with a cancel token is handed to the plugin in slices of at most this long, the token
// checked between them: the plugin ABI has no per-acquire cancel, only interrupt() for the whole
// backend, so this bounds how long a cancel waits for the plugin to return (dlock.h gives the cost).
constexpr int64_t cancel_slice_ns = 250 * 1'000'000LL;

void host_log(void* context, int level, const char* message) {
    static_cast<client_core*>(context)->log(level, message);
}

void host_hold_state_changed(void* context, void* host_lease, int state, int64_t valid_until_ns) {
    static_cast<client_core*>(context)->hold_state_changed(static_cast<hold*>(host_lease), state, valid_until_ns);
}

// Reads one field of a caller's option struct if the caller's struct_size covers it.
template <typename T, typename Field>
bool has_field(const T* options, Field T::*member) {
    const auto offset = reinterpret_cast<size_t>(&(static_cast<const T*>(nullptr)->*member));
    return options && options->struct_size >= offset + sizeof(Field);
}

// Takes `lease` out of its hold's list; the list is that one lease but for reentrant holds.
template <typename List>
void remove_lease(List& leases, dlock_lease* lease) {
    if (leases.size() == 1 && leases.front() == lease) leases.clear();
    else leases.erase(std::remove(leases.begin(), leases.end(), lease), leases.end());
}

bool tri_state(int value, bool fallback, const char* what) {
    if (value == DLOCK_DEFAULT) return fallback;
    if (value == 0 || value == 1) return value == 1;
    throw error(DLOCK_INVALID_ARGUMENT, fmt::format("acquire option `{}` is {}; use 0, 1 or DLOCK_DEFAULT", what, value));
}

}  // namespace

std::shared_ptr<client_core> client_core::open(config::client_config config) {
    auto module = loader::load(config.backend, config.plugin_path, builtin_backends());
    const auto options = config::bind_options(config, *module->table);
    for (const auto& w : options.warnings()) logger().warn("{}", w);
    std::shared_ptr<client_core> core(new client_core(std::move(config), std::move(module)));
    if (!core->config_.metrics_listen.empty())
        core->metrics_ = std::make_unique<client_metrics>(core->config_.metrics_listen, core->plugin_->name);
    plugin_error err;
    const int status = plugin_call(err, core->plugin_->name, "create", [&] {
        return core->plugin_->create(options.data(), options.size(), &core->host_, &core->backend_, &err);
    });
    if (status != DLOCK_OK) {
        core->backend_ = nullptr;
        throw error(status, message_of(err, fmt::format("backend `{}` could not be created ({})", core->plugin_->name,
                                                        detail::status_name(status))));
    }
    if (!core->backend_)
        throw error(DLOCK_PLUGIN, fmt::format("plugin `{}` reported success from `create` but returned no backend", core->plugin_->name));
    core->capabilities_ = effective_capabilities(*core->plugin_, core->plugin_->capabilities(core->backend_));
    core->keeper_ = std::thread([raw = core.get()] { raw->keeper_loop(); });
    core->dispatcher_ = std::thread([raw = core.get()] { raw->dispatcher_loop(); });
    core->dispatcher_id_ = core->dispatcher_.get_id();
    return core;
}

client_core::client_core(config::client_config config, std::shared_ptr<const loader::module> module)
    : config_(std::move(config)), module_(std::move(module)), plugin_(module_->table), clock_(testing::clock_for_new_client()) {
    host_.struct_size = sizeof host_;
    host_.context = this;
    host_.log = host_log;
    host_.hold_state_changed = host_hold_state_changed;
}

client_core::~client_core() { close(); }

void client_core::log(int level, const char* message) {
    static const spdlog::level::level_enum levels[] = {spdlog::level::debug, spdlog::level::info, spdlog::level::warn,
                                                       spdlog::level::err};
    logger().log(levels[std::clamp(level, 0, 3)], "{}: {}", plugin_->name, message ? message : "");
}

[[noreturn]] void client_core::fail_plugin_call(int status, const dlock_plugin_error& err, const char* what) {
    throw error(status, message_of(err, fmt::format("backend `{}`: {} failed ({})", plugin_->name, what, detail::status_name(status))));
}

dlock_lease* client_core::acquire(const char* name, const dlock_acquire_options* options) {
    if (!metrics_) return acquire_lease(name, options);
    // acquire_lease counts itself out before it returns, and a close in another thread may then
    // free this client (its last reference is the handle's): keep it alive to record the outcome.
    const auto keep_alive = shared_from_this();
    const int64_t start = monotonic_now_ns();
    auto record = [&](int status) {
        // A try-once (wait 0) measures the backend's latency; any other wait, the time spent waiting.
        const bool waits = has_field(options, &dlock_acquire_options::wait_ms) && options->wait_ms != DLOCK_DEFAULT
                               ? options->wait_ms != 0
                               : name && config::resolve(config_, name).wait_ms != 0;
        metrics_->acquire_finished(waits, status, monotonic_now_ns() - start);
    };
    try {
        dlock_lease* lease = acquire_lease(name, options);
        record(DLOCK_OK);
        return lease;
    } catch (const error& e) {
        record(e.status());
        throw;
    } catch (...) {
        record(DLOCK_INTERNAL);
        throw;
    }
}

dlock_lease* client_core::acquire_lease(const char* name, const dlock_acquire_options* options) {
    const resolved_acquire r = resolve_request(name, options);
    if (r.cancelled()) throw error(DLOCK_CANCELLED, fmt::format("acquire of `{}` cancelled by its cancel token before it began", name));
    // close() waits for the in-flight count to reach zero before destroying the backend, so this call
    // is counted out only after its last plugin call: under the mutex where a lease is handed out
    // (which clears `in_flight`), or on the way out when the acquisition fails or the client closed
    // meanwhile. Counted in without the mutex, then the close checked, both sequentially consistent:
    // either this sees closed_, or close() (which sets closed_, then reads the count) waits for this call.
    ++calls_in_flight_;
    bool in_flight = true;
    const auto count_out_on_exit = plugin_kit::scope_exit([&] {
        if (!in_flight) return;
        plugin_kit::lock_guard lock(mutex_);
        count_out_acquire(in_flight);
    });
    if (closed_) throw error(DLOCK_CANCELLED, "the client is closed");
    if (r.reentrant) {
        if (dlock_lease* lease = reenter(r, in_flight)) return lease;
    }
    return acquire_new_hold(r, in_flight);
}

resolved_acquire client_core::resolve_request(const char* name, const dlock_acquire_options* options) const {
    if (!name) throw error(DLOCK_INVALID_ARGUMENT, "lock name is NULL");
    resolved_acquire r;
    r.name = name;  // measured once
    detail::validate_name(r.name);
    if (options && options->struct_size < sizeof(uint32_t))
        throw error(DLOCK_INVALID_ARGUMENT, "acquire options: struct_size is 0; initialise with DLOCK_ACQUIRE_OPTIONS_INIT");
    const config::resolved_policy policy = config::resolve(config_, r.name);

    r.wait_ms = policy.wait_ms;
    if (has_field(options, &dlock_acquire_options::wait_ms) && options->wait_ms != DLOCK_DEFAULT) {
        if (options->wait_ms < 0)
            throw error(DLOCK_INVALID_ARGUMENT, fmt::format("acquire option `wait_ms` is {}; it must be >= 0, "
                                                            "DLOCK_WAIT_FOREVER or DLOCK_DEFAULT", options->wait_ms));
        r.wait_ms = options->wait_ms;
    }
    r.ttl_ms = policy.ttl_ms;
    if (has_field(options, &dlock_acquire_options::ttl_ms) && options->ttl_ms != DLOCK_DEFAULT) {
        if (options->ttl_ms < 1)
            throw error(DLOCK_INVALID_ARGUMENT, fmt::format("acquire option `ttl_ms` is {}; a lease lasts at least 1 ms", options->ttl_ms));
        if (options->ttl_ms > max_ttl_ms)
            throw error(DLOCK_INVALID_ARGUMENT, fmt::format("acquire option `ttl_ms` is {}; the limit is 365 days ({} ms)",
                                                            options->ttl_ms, max_ttl_ms));
        r.ttl_ms = options->ttl_ms;
    }
    r.renew = has_field(options, &dlock_acquire_options::renew) ? tri_state(options->renew, policy.renew, "renew") : policy.renew;
    r.fair = has_field(options, &dlock_acquire_options::fair) ? tri_state(options->fair, policy.fair, "fair") : policy.fair;
    const bool reentrant_given = has_field(options, &dlock_acquire_options::reentrant) && options->reentrant != DLOCK_DEFAULT;
    r.reentrant = has_field(options, &dlock_acquire_options::reentrant)
                      ? tri_state(options->reentrant, policy.reentrant, "reentrant") : policy.reentrant;
    if (has_field(options, &dlock_acquire_options::on_lost_user_data)) {
        r.on_lost = options->on_lost;
        r.on_lost_data = options->on_lost_user_data;
    }
    r.permits = has_field(options, &dlock_acquire_options::permits) ? options->permits : 0;
    int shared_option = has_field(options, &dlock_acquire_options::shared) ? options->shared : 0;
    if (shared_option == DLOCK_DEFAULT) shared_option = 0;
    if (shared_option != 0 && shared_option != 1)
        throw error(DLOCK_INVALID_ARGUMENT, fmt::format("acquire option `shared` is {}; it must be 0, 1 or DLOCK_DEFAULT", shared_option));
    const bool shared = shared_option == 1;
    if (shared && r.permits != 0)
        throw error(DLOCK_INVALID_ARGUMENT, fmt::format("acquire of `{}`: `shared` and `permits` ({}) together; a name is either "
                                                        "a lock, held shared or exclusively, or a semaphore", name, r.permits));
    r.kind = r.permits != 0 ? DLOCK_HOLD_PERMIT : shared ? DLOCK_HOLD_SHARED : DLOCK_HOLD_EXCLUSIVE;
    if (r.kind != DLOCK_HOLD_EXCLUSIVE) {
        // A policy's `reentrant` (config defaults or `locks:`) is about exclusive locks; only the
        // caller's own reentrant = 1 asks for what a permit or a shared hold cannot be.
        if (r.reentrant && !reentrant_given) r.reentrant = false;
        if (r.reentrant)
            throw error(DLOCK_INVALID_ARGUMENT, fmt::format("acquire of `{}`: `reentrant` is for exclusive locks; a {} is "
                                                            "taken anew by each acquire (set reentrant to 0)",
                                                            name, r.kind == DLOCK_HOLD_PERMIT ? "semaphore permit" : "shared hold"));
        const uint64_t needed = r.kind == DLOCK_HOLD_PERMIT ? DLOCK_CAP_SEMAPHORE : DLOCK_CAP_SHARED;
        if (!(capabilities_ & needed))
            throw error(DLOCK_NOT_SUPPORTED,
                        fmt::format("backend `{}` has no {}{} (see `dlock backends`)", plugin_->name,
                                    r.kind == DLOCK_HOLD_PERMIT ? "semaphores" : "shared locks",
                                    plugin_->version < 2 ? fmt::format(": its plugin implements plugin ABI version {}", plugin_->version)
                                                         : std::string()));
    }
    r.cancel = has_field(options, &dlock_acquire_options::cancel) ? options->cancel : nullptr;
    return r;
}

void client_core::count_out_acquire(bool& in_flight) {
    --calls_in_flight_;
    in_flight = false;
    // Only close() waits for the count, and only after setting closed_ under the mutex.
    if (closed_) changed_.notify_all();
}

dlock_lease* client_core::new_lease(std::shared_ptr<hold> h, const resolved_acquire& r) {
    auto* lease = new dlock_lease;
    lease->client = shared_from_this();
    lease->fence = h->fence;
    lease->on_lost = r.on_lost;
    lease->on_lost_data = r.on_lost_data;
    h->leases.push_back(lease);
    lease->hold = std::move(h);
    return lease;
}

dlock_lease* client_core::reenter(const resolved_acquire& r, bool& in_flight) {
    plugin_kit::lock_guard lock(mutex_);
    if (closed_) throw error(DLOCK_CANCELLED, "the client is closed");
    auto it = reentrant_.find(std::string(r.name));
    if (it == reentrant_.end()) return nullptr;
    const std::shared_ptr<hold> held = it->second;
    // The keeper may be late (stuck in a slow renewal): validity decides, not the state it last
    // wrote. A hold whose validity is over is lost, never shared.
    if ((held->state == DLOCK_LEASE_HELD || held->state == DLOCK_LEASE_SUSPECT) && held->valid_until_ns <= clock_->now_ns())
        mark_lost(*held);
    if (held->state != DLOCK_LEASE_HELD && held->state != DLOCK_LEASE_SUSPECT) return nullptr;
    count_out_acquire(in_flight);
    return new_lease(held, r);
}

int client_core::call_plugin_acquire(const resolved_acquire& r, hold& h, int64_t deadline_ns, int64_t& sent_deadline_ns,
                                     dlock_hold*& plugin_hold, dlock_grant& grant, dlock_plugin_error& err) {
    dlock_acquire_request request{};
    request.struct_size = sizeof request;
    request.name = h.name.c_str();
    request.owner = h.owner.data();
    request.ttl_ms = r.ttl_ms;
    // A cancellable wait: at most one slice per plugin call (a try-once stays a try-once).
    request.deadline_ns = r.cancel && deadline_ns != 0
                              ? std::min(deadline_ns, detail::saturating_add(clock_->now_ns(), cancel_slice_ns))
                              : deadline_ns;
    sent_deadline_ns = request.deadline_ns;
    request.fair = r.fair ? 1 : 0;
    request.host_lease = &h;
    if (plugin_->version >= 2) {  // a version 1 table is never sent anything but an exclusive lock (checked in resolve_request)
        request.kind = r.kind;
        request.permits = r.permits;
    } else {
        request.struct_size = DLOCK_ACQUIRE_REQUEST_V1_SIZE;
    }
    grant.struct_size = sizeof grant;
    return plugin_call(err, plugin_->name, "acquire",
                       [&] { return plugin_->acquire(backend_, &request, &plugin_hold, &grant, &err); });
}

std::string client_core::refusal_of(hold& h) {
    // Never hand out a grant that is no longer a lock: one the backend reported LOST before acquire
    // returned (no lease existed yet to notify), or one whose validity ran out before the reply
    // arrived (a slow network, a stalled process). A grant without an end (a session-bound lock)
    // needs no clock read (about 20 ns of an uncontended cycle of a few microseconds).
    if (h.state == DLOCK_LEASE_LOST)
        return fmt::format("backend `{}` granted `{}` but reported it lost before the grant could be handed out", plugin_->name, h.name);
    const int64_t now = h.valid_until_ns == forever_ns ? INT64_MIN : clock_->now_ns();
    if (h.valid_until_ns > now) return std::string();
    return fmt::format("backend `{}` granted `{}` but the grant's validity was over {} ms before it arrived "
                       "(reply slower than the ttl of {} ms)",
                       plugin_->name, h.name, (now - h.valid_until_ns) / detail::ns_per_ms, h.ttl_ms);
}

dlock_lease* client_core::acquire_new_hold(const resolved_acquire& r, bool& in_flight) {
    const int64_t deadline_ns = r.wait_ms == 0 ? 0
                                : r.wait_ms == INT64_MAX ? forever_ns
                                                         : std::max<int64_t>(1, detail::saturating_add(clock_->now_ns(), detail::ms_to_ns(r.wait_ms)));
    // Why the last grant was refused, for the TIMEOUT message when no usable one came in time.
    std::string refused;
    for (;;) {
        if (r.cancelled()) throw error(DLOCK_CANCELLED, fmt::format("acquire of `{}` cancelled by its cancel token", r.name));
        // A fresh hold (and owner token) for every attempt: a refused grant's hold is given back
        // and its cookie never reused.
        auto h = std::make_shared<hold>(r.name);
        h->owner = detail::new_owner_token();
        h->ttl_ms = r.ttl_ms;
        h->renew = r.renew;
        h->reentrant = r.reentrant;
        dlock_hold* plugin_hold = nullptr;
        dlock_grant grant{};
        plugin_error err;
        int64_t sent_deadline_ns = 0;
        const int status = call_plugin_acquire(r, *h, deadline_ns, sent_deadline_ns, plugin_hold, grant, err);
        if (status != DLOCK_OK) {
            // A slice of a cancellable wait ended, not the wait: the loop's head checks the token.
            if (r.cancel && status == DLOCK_TIMEOUT && (r.cancelled() || sent_deadline_ns < deadline_ns)) continue;
            if (status == DLOCK_TIMEOUT) {
                std::string why = message_of(err, fmt::format("lock `{}` not acquired within {} ms", r.name, r.wait_ms));
                if (!refused.empty()) why += "; before that, " + refused;
                throw error(DLOCK_TIMEOUT, why);
            }
            fail_plugin_call(status, err, "acquire");
        }
        if (!plugin_hold) throw error(DLOCK_PLUGIN, fmt::format("plugin `{}` reported success from `acquire` but returned no hold", plugin_->name));

        plugin_kit::unique_lock lock(mutex_);
        h->plugin_hold = plugin_hold;
        h->fence = grant.fencing_token;
        if (grant.ttl_ms > 0) h->ttl_ms = grant.ttl_ms;
        h->valid_until_ns = grant.valid_until_ns;
        h->next_renew_ns = keeper::next_renewal_ns(h->renew && (capabilities_ & DLOCK_CAP_TTL), h->valid_until_ns, h->ttl_ms);
        remember_hold(h);
        if (closed_) {  // closed while we waited: give it back rather than hand out a lease on a closed client
            std::string why;
            release_hold(lock, h, why);
            throw error(DLOCK_CANCELLED, "the client was closed during acquire");
        }
        const bool cancelled = r.cancelled();  // the grant came after the cancel: the caller no longer wants it
        if (!cancelled) refused = refusal_of(*h);
        if (cancelled || !refused.empty()) {
            forget_hold(h);
            h->plugin_hold = nullptr;
            h->state = DLOCK_LEASE_LOST;
            lock.unlock();
            give_back_grant(plugin_hold, h->name);
            if (cancelled)
                throw error(DLOCK_CANCELLED, fmt::format("acquire of `{}` cancelled by its cancel token; the grant that "
                                                         "arrived meanwhile was given back", r.name));
            // Try again while the wait allows, after a short pause, so that a backend that loses
            // every grant at once is not spun on.
            const int64_t left_ns = deadline_ns - clock_->now_ns();
            if (left_ns <= 0)
                throw error(DLOCK_TIMEOUT, fmt::format("lock `{}` not acquired within {} ms: {}; it was given back", r.name, r.wait_ms, refused));
            clock_->sleep_until(clock_->now_ns() + std::min<int64_t>(left_ns, 10 * detail::ns_per_ms));
            continue;
        }
        // No plugin call follows: close() may go on once this section ends.
        count_out_acquire(in_flight);
        if (r.reentrant) reentrant_[h->name] = h;
        if (metrics_) {
            h->counted_held = true;
            metrics_->held_changed(+1);
        }
        wake_keeper_if_due_sooner(*h);
        return new_lease(std::move(h), r);  // the lease takes this function's reference
    }
}

void client_core::give_back_grant(dlock_hold* plugin_hold, const std::string& name) {
    plugin_error err;
    const int status = plugin_call(err, plugin_->name, "release", [&] { return plugin_->release(backend_, plugin_hold, &err); });
    if (status != DLOCK_OK && status != DLOCK_LOST)
        logger().warn("{}: giving back a refused grant of `{}` was not confirmed ({}); it expires by itself: {}", plugin_->name,
                      name, detail::status_name(status), message_of(err, ""));
    destroy_plugin_hold(plugin_hold);
}

void client_core::remember_hold(const std::shared_ptr<hold>& h) {
    h->slot = holds_.size();
    holds_.push_back(h);
}

void client_core::stop_counting_held(hold& h) {
    if (!h.counted_held) return;
    h.counted_held = false;
    metrics_->held_changed(-1);
}

void client_core::forget_hold(const std::shared_ptr<hold>& h) {
    stop_counting_held(*h);
    if (h->slot < holds_.size() && holds_[h->slot] == h) {
        holds_.back()->slot = h->slot;
        std::swap(holds_[h->slot], holds_.back());
        holds_.pop_back();
    }
    if (!h->reentrant) return;  // only a reentrant hold is in reentrant_
    auto it = reentrant_.find(h->name);
    if (it != reentrant_.end() && it->second == h) reentrant_.erase(it);
}

int client_core::release_hold(plugin_kit::unique_lock& lock, const std::shared_ptr<hold>& h, std::string& why,
                              dlock_hold** destroy_later) {
    changed_.wait(lock.std(), [&] { return !h->busy; });
    // Decided by validity: a hold whose valid_until passed is ALREADY_LOST even if the backend still
    // had it (another client may have held it meanwhile), unless an earlier attempt of this release
    // was sent while it was valid: then that attempt may be what removed the lock, and the backend's
    // answer decides, whatever validity (or the keeper, marking it LOST meanwhile) said since.
    const bool was_lost = !h->release_sent_while_valid && lost_by_validity(*h);
    if (!h->plugin_hold) return was_lost ? DLOCK_LOST : DLOCK_OK;
    if (!was_lost) h->release_sent_while_valid = true;
    h->busy = true;
    dlock_hold* plugin_hold = h->plugin_hold;
    // Let go of through the mutex itself, which the analysis follows (`lock` still says it owns it,
    // true again before it is next used); nothing between throws.
    mutex_.unlock();
    plugin_error err;
    int status = plugin_call(err, plugin_->name, "release", [&] { return plugin_->release(backend_, plugin_hold, &err); });
    mutex_.lock();
    h->busy = false;
    changed_.notify_all();
    if (metrics_) metrics_->release_finished(status == DLOCK_OK && was_lost ? DLOCK_LOST : status);
    if (status != DLOCK_OK && status != DLOCK_LOST) {
        why = message_of(err, fmt::format("backend `{}`: release of `{}` failed ({}); the outcome is unknown, retry",
                                          plugin_->name, h->name, detail::status_name(status)));
        return DLOCK_UNKNOWN;
    }
    if (status == DLOCK_LOST || was_lost) {
        h->state = DLOCK_LEASE_LOST;
        status = DLOCK_LOST;
        why = fmt::format("lock `{}` had been lost before release (expired or taken); nothing of the new holder's was touched", h->name);
    } else {
        h->state = DLOCK_LEASE_RELEASED;
    }
    forget_hold(h);
    h->plugin_hold = nullptr;
    if (destroy_later) {
        *destroy_later = plugin_hold;
        return status;
    }
    mutex_.unlock();
    destroy_plugin_hold(plugin_hold);
    mutex_.lock();
    return status;
}

void client_core::destroy_plugin_hold(dlock_hold* plugin_hold) {
    plugin_error err;
    plugin_call(err, plugin_->name, "hold_destroy", [&] { plugin_->hold_destroy(backend_, plugin_hold); return 0; });
}

void client_core::abandon_hold(const std::shared_ptr<hold>& h) {
    forget_hold(h);
    dlock_hold* plugin_hold = h->plugin_hold;
    h->plugin_hold = nullptr;
    h->state = DLOCK_LEASE_LOST;
    mutex_.unlock();  // as in release_hold: the caller's lock owns it again on return
    destroy_plugin_hold(plugin_hold);
    mutex_.lock();
}

int client_core::release(dlock_lease* lease) {
    plugin_kit::unique_lock lock(mutex_);
    if (lease->released) return lease->release_status;
    const std::shared_ptr<hold>& h = lease->hold;  // the caller's lease keeps it
    auto& leases = h->leases;
    remove_lease(leases, lease);
    int status;
    std::string why;
    dlock_hold* done_with = nullptr;  // destroyed below, once mutex_ is let go
    if (!leases.empty()) {
        // Another reentrant lease still holds it: only this handle is done.
        status = lost_by_validity(*h) ? DLOCK_LOST : DLOCK_OK;
    } else {
        status = release_hold(lock, h, why, &done_with);
        if (status == DLOCK_UNKNOWN) {
            h->leases.push_back(lease);  // still ours as far as we know; the caller may retry
            throw error(DLOCK_UNKNOWN, why);
        }
    }
    lease->released = true;
    lease->release_status = status;
    lock.unlock();
    if (done_with) destroy_plugin_hold(done_with);
    if (status == DLOCK_LOST) {
        if (why.empty()) why = fmt::format("lock `{}` had been lost before release", h->name);
        throw error(DLOCK_LOST, why);
    }
    return status;
}

int client_core::renew(dlock_lease* lease) {
    plugin_kit::unique_lock lock(mutex_);
    if (lease->released) throw error(DLOCK_INVALID_ARGUMENT, fmt::format("lease on `{}` was released", lease->hold->name));
    const std::shared_ptr<hold> h = lease->hold;
    changed_.wait(lock.std(), [&] { return !h->busy; });
    // A renewal must not bring back a hold whose validity is over, keeper late or not.
    if (lost_by_validity(*h)) throw error(DLOCK_LOST, fmt::format("lease on `{}` is lost", lease->hold->name));
    if (closed_ || !h->plugin_hold) throw error(DLOCK_CANCELLED, "the client is closed");
    h->busy = true;
    dlock_renewal renewal{h->plugin_hold, h->ttl_ms, DLOCK_UNKNOWN, 0};
    lock.unlock();
    plugin_error err;
    const int call = plugin_call(err, plugin_->name, "renew", [&] { return plugin_->renew(backend_, &renewal, 1, &err); });
    lock.lock();
    h->busy = false;
    changed_.notify_all();
    const int status = call == DLOCK_OK ? renewal.status : call;
    apply_renewal(*h, status, renewal.valid_until_ns, clock_->now_ns());
    // A keeper that scanned while this renewal was busy skipped the hold and sleeps until its old
    // validity ends: wake it for the new schedule, as a new hold does.
    wake_keeper_if_due_sooner(*h);
    if (status != DLOCK_OK)
        throw error(status, message_of(err, fmt::format("backend `{}`: renewal of `{}` not confirmed ({})", plugin_->name,
                                                        h->name, detail::status_name(status))));
    return DLOCK_OK;
}

void client_core::on_lost(dlock_lease* lease, dlock_lost_callback callback, void* user_data) {
    plugin_kit::unique_lock lock(mutex_);
    // The caller may free the previous callback's data once this returns: let a run of it finish
    // (unless this is that run, replacing itself).
    if (std::this_thread::get_id() != dispatcher_id_)
        // Through the clock, so that a test on a simulated one can tell this thread is waiting.
        while (running_callback_ == lease) clock_->wait_until(lock.std(), changed_, forever_ns);
    // Lost is decided by validity, as in state_of(), not by the keeper having woken yet (it may be
    // late on a loaded machine); marked before the new callback is in place, so that it runs here.
    if (!lease->released) lost_by_validity(*lease->hold);
    lease->on_lost = callback;
    lease->on_lost_data = user_data;
    if (!callback || lease->released || lease->lost_notified || lease->hold->state != DLOCK_LEASE_LOST) return;
    lease->lost_notified = true;
    ++lease->callbacks_running;
    lock.unlock();
    callback(lease, user_data);
    lock.lock();
    --lease->callbacks_running;
    changed_.notify_all();
}

dlock_lease_state client_core::state_of(const dlock_lease* lease) {
    plugin_kit::lock_guard lock(mutex_);
    if (lease->released) return DLOCK_LEASE_RELEASED;
    // The pollable state is exact even if the keeper has not woken yet.
    lost_by_validity(*lease->hold);
    return lease->hold->state;
}

int64_t client_core::valid_until_of(const dlock_lease* lease) {
    plugin_kit::lock_guard lock(mutex_);
    return lease->hold->valid_until_ns;
}

void client_core::destroy(dlock_lease* lease) {
    // A released lease with no callback queued or running is out of the core's reach: release()
    // took it out of its hold's leases (so mark_lost queues nothing for it) in the same critical
    // section that set `released` (after which on_lost() calls nothing), so it is freed without
    // the mutex.
    if (lease->released && lease->callbacks_running == 0) {
        delete lease;
        return;
    }
    plugin_kit::unique_lock lock(mutex_);
    if (std::this_thread::get_id() != dispatcher_id_)
        while (lease->callbacks_running != 0) clock_->wait_until(lock.std(), changed_, forever_ns);  // as in on_lost()
    else if (running_callback_ == lease)
        running_callback_ = nullptr;  // destroyed from its own callback: the dispatcher must not touch it after
    lost_queue_.erase(std::remove(lost_queue_.begin(), lost_queue_.end(), lease), lost_queue_.end());
    if (!lease->released) {
        const std::shared_ptr<hold> h = lease->hold;
        auto& leases = h->leases;
        remove_lease(leases, lease);
        if (leases.empty()) {
            std::string why;
            if (release_hold(lock, h, why) == DLOCK_UNKNOWN) {
                // Best effort only: drop our record. A TTL backend lets the lease expire; a session-bound
                // one (file) releases when the plugin frees the hold.
                logger().warn("lease on `{}` destroyed without a confirmed release: {}", h->name, why);
                abandon_hold(h);
            }
        }
    }
    lock.unlock();
    delete lease;
}

void client_core::inspect(const char* name, dlock_lock_info* info) {
    if (!name) throw error(DLOCK_INVALID_ARGUMENT, "lock name is NULL");
    if (!info) throw error(DLOCK_INVALID_ARGUMENT, "dlock_inspect: out_info is NULL");
    if (info->struct_size < DLOCK_LOCK_INFO_V1_SIZE)
        throw error(DLOCK_INVALID_ARGUMENT, fmt::format("dlock_inspect: out_info->struct_size is {}, smaller than the oldest "
                                                        "dlock_lock_info ({} bytes); initialise it with DLOCK_LOCK_INFO_INIT",
                                                        info->struct_size, DLOCK_LOCK_INFO_V1_SIZE));
    detail::validate_name(name);
    if (!plugin_->inspect) throw error(DLOCK_NOT_SUPPORTED, fmt::format("backend `{}` cannot inspect locks", plugin_->name));
    enter_call("dlock_inspect");
    const auto left = plugin_kit::scope_exit([this] { leave_call(); });
    dlock_lock_info out = DLOCK_LOCK_INFO_INIT;
    plugin_error err;
    const int status = plugin_call(err, plugin_->name, "inspect", [&] { return plugin_->inspect(backend_, name, &out, &err); });
    if (status != DLOCK_OK) fail_plugin_call(status, err, "inspect");
    out.holder[sizeof out.holder - 1] = '\0';
    // A caller built against an older header has a shorter struct: write only what it covers.
    out.struct_size = info->struct_size;
    std::memcpy(info, &out, std::min<size_t>(info->struct_size, sizeof out));
}

namespace {
// Hands each holder a plugin reports to the caller's visitor, as a struct of this build's size,
// copying what the plugin filled (its struct_size) and defaulting the rest.
struct holder_relay {
    dlock_holder_visitor visit;
    void* user_data;
    static int call(const dlock_holder_info* given, void* self_ptr) {
        auto* self = static_cast<holder_relay*>(self_ptr);
        if (!given || given->struct_size < DLOCK_HOLDER_INFO_V1_SIZE || !given->name) return 0;  // malformed: skipped
        dlock_holder_info info{};
        std::memcpy(&info, given, std::min<size_t>(given->struct_size, sizeof info));
        info.struct_size = sizeof info;
        info.holder[sizeof info.holder - 1] = '\0';
        return self->visit(&info, self->user_data);
    }
};
}  // namespace

void client_core::enter_call(const char* what) {
    ++calls_in_flight_;  // before the check, as in acquire_lease: close() either is seen or waits
    if (closed_) {
        leave_call();
        throw error(DLOCK_CANCELLED, fmt::format("{}: the client is closed", what));
    }
}

void client_core::leave_call() {
    plugin_kit::lock_guard lock(mutex_);
    --calls_in_flight_;
    if (closed_) changed_.notify_all();
}

void client_core::holders(const char* name, bool semaphore, dlock_holder_visitor visit, void* user_data) {
    if (!name) throw error(DLOCK_INVALID_ARGUMENT, "dlock_holders: name is NULL");
    if (!visit) throw error(DLOCK_INVALID_ARGUMENT, "dlock_holders: visit is NULL");
    detail::validate_name(name);
    if (plugin_->version < 2 || !plugin_->holders)
        throw error(DLOCK_NOT_SUPPORTED, fmt::format("backend `{}` cannot enumerate the holders of a lock", plugin_->name));
    enter_call("dlock_holders");
    const auto left = plugin_kit::scope_exit([this] { leave_call(); });
    holder_relay relay{visit, user_data};
    plugin_error err;
    const int status = plugin_call(err, plugin_->name, "holders", [&] {
        return plugin_->holders(backend_, name, semaphore ? 1 : 0, &holder_relay::call, &relay, &err);
    });
    if (status != DLOCK_OK) fail_plugin_call(status, err, "holders");
}

void client_core::list(const char* prefix, dlock_holder_visitor visit, void* user_data) {
    if (!visit) throw error(DLOCK_INVALID_ARGUMENT, "dlock_list: visit is NULL");
    if (!prefix) prefix = "";
    if (*prefix) detail::validate_name(prefix);
    if (plugin_->version < 2 || !plugin_->list || !(capabilities_ & DLOCK_CAP_LIST))
        throw error(DLOCK_NOT_SUPPORTED, fmt::format("backend `{}` cannot list its locks", plugin_->name));
    enter_call("dlock_list");
    const auto left = plugin_kit::scope_exit([this] { leave_call(); });
    holder_relay relay{visit, user_data};
    plugin_error err;
    const int status = plugin_call(err, plugin_->name, "list", [&] {
        return plugin_->list(backend_, prefix, &holder_relay::call, &relay, &err);
    });
    if (status != DLOCK_OK) fail_plugin_call(status, err, "list");
}

size_t client_core::break_lock(const char* name, bool semaphore) {
    if (!name) throw error(DLOCK_INVALID_ARGUMENT, "dlock_break: name is NULL");
    detail::validate_name(name);
    if (plugin_->version < 2 || !plugin_->break_lock || !(capabilities_ & DLOCK_CAP_BREAK))
        throw error(DLOCK_NOT_SUPPORTED, fmt::format("backend `{}` cannot break a lock held by another process", plugin_->name));
    enter_call("dlock_break");
    const auto left = plugin_kit::scope_exit([this] { leave_call(); });
    size_t broken = 0;
    plugin_error err;
    const int status = plugin_call(err, plugin_->name, "break_lock", [&] {
        return plugin_->break_lock(backend_, name, semaphore ? 1 : 0, &broken, &err);
    });
    if (status != DLOCK_OK) fail_plugin_call(status, err, "break");
    return broken;
}

void client_core::close() {
    plugin_kit::unique_lock lock(mutex_);
    if (closed_) return;
    closed_ = true;
    if (backend_) {
        lock.unlock();
        plugin_error err;
        plugin_call(err, plugin_->name, "interrupt", [&] { plugin_->interrupt(backend_); return 0; });
        lock.lock();
        changed_.wait(lock.std(), [&] { return calls_in_flight_ == 0; });
        const std::vector<std::shared_ptr<hold>> remaining(holds_.begin(), holds_.end());
        for (const auto& h : remaining) {
            std::string why;
            if (release_hold(lock, h, why) == DLOCK_UNKNOWN) {
                logger().warn("closing the client: {}", why);
                abandon_hold(h);
            }
        }
    }
    stop_keeper_ = true;
    clock_->notify_all(keeper_wake_);
    // The dispatcher runs the callbacks already queued (their leases were lost before the close),
    // then exits.
    stop_dispatcher_ = true;
    dispatcher_wake_.notify_all();
    lock.unlock();
    if (keeper_.joinable()) keeper_.join();
    if (dispatcher_.joinable()) {
        if (dispatcher_id_ == std::this_thread::get_id()) dispatcher_.detach();
        else dispatcher_.join();
    }
    if (backend_) {
        plugin_error err;
        plugin_call(err, plugin_->name, "destroy", [&] { plugin_->destroy(backend_); return 0; });
        backend_ = nullptr;
    }
}

}  // namespace dlock::core

// dlock.hpp — the header-only C++17 API over the C ABI of dlock.h.
//
//   dlock::client   one configured backend (move-only; closes on destruction)
//   dlock::lease    proof of holding a lock (move-only; released on destruction)
//   dlock::mutex    a named distributed lock meeting TimedLockable, for std::unique_lock,
//                   std::scoped_lock and try_lock_for
//   dlock::shared_mutex  a named lock held shared or exclusively, meeting SharedTimedLockable, for
//                   std::shared_lock as well (needs DLOCK_CAP_SHARED)
//   dlock::semaphore  N permits under one name; each acquire returns a permit, a lease released on
//                   destruction (needs DLOCK_CAP_SEMAPHORE)
//   dlock::cancellation  a cancel handle for waits (acquire_options::with_cancel, mutex::lock(c))
//
// Errors: functions throw std::system_error whose code is in dlock::category(). client::open,
// client::acquire, lease::renew and lease::release also have an overload taking std::error_code&
// that never throws; the others (from_yaml, inspect, on_lost, ...) only throw. Durations are
// std::chrono; time points are std::chrono::steady_clock (CLOCK_MONOTONIC on Linux, the clock of
// every dlock deadline).
// Thread safety is that of the C ABI: a client may be shared by threads; a lease or mutex object
// is used by one thread at a time.
#pragma once

#include <dlock/dlock.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace dlock {

// ---- errors ------------------------------------------------------------------------------------

enum class errc {
    timeout = DLOCK_TIMEOUT,
    invalid_argument = DLOCK_INVALID_ARGUMENT,
    config = DLOCK_CONFIG,
    plugin = DLOCK_PLUGIN,
    not_supported = DLOCK_NOT_SUPPORTED,
    unavailable = DLOCK_UNAVAILABLE,
    backend = DLOCK_BACKEND,
    unknown = DLOCK_UNKNOWN,
    lost = DLOCK_LOST,
    cancelled = DLOCK_CANCELLED,
    internal = DLOCK_INTERNAL,
    permission = DLOCK_PERMISSION,
};

// The category of dlock statuses; message() gives the status's constant name.
inline const std::error_category& category() noexcept {
    struct dlock_category final : std::error_category {
        const char* name() const noexcept override { return "dlock"; }
        std::string message(int status) const override { return dlock_status_name(status); }
    };
    static const dlock_category instance;
    return instance;
}

inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), category()}; }

namespace detail {

// The error of a non-OK status, with the thread's detail text.
inline std::error_code to_error_code(int status) noexcept { return {status, category()}; }

[[noreturn]] inline void throw_status(int status) { throw std::system_error(to_error_code(status), dlock_last_error()); }

inline void throw_if(const std::error_code& ec) {
    if (ec) throw std::system_error(ec, ec.category() == category() ? dlock_last_error() : "");
}

inline int64_t to_ms(std::chrono::nanoseconds d) noexcept {
    if (d <= std::chrono::nanoseconds::zero()) return 0;
    // Round up: a wait of 1.5 ms must not become 1 ms.
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(d).count();
    return ms;
}

// `name` as a C string; a NUL inside it would cut the name short, so it is refused.
inline std::string c_name(std::string_view name) {
    std::string z(name);
    if (z.find('\0') != std::string::npos)
        throw std::system_error(make_error_code(errc::invalid_argument), "a dlock name must not contain a NUL byte");
    return z;
}

inline std::chrono::steady_clock::time_point from_monotonic_ns(int64_t ns) noexcept {
    if (ns == std::numeric_limits<int64_t>::max()) return std::chrono::steady_clock::time_point::max();
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(ns));
}

}  // namespace detail

// ---- options -----------------------------------------------------------------------------------

// A wait without limit (until acquired or the client closes).
inline constexpr std::chrono::milliseconds forever = std::chrono::milliseconds::max();

// A cancel handle for waits, as std::stop_source is for threads (C++17 has none): cancel() from
// any thread ends every acquire waiting with it with errc::cancelled, and makes later ones given it
// fail at once; other waits go on. It stays cancelled. Must outlive the acquires given it; not
// copyable or movable, since they hold its address. dlock.h tells what a cancellable wait costs.
class cancellation {
public:
    cancellation() {
        if (const int status = dlock_cancel_token_create(&token_); status != DLOCK_OK) detail::throw_status(status);
    }
    ~cancellation() { dlock_cancel_token_destroy(token_); }
    cancellation(const cancellation&) = delete;
    cancellation& operator=(const cancellation&) = delete;

    void cancel() noexcept { dlock_cancel_token_cancel(token_); }
    bool cancelled() const noexcept { return dlock_cancel_token_is_cancelled(token_) != 0; }
    dlock_cancel_token* handle() const noexcept { return token_; }

private:
    dlock_cancel_token* token_ = nullptr;
};

// Unset fields come from the lock's policy in the config, then its defaults.
struct acquire_options {
    std::optional<std::chrono::milliseconds> wait;  // zero = try once; dlock::forever = no limit
    std::optional<std::chrono::milliseconds> ttl;
    std::optional<bool> renew;
    std::optional<bool> fair;
    std::optional<bool> reentrant;
    dlock_cancel_token* cancel = nullptr;  // from a dlock::cancellation (with_cancel); none by default
    // 0: the name is a lock. N >= 1: take one of the N permits of the semaphore of that name (a
    // semaphore and a lock of one name are different objects); every client of it gives the same N.
    uint32_t permits = 0;
    // Hold the lock shared: with other shared holders, never with an exclusive one. Not with permits.
    bool shared = false;

    acquire_options& with_wait(std::chrono::milliseconds d) { wait = d; return *this; }
    acquire_options& with_ttl(std::chrono::milliseconds d) { ttl = d; return *this; }
    acquire_options& with_renew(bool on) { renew = on; return *this; }
    acquire_options& with_fair(bool on) { fair = on; return *this; }
    acquire_options& with_reentrant(bool on) { reentrant = on; return *this; }
    // The wait ends with errc::cancelled when `c` is cancelled. `c` must outlive the acquire.
    acquire_options& with_cancel(const cancellation& c) { cancel = c.handle(); return *this; }
    acquire_options& with_permits(uint32_t n) { permits = n; return *this; }
    acquire_options& with_shared(bool on) { shared = on; return *this; }

    dlock_acquire_options to_c() const noexcept {
        dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
        if (wait) o.wait_ms = *wait == forever ? DLOCK_WAIT_FOREVER : wait->count() < 0 ? 0 : wait->count();
        if (ttl) o.ttl_ms = ttl->count();
        if (renew) o.renew = *renew ? 1 : 0;
        if (fair) o.fair = *fair ? 1 : 0;
        if (reentrant) o.reentrant = *reentrant ? 1 : 0;
        o.cancel = cancel;
        o.permits = permits;
        o.shared = shared ? 1 : 0;
        return o;
    }
};

enum class lease_state { held = DLOCK_LEASE_HELD, suspect = DLOCK_LEASE_SUSPECT, lost = DLOCK_LEASE_LOST, released = DLOCK_LEASE_RELEASED };

// The three outcomes of a release.
enum class release_outcome {
    released,      // released (or released before)
    already_lost,  // had expired or been taken; nothing of the new holder's was touched
    unknown,       // the backend could not be reached; safe to retry
};

struct lock_info {
    bool held = false;
    std::string holder;                            // owner token, if known
    uint64_t fencing_token = 0;                    // last issued, 0 if none/unknown
    std::optional<std::chrono::milliseconds> ttl_left;  // unset without ttl
};

// How a holder holds what it holds.
enum class hold_kind { exclusive = DLOCK_HOLD_EXCLUSIVE, shared = DLOCK_HOLD_SHARED, permit = DLOCK_HOLD_PERMIT };

// One current holder, as client::holders and client::list report it.
struct holder_info {
    std::string name;                              // the lock's or semaphore's name
    hold_kind kind = hold_kind::exclusive;
    uint32_t permits = 0;                          // permit: the semaphore's limit as stored (0 unknown)
    std::string holder;                            // owner token, if known
    uint64_t fencing_token = 0;                    // 0 if none/unknown
    std::optional<std::chrono::milliseconds> ttl_left;  // unset without ttl or unknown
};

// ---- lease -------------------------------------------------------------------------------------

class lease {
public:
    lease() noexcept = default;
    explicit lease(dlock_lease* handle) noexcept : handle_(handle) {}
    lease(lease&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)), lost_(std::move(other.lost_)) {}
    lease& operator=(lease&& other) noexcept {
        if (this != &other) {
            reset();
            handle_ = std::exchange(other.handle_, nullptr);
            lost_ = std::move(other.lost_);
        }
        return *this;
    }
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    // Releases the lock if still held (best effort; use release() to learn the outcome).
    ~lease() { reset(); }

    explicit operator bool() const noexcept { return handle_ != nullptr; }
    dlock_lease* handle() const noexcept { return handle_; }

    std::string_view name() const noexcept { return dlock_lease_name(handle_); }
    std::string_view owner() const noexcept { return dlock_lease_owner(handle_); }
    // Strictly increasing per name across holders; 0 when the backend has no fencing.
    uint64_t fencing_token() const noexcept { return dlock_lease_fencing_token(handle_); }
    // time_point::max() for leases that never expire on their own.
    std::chrono::steady_clock::time_point valid_until() const noexcept {
        return detail::from_monotonic_ns(dlock_lease_valid_until(handle_));
    }
    lease_state state() const noexcept { return static_cast<lease_state>(dlock_lease_state_get(handle_)); }
    bool held() const noexcept {
        const auto s = state();
        return s == lease_state::held || s == lease_state::suspect;
    }

    // Calls `callback` once, from the client's callback thread, when the lease becomes LOST (at
    // once, from this thread, if it already is). It may block without delaying renewals, but it
    // holds up the client's later callbacks meanwhile. It must not destroy this lease or close the
    // client. Calling on_lost again replaces the callback, safely even while the previous one runs
    // (from inside it, too): a running callback is kept alive until it returns.
    void on_lost(std::function<void()> callback) {
        if (!lost_) lost_ = std::make_unique<lost_slot>();
        {
            std::lock_guard<std::mutex> guard(lost_->mutex);
            lost_->callback = std::make_shared<std::function<void()>>(std::move(callback));
        }
        const int status = dlock_lease_on_lost(handle_, &lease::call_lost, lost_.get());
        if (status != DLOCK_OK) detail::throw_status(status);
    }

    void renew() {
        std::error_code ec;
        renew(ec);
        detail::throw_if(ec);
    }
    void renew(std::error_code& ec) noexcept {
        const int status = dlock_lease_renew(handle_);
        ec = status == DLOCK_OK ? std::error_code() : detail::to_error_code(status);
    }

    // Releases; never throws for the three outcomes. Throws std::system_error only for misuse
    // (an empty lease).
    release_outcome release() {
        std::error_code ec;
        const auto outcome = release(ec);
        if (ec) detail::throw_if(ec);
        return outcome;
    }
    release_outcome release(std::error_code& ec) noexcept {
        ec.clear();
        if (!handle_) {
            ec = make_error_code(errc::invalid_argument);
            return release_outcome::unknown;
        }
        switch (dlock_lease_release(handle_)) {
        case DLOCK_OK: return release_outcome::released;
        case DLOCK_LOST: return release_outcome::already_lost;
        default: return release_outcome::unknown;
        }
    }

private:
    // The current lost callback. A run holds its own reference, so replacing the callback never
    // frees one that is running.
    struct lost_slot {
        std::mutex mutex;
        std::shared_ptr<std::function<void()>> callback;
    };
    static void call_lost(dlock_lease*, void* user) {
        auto* slot = static_cast<lost_slot*>(user);
        std::shared_ptr<std::function<void()>> callback;
        {
            std::lock_guard<std::mutex> guard(slot->mutex);
            callback = slot->callback;
        }
        if (callback && *callback) (*callback)();
    }
    void reset() noexcept {
        dlock_lease_destroy(std::exchange(handle_, nullptr));  // waits for a running callback
        lost_.reset();
    }

    dlock_lease* handle_ = nullptr;
    // On the heap so its address, given to the C ABI, survives moves of the lease.
    std::unique_ptr<lost_slot> lost_;
};

// ---- client ------------------------------------------------------------------------------------

class client {
public:
    client() noexcept = default;
    explicit client(dlock_client* handle) noexcept : handle_(handle) {}
    client(client&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    client& operator=(client&& other) noexcept {
        if (this != &other) {
            dlock_client_close(handle_);
            handle_ = std::exchange(other.handle_, nullptr);
        }
        return *this;
    }
    client(const client&) = delete;
    client& operator=(const client&) = delete;
    // Closes: waits in other threads are cancelled and held leases released.
    ~client() { dlock_client_close(handle_); }

    // A config path, a DSN, or empty for $DLOCK_CONFIG / the embedded default (dlock_client_open).
    static client open(const std::string& config = {}) {
        std::error_code ec;
        client c = open(config, ec);
        detail::throw_if(ec);
        return c;
    }
    static client open(const std::string& config, std::error_code& ec) noexcept {
        dlock_client* handle = nullptr;
        const int status = dlock_client_open(config.c_str(), &handle);
        ec = status == DLOCK_OK ? std::error_code() : detail::to_error_code(status);
        return client(status == DLOCK_OK ? handle : nullptr);
    }
    // From YAML text; `origin` names it in error messages.
    static client from_yaml(const std::string& yaml, const std::string& origin = "<yaml text>") {
        dlock_client* handle = nullptr;
        const int status = dlock_client_open_yaml(yaml.c_str(), origin.c_str(), &handle);
        if (status != DLOCK_OK) detail::throw_status(status);
        return client(handle);
    }

    explicit operator bool() const noexcept { return handle_ != nullptr; }
    dlock_client* handle() const noexcept { return handle_; }
    std::string_view backend() const noexcept { return dlock_client_backend(handle_); }
    uint64_t capabilities() const noexcept { return dlock_client_capabilities(handle_); }
    bool has(uint64_t capability) const noexcept { return (capabilities() & capability) == capability; }

    // Acquires `name`. Throws std::system_error, with errc::timeout when not acquired in time.
    lease acquire(std::string_view name, const acquire_options& options = {}) {
        std::error_code ec;
        lease l = acquire(name, options, ec);
        detail::throw_if(ec);
        return l;
    }
    // Never throws; an empty lease and ec == errc::timeout when not acquired in time.
    lease acquire(std::string_view name, const acquire_options& options, std::error_code& ec) noexcept {
        try {
            const std::string name_z(name);
            if (name_z.size() != std::char_traits<char>::length(name_z.c_str())) {
                ec = make_error_code(errc::invalid_argument);
                return lease();
            }
            const dlock_acquire_options o = options.to_c();
            dlock_lease* handle = nullptr;
            const int status = dlock_acquire(handle_, name_z.c_str(), &o, &handle);
            ec = status == DLOCK_OK ? std::error_code() : detail::to_error_code(status);
            return lease(status == DLOCK_OK ? handle : nullptr);
        } catch (...) {
            ec = make_error_code(errc::internal);
            return lease();
        }
    }
    // Tries once (or waits options.wait): nullopt when not acquired in time; throws other errors.
    std::optional<lease> try_acquire(std::string_view name, acquire_options options = {}) {
        if (!options.wait) options.wait = std::chrono::milliseconds(0);
        std::error_code ec;
        lease l = acquire(name, options, ec);
        if (ec == make_error_code(errc::timeout)) return std::nullopt;
        detail::throw_if(ec);
        return std::optional<lease>(std::move(l));
    }

    lock_info inspect(std::string_view name) {
        dlock_lock_info info = DLOCK_LOCK_INFO_INIT;
        const std::string name_z(name);
        const int status = dlock_inspect(handle_, name_z.c_str(), &info);
        if (status != DLOCK_OK) detail::throw_status(status);
        lock_info out;
        out.held = info.held != 0;
        out.holder = info.holder;
        out.fencing_token = info.fencing_token;
        if (info.ttl_left_ms >= 0) out.ttl_left = std::chrono::milliseconds(info.ttl_left_ms);
        return out;
    }

    // Every current holder of the lock `name` (its exclusive or shared holders) or, with
    // semaphore = true, every permit holder of the semaphore `name`; empty when free.
    std::vector<holder_info> holders(std::string_view name, bool semaphore = false) {
        const std::string name_z = detail::c_name(name);
        holder_collector collected;
        const int status = dlock_holders(handle_, name_z.c_str(), semaphore ? 1 : 0, &holder_collector::visit, &collected);
        return collected.take(status);
    }
    // Every holder of every lock and semaphore whose name starts with `prefix` (all when empty);
    // needs DLOCK_CAP_LIST (else errc::not_supported).
    std::vector<holder_info> list(std::string_view prefix = {}) {
        const std::string prefix_z = detail::c_name(prefix);
        holder_collector collected;
        const int status = dlock_list(handle_, prefix_z.c_str(), &holder_collector::visit, &collected);
        return collected.take(status);
    }
    // An administrator's forced release of every holder of the lock (or of every permit of the
    // semaphore) `name`, fenced; returns how many holds were removed. Needs DLOCK_CAP_BREAK;
    // errc::permission when this identity may not remove other holders' locks.
    size_t break_lock(std::string_view name, bool semaphore = false) {
        const std::string name_z = detail::c_name(name);
        size_t broken = 0;
        if (const int status = dlock_break(handle_, name_z.c_str(), semaphore ? 1 : 0, &broken); status != DLOCK_OK)
            detail::throw_status(status);
        return broken;
    }

    void close() noexcept { dlock_client_close(std::exchange(handle_, nullptr)); }

private:
    // Gathers what a dlock_holder_visitor is given. Nothing may be thrown through the C caller, so
    // a failure (out of memory) stops the visit and is rethrown by take().
    struct holder_collector {
        std::vector<holder_info> holders;
        std::exception_ptr failure;

        static int visit(const dlock_holder_info* info, void* self_ptr) noexcept {
            auto* self = static_cast<holder_collector*>(self_ptr);
            try {
                holder_info h;
                h.name = info->name ? info->name : "";
                h.kind = static_cast<hold_kind>(info->kind);
                h.permits = info->permits;
                h.holder.assign(info->holder, strnlen(info->holder, sizeof info->holder));
                h.fencing_token = info->fencing_token;
                if (info->ttl_left_ms >= 0) h.ttl_left = std::chrono::milliseconds(info->ttl_left_ms);
                self->holders.push_back(std::move(h));
                return 0;
            } catch (...) {
                self->failure = std::current_exception();
                return 1;
            }
        }
        std::vector<holder_info> take(int status) {
            if (status != DLOCK_OK) detail::throw_status(status);
            if (failure) std::rethrow_exception(failure);
            return std::move(holders);
        }
    };

    dlock_client* handle_ = nullptr;
};

// ---- mutex -------------------------------------------------------------------------------------

// A named distributed lock meeting TimedLockable. lock() waits without limit; try_lock() tries
// once. The client must outlive the mutex. Several threads may share one mutex object: the lease
// is stored under an internal std::mutex that is never held while waiting for the lock.
class mutex {
public:
    mutex(client& c, std::string name, acquire_options options = {})
        : client_(&c), name_(std::move(name)), options_(std::move(options)) {}
    mutex(const mutex&) = delete;
    mutex& operator=(const mutex&) = delete;

    void lock() { store(client_->acquire(name_, acquire_options(options_).with_wait(forever))); }
    // Waits until acquired or `c` is cancelled: then throws std::system_error with errc::cancelled.
    void lock(const cancellation& c) {
        store(client_->acquire(name_, acquire_options(options_).with_wait(forever).with_cancel(c)));
    }
    bool try_lock() { return try_for(std::chrono::milliseconds(0)); }
    template <typename Rep, typename Period>
    bool try_lock_for(const std::chrono::duration<Rep, Period>& d) {
        return try_for(std::chrono::duration_cast<std::chrono::nanoseconds>(d));
    }
    // As try_lock_for(d), and throws std::system_error with errc::cancelled when `c` is cancelled.
    template <typename Rep, typename Period>
    bool try_lock_for(const std::chrono::duration<Rep, Period>& d, const cancellation& c) {
        return try_for(std::chrono::duration_cast<std::chrono::nanoseconds>(d), &c);
    }
    template <typename Clock, typename Duration>
    bool try_lock_until(const std::chrono::time_point<Clock, Duration>& t) {
        return try_for(std::chrono::duration_cast<std::chrono::nanoseconds>(t - Clock::now()));
    }
    // Releases; never throws. Call current_lease().release() first to learn the outcome.
    void unlock() noexcept {
        lease taken;
        {
            std::lock_guard<std::mutex> guard(guard_);
            taken = std::move(lease_);
        }
        std::error_code ec;
        if (taken) taken.release(ec);
    }

    const std::string& name() const noexcept { return name_; }
    // The fencing token of the current hold (0 when not held or without fencing).
    uint64_t fencing_token() const {
        std::lock_guard<std::mutex> guard(guard_);
        return lease_ ? lease_.fencing_token() : 0;
    }
    // The current lease (empty when not held). Not to be moved from while the mutex is locked.
    dlock::lease& current_lease() noexcept { return lease_; }

private:
    bool try_for(std::chrono::nanoseconds d, const cancellation* c = nullptr) {
        std::error_code ec;
        acquire_options o = acquire_options(options_).with_wait(std::chrono::milliseconds(detail::to_ms(d)));
        if (c) o.with_cancel(*c);
        lease l = client_->acquire(name_, o, ec);
        if (ec == make_error_code(errc::timeout)) return false;
        detail::throw_if(ec);
        store(std::move(l));
        return true;
    }
    void store(lease l) {
        std::lock_guard<std::mutex> guard(guard_);
        lease_ = std::move(l);
    }

    client* client_;
    std::string name_;
    acquire_options options_;
    mutable std::mutex guard_;
    dlock::lease lease_;
};

// ---- shared_mutex ------------------------------------------------------------------------------

// A named distributed lock that is held either shared — by any number of holders at once, in any
// processes — or exclusively by one, meeting SharedTimedLockable (and so TimedLockable): for
// std::shared_lock, std::unique_lock and std::scoped_lock. lock() and lock_shared() wait without
// limit; try_lock() and try_lock_shared() try once. Needs DLOCK_CAP_SHARED (else the locking calls
// throw std::system_error with errc::not_supported). The client must outlive the object.
// Several threads may share one object: each shared hold is a lease of its own, kept under an
// internal std::mutex that is never held while waiting; unlock_shared() releases one the calling
// thread took (or, called from another thread, any one: the holds are alike). Whether a waiting
// exclusive acquirer stops new shared ones (writer preference) is the backend's, stated in its docs.
class shared_mutex {
public:
    // `options` as for every acquire (its permits and shared are ignored; reentrant applies to
    // the exclusive hold only).
    shared_mutex(client& c, std::string name, acquire_options options = {})
        : client_(&c), name_(std::move(name)), options_(std::move(options)) {
        options_.shared = false;
        options_.permits = 0;
    }
    shared_mutex(const shared_mutex&) = delete;
    shared_mutex& operator=(const shared_mutex&) = delete;

    // ---- exclusive ----
    void lock() { store_exclusive(client_->acquire(name_, acquire_options(options_).with_wait(forever))); }
    bool try_lock() { return try_for(std::chrono::nanoseconds::zero(), false); }
    template <typename Rep, typename Period>
    bool try_lock_for(const std::chrono::duration<Rep, Period>& d) {
        return try_for(std::chrono::duration_cast<std::chrono::nanoseconds>(d), false);
    }
    template <typename Clock, typename Duration>
    bool try_lock_until(const std::chrono::time_point<Clock, Duration>& t) {
        return try_for(std::chrono::duration_cast<std::chrono::nanoseconds>(t - Clock::now()), false);
    }
    // Releases the exclusive hold; never throws.
    void unlock() noexcept {
        lease taken;
        {
            std::lock_guard<std::mutex> guard(guard_);
            taken = std::move(exclusive_);
        }
        std::error_code ec;
        if (taken) taken.release(ec);
    }

    // ---- shared ----
    void lock_shared() { store_shared(client_->acquire(name_, shared_options().with_wait(forever))); }
    bool try_lock_shared() { return try_for(std::chrono::nanoseconds::zero(), true); }
    template <typename Rep, typename Period>
    bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& d) {
        return try_for(std::chrono::duration_cast<std::chrono::nanoseconds>(d), true);
    }
    template <typename Clock, typename Duration>
    bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration>& t) {
        return try_for(std::chrono::duration_cast<std::chrono::nanoseconds>(t - Clock::now()), true);
    }
    // Releases one shared hold (the calling thread's latest if it has one); never throws.
    void unlock_shared() noexcept {
        lease taken;
        {
            std::lock_guard<std::mutex> guard(guard_);
            if (shared_.empty()) return;
            auto it = shared_.end();
            for (auto i = shared_.begin(); i != shared_.end(); ++i)
                if (i->first == std::this_thread::get_id()) it = i;
            if (it == shared_.end()) it = std::prev(shared_.end());
            taken = std::move(it->second);
            shared_.erase(it);
        }
        std::error_code ec;
        taken.release(ec);
    }

    const std::string& name() const noexcept { return name_; }
    // The fencing token of the exclusive hold (0 when not held exclusively or without fencing).
    uint64_t fencing_token() const {
        std::lock_guard<std::mutex> guard(guard_);
        return exclusive_ ? exclusive_.fencing_token() : 0;
    }
    // How many shared holds this object has now.
    size_t shared_holds() const {
        std::lock_guard<std::mutex> guard(guard_);
        return shared_.size();
    }

private:
    acquire_options shared_options() const {
        acquire_options o = acquire_options(options_).with_shared(true);
        o.reentrant.reset();  // each shared hold is taken anew
        return o;
    }
    bool try_for(std::chrono::nanoseconds d, bool shared) {
        std::error_code ec;
        acquire_options o = shared ? shared_options() : acquire_options(options_);
        o.with_wait(std::chrono::milliseconds(detail::to_ms(d)));
        lease l = client_->acquire(name_, o, ec);
        if (ec == make_error_code(errc::timeout)) return false;
        detail::throw_if(ec);
        if (shared) store_shared(std::move(l));
        else store_exclusive(std::move(l));
        return true;
    }
    void store_exclusive(lease l) {
        std::lock_guard<std::mutex> guard(guard_);
        exclusive_ = std::move(l);
    }
    void store_shared(lease l) {
        std::lock_guard<std::mutex> guard(guard_);
        shared_.emplace_back(std::this_thread::get_id(), std::move(l));
    }

    client* client_;
    std::string name_;
    acquire_options options_;
    mutable std::mutex guard_;
    lease exclusive_;
    std::vector<std::pair<std::thread::id, lease>> shared_;
};

// ---- semaphore ---------------------------------------------------------------------------------

// A permit of a semaphore: a lease like any other (renewed, lost-signalled, released on
// destruction; release() reports the outcome).
using permit = lease;

// The counting semaphore `name` with N permits: at most N holders at once, across processes. Each
// acquire takes one permit and returns it as a dlock::permit. Every client of one semaphore must
// give the same N; where the backend stores N, another N is refused with errc::invalid_argument.
// A semaphore and a lock of the same name are different objects. Needs DLOCK_CAP_SEMAPHORE (else
// the acquires throw std::system_error with errc::not_supported). The client must outlive it.
// Thread-safe: it holds no state besides its name and options.
class semaphore {
public:
    // Throws std::system_error with errc::invalid_argument when `permits` is 0.
    semaphore(client& c, std::string name, uint32_t permits, acquire_options options = {})
        : client_(&c), name_(std::move(name)), options_(std::move(options)) {
        if (permits == 0)
            throw std::system_error(make_error_code(errc::invalid_argument),
                                    "dlock::semaphore `" + name_ + "`: permits is 0; a semaphore has at least 1");
        options_.permits = permits;
        options_.shared = false;
    }

    // Waits without limit for a permit.
    permit acquire() const { return client_->acquire(name_, acquire_options(options_).with_wait(forever)); }
    // Waits until `c` is cancelled: then throws std::system_error with errc::cancelled.
    permit acquire(const cancellation& c) const {
        return client_->acquire(name_, acquire_options(options_).with_wait(forever).with_cancel(c));
    }
    // Tries once: nullopt when every permit is taken.
    std::optional<permit> try_acquire() const { return try_for(std::chrono::nanoseconds::zero()); }
    template <typename Rep, typename Period>
    std::optional<permit> try_acquire_for(const std::chrono::duration<Rep, Period>& d) const {
        return try_for(std::chrono::duration_cast<std::chrono::nanoseconds>(d));
    }
    template <typename Clock, typename Duration>
    std::optional<permit> try_acquire_until(const std::chrono::time_point<Clock, Duration>& t) const {
        return try_for(std::chrono::duration_cast<std::chrono::nanoseconds>(t - Clock::now()));
    }

    const std::string& name() const noexcept { return name_; }
    uint32_t permits() const noexcept { return options_.permits; }
    // The current permit holders.
    std::vector<holder_info> holders() const { return client_->holders(name_, true); }

private:
    std::optional<permit> try_for(std::chrono::nanoseconds d) const {
        std::error_code ec;
        permit p = client_->acquire(name_, acquire_options(options_).with_wait(std::chrono::milliseconds(detail::to_ms(d))), ec);
        if (ec == make_error_code(errc::timeout)) return std::nullopt;
        detail::throw_if(ec);
        return std::optional<permit>(std::move(p));
    }

    client* client_;
    std::string name_;
    acquire_options options_;
};

}  // namespace dlock

namespace std {
template <>
struct is_error_code_enum<dlock::errc> : true_type {};
}  // namespace std

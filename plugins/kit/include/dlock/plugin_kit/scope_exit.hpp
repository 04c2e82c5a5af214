// dlock/plugin_kit/scope_exit.hpp — runs a callable when the scope it was made in is left, by return
// or by exception; the one guard for "undo this on every way out" (unwatch, leave a queue, give a
// slot back, close a descriptor). `release()` keeps the action from running (the work it undoes was
// kept). The callable must not throw: it runs from a destructor.
//
//     auto unwatch = dlock::plugin_kit::scope_exit([&] { b.unwatch(w); });
//     ...
//     unwatch.release();  // only when the watch is to outlive this scope
#pragma once

#include <type_traits>
#include <utility>

namespace dlock::plugin_kit {

template <class F>
class scope_exit {
public:
    explicit scope_exit(F action) noexcept(std::is_nothrow_move_constructible_v<F>) : action_(std::move(action)) {}
    scope_exit(scope_exit&& other) noexcept(std::is_nothrow_move_constructible_v<F>)
        : action_(std::move(other.action_)), armed_(std::exchange(other.armed_, false)) {}
    scope_exit(const scope_exit&) = delete;
    scope_exit& operator=(const scope_exit&) = delete;
    scope_exit& operator=(scope_exit&&) = delete;
    ~scope_exit() {
        if (armed_) action_();
    }

    // The action will not run.
    void release() noexcept { armed_ = false; }

private:
    F action_;
    bool armed_ = true;
};

template <class F>
scope_exit(F) -> scope_exit<F>;

}  // namespace dlock::plugin_kit

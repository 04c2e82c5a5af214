// firewall.hpp — what every C entry point of libdlock shares: the thread's last error text and the
// exception firewall that turns detail::error into a dlock_status plus that text.
#pragma once

#include "dlock_internal/common.hpp"

#include <new>
#include <string>

namespace dlock::c_abi {

// The text of dlock_last_error(): one per thread.
inline thread_local std::string last_error;

inline int fail(int status, const char* message) noexcept {
    try {
        last_error = message;
    } catch (...) {
        // Out of memory while recording an error: keep the status.
    }
    return status;
}

// Runs `body` (which returns a dlock_status); no exception leaves.
template <typename F>
int firewall(F&& body) noexcept {
    try {
        return body();
    } catch (const detail::error& e) {
        return fail(e.status(), e.what());
    } catch (const std::bad_alloc&) {
        return fail(DLOCK_INTERNAL, "out of memory");
    } catch (const std::exception& e) {
        return fail(DLOCK_INTERNAL, e.what());
    } catch (...) {
        return fail(DLOCK_INTERNAL, "unknown internal error");
    }
}

}  // namespace dlock::c_abi

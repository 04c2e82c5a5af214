// The C ABI of dlock's log hook (dlock.h, "logging").
#include "dlock_internal/log.hpp"
#include "firewall.hpp"

#include <dlock/dlock.h>

extern "C" int dlock_set_log_handler(dlock_log_handler handler, void* user_data) {
    return dlock::c_abi::firewall([&] {
        if (!dlock::core::set_log_handler(handler, user_data))
            throw dlock::detail::error(DLOCK_INVALID_ARGUMENT,
                                       "dlock_set_log_handler: called from inside a log handler, which must not call dlock; "
                                       "the handler was not changed");
        return DLOCK_OK;
    });
}

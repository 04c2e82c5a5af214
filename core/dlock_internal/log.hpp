// log.hpp — where dlock's log lines go: stderr, or the handler the application installed with
// dlock_set_log_handler (dlock.h gives its contract: one line at a time, never re-entered).
#pragma once

#include <dlock/dlock.h>

#include <memory>

namespace spdlog {
class logger;
namespace sinks {
class sink;
}  // namespace sinks
}  // namespace spdlog

namespace dlock::core {

// The sink of dlock's logger: the installed handler, or stderr when there is none.
std::shared_ptr<spdlog::sinks::sink> log_sink();

// dlock's own logger: stderr or the application's handler (log_sink), level from $DLOCK_LOG (debug,
// info, warn, error, off; default warn). Not registered in spdlog's global registry, so it never
// clashes with the application's loggers.
spdlog::logger& logger();

// Installs `handler` (NULL: stderr again). Once it returns, the previous handler is not running and
// is never called again. False, and nothing changed, when called from inside a handler.
bool set_log_handler(dlock_log_handler handler, void* user_data);

}  // namespace dlock::core

// dlock/plugin_kit.hpp — the plugin kit: what a backend plugin written in C++ needs beside the plugin
// ABI (dlock/plugin.h), in one include. Header-only C++17; a plugin built with it links nothing of
// dlock (CMake: dlock::plugin_kit; pkg-config: the cflags of `dlock`).
//   support.hpp  the failure type, the exception firewall for entry points, option lookup, negotiation
//   clock.hpp    the ABI's clock (CLOCK_MONOTONIC ns), the "forever" deadline, saturating ms → ns
//   waker.hpp    waiters woken through a server's push channel (pub/sub, LISTEN/NOTIFY)
//   scope_exit.hpp  an action run on every way out of a scope (the one undo guard)
//   thread_safety.hpp  clang's thread-safety annotations and an annotated mutex and locks
// docs/abi.md ("Writing a plugin") shows a whole plugin built with it.
#pragma once

#include <dlock/plugin_kit/clock.hpp>
#include <dlock/plugin_kit/plugin_struct.hpp>
#include <dlock/plugin_kit/scope_exit.hpp>
#include <dlock/plugin_kit/support.hpp>
#include <dlock/plugin_kit/thread_safety.hpp>
#include <dlock/plugin_kit/waker.hpp>

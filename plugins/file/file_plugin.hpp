// file_plugin.hpp — the `file` backend, built into libdlock. Its negotiation function has its own
// name (and hidden visibility) so it never clashes with a loadable plugin's exported symbol.
#pragma once

#include <dlock/plugin.h>

#include <string>
#include <string_view>

extern "C" int dlock_file_plugin_negotiate(uint32_t host_max_version, const dlock_plugin** out_plugin,
                                           uint32_t* out_min_version);

namespace dlock::file_backend {

// The lock file name of a lock name: bytes [A-Za-z0-9_-] and '.' (not first) kept, every other
// byte %XX-escaped, then ".lock". Names whose escaped form exceeds 200 bytes become a readable
// prefix + "~" + 32 hex digits of a SHA-1 name hash. Distinct names give distinct file names
// (the long form contains '~', which the short form always escapes).
std::string lock_file_name(std::string_view name);

// The file of the semaphore `name`: the same escaping, with ".sem" for ".lock" (a semaphore and a
// lock of one name are different objects).
std::string semaphore_file_name(std::string_view name);

}  // namespace dlock::file_backend

// names.hpp — the pure part of the `etcd` plugin (no server, no gRPC): lock names to the one path
// element of their queue directory and back. Built as dlock_etcd_names, which the plugin and the
// unit tests link.
#pragma once

#include <string>

namespace dlock::etcd {

// `%`, `/` and control bytes become %XX; every other byte stays (UTF-8 stays readable in etcdctl).
// Injective, and the result holds no `/`.
std::string escape_name(const char* name);

// The inverse of escape_name: `%XX` back to its byte. False for a text escape_name cannot make
// (a `%` not followed by two uppercase hex digits) or for an empty name.
bool unescape_name(const std::string& escaped, std::string& name);

}  // namespace dlock::etcd

// plugin_struct.hpp — reading a struct the host hands a plugin across the ABI when the two were
// built against different versions of plugin.h. Every such struct starts with struct_size, the
// size the host was built with: a plugin built against a newer header must not read past it (the
// fields appended since are not there), and one built against an older header simply ignores the
// fields it does not know. Header-only; nothing here crosses the plugin ABI. For one field, use
// DLOCK_STRUCT_COVERS of plugin.h.
#pragma once

#include <dlock/plugin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace dlock::plugin_kit {

// Copies into `out` the part of `*given` that given->struct_size covers and this build knows;
// `out` keeps its own values (the defaults) for fields the host was built without. Returns false,
// leaving `out` as it was, if `given` is null or shorter than `min_size` (the oldest released
// version's size, such as DLOCK_PLUGIN_HOST_V1_SIZE): no host of any version hands over less.
template <typename T>
bool copy_in(T& out, const T* given, size_t min_size) noexcept {
    if (!given || given->struct_size < min_size) return false;
    std::memcpy(static_cast<void*>(&out), given, std::min<size_t>(given->struct_size, sizeof(T)));
    out.struct_size = static_cast<uint32_t>(std::min<size_t>(given->struct_size, sizeof(T)));
    return true;
}

}  // namespace dlock::plugin_kit

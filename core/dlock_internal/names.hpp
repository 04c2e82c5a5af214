// names.hpp — validation of lock names and generation of owner tokens, shared by the core and tests.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace dlock::detail {

constexpr size_t max_name_bytes = 1024;

// Throws error(DLOCK_INVALID_ARGUMENT) unless `name` is 1..1024 bytes of valid UTF-8 (shortest
// form, no surrogates, <= U+10FFFF) without NUL. The message says which rule failed and where.
void validate_name(std::string_view name);

// An owner token: 32 lowercase hex digits and a NUL.
using owner_token = std::array<char, 33>;

// A fresh owner token: 128 bits from the kernel CSPRNG (getrandom). Bits are read in blocks and
// handed out once each; a forked child never reuses its parent's.
owner_token new_owner_token();

}  // namespace dlock::detail

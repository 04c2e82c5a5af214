// Lock-name validation and owner tokens.
#include "dlock_internal/names.hpp"

#include "dlock_internal/common.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <pthread.h>
#include <sys/random.h>

namespace dlock::detail {

void validate_name(std::string_view name) {
    if (name.empty()) throw error(DLOCK_INVALID_ARGUMENT, "invalid lock name: it is empty (names are 1..1024 bytes of UTF-8)");
    if (name.size() > max_name_bytes)
        throw error(DLOCK_INVALID_ARGUMENT,
                    fmt::format("invalid lock name: {} bytes long, the limit is {}", name.size(), max_name_bytes));
    const auto* p = reinterpret_cast<const unsigned char*>(name.data());
    const size_t n = name.size();
    size_t i = 0;
    while (i < n && unsigned(p[i] - 1) < 0x7f) ++i;  // the common case: ASCII without NUL
    while (i < n) {
        const unsigned char c = p[i];
        if (c == 0) throw error(DLOCK_INVALID_ARGUMENT, fmt::format("invalid lock name: NUL byte at offset {}", i));
        if (c < 0x80) { ++i; continue; }
        size_t len;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; }
        else throw error(DLOCK_INVALID_ARGUMENT, fmt::format("invalid lock name: not UTF-8 (byte 0x{:02x} at offset {})", c, i));
        if (i + len > n) throw error(DLOCK_INVALID_ARGUMENT, fmt::format("invalid lock name: truncated UTF-8 sequence at offset {}", i));
        for (size_t k = 1; k < len; ++k) {
            if ((p[i + k] & 0xC0) != 0x80)
                throw error(DLOCK_INVALID_ARGUMENT, fmt::format("invalid lock name: not UTF-8 (bad continuation byte at offset {})", i + k));
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            throw error(DLOCK_INVALID_ARGUMENT, fmt::format("invalid lock name: not UTF-8 (overlong, surrogate or out-of-range sequence at offset {})", i));
        i += len;
    }
}

namespace {

// Random bits are read from the kernel a block at a time (one getrandom call per 256 tokens) and
// each byte is handed out once. A fork copies the block into the child, so every fork bumps a
// generation number and a block from an older generation is thrown away, never reused.
std::atomic<uint64_t> fork_generation{0};
// Registered once, when the library is loaded (not on every token: std::call_once costs two
// thread-local accesses even after the first call).
const int atfork_registered = pthread_atfork(nullptr, nullptr, [] { fork_generation.fetch_add(1, std::memory_order_relaxed); });

struct random_block {
    unsigned char bytes[4096];
    size_t used = sizeof bytes;
    uint64_t generation = ~uint64_t(0);
};
thread_local random_block block;

// The two lowercase hex digits of each byte value: a token is 16 two-byte copies.
struct hex_pair_table {
    char digits[256][2];
    constexpr hex_pair_table() : digits{} {
        const char hex[] = "0123456789abcdef";
        for (int v = 0; v < 256; ++v) {
            digits[v][0] = hex[v >> 4];
            digits[v][1] = hex[v & 15];
        }
    }
};
constexpr hex_pair_table hex_pairs;

void fill(random_block& b) {
    size_t got = 0;
    while (got < sizeof b.bytes) {
        ssize_t r = getrandom(b.bytes + got, sizeof b.bytes - got, 0);
        if (r < 0) {
            if (errno == EINTR) continue;
            throw error(DLOCK_INTERNAL, fmt::format("getrandom failed: {}", std::strerror(errno)));
        }
        got += size_t(r);
    }
    b.used = 0;
}

}  // namespace

owner_token new_owner_token() {
    (void)atfork_registered;
    random_block& b = block;  // one thread-local lookup
    const uint64_t generation = fork_generation.load(std::memory_order_relaxed);
    if (b.generation != generation || b.used + 16 > sizeof b.bytes) {
        fill(b);
        b.generation = generation;
    }
    unsigned char bits[16];
    std::memcpy(bits, b.bytes + b.used, sizeof bits);
    std::memset(b.bytes + b.used, 0, sizeof bits);
    b.used += sizeof bits;
    owner_token token;
    for (size_t i = 0; i < sizeof bits; ++i) std::memcpy(token.data() + 2 * i, hex_pairs.digits[bits[i]], 2);
    token[32] = '\0';
    return token;
}

}  // namespace dlock::detail

// The `digest` scheme's identity: user + ":" + base64(SHA-1(user + ":" + password)). ZooKeeper
// computes it on the server from the credentials a client sends; dlock computes it too, to write
// ACLs naming its own identity and to tell a wrong password from a missing permission at open.
// SHA-1 is used here only because the scheme is defined with it (FIPS 180-4, section 6.1).
#include "zookeeper_backend.hpp"

#include <array>
#include <cstring>

namespace dlock::zk {

namespace {

uint32_t rotl(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

std::array<uint8_t, 20> sha1(const std::string& message) {
    uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
    std::string padded = message;
    padded += static_cast<char>(0x80);
    while (padded.size() % 64 != 56) padded += '\0';
    const uint64_t bits = uint64_t(message.size()) * 8;
    for (int i = 7; i >= 0; --i) padded += static_cast<char>((bits >> (i * 8)) & 0xff);

    for (size_t block = 0; block < padded.size(); block += 64) {
        uint32_t w[80];
        for (int t = 0; t < 16; ++t) {
            const auto* p = reinterpret_cast<const uint8_t*>(padded.data() + block + t * 4);
            w[t] = uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
        }
        for (int t = 16; t < 80; ++t) w[t] = rotl(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
        uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
        for (int t = 0; t < 80; ++t) {
            uint32_t f, k;
            if (t < 20) { f = (b & c) | (~b & d); k = 0x5A827999; }
            else if (t < 40) { f = b ^ c ^ d; k = 0x6ED9EBA1; }
            else if (t < 60) { f = (b & c) | (b & d) | (c & d); k = 0x8F1BBCDC; }
            else { f = b ^ c ^ d; k = 0xCA62C1D6; }
            const uint32_t next = rotl(a, 5) + f + e + k + w[t];
            e = d;
            d = c;
            c = rotl(b, 30);
            b = a;
            a = next;
        }
        h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e;
    }
    std::array<uint8_t, 20> out{};
    for (int i = 0; i < 5; ++i)
        for (int j = 0; j < 4; ++j) out[i * 4 + j] = uint8_t(h[i] >> (24 - j * 8));
    return out;
}

std::string base64(const uint8_t* data, size_t n) {
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (size_t i = 0; i < n; i += 3) {
        const uint32_t chunk = uint32_t(data[i]) << 16 | (i + 1 < n ? uint32_t(data[i + 1]) << 8 : 0) |
                               (i + 2 < n ? uint32_t(data[i + 2]) : 0);
        out += alphabet[(chunk >> 18) & 63];
        out += alphabet[(chunk >> 12) & 63];
        out += i + 1 < n ? alphabet[(chunk >> 6) & 63] : '=';
        out += i + 2 < n ? alphabet[chunk & 63] : '=';
    }
    return out;
}

}  // namespace

std::string digest_identity(const std::string& user, const std::string& password) {
    const auto hash = sha1(user + ":" + password);
    return user + ":" + base64(hash.data(), hash.size());
}

}  // namespace dlock::zk

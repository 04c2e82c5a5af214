// The `digest` scheme's identity: user + ":" + base64(SHA-1(user + ":" + password)). ZooKeeper
// computes it on the server from the credentials a client sends; dlock computes it too, to write
// ACLs naming its own identity and to tell a wrong password from a missing permission at open.
// SHA-1 is used here only because the scheme is defined with it; OpenSSL's libcrypto computes it.
#include "zookeeper_backend.hpp"

#include <openssl/evp.h>
#include <openssl/sha.h>

namespace dlock::zk {

std::string digest_identity(const std::string& user, const std::string& password) {
    const std::string credentials = user + ":" + password;
    unsigned char hash[SHA_DIGEST_LENGTH];
    SHA1(reinterpret_cast<const unsigned char*>(credentials.data()), credentials.size(), hash);
    unsigned char encoded[4 * ((SHA_DIGEST_LENGTH + 2) / 3) + 1];
    const int n = EVP_EncodeBlock(encoded, hash, SHA_DIGEST_LENGTH);
    return user + ":" + std::string(reinterpret_cast<const char*>(encoded), size_t(n));
}

}  // namespace dlock::zk

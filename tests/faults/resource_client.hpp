// resource_client.hpp — a blocking client of the fenced_resource server (protocol at the top of
// resource_server.cpp), used by the workers. One connection; one request at a time.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace dlock::faults {

class resource_client {
public:
    explicit resource_client(const std::string& socket_path) {
        fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        std::strncpy(address.sun_path, socket_path.c_str(), sizeof address.sun_path - 1);
        if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
            throw std::runtime_error("cannot connect to the fenced resource at " + socket_path);
    }
    ~resource_client() {
        if (fd_ >= 0) ::close(fd_);
    }
    resource_client(const resource_client&) = delete;
    resource_client& operator=(const resource_client&) = delete;

    // Sends one request line, returns the answer line (without '\n').
    std::string request(const std::string& line) {
        const std::string out = line + "\n";
        for (size_t sent = 0; sent < out.size();) {
            const ssize_t w = ::write(fd_, out.data() + sent, out.size() - sent);
            if (w <= 0) throw std::runtime_error("fenced resource: write failed");
            sent += size_t(w);
        }
        for (;;) {
            const auto eol = buffer_.find('\n');
            if (eol != std::string::npos) {
                std::string answer = buffer_.substr(0, eol);
                buffer_.erase(0, eol + 1);
                return answer;
            }
            char chunk[4096];
            const ssize_t n = ::read(fd_, chunk, sizeof chunk);
            if (n <= 0) throw std::runtime_error("fenced resource: connection closed");
            buffer_.append(chunk, size_t(n));
        }
    }

private:
    int fd_ = -1;
    std::string buffer_;
};

}  // namespace dlock::faults

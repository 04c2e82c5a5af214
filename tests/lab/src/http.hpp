// http.hpp (internal) — defines a small HTTP client for etcd's health endpoint, its v3 JSON gateway
// and the servers' metrics endpoints on loopback (libcurl), and the base64 of the gateway's keys and
// values (OpenSSL).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "dlock/lab/endpoint.hpp"

namespace dlock::lab::detail {

struct http_response {
  int status = 0;
  std::string body;
};

// Sends `method path` with `body` (Content-Type application/json when non-empty or a POST) and
// returns the response; the whole exchange must end within `timeout`. Never goes through a proxy.
// Throws std::system_error on connection failure (ECONNREFUSED) or timeout (ETIMEDOUT),
// std::runtime_error on any other failure (a response that is not HTTP).
http_response http_request(const endpoint& server, const std::string& method, const std::string& path,
                           const std::string& body, std::chrono::milliseconds timeout);

std::string base64_encode(std::string_view bytes);
// Takes padded or unpadded text. Throws std::invalid_argument on text that is not base64.
std::string base64_decode(std::string_view text);

}  // namespace dlock::lab::detail

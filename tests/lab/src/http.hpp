// http.hpp (internal) — defines a minimal HTTP/1.0 client for etcd's health endpoint and v3 JSON
// gateway on loopback. HTTP/1.0 with one request per connection keeps the response unchunked and
// delimited by the server closing the connection, so no HTTP library is needed for this.
#pragma once

#include <chrono>
#include <string>

#include "dlock/lab/endpoint.hpp"

namespace dlock::lab::detail {

struct http_response {
  int status = 0;
  std::string body;
};

// Sends `method path` with `body` (Content-Type application/json when non-empty) and returns the
// response. Throws std::system_error on connection failure or timeout, std::runtime_error on a
// response that is not HTTP.
http_response http_request(const endpoint& server, const std::string& method, const std::string& path,
                           const std::string& body, std::chrono::milliseconds timeout);

std::string base64_encode(std::string_view bytes);
// Throws std::invalid_argument on a character outside the base64 alphabet.
std::string base64_decode(std::string_view text);

}  // namespace dlock::lab::detail

// Implements the minimal HTTP/1.0 client and base64 (http.hpp).
#include "http.hpp"

#include <stdexcept>

#include "socket.hpp"

namespace dlock::lab::detail {

http_response http_request(const endpoint& server, const std::string& method, const std::string& path,
                           const std::string& body, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  unique_fd connection = connect_tcp(server, timeout);
  std::string request = method + " " + path + " HTTP/1.0\r\nHost: " + server.to_string() + "\r\n";
  if (!body.empty() || method == "POST") {
    request += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  request += "\r\n";
  request += body;
  send_all(connection.get(), request);
  std::string raw = read_until_eof(connection.get(), deadline);
  // "HTTP/1.x NNN reason\r\n" headers "\r\n\r\n" body
  if (raw.compare(0, 5, "HTTP/") != 0 || raw.size() < 12) {
    throw std::runtime_error("not an HTTP response from " + server.to_string() + path);
  }
  http_response response;
  response.status = std::stoi(raw.substr(9, 3));
  auto header_end = raw.find("\r\n\r\n");
  if (header_end != std::string::npos) response.body = raw.substr(header_end + 4);
  return response;
}

namespace {
constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                 static_cast<unsigned char>(bytes[i + 2]);
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += alphabet[(v >> 6) & 63];
    out += alphabet[v & 63];
  }
  if (bytes.size() - i == 1) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += "==";
  } else if (bytes.size() - i == 2) {
    unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8);
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += alphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

std::string base64_decode(std::string_view text) {
  std::string out;
  unsigned buffer = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    const char* found = std::char_traits<char>::find(alphabet, 64, c);
    if (!found) throw std::invalid_argument("not base64: \"" + std::string(text) + "\"");
    buffer = (buffer << 6) | static_cast<unsigned>(found - alphabet);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buffer >> bits) & 0xFF);
    }
  }
  return out;
}

}  // namespace dlock::lab::detail

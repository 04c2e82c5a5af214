// Implements the HTTP client (libcurl) and base64 (OpenSSL) of http.hpp.
#include "http.hpp"

#include <curl/curl.h>
#include <openssl/evp.h>

#include <cerrno>
#include <memory>
#include <stdexcept>
#include <system_error>

namespace dlock::lab::detail {

namespace {

// libcurl's process-wide set-up, once, before the first handle: curl_easy_init would do it
// implicitly, but not thread-safely, and the lab's probes run on several threads.
void init_curl_once() {
  static const CURLcode init = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (init != CURLE_OK) throw std::runtime_error(std::string("curl_global_init: ") + curl_easy_strerror(init));
}

std::size_t append_to_string(char* data, std::size_t size, std::size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

template <typename T>
void set(CURL* handle, CURLoption option, T value) {
  if (const CURLcode code = curl_easy_setopt(handle, option, value); code != CURLE_OK) {
    throw std::runtime_error(std::string("curl_easy_setopt: ") + curl_easy_strerror(code));
  }
}

}  // namespace

http_response http_request(const endpoint& server, const std::string& method, const std::string& path,
                           const std::string& body, std::chrono::milliseconds timeout) {
  init_curl_once();
  const std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) throw std::runtime_error("curl_easy_init failed");
  CURL* handle = curl.get();
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(nullptr, curl_slist_free_all);
  const std::string url = "http://" + server.to_string() + path;
  http_response response;
  set(handle, CURLOPT_URL, url.c_str());
  set(handle, CURLOPT_PROXY, "");  // loopback servers: never a proxy from the environment (http_proxy)
  set(handle, CURLOPT_NOSIGNAL, 1L);
  set(handle, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
  if (method != "GET" && method != "POST") set(handle, CURLOPT_CUSTOMREQUEST, method.c_str());
  if (!body.empty() || method == "POST") {
    // "Expect:" keeps a larger body from waiting for a 100 Continue first.
    for (const char* header : {"Content-Type: application/json", "Expect:"}) {
      curl_slist* longer = curl_slist_append(headers.get(), header);
      if (!longer) throw std::runtime_error("curl_slist_append failed");
      headers.release();
      headers.reset(longer);
    }
    set(handle, CURLOPT_HTTPHEADER, headers.get());
    set(handle, CURLOPT_POSTFIELDS, body.data());
    set(handle, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  }
  set(handle, CURLOPT_WRITEFUNCTION, &append_to_string);
  set(handle, CURLOPT_WRITEDATA, static_cast<void*>(&response.body));
  const CURLcode code = curl_easy_perform(handle);
  const std::string what = method + " http://" + server.to_string() + path + ": " + curl_easy_strerror(code);
  if (code == CURLE_COULDNT_CONNECT) throw std::system_error(ECONNREFUSED, std::generic_category(), what);
  if (code == CURLE_OPERATION_TIMEDOUT) throw std::system_error(ETIMEDOUT, std::generic_category(), what);
  if (code != CURLE_OK) throw std::runtime_error(what);
  long status = 0;
  curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &status);
  response.status = static_cast<int>(status);
  return response;
}

std::string base64_encode(std::string_view bytes) {
  std::string out((bytes.size() + 2) / 3 * 4 + 1, '\0');  // EVP_EncodeBlock writes a terminating NUL
  const int written = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                      reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(written));
  return out;
}

std::string base64_decode(std::string_view text) {
  // EVP_DecodeBlock takes whole groups of four characters and decodes the padding as zero bytes.
  std::string padded(text);
  padded.append((4 - padded.size() % 4) % 4, '=');
  std::size_t padding = 0;
  while (padding < 2 && padding < padded.size() && padded[padded.size() - 1 - padding] == '=') ++padding;
  std::string out(padded.size() / 4 * 3, '\0');
  const int decoded = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                      reinterpret_cast<const unsigned char*>(padded.data()), static_cast<int>(padded.size()));
  if (decoded < 0 || static_cast<std::size_t>(decoded) < padding) {
    throw std::invalid_argument("not base64: \"" + std::string(text) + "\"");
  }
  out.resize(static_cast<std::size_t>(decoded) - padding);
  return out;
}

}  // namespace dlock::lab::detail

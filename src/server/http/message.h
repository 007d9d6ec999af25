// One HTTP exchange as the route handlers see it: the request read whole (headers and body, limits
// already enforced by server/http/transport.h) and the response they fill, either whole or as a
// stream of chunks written by a provider that runs on the handler's thread.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace inferd::server {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// Header names compare without regard to case (RFC 9110).
bool header_name_equal(std::string_view a, std::string_view b);

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target without its query
  std::string target;  // as sent: path and query
  HttpHeaders headers;
  std::string body;
  std::string remote_addr;

  bool has_header(std::string_view name) const;
  // The first value of `name`, empty when absent.
  std::string get_header_value(std::string_view name) const;
};

// Where a streamed response's provider writes. write() blocks while the client is slow to read
// (bounded by the transport's write timeout); false: the client is gone, stop generating.
struct ChunkSink {
  std::function<bool(const char* data, size_t size)> write;
  std::function<bool()> is_writable;
  std::function<void()> done;  // the last chunk was written
};

struct HttpResponse {
  // Called until it returns false or calls sink.done(); the offset is the bytes written so far.
  using ChunkProvider = std::function<bool(size_t offset, ChunkSink& sink)>;
  // Called once after the provider ends: true when the response was sent whole.
  using Releaser = std::function<void(bool success)>;

  int status = 200;
  HttpHeaders headers;
  std::string body;
  std::string content_type;
  ChunkProvider provider;  // set: the body is streamed (chunked transfer encoding)
  Releaser releaser;

  void set_header(std::string name, std::string value);
  bool has_header(std::string_view name) const;
  std::string get_header_value(std::string_view name) const;
  void set_content(std::string text, std::string type);
  void set_content(const char* data, size_t size, std::string type);
  void set_chunked_content_provider(std::string type, ChunkProvider chunks, Releaser release = {});
};

}  // namespace inferd::server

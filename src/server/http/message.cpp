#include "server/http/message.h"

#include <algorithm>
#include <cctype>

namespace inferd::server {
namespace {

const std::string* find_header(const HttpHeaders& headers, std::string_view name) {
  for (const auto& [key, value] : headers) {
    if (header_name_equal(key, name)) return &value;
  }
  return nullptr;
}

}  // namespace

bool header_name_equal(std::string_view a, std::string_view b) {
  return std::ranges::equal(a, b, [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) ==
           std::tolower(static_cast<unsigned char>(y));
  });
}

bool HttpRequest::has_header(std::string_view name) const {
  return find_header(headers, name) != nullptr;
}

std::string HttpRequest::get_header_value(std::string_view name) const {
  const std::string* value = find_header(headers, name);
  return value != nullptr ? *value : std::string();
}

void HttpResponse::set_header(std::string name, std::string value) {
  for (auto& [key, old] : headers) {
    if (header_name_equal(key, name)) {
      old = std::move(value);
      return;
    }
  }
  headers.emplace_back(std::move(name), std::move(value));
}

bool HttpResponse::has_header(std::string_view name) const {
  return find_header(headers, name) != nullptr;
}

std::string HttpResponse::get_header_value(std::string_view name) const {
  const std::string* value = find_header(headers, name);
  return value != nullptr ? *value : std::string();
}

void HttpResponse::set_content(std::string text, std::string type) {
  body = std::move(text);
  content_type = std::move(type);
}

void HttpResponse::set_content(const char* data, size_t size, std::string type) {
  set_content(std::string(data, size), std::move(type));
}

void HttpResponse::set_chunked_content_provider(std::string type, ChunkProvider chunks,
                                                Releaser release) {
  content_type = std::move(type);
  provider = std::move(chunks);
  releaser = std::move(release);
}

}  // namespace inferd::server

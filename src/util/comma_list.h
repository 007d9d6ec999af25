// Comma-separated lists as command lines give them (--host, --cors-origins): the items, with
// the white space around each trimmed and empty ones dropped.
#pragma once

#include <cctype>
#include <string_view>
#include <vector>

namespace inferd {

inline std::string_view trim_space(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

inline std::vector<std::string_view> comma_list(std::string_view text) {
  std::vector<std::string_view> items;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = trim_space(text.substr(0, comma));
    if (!item.empty()) items.push_back(item);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
  return items;
}

}  // namespace inferd

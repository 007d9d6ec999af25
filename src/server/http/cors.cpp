#include "server/http/cors.h"

#include <algorithm>

#include "util/comma_list.h"

namespace inferd::server {

bool is_local_origin(std::string_view origin) {
  for (std::string_view scheme : {"http://", "https://"}) {
    if (!origin.starts_with(scheme)) continue;
    std::string_view host = origin.substr(scheme.size());
    for (std::string_view name : {"localhost", "127.0.0.1", "[::1]"}) {
      if (!host.starts_with(name)) continue;
      std::string_view port = host.substr(name.size());
      if (port.empty()) return true;
      if (port.front() != ':' || port.size() < 2 || port.size() > 6) return false;
      return std::all_of(port.begin() + 1, port.end(), [](char c) { return c >= '0' && c <= '9'; });
    }
  }
  return false;
}

CorsPolicy::CorsPolicy(std::string_view origins) {
  if (trim_space(origins).empty()) origins = "localhost";
  for (const std::string_view item : comma_list(origins)) {
    if (item == "*") {
      any_ = true;
    } else if (item == "localhost") {
      localhost_ = true;
    } else {
      // An origin never ends with a slash; a list written with one still means the origin.
      exact_.emplace_back(item.ends_with('/') ? item.substr(0, item.size() - 1) : item);
    }
  }
}

bool CorsPolicy::allows(std::string_view origin) const {
  if (origin.empty()) return false;
  if (any_) return true;
  if (localhost_ && is_local_origin(origin)) return true;
  return std::find(exact_.begin(), exact_.end(), origin) != exact_.end();
}

}  // namespace inferd::server

// Which web origins may call the API from a browser (CORS). By default only pages served from
// this machine (localhost, 127.0.0.1, [::1], any port or scheme): a page elsewhere on the web
// must not be able to drive a local server through its visitor's browser. `--cors-origins`
// lists others: exact origins ("https://app.example.com"), "localhost" for the default set,
// "*" for any.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace inferd::server {

class CorsPolicy {
 public:
  // `origins`: a comma-separated list as --cors-origins takes it; empty: "localhost".
  explicit CorsPolicy(std::string_view origins = {});
  bool allows(std::string_view origin) const;

 private:
  bool any_ = false;
  bool localhost_ = false;
  std::vector<std::string> exact_;
};

// True for http(s)://localhost, 127.0.0.1 or [::1], with or without a port, and nothing else
// ("http://localhost.evil.com" is not local).
bool is_local_origin(std::string_view origin);

}  // namespace inferd::server

// llama-server's /cors-proxy?url=URL (--ui-mcp-proxy): the request is sent on to URL (http or
// https, certificates checked) and its answer streamed back, so that a chat page can talk to a
// remote MCP server its browser would not let it reach. Only the headers the page names for
// it (x-llama-server-proxy-header-NAME: VALUE becomes NAME: VALUE) go on: never the caller's
// own Authorization, API key or cookies.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "server/http/message.h"

namespace inferd::server {

// A query parameter of a request target ("/p?a=1&url=http%3A%2F%2Fx"), percent-decoded.
std::optional<std::string> query_parameter(std::string_view target, std::string_view name);

struct ProxyUrl {
  bool https = false;
  std::string host;  // without the brackets of an IPv6 literal
  int port = 0;
  std::string target;  // path and query, "/" at least
};
// Throws inferd::Error naming what is wrong: not http(s), no host, credentials in it, a bad port.
ProxyUrl parse_proxy_url(std::string_view url);

// Answers `req` (GET or POST /cors-proxy?url=...) with the remote answer, or 400 for a bad URL
// and 502 when the remote server cannot be reached.
void forward_request(const HttpRequest& req, HttpResponse& res);

}  // namespace inferd::server

// The chat page's files (src/server/web/), embedded into the binary at build time by
// cmake/embed-web.cmake: `inferd serve` answers GET / and the page's own files from them.
#pragma once

#include <span>
#include <string_view>

namespace inferd::server {

struct WebAsset {
  std::string_view path;          // URL path: "/" for index.html, "/app.js", ...
  std::string_view content_type;  // with charset for text
  std::string_view body;
};

std::span<const WebAsset> web_assets();

}  // namespace inferd::server

// Which handler answers a request: exact paths per method, one handler for every OPTIONS
// (CORS preflight), a hook run after every answer, and the error answers (404, 405, a handler
// that throws, and the transport's own 4xx such as 413 or 431).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "server/http/message.h"

namespace inferd::server {

using HttpHandler = std::function<void(const HttpRequest&, HttpResponse&)>;
// Fills `res` (its status already set) with an error body saying `message`.
using HttpErrorHandler =
    std::function<void(const HttpRequest&, HttpResponse& res, std::string_view message)>;

class HttpRoutes {
 public:
  void get(const std::string& path, HttpHandler handler);  // HEAD is answered by it too
  void post(const std::string& path, HttpHandler handler);
  void options(HttpHandler handler);  // every path
  void after(HttpHandler hook);       // after every answer, errors included
  void on_error(HttpErrorHandler handler);

  // The POST paths, those under /v1 first.
  std::vector<std::string> post_paths() const;

  // Answers `req` into `res`. Never throws.
  void dispatch(const HttpRequest& req, HttpResponse& res) const;
  // An error answer with `status`, as for a request that got no further than `req` holds.
  void error(const HttpRequest& req, HttpResponse& res, int status, std::string_view message) const;

 private:
  std::unordered_map<std::string, HttpHandler> get_, post_;
  HttpHandler options_, after_;
  HttpErrorHandler on_error_;
};

}  // namespace inferd::server

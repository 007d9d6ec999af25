#include "server/http/routes.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>

namespace inferd::server {

void HttpRoutes::get(const std::string& path, HttpHandler handler) {
  get_[path] = std::move(handler);
}

void HttpRoutes::post(const std::string& path, HttpHandler handler) {
  post_[path] = std::move(handler);
}

std::vector<std::string> HttpRoutes::post_paths() const {
  std::vector<std::string> paths;
  for (const auto& [path, handler] : post_) paths.push_back(path);
  std::sort(paths.begin(), paths.end(), [](const std::string& a, const std::string& b) {
    const bool va = a.starts_with("/v1/"), vb = b.starts_with("/v1/");
    return va != vb ? va : a < b;
  });
  return paths;
}

void HttpRoutes::options(HttpHandler handler) {
  options_ = std::move(handler);
}

void HttpRoutes::after(HttpHandler hook) {
  after_ = std::move(hook);
}

void HttpRoutes::on_error(HttpErrorHandler handler) {
  on_error_ = std::move(handler);
}

void HttpRoutes::error(const HttpRequest& req, HttpResponse& res, int status,
                       std::string_view message) const {
  res = HttpResponse();
  res.status = status;
  if (on_error_) on_error_(req, res, message);
  if (after_) after_(req, res);
}

void HttpRoutes::dispatch(const HttpRequest& req, HttpResponse& res) const {
  const HttpHandler* handler = nullptr;
  const auto find = [&req](const std::unordered_map<std::string, HttpHandler>& table) {
    const auto it = table.find(req.path);
    return it == table.end() ? nullptr : &it->second;
  };
  if (req.method == "GET" || req.method == "HEAD") {
    handler = find(get_);
  } else if (req.method == "POST") {
    handler = find(post_);
  } else if (req.method == "OPTIONS" && options_) {
    handler = &options_;
  }
  if (handler == nullptr) {
    const bool known = find(get_) != nullptr || find(post_) != nullptr;
    if (!known)
      return error(req, res, 404, fmt::format("{} {}: no such route", req.method, req.path));
    error(req, res, 405, fmt::format("{} is not served for {}", req.method, req.path));
    res.set_header("Allow", find(get_) != nullptr ? "GET, HEAD, OPTIONS" : "POST, OPTIONS");
    return;
  }
  try {
    (*handler)(req, res);
  } catch (const std::exception& e) {
    return error(req, res, 500, e.what());
  } catch (...) {
    return error(req, res, 500, "internal error");
  }
  if (after_) after_(req, res);
}

}  // namespace inferd::server

#include "server/api/vertex.h"

#include <cctype>
#include <cstdlib>
#include <thread>

#include "server/api/openai_request.h"

namespace inferd::server {
namespace {

using json = nlohmann::ordered_json;

constexpr size_t kMaxInstances = 128;

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

std::string with_leading_slash(std::string path) {
  if (!path.empty() && path[0] != '/') path.insert(path.begin(), '/');
  return path;
}

json error_object(const std::string& message) {
  return ApiError(400, message).body();
}

}  // namespace

VertexSettings vertex_settings_from_env() {
  VertexSettings s;
  s.enabled = env("AIP_MODE") == "PREDICTION";
  s.predict_route = with_leading_slash(env("AIP_PREDICT_ROUTE"));
  if (s.predict_route.empty()) s.predict_route = "/predict";
  s.health_route = with_leading_slash(env("AIP_HEALTH_ROUTE"));
  const std::string port = env("AIP_HTTP_PORT");
  if (!port.empty()) s.port = std::atoi(port.c_str());
  return s;
}

std::string vertex_format_of(std::string_view path) {
  if (path.starts_with("/v1/")) path.remove_prefix(3);
  if (path.starts_with("/")) path.remove_prefix(1);
  std::string format;
  bool upper = false;
  for (const char c : path) {
    if (c == '/' || c == '-' || c == '_') {
      upper = true;
      continue;
    }
    format += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return format;
}

json vertex_predict(const json& body, const std::vector<std::string>& post_paths,
                    const VertexCall& call) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  const auto instances = body.find("instances");
  if (instances == body.end() || !instances->is_array())
    throw ApiError(400, "the body needs 'instances', a list of requests", "instances");
  if (instances->size() > kMaxInstances)
    throw ApiError(400, "at most 128 instances a request", "instances");
  // The first route with a format wins (the /v1 one: post_paths lists it first).
  const auto path_of = [&post_paths](const std::string& format) -> std::string {
    for (const std::string& path : post_paths)
      if (vertex_format_of(path) == format) return path;
    for (const std::string& path : post_paths)
      if (path == format) return path;
    return {};
  };
  std::vector<json> answers(instances->size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < instances->size(); ++i) {
    const json& instance = (*instances)[i];
    if (!instance.is_object() || !instance.contains("@requestFormat") ||
        !instance["@requestFormat"].is_string()) {
      answers[i] = error_object("each instance must be an object with a string @requestFormat");
      continue;
    }
    const std::string format = instance["@requestFormat"].get<std::string>();
    const std::string path = path_of(format);
    if (path.empty()) {
      answers[i] = error_object("no route answers @requestFormat '" + format + "'");
      continue;
    }
    json request = instance;
    request.erase("@requestFormat");
    if (request.contains("stream")) request["stream"] = false;  // answered whole
    threads.emplace_back([&answers, &call, i, path, request = std::move(request)]() mutable {
      answers[i] = call(path, std::move(request));
    });
  }
  for (std::thread& t : threads) t.join();
  json predictions = json::array();
  for (json& answer : answers) predictions.push_back(std::move(answer));
  return {{"predictions", std::move(predictions)}};
}

}  // namespace inferd::server

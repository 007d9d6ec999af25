// Google Cloud Vertex AI's prediction protocol, which llama-server serves when the platform
// starts it with AIP_MODE=PREDICTION: POST AIP_PREDICT_ROUTE (default /predict) takes
// {"instances": [{"@requestFormat": "chatCompletions", ...request fields}, ...]} and answers
// {"predictions": [answer, ...]}, each instance answered whole by the route its format names
// (the route's path in camelCase, "/v1/chat/completions" -> "chatCompletions", or the path).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace inferd::server {

struct VertexSettings {
  bool enabled = false;       // AIP_MODE=PREDICTION
  std::string predict_route;  // AIP_PREDICT_ROUTE, default /predict
  std::string health_route;   // AIP_HEALTH_ROUTE: another path for GET /health, or empty
  int port = 0;               // AIP_HTTP_PORT (0: not set), which wins over --port
};

// From the environment Vertex AI sets.
VertexSettings vertex_settings_from_env();

// "/v1/chat/completions" -> "chatCompletions", "/apply-template" -> "applyTemplate".
std::string vertex_format_of(std::string_view path);

// Answers a predict body: each instance goes to `call(path, request)` (run in parallel, one
// thread each), the path found among `post_paths` by format. A bad instance gets an error
// object in its place; a bad body throws ApiError.
using VertexCall =
    std::function<nlohmann::ordered_json(const std::string& path, nlohmann::ordered_json request)>;
nlohmann::ordered_json vertex_predict(const nlohmann::ordered_json& body,
                                      const std::vector<std::string>& post_paths,
                                      const VertexCall& call);

}  // namespace inferd::server

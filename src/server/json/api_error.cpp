#include "server/json/api_error.h"

namespace inferd::server {

nlohmann::ordered_json ApiError::body() const {
  using json = nlohmann::ordered_json;
  json error = {{"message", what()},
                {"type", type},
                {"param", param.empty() ? json(nullptr) : json(param)},
                {"code", code.empty() ? json(nullptr) : json(code)}};
  error.update(details);
  return {{"error", error}};
}

}  // namespace inferd::server

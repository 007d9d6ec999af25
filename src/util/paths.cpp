#include "util/paths.h"

#include <cstdlib>

namespace inferd {

std::string cache_dir() {
  if (const char* env = std::getenv("INFERD_CACHE"); env != nullptr && *env != '\0') return env;
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : ".") + "/.cache/inferd";
}

std::string default_model_path() {
  if (const char* env = std::getenv("INFERD_MODEL"); env != nullptr && *env != '\0') return env;
  return cache_dir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace inferd

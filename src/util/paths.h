// Where inferd keeps things on disk: the cache folder and the default model in it.
#pragma once

#include <string>

namespace inferd {

// $INFERD_CACHE, else ~/.cache/inferd.
std::string cache_dir();
// $INFERD_MODEL, else the model scripts/fetch-model caches (SmolLM2-135M-Instruct Q4_1).
std::string default_model_path();

}  // namespace inferd

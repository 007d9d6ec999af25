// The architecture registry: `general.architecture` -> the function that builds that Model.
// Adding an architecture is one file in archs/ plus one line in registry.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/model.h"

namespace inferd::model {

// Builds the model for the file's architecture; the file must outlive the model (weights
// stay in its map). An unknown architecture is an inferd::Error listing the known ones.
std::unique_ptr<Model> load_model(const gguf::GgufFile& file, const ModelOptions& options);
std::vector<std::string> known_architectures();

// Constructors of each architecture (archs/<arch>.cpp).
std::unique_ptr<Model> make_llama(const gguf::GgufFile& file, const ModelOptions& options);
std::unique_ptr<Model> make_qwen2(const gguf::GgufFile& file, const ModelOptions& options);
std::unique_ptr<Model> make_qwen3(const gguf::GgufFile& file, const ModelOptions& options);
std::unique_ptr<Model> make_gemma2(const gguf::GgufFile& file, const ModelOptions& options);
std::unique_ptr<Model> make_gemma3(const gguf::GgufFile& file, const ModelOptions& options);
std::unique_ptr<Model> make_gemma4(const gguf::GgufFile& file, const ModelOptions& options);
std::unique_ptr<Model> make_gpt_oss(const gguf::GgufFile& file, const ModelOptions& options);
std::unique_ptr<Model> make_qwen2moe(const gguf::GgufFile& file, const ModelOptions& options);
std::unique_ptr<Model> make_qwen3moe(const gguf::GgufFile& file, const ModelOptions& options);
std::unique_ptr<Model> make_phi3(const gguf::GgufFile& file, const ModelOptions& options);
std::unique_ptr<Model> make_qwen35(const gguf::GgufFile& file, const ModelOptions& options);
std::unique_ptr<Model> make_qwen35moe(const gguf::GgufFile& file, const ModelOptions& options);
std::unique_ptr<Model> make_qwen3next(const gguf::GgufFile& file, const ModelOptions& options);
std::unique_ptr<Model> make_glm4moe(const gguf::GgufFile& file, const ModelOptions& options);
std::unique_ptr<Model> make_eagle3(const gguf::GgufFile& file, const ModelOptions& options);
std::unique_ptr<Model> make_deepseek2(const gguf::GgufFile& file, const ModelOptions& options);

}  // namespace inferd::model

#include "model/config.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace inferd::model {
namespace {

int positive_int(const gguf::GgufFile& file, const std::string& key) {
  int64_t v = file.require_int(key);
  if (v <= 0 || v > (int64_t{1} << 30)) fail("{}: '{}' = {} is out of range", file.name(), key, v);
  return static_cast<int>(v);
}

// The `rope.scaling.*` keys (`a` ends in "rope.scaling."), as llama.cpp reads and defaults them:
// linear and yarn take `factor`; yarn also `original_context_length` (default: the trained
// context) and, where the file has them, `yarn_beta_fast` / `yarn_beta_slow` (default 32 and 1).
// Any other type fails by name rather than running with the wrong positions.
void read_rope_scaling(const gguf::GgufFile& file, const std::string& a, ModelConfig& c) {
  const std::string type = file.get_string(a + "type").value_or("none");
  const float attn_factor = static_cast<float>(file.get_float(a + "attn_factor").value_or(1.0));
  c.rope_attn_factor = attn_factor;
  if (type == "none") return;
  if (type != "linear" && type != "yarn")
    fail("{}: rope scaling '{}' is not supported yet (none, linear, yarn)", file.name(), type);
  const double factor = file.require_float(a + "factor");
  if (!(factor > 0)) fail("{}: rope.scaling.factor {} must be positive", file.name(), factor);
  c.rope_freq_scale = static_cast<float>(1.0 / factor);
  if (type == "linear") return;
  kernels::YarnScaling& yarn = c.rope_yarn;
  yarn.ext_factor = 1.0f;
  yarn.original_context = file.get_int(a + "original_context_length").value_or(c.context_length);
  yarn.beta_fast = static_cast<float>(file.get_float(a + "yarn_beta_fast").value_or(32.0));
  yarn.beta_slow = static_cast<float>(file.get_float(a + "yarn_beta_slow").value_or(1.0));
  if (yarn.original_context <= 0 || !(yarn.beta_fast > 0) || !(yarn.beta_slow > 0)) {
    fail("{}: YaRN original context {} and betas {}, {} must be positive", file.name(),
         yarn.original_context, yarn.beta_fast, yarn.beta_slow);
  }
  // llama.cpp's cparams: get_mscale(factor, 1) cancelled by the 1 + 0.1 ln(factor) that ggml's
  // rope multiplies in itself, then the file's attention factor; in float, in that order.
  const float scale = 1.0f / c.rope_freq_scale;
  const float mscale = scale <= 1.0f ? 1.0f : 0.1f * std::log(scale) + 1.0f;
  c.rope_attn_factor = mscale * (1.0f / (1.0f + 0.1f * std::log(scale))) * attn_factor;
}

// A key that is one integer, or an array of one a layer (Gemma 4's feed_forward_length and
// head_count_kv): the value of layer 0 in `scalar`, and the array in `per_layer` when the
// layers differ.
void int_or_per_layer(const gguf::GgufFile& file, const std::string& key, int n_layers,
                      int& scalar, std::vector<int>& per_layer) {
  const gguf::Value* value = file.find(key);
  if (value == nullptr || !value->is_array()) {
    scalar = positive_int(file, key);
    return;
  }
  const gguf::Array* values = file.get_array(key);
  if (std::ssize(values->items) != n_layers)
    fail("{}: '{}' has {} values for {} layers", file.name(), key, values->items.size(), n_layers);
  for (const gguf::Value& item : values->items) {
    const std::optional<int64_t> v = item.as_int();
    if (!v || *v <= 0 || *v > (int64_t{1} << 30))
      fail("{}: '{}' holds a value that is not a positive count", file.name(), key);
    per_layer.push_back(static_cast<int>(*v));
  }
  scalar = per_layer.front();
  if (std::all_of(per_layer.begin(), per_layer.end(), [&](int v) { return v == scalar; }))
    per_layer.clear();
}

}  // namespace

ModelConfig ModelConfig::from_gguf(const gguf::GgufFile& file) {
  ModelConfig c;
  c.architecture = file.architecture();
  c.name = file.get_string("general.name").value_or(c.architecture);
  const std::string a = c.architecture + ".";
  c.n_layers = positive_int(file, a + "block_count");
  // Multi-token-prediction layers follow the trunk's in the file; the forward pass runs the
  // trunk only (an architecture that reads them says so at load).
  c.n_nextn_layers = static_cast<int>(file.get_int(a + "nextn_predict_layers").value_or(0));
  if (c.n_nextn_layers < 0 || c.n_nextn_layers >= c.n_layers)
    fail("{}: '{}nextn_predict_layers' = {} for {} blocks", file.name(), a, c.n_nextn_layers,
         c.n_layers);
  c.n_layers -= c.n_nextn_layers;
  c.n_embd = positive_int(file, a + "embedding_length");
  const int all_layers = c.n_layers + c.n_nextn_layers;
  int_or_per_layer(file, a + "feed_forward_length", all_layers, c.n_ff, c.layer_n_ff);
  c.n_heads = positive_int(file, a + "attention.head_count");
  c.n_kv_heads = c.n_heads;
  if (file.has(a + "attention.head_count_kv"))
    int_or_per_layer(file, a + "attention.head_count_kv", all_layers, c.n_kv_heads,
                     c.layer_n_kv_heads);
  c.layer_n_ff.resize(c.layer_n_ff.empty() ? 0 : static_cast<size_t>(c.n_layers));
  c.layer_n_kv_heads.resize(c.layer_n_kv_heads.empty() ? 0 : static_cast<size_t>(c.n_layers));
  c.context_length = positive_int(file, a + "context_length");
  for (const int kv_heads : c.layer_n_kv_heads.empty() ? std::vector<int>{c.n_kv_heads}
                                                       : c.layer_n_kv_heads) {
    if (c.n_heads % kv_heads != 0) {
      fail("{}: {} attention heads are not a multiple of {} kv heads", file.name(), c.n_heads,
           kv_heads);
    }
  }
  if (file.has(a + "attention.key_length")) {
    c.head_dim = positive_int(file, a + "attention.key_length");
  } else {
    if (c.n_embd % c.n_heads != 0) {
      fail("{}: hidden size {} is not a multiple of {} heads", file.name(), c.n_embd, c.n_heads);
    }
    c.head_dim = c.n_embd / c.n_heads;
  }
  if (file.has(a + "attention.value_length") &&
      positive_int(file, a + "attention.value_length") != c.head_dim) {
    c.value_head_dim = positive_int(file, a + "attention.value_length");  // the decoder checks it
  }
  c.rope_dims = file.has(a + "rope.dimension_count")
                    ? positive_int(file, a + "rope.dimension_count")
                    : c.head_dim;
  if (c.rope_dims > c.head_dim || c.rope_dims % 2 != 0) {
    fail("{}: rope dimension count {} must be even and at most the head size {}", file.name(),
         c.rope_dims, c.head_dim);
  }
  c.rms_eps =
      static_cast<float>(file.get_float(a + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  c.rope_freq_base = static_cast<float>(file.get_float(a + "rope.freq_base").value_or(10000.0));
  read_rope_scaling(file, a + "rope.scaling.", c);
  const gguf::Array* tokens = file.get_array("tokenizer.ggml.tokens");
  c.n_vocab = tokens != nullptr ? static_cast<int>(tokens->items.size())
                                : positive_int(file, a + "vocab_size");
  return c;
}

int ModelConfig::max_n_ff() const {
  int most = n_ff;
  for (const int f : layer_n_ff) most = std::max(most, f);
  return most;
}

int64_t ModelConfig::max_kv_dim() const {
  int64_t most = 0;
  for (int l = 0; l < n_layers; ++l) most = std::max(most, int64_t{n_kv_heads_of(l)} * head_dim_of(l));
  return most;
}

std::string ModelConfig::summary() const {
  return fmt::format("{} ({}): {} layers, hidden {}, ff {}, heads {}/{} x {}, vocab {}, context {}",
                     name, architecture, n_layers, n_embd, n_ff, n_heads, n_kv_heads, head_dim,
                     n_vocab, context_length);
}

}  // namespace inferd::model

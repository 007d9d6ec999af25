#include "model/config.h"

#include "util/error.h"

namespace inferd::model {
namespace {

int positive_int(const gguf::GgufFile& file, const std::string& key) {
  int64_t v = file.require_int(key);
  if (v <= 0 || v > (int64_t{1} << 30)) fail("{}: '{}' = {} is out of range", file.name(), key, v);
  return static_cast<int>(v);
}

}  // namespace

ModelConfig ModelConfig::from_gguf(const gguf::GgufFile& file) {
  ModelConfig c;
  c.architecture = file.architecture();
  c.name = file.get_string("general.name").value_or(c.architecture);
  const std::string a = c.architecture + ".";
  c.n_layers = positive_int(file, a + "block_count");
  c.n_embd = positive_int(file, a + "embedding_length");
  c.n_ff = positive_int(file, a + "feed_forward_length");
  c.n_heads = positive_int(file, a + "attention.head_count");
  c.n_kv_heads = file.has(a + "attention.head_count_kv")
                     ? positive_int(file, a + "attention.head_count_kv")
                     : c.n_heads;
  c.context_length = positive_int(file, a + "context_length");
  if (c.n_heads % c.n_kv_heads != 0) {
    fail("{}: {} attention heads are not a multiple of {} kv heads", file.name(), c.n_heads,
         c.n_kv_heads);
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
    fail("{}: value head size {} differs from the key head size {}: not supported", file.name(),
         file.require_int(a + "attention.value_length"), c.head_dim);
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
  std::string scaling = file.get_string(a + "rope.scaling.type").value_or("none");
  if (scaling == "linear") {
    double factor = file.require_float(a + "rope.scaling.factor");
    if (factor <= 0) fail("{}: rope.scaling.factor {} must be positive", file.name(), factor);
    c.rope_freq_scale = static_cast<float>(1.0 / factor);
  } else if (scaling != "none") {
    fail("{}: rope scaling '{}' is not supported yet (only none and linear)", file.name(), scaling);
  }
  const gguf::Array* tokens = file.get_array("tokenizer.ggml.tokens");
  c.n_vocab = tokens != nullptr ? static_cast<int>(tokens->items.size())
                                : positive_int(file, a + "vocab_size");
  return c;
}

std::string ModelConfig::summary() const {
  return fmt::format("{} ({}): {} layers, hidden {}, ff {}, heads {}/{} x {}, vocab {}, context {}",
                     name, architecture, n_layers, n_embd, n_ff, n_heads, n_kv_heads, head_dim,
                     n_vocab, context_length);
}

}  // namespace inferd::model

#include "quant/type_policy.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <numeric>

namespace inferd::quant {
namespace {

struct NamedFileType {
  std::string_view name;
  FileType type;
};

// What `inferd quantize` makes, with llama-quantize's aliases.
constexpr NamedFileType kMixes[] = {
    {"Q4_0", FileType::Q4_0},           {"Q4_1", FileType::Q4_1},
    {"Q5_0", FileType::Q5_0},           {"Q5_1", FileType::Q5_1},
    {"Q8_0", FileType::Q8_0},           {"Q2_K", FileType::Q2_K},
    {"Q3_K_S", FileType::Q3_K_S},       {"Q3_K_M", FileType::Q3_K_M},
    {"Q3_K_L", FileType::Q3_K_L},       {"Q3_K", FileType::Q3_K_M},
    {"Q4_K_S", FileType::Q4_K_S},       {"Q4_K_M", FileType::Q4_K_M},
    {"Q4_K", FileType::Q4_K_M},         {"Q5_K_S", FileType::Q5_K_S},
    {"Q5_K_M", FileType::Q5_K_M},       {"Q5_K", FileType::Q5_K_M},
    {"Q6_K", FileType::Q6_K},           {"IQ4_NL", FileType::IQ4_NL},
    {"IQ4_XS", FileType::IQ4_XS},       {"F16", FileType::F16},
    {"BF16", FileType::BF16},           {"F32", FileType::F32},
    {"MXFP4_MOE", FileType::MXFP4_MOE},
};

// Every file type llama.cpp defines, by llama-quantize's name.
struct NamedValue {
  uint32_t value;
  std::string_view name;
};
constexpr NamedValue kAllFileTypes[] = {
    {0, "F32"},      {1, "F16"},      {2, "Q4_0"},       {3, "Q4_1"},    {7, "Q8_0"},
    {8, "Q5_0"},     {9, "Q5_1"},     {10, "Q2_K"},      {11, "Q3_K_S"}, {12, "Q3_K_M"},
    {13, "Q3_K_L"},  {14, "Q4_K_S"},  {15, "Q4_K_M"},    {16, "Q5_K_S"}, {17, "Q5_K_M"},
    {18, "Q6_K"},    {19, "IQ2_XXS"}, {20, "IQ2_XS"},    {21, "Q2_K_S"}, {22, "IQ3_XS"},
    {23, "IQ3_XXS"}, {24, "IQ1_S"},   {25, "IQ4_NL"},    {26, "IQ3_S"},  {27, "IQ3_M"},
    {28, "IQ2_S"},   {29, "IQ2_M"},   {30, "IQ4_XS"},    {31, "IQ1_M"},  {32, "BF16"},
    {36, "TQ1_0"},   {37, "TQ2_0"},   {38, "MXFP4_MOE"}, {39, "NVFP4"},  {40, "Q1_0"},
    {41, "Q2_0"},
};

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::toupper(static_cast<unsigned char>(a[i])) !=
        std::toupper(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

bool contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

enum class Role {
  TokenEmbd,
  AttnQ,
  AttnV,  // also fused QKV and MLA's kv_b: the tensors llama.cpp treats as attn_v
  AttnK,
  AttnOutput,
  FfnUp,
  FfnGate,
  FfnDown,
  Output,
  Other,
};

Role role_of(std::string_view name) {
  if (name == "output.weight") return Role::Output;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return Role::TokenEmbd;
  if (contains(name, "attn_qkv.weight") || contains(name, "attn_kv_b.weight") ||
      contains(name, "attn_v.weight")) {
    return Role::AttnV;
  }
  if (contains(name, "attn_k.weight")) return Role::AttnK;
  if (contains(name, "attn_q.weight")) return Role::AttnQ;
  if (contains(name, "attn_output.weight")) return Role::AttnOutput;
  if (contains(name, "ffn_up")) return Role::FfnUp;
  if (contains(name, "ffn_gate")) return Role::FfnGate;
  if (contains(name, "ffn_down")) return Role::FfnDown;
  return Role::Other;
}

// Layer of "blk.N.*"; -1 for tensors outside the blocks.
int layer_of(const std::string& name) {
  int layer = -1;
  if (std::sscanf(name.c_str(), "blk.%d.", &layer) != 1) return -1;
  return layer;
}

// Dimensions after dropping trailing ones (ggml_n_dims).
int dims_of(const std::vector<uint64_t>& shape) {
  for (int i = static_cast<int>(shape.size()) - 1; i >= 1; --i) {
    if (shape[i] > 1) return i + 1;
  }
  return 1;
}

bool is_block_quantized(DType t) {
  return t != DType::F32 && t != DType::F16 && t != DType::BF16;
}

uint64_t block_size(DType t) {
  return dtype_info(t).block_size;
}

// The layers that get more bits in the _M mixes: the first and last eighth, and every third
// layer in between.
bool more_bits(int64_t layer, int64_t n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

// The mix's per-tensor adjustment (llama.cpp's rules for the file types listed in FileType).
class Rules {
 public:
  Rules(const ModelShape& model, const std::vector<TensorDesc>& tensors, FileType file_type)
      : model_(model), ftype_(file_type) {
    for (const TensorDesc& t : tensors) {
      Role r = role_of(t.name);
      if (r == Role::AttnV) ++n_attn_v_;
      if (r == Role::Output) tied_embeddings_ = false;
    }
    n_gqa_ = model.n_head_kv > 0 ? model.n_head / model.n_head_kv : 0;
    falcon_ = model.arch == "falcon";
    // llama.cpp's "70B" model type: 80 llama layers with grouped-query attention.
    llama_70b_ = model.arch == "llama" && model.n_layer == 80 && model.n_head != model.n_head_kv;
  }

  DType adjust(const TensorDesc& t, DType type) {
    using F = FileType;
    const Role role = role_of(t.name);
    const F f = ftype_;
    if (role == Role::Output || (tied_embeddings_ && role == Role::TokenEmbd)) {
      // The output projection (or the embedding that doubles as it) gets Q6_K, or Q8_0 when
      // the rows do not split into the mix's blocks (or the mix is MXFP4_MOE).
      if (f == F::MXFP4_MOE || falcon_ || t.shape[0] % block_size(type) != 0) return DType::Q8_0;
      return type != DType::Q8_0 ? DType::Q6_K : type;
    }
    if (f == F::MXFP4_MOE) return mxfp4_moe_type(t, role);
    if (role == Role::TokenEmbd) return type;
    if (role == Role::AttnV) {
      if (f == F::Q2_K) {
        type = n_gqa_ >= 4 ? DType::Q4_K : DType::Q3_K;
      } else if (f == F::Q3_K_M) {
        type = i_attn_v_ < 2 ? DType::Q5_K : DType::Q4_K;
      } else if (f == F::Q3_K_L) {
        type = DType::Q5_K;
      } else if ((f == F::IQ4_NL || f == F::IQ4_XS) && n_gqa_ >= 4) {
        type = DType::Q5_K;
      } else if ((f == F::Q4_K_M || f == F::Q5_K_M) && more_bits(i_attn_v_, n_attn_v_)) {
        type = DType::Q6_K;
      } else if (f == F::Q4_K_S && i_attn_v_ < 4) {
        type = DType::Q5_K;
      }
      if (llama_70b_ && (type == DType::Q3_K || type == DType::Q4_K)) type = DType::Q5_K;
      if (model_.n_expert == 8) type = DType::Q8_0;
      ++i_attn_v_;
      return type;
    }
    if (role == Role::AttnK) return model_.n_expert == 8 ? DType::Q8_0 : type;
    if (role == Role::AttnQ) return type;
    if (role == Role::FfnDown) {
      const int64_t n = model_.n_layer;
      const int64_t i = layer_index(t, i_ffn_down_);
      if (f == F::Q2_K) {
        type = DType::Q3_K;
      } else if (f == F::Q3_K_M) {
        type = i < n / 16 ? DType::Q5_K : !falcon_ || more_bits(i, n) ? DType::Q4_K : DType::Q3_K;
      } else if (f == F::Q3_K_L) {
        type = falcon_ ? DType::Q4_K : DType::Q5_K;
      } else if (f == F::Q4_K_M) {
        if (falcon_) {
          type = i < n / 16 ? DType::Q6_K : more_bits(i, n) ? DType::Q5_K : DType::Q4_K;
        } else if (more_bits(i, n)) {
          type = DType::Q6_K;
        }
      } else if (i < n / 8 && (f == F::IQ4_NL || f == F::IQ4_XS)) {
        type = DType::Q5_K;  // (llama.cpp skips this with an importance matrix; we have none)
      } else if (f == F::Q5_K_M && more_bits(i, n)) {
        type = DType::Q6_K;
      } else if (f == F::Q4_K_S && !falcon_ && i < n / 8) {
        type = DType::Q5_K;
      }
      ++i_ffn_down_;
      return type;
    }
    if (role == Role::AttnOutput) {
      if (!falcon_) {
        if (model_.n_expert == 8) {
          if (f == F::Q2_K || f == F::Q3_K_S || f == F::Q3_K_M || f == F::IQ4_NL ||
              f == F::Q4_K_S || f == F::Q4_K_M || f == F::IQ4_XS) {
            type = DType::Q5_K;
          }
        } else if (f == F::Q2_K) {
          type = DType::Q3_K;
        } else if (f == F::Q3_K_M) {
          type = DType::Q4_K;
        } else if (f == F::Q3_K_L) {
          type = DType::Q5_K;
        }
      } else if (f == F::Q3_K_L) {
        type = DType::Q4_K;
      }
      return type;
    }
    // ffn_gate and ffn_up change only in mixes not made here.
    return type;
  }

 private:
  // MXFP4_MOE: the stacked expert tensors (a third dimension over 1) in MXFP4, everything else
  // in Q8_0. In bailingmoe3 models only the feed-forward ones count as experts (their MLA
  // projections are 3-D too).
  DType mxfp4_moe_type(const TensorDesc& t, Role role) const {
    const bool experts = t.shape.size() > 2 && t.shape[2] > 1;
    const bool ffn = role == Role::FfnUp || role == Role::FfnGate || role == Role::FfnDown;
    if (experts && (model_.arch != "bailingmoe3" || ffn)) return DType::MXFP4;
    return DType::Q8_0;
  }

  // The layer of a per-layer tensor: its position among its kind, or, in MoE models (whose
  // expert tensors need not come in layer order), the number in its name.
  int64_t layer_index(const TensorDesc& t, int64_t counter) const {
    if (model_.n_expert > 1) {
      int layer = layer_of(t.name);
      if (layer >= 0) return layer;
    }
    return counter;
  }

  const ModelShape& model_;
  FileType ftype_;
  bool tied_embeddings_ = true;
  bool falcon_ = false;
  bool llama_70b_ = false;
  int64_t n_gqa_ = 0;
  int64_t n_attn_v_ = 0;
  int64_t i_attn_v_ = 0;
  int64_t i_ffn_down_ = 0;
};

// A row length the type's blocks do not divide: the nearest 32-wide type, then F16.
DType fallback_for(DType type, uint64_t row) {
  if (row % block_size(type) == 0) return type;
  DType next = type;
  switch (type) {
    case DType::IQ4_XS:
      next = DType::IQ4_NL;
      break;
    case DType::Q2_K:
    case DType::Q3_K:
      next = DType::Q4_0;
      break;
    case DType::Q4_K:
      next = DType::Q5_0;
      break;
    case DType::Q5_K:
      next = DType::Q5_1;
      break;
    case DType::Q6_K:
      next = DType::Q8_0;
      break;
    default:
      break;
  }
  return row % block_size(next) == 0 ? next : DType::F16;
}

}  // namespace

std::optional<FileType> parse_file_type(std::string_view name) {
  for (const NamedFileType& m : kMixes) {
    if (iequals(m.name, name)) return m.type;
  }
  return std::nullopt;
}

std::vector<std::string> file_type_names() {
  std::vector<std::string> names;
  for (const NamedFileType& m : kMixes) names.emplace_back(m.name);
  return names;
}

std::optional<std::string_view> file_type_name(uint32_t value) {
  for (const NamedValue& v : kAllFileTypes) {
    if (v.value == value) return v.name;
  }
  return std::nullopt;
}

DType default_type(FileType type) {
  switch (type) {
    case FileType::F32:
      return DType::F32;
    case FileType::F16:
      return DType::F16;
    case FileType::BF16:
      return DType::BF16;
    case FileType::Q4_0:
      return DType::Q4_0;
    case FileType::Q4_1:
      return DType::Q4_1;
    case FileType::Q5_0:
      return DType::Q5_0;
    case FileType::Q5_1:
      return DType::Q5_1;
    case FileType::Q8_0:
      return DType::Q8_0;
    case FileType::Q2_K:
      return DType::Q2_K;
    case FileType::Q3_K_S:
    case FileType::Q3_K_M:
    case FileType::Q3_K_L:
      return DType::Q3_K;
    case FileType::Q4_K_S:
    case FileType::Q4_K_M:
      return DType::Q4_K;
    case FileType::Q5_K_S:
    case FileType::Q5_K_M:
      return DType::Q5_K;
    case FileType::Q6_K:
      return DType::Q6_K;
    case FileType::IQ4_NL:
      return DType::IQ4_NL;
    case FileType::IQ4_XS:
      return DType::IQ4_XS;
    case FileType::MXFP4_MOE:
      return DType::MXFP4;
  }
  return DType::F16;
}

bool allows_quantization(const TensorDesc& tensor) {
  if (dims_of(tensor.shape) < 2) return false;
  const std::string_view name = tensor.name;
  constexpr std::string_view kSuffix = "weight";
  if (name.size() < kSuffix.size() || name.substr(name.size() - kSuffix.size()) != kSuffix) {
    return false;
  }
  if (name == "position_embd.weight" || name == "token_types.weight") return false;
  // Norms, MoE routers, and small tensors llama.cpp leaves as they are.
  static constexpr std::string_view kKept[] = {
      "_norm.weight",
      "ffn_gate_inp.weight",
      "ffn_gate_tid2eid.weight",
      "altup",
      "laurel",
      "per_layer_model_proj",
      "ssm_conv1d",
      "shortconv.conv.weight",
      "indexer.k_proj.weight",
      "indexer.q_proj.weight",
      "time_mix_first.weight",
      "time_mix_w0.weight",
      "time_mix_w1.weight",
      "time_mix_w2.weight",
      "time_mix_v0.weight",
      "time_mix_v1.weight",
      "time_mix_v2.weight",
      "time_mix_a0.weight",
      "time_mix_a1.weight",
      "time_mix_a2.weight",
      "time_mix_g1.weight",
      "time_mix_g2.weight",
      "time_mix_decay_w1.weight",
      "time_mix_decay_w2.weight",
      "time_mix_lerp_fused.weight",
      "attn_rel_b.weight",
      ".position_embd",
      "sam.pos_embd",
      "sam.neck.",
      "sam.net_",
      ".rel_pos",
      ".patch_embd",
      ".patch_merger",
      "a.rvq.codebook",
      "mm.a.code_embd",
  };
  for (std::string_view part : kKept) {
    if (contains(name, part)) return false;
  }
  return true;
}

std::vector<size_t> processing_order(const std::vector<TensorDesc>& tensors) {
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::vector<int> layers(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) layers[i] = layer_of(tensors[i].name);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (layers[a] != layers[b]) return layers[a] < layers[b];
    return tensors[a].name < tensors[b].name;
  });
  return order;
}

std::vector<TypeChoice> choose_types(const ModelShape& model,
                                     const std::vector<TensorDesc>& tensors, FileType file_type,
                                     bool pure) {
  std::vector<TypeChoice> result(tensors.size());
  Rules rules(model, tensors, file_type);
  const DType base = default_type(file_type);
  for (size_t i : processing_order(tensors)) {
    const TensorDesc& t = tensors[i];
    TypeChoice& choice = result[i];
    if (!allows_quantization(t)) {
      choice.type = choice.wanted = t.type;
      continue;
    }
    DType type = base;
    if (is_block_quantized(base)) {
      if (!pure) type = rules.adjust(t, type);
      choice.wanted = type;
      type = fallback_for(type, t.shape[0]);
      choice.fell_back = type != choice.wanted;
    } else {
      choice.wanted = type;
    }
    choice.type = type;
  }
  return result;
}

}  // namespace inferd::quant

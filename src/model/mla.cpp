#include "model/mla.h"

#include <algorithm>

#include "util/error.h"

namespace inferd::model {

MlaLayer load_mla_layer(const WeightLoader& w, const std::string& p, const MlaConfig& c,
                        int n_heads, int n_embd) {
  MlaLayer m;
  const int64_t H = n_heads, q_rows = H * c.key_dims();
  if (c.q_lora_rank > 0) {
    m.q_a = w.matrix(p + "attn_q_a.weight", c.q_lora_rank, n_embd);
    m.q_a_norm = w.vector(p + "attn_q_a_norm.weight", c.q_lora_rank);
    m.q_b = w.matrix(p + "attn_q_b.weight", q_rows, c.q_lora_rank);
  } else {
    m.q = w.matrix(p + "attn_q.weight", q_rows, n_embd);
  }
  m.kv_a = w.matrix(p + "attn_kv_a_mqa.weight", int64_t{c.kv_lora_rank} + c.rope_dims, n_embd);
  m.kv_a_norm = w.vector(p + "attn_kv_a_norm.weight", c.kv_lora_rank);
  if (c.split_kv_b) {
    m.k_b = w.transposed_stacked_f32(p + "attn_k_b.weight", H, c.kv_lora_rank, c.nope_dims);
    m.v_b = w.stacked_matrix(p + "attn_v_b.weight", H, c.value_dims, c.kv_lora_rank);
  } else {
    m.kv_b = w.matrix(p + "attn_kv_b.weight", H * (c.nope_dims + c.value_dims), c.kv_lora_rank);
  }
  return m;
}

MlaBlock::MlaBlock(const MlaConfig& config, int n_heads, int n_embd, int64_t max_tokens)
    : config_(config), n_heads_(n_heads) {
  const auto T = static_cast<size_t>(max_tokens), H = static_cast<size_t>(n_heads);
  const auto floats = [&](size_t n) { return memory_.allocate_array<float>(n); };
  if (config.q_lora_rank > 0) q_a_ = floats(T * static_cast<size_t>(config.q_lora_rank));
  kv_a_ = floats(T * static_cast<size_t>(config.kv_lora_rank + config.rope_dims));
  latent_ = floats(T * static_cast<size_t>(config.kv_lora_rank));
  kv_b_ = floats(T * H * static_cast<size_t>(config.nope_dims + config.value_dims));
  v_b_ = floats(T * H * static_cast<size_t>(config.value_dims));
  memory_.prefault();
  scratch_.reserve(max_tokens, std::max({int64_t{n_embd}, int64_t{config.q_lora_rank},
                                         int64_t{config.kv_lora_rank}}));
}

void MlaBlock::project(const MlaLayer& layer, const float* h, int64_t n_tokens,
                       const int32_t* positions, const kernels::RopeTable& rope, RopeMode mode,
                       float rms_eps, float* q, float* k, float* v, ThreadPool& pool,
                       int64_t bf16_from) {
  const MlaConfig& c = config_;
  const int64_t T = n_tokens, H = n_heads_, L = c.kv_lora_rank, nope = c.nope_dims;
  const int64_t kd = c.key_dims(), vd = c.value_dims, kv_a_dim = L + c.rope_dims;
  const kernels::KernelTable& table = kernels::active_kernels();
  const bool lora = c.q_lora_rank > 0;
  const kernels::MatmulTarget inputs[] = {
      {lora ? &layer.q_a : &layer.q, lora ? q_a_.data() : q},  // [T, q_lora_rank] or [T, H * kd]
      {&layer.kv_a, kv_a_.data()}};                            // [T, L + rope]
  kernels::matmul_many(inputs, h, T, scratch_, pool, table, bf16_from);
  pool.parallel_for(T, 4, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      if (lora) {
        float* qa = &q_a_[static_cast<size_t>(t * c.q_lora_rank)];
        kernels::rms_norm(qa, layer.q_a_norm, qa, c.q_lora_rank, rms_eps);
      }
      kernels::rms_norm(&kv_a_[static_cast<size_t>(t * kv_a_dim)], layer.kv_a_norm,
                        &latent_[static_cast<size_t>(t * L)], L, rms_eps);
    }
  });
  if (lora)
    kernels::matmul(layer.q_b, q_a_.data(), T, q, scratch_, pool, table, bf16_from);  // [T, H * kd]
  const bool split = c.split_kv_b;
  if (split) {
    const kernels::MatmulTarget kv[] = {{&layer.k_b, kv_b_.data()},  // [T, H * nope]
                                        {&layer.v_b, v_b_.data()}};  // [T, H * vd]
    kernels::matmul_many(kv, latent_.data(), T, scratch_, pool, table, bf16_from);
  } else {
    kernels::matmul(layer.kv_b, latent_.data(), T, kv_b_.data(), scratch_, pool, table,
                    bf16_from);  // [T, H * (nope + vd)]
  }
  // Where head h's k_nope and value lie in a token's row of kv_b_ (and v_b_).
  const int64_t k_stride = split ? nope : nope + vd;
  const float* v_source = split ? v_b_.data() : kv_b_.data() + nope;
  const int64_t v_row = split ? H * vd : H * (nope + vd), v_stride = split ? vd : nope + vd;
  const auto rotate = [&](float* x, int n, int head_size, int32_t pos) {
    if (mode == RopeMode::kNeox) {
      rope.apply_neox(x, n, head_size, pos);
    } else {
      rope.apply_normal(x, n, head_size, pos);
    }
  };
  pool.parallel_for(T, 4, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int32_t pos = positions[t];
      rotate(q + t * H * kd + nope, n_heads_, static_cast<int>(kd), pos);  // each head's last rope
      float* k_pe = &kv_a_[static_cast<size_t>(t * kv_a_dim + L)];
      rotate(k_pe, 1, c.rope_dims, pos);
      const float* kn = &kv_b_[static_cast<size_t>(t * H * k_stride)];
      for (int64_t hd = 0; hd < H; ++hd) {
        float* key = k + (t * H + hd) * kd;
        std::copy_n(kn + hd * k_stride, nope, key);
        std::copy_n(k_pe, c.rope_dims, key + nope);
        std::copy_n(v_source + t * v_row + hd * v_stride, vd, v + (t * H + hd) * vd);
      }
    }
  });
}

}  // namespace inferd::model

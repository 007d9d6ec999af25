// DeepSeek's multi-head latent attention (model/mla.h, archs/deepseek2.cpp) on tiny random
// models written in memory: the same weights decompressed by one attn_kv_b (older files) and by
// attn_k_b / attn_v_b (files with the MLA head sizes: attn_k_b stored transposed) give the same
// logits, with q_lora and with a plain attn_q; and what changes the computation without being
// implemented is refused by name. (tests/model/architectures_test.cpp holds both kinds of file to
// llama.cpp.)
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gguf/gguf_writer.h"
#include "model/registry.h"
#include "tiny_model.h"
#include "tiny_runner.h"

namespace inferd::testing {
namespace {

struct TinyMla {
  static constexpr int kLayers = 2, kEmbd = 64, kHeads = 4, kFf = 96, kVocab = 96;
  static constexpr int kNope = 32, kRope = 8, kValue = 32, kLatent = 32;
  int q_lora = 32;    // 0: a plain attn_q
  bool split = true;  // attn_k_b / attn_v_b and the MLA head sizes, or one attn_kv_b
  DType type = DType::F32;
  // Extra metadata: a key and a float value (e.g. attention.temperature_scale).
  std::string extra_key = "";
  float extra_value = 0;
};

// A deepseek2 file of TinyMla's shape; layers all dense (leading_dense_block_count = layers).
// The weights depend on the seed only, whichever way the latent is decompressed.
std::vector<uint8_t> make_tiny_deepseek2(const TinyMla& s) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const auto random = [&](size_t n, float scale) {
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng) * scale;
    return v;
  };
  const std::string a = "deepseek2.";
  gguf::GgufWriter w;
  w.set_string("general.architecture", "deepseek2");
  w.set_u32(a + "block_count", TinyMla::kLayers);
  w.set_u32(a + "embedding_length", TinyMla::kEmbd);
  w.set_u32(a + "feed_forward_length", TinyMla::kFf);
  w.set_u32(a + "attention.head_count", TinyMla::kHeads);
  w.set_u32(a + "attention.head_count_kv", s.split ? 1 : TinyMla::kHeads);
  w.set_u32(a + "context_length", 256);
  w.set_f32(a + "rope.freq_base", 10000.0f);
  w.set_u32(a + "rope.dimension_count", TinyMla::kRope);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.set_u32(a + "vocab_size", TinyMla::kVocab);
  w.set_u32(a + "expert_count", 4);
  w.set_u32(a + "expert_used_count", 2);
  w.set_u32(a + "expert_feed_forward_length", 32);
  w.set_u32(a + "expert_shared_count", 1);
  w.set_u32(a + "leading_dense_block_count", TinyMla::kLayers);
  if (s.q_lora > 0) w.set_u32(a + "attention.q_lora_rank", static_cast<uint32_t>(s.q_lora));
  w.set_u32(a + "attention.kv_lora_rank", TinyMla::kLatent);
  if (s.split) {
    w.set_u32(a + "attention.key_length", TinyMla::kLatent + TinyMla::kRope);
    w.set_u32(a + "attention.value_length", TinyMla::kLatent);
    w.set_u32(a + "attention.key_length_mla", TinyMla::kNope + TinyMla::kRope);
    w.set_u32(a + "attention.value_length_mla", TinyMla::kValue);
  } else {
    w.set_u32(a + "attention.key_length", TinyMla::kNope + TinyMla::kRope);
    w.set_u32(a + "attention.value_length", TinyMla::kValue);
  }
  if (!s.extra_key.empty()) w.set_f32(a + s.extra_key, s.extra_value);
  const auto E = size_t{TinyMla::kEmbd}, H = size_t{TinyMla::kHeads}, L = size_t{TinyMla::kLatent};
  const size_t nope = TinyMla::kNope, rope = TinyMla::kRope, vd = TinyMla::kValue;
  const auto matrix = [&](const std::string& name, size_t rows, size_t cols, float scale) {
    w.add_tensor(name, s.type, {cols, rows}, encode_rows(s.type, random(rows * cols, scale)));
  };
  const auto norm = [&](const std::string& name, size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = 1.0f + 0.1f * dist(rng);
    w.add_tensor(name, DType::F32, {n}, encode_rows(DType::F32, v));
  };
  matrix("token_embd.weight", TinyMla::kVocab, E, 1.0f);
  norm("output_norm.weight", E);
  matrix("output.weight", TinyMla::kVocab, E, 0.3f);
  for (int l = 0; l < TinyMla::kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    norm(p + "attn_norm.weight", E);
    // Both kinds of file draw the same numbers in the same order.
    const auto q_a = random(32 * E, 0.3f), q_b = random(H * (nope + rope) * 32, 0.3f);
    const auto q = random(H * (nope + rope) * E, 0.3f);
    if (s.q_lora > 0) {
      w.add_tensor(p + "attn_q_a.weight", s.type, {E, 32}, encode_rows(s.type, q_a));
      norm(p + "attn_q_a_norm.weight", 32);
      w.add_tensor(p + "attn_q_b.weight", s.type, {32, H * (nope + rope)},
                   encode_rows(s.type, q_b));
    } else {
      w.add_tensor(p + "attn_q.weight", s.type, {E, H * (nope + rope)}, encode_rows(s.type, q));
    }
    matrix(p + "attn_kv_a_mqa.weight", L + rope, E, 0.3f);
    norm(p + "attn_kv_a_norm.weight", L);
    const auto kv_b = random(H * (nope + vd) * L, 0.3f);  // [H][nope + vd][L]
    if (s.split) {  // k_b [H][L][nope] (the transpose), v_b [H][vd][L]
      std::vector<float> k_b(H * L * nope), v_b(H * vd * L);
      for (size_t h = 0; h < H; ++h) {
        for (size_t r = 0; r < L; ++r) {
          for (size_t i = 0; i < nope; ++i)
            k_b[(h * L + r) * nope + i] = kv_b[(h * (nope + vd) + i) * L + r];
          for (size_t j = 0; j < vd; ++j)
            v_b[(h * vd + j) * L + r] = kv_b[(h * (nope + vd) + nope + j) * L + r];
        }
      }
      w.add_tensor(p + "attn_k_b.weight", s.type, {nope, L, H}, encode_rows(s.type, k_b));
      w.add_tensor(p + "attn_v_b.weight", s.type, {L, vd, H}, encode_rows(s.type, v_b));
    } else {
      w.add_tensor(p + "attn_kv_b.weight", s.type, {L, H * (nope + vd)}, encode_rows(s.type, kv_b));
    }
    matrix(p + "attn_output.weight", E, H * vd, 0.2f);
    norm(p + "ffn_norm.weight", E);
    matrix(p + "ffn_gate.weight", TinyMla::kFf, E, 0.2f);
    matrix(p + "ffn_up.weight", TinyMla::kFf, E, 0.2f);
    matrix(p + "ffn_down.weight", E, TinyMla::kFf, 0.2f);
  }
  return w.build();
}

std::vector<float> logits_of(const std::vector<uint8_t>& bytes, const std::vector<int32_t>& tokens,
                             int64_t chunk) {
  const auto file = gguf::GgufFile::parse(bytes);
  auto model = model::load_model(file, {64, 256});
  Runner runner(*model, 32);
  return runner.run(tokens, chunk);
}

TEST(Mla, SplitAndCombinedDecompressionGiveTheSameLogits) {
  const std::vector<int32_t> tokens = {5, 17, 3, 88, 41, 9, 60, 22, 71, 12, 33};
  for (const int q_lora : {32, 0}) {
    const auto combined =
        logits_of(make_tiny_deepseek2({.q_lora = q_lora, .split = false}), tokens, 4);
    const auto split = logits_of(make_tiny_deepseek2({.q_lora = q_lora, .split = true}), tokens, 4);
    // Whole prompt at once or a token at a time: the same.
    const auto one_by_one =
        logits_of(make_tiny_deepseek2({.q_lora = q_lora, .split = true}), tokens, 1);
    ASSERT_EQ(combined.size(), split.size());
    float spread = 0;
    for (size_t i = 0; i < combined.size(); ++i) {
      spread = std::max(spread, std::fabs(combined[i]));
      EXPECT_NEAR(split[i], combined[i], 1e-4f * (1 + std::fabs(combined[i])))
          << "q_lora " << q_lora;
      EXPECT_NEAR(one_by_one[i], split[i], 1e-4f * (1 + std::fabs(split[i])))
          << "q_lora " << q_lora;
    }
    EXPECT_GT(spread, 0.1f);  // the model computes something
  }
}

// Every matrix in Q8_0 (attn_k_b dequantized and transposed at load): the logits stay within a
// few percent of the F32 model's spread, as Q8_0's rounding moves them, not more.
TEST(Mla, QuantizedTransposedKeysLoad) {
  const std::vector<int32_t> tokens = {5, 17, 3, 88};
  const auto f32 = logits_of(make_tiny_deepseek2({.split = true}), tokens, 4);
  const auto q8 = logits_of(make_tiny_deepseek2({.split = true, .type = DType::Q8_0}), tokens, 4);
  double diff = 0, spread = 0;
  for (size_t i = 0; i < f32.size(); ++i) {
    diff = std::max(diff, double(std::fabs(f32[i] - q8[i])));
    spread = std::max(spread, double(std::fabs(f32[i])));
  }
  EXPECT_LT(diff, 0.05 * spread);
  EXPECT_GT(diff, 0.0);  // rounded weights, not the F32 ones
}

TEST(Mla, RefusesWhatItDoesNotImplement) {
  expect_load_error(
      make_tiny_deepseek2({.extra_key = "attention.temperature_scale", .extra_value = 0.1f}),
      "attention.temperature_scale");
  // Without the rotated part's size every key dimension would rotate, leaving none unrotated.
  const auto bytes = make_tiny_deepseek2({});
  const auto file = gguf::GgufFile::parse(bytes);
  const auto no_rope = copy_of(file, [](const std::string& k) {
                         return k == "deepseek2.rope.dimension_count";
                       }).build();
  expect_load_error(no_rope, "rope.dimension_count");
  // An MLA file's key_length is the latent's (kv_lora_rank + rope).
  auto w =
      copy_of(file, [](const std::string& k) { return k == "deepseek2.attention.key_length"; });
  w.set_u32("deepseek2.attention.key_length", 41);
  expect_load_error(w.build(), "key_length");
}

}  // namespace
}  // namespace inferd::testing

// RoPE tables with YaRN scaling against the formula computed directly in double precision
// (the YaRN paper's NTK-by-parts ramp and attention scale, with ggml's correction dims), and the
// `rope.scaling.*` keys that ModelConfig reads into them.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "util/error.h"

namespace inferd::kernels {
namespace {

struct YarnCase {
  const char* name;
  int rot_dims;
  double freq_base, factor, attn_factor;
  YarnScaling yarn;
};

// The pair index whose wavelength fits `turns` times in the original context.
double correction_dim(const YarnCase& c, double turns) {
  return c.rot_dims * std::log(double(c.yarn.original_context) / (turns * 2 * std::numbers::pi)) /
         (2 * std::log(c.freq_base));
}

// cos and sin (times the magnitude scale) of pair i at position p, straight from the formula.
std::pair<double, double> yarn_cos_sin(const YarnCase& c, int i, int64_t p) {
  double low = correction_dim(c, c.yarn.beta_fast), high = correction_dim(c, c.yarn.beta_slow);
  if (c.yarn.round_dims) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(0.0, low);
  high = std::min(double(c.rot_dims - 1), high);
  const double original = double(p) * std::pow(c.freq_base, -2.0 * i / c.rot_dims);
  // 1 for pairs below `low` (they keep their angle), 0 above `high` (fully interpolated).
  const double keep = 1 - std::clamp((i - low) / std::max(0.001, high - low), 0.0, 1.0);
  const double angle = original / c.factor * (1 - keep) + original * keep;
  const double mscale = c.attn_factor * (1 + 0.1 * std::log(c.factor));
  return {std::cos(angle) * mscale, std::sin(angle) * mscale};
}

// The table's cos and sin of every pair at position p: rotating (1, 0) gives (cos, sin).
std::vector<float> table_cos_sin(const RopeTable& table, int rot_dims, int64_t p) {
  std::vector<float> x(static_cast<size_t>(rot_dims), 0.0f);  // [rot_dims]: pairs (2i, 2i+1)
  for (int i = 0; i < rot_dims; i += 2) x[static_cast<size_t>(i)] = 1.0f;
  table.apply_normal(x.data(), 1, rot_dims, p);
  return x;
}

YarnScaling yarn_of(int64_t original_context, bool round_dims, float beta_fast = 32.0f,
                    float beta_slow = 1.0f) {
  return {1.0f, beta_fast, beta_slow, original_context, round_dims};
}

// gpt-oss's settings (base 150000, factor 32, original context 4096: correction dims 8.09 and
// 17.40 of 32 pairs) with ggml's whole-number range [8, 18] and with the range unrounded;
// Qwen-like settings (base 1e6, factor 4, 32768, 64 pairs: [23, 40]); a short original context
// whose low dim is clamped to 0, with other betas and an attention factor.
TEST(RopeYarn, TableMatchesTheFormula) {
  const YarnCase cases[] = {
      {"gpt-oss, rounded", 64, 150000, 32, 1, yarn_of(4096, true)},
      {"gpt-oss, unrounded", 64, 150000, 32, 1, yarn_of(4096, false)},
      {"qwen", 128, 1e6, 4, 1, yarn_of(32768, true)},
      {"clamped, betas, attn factor", 32, 10000, 8, 0.75, yarn_of(64, false, 16.0f, 2.0f)},
  };
  const int64_t max_positions = 5000;
  for (const YarnCase& c : cases) {
    const RopeTable table(max_positions, c.rot_dims, float(c.freq_base), float(1 / c.factor), {},
                          float(c.attn_factor), c.yarn);
    for (const int64_t p : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{100}, int64_t{1234},
                            int64_t{4095}, max_positions - 1}) {
      const std::vector<float> got = table_cos_sin(table, c.rot_dims, p);
      for (int i = 0; i < c.rot_dims / 2; ++i) {
        const auto [cos_want, sin_want] = yarn_cos_sin(c, i, p);
        // The table accumulates each angle in float as ggml does: about (i + 1) roundings of an
        // angle of up to p radians.
        const double tol =
            1e-6 + 1e-7 * (i + 1) * double(p) * std::pow(c.freq_base, -2.0 * i / c.rot_dims);
        EXPECT_NEAR(got[static_cast<size_t>(2 * i)], cos_want, tol)
            << c.name << " p " << p << " pair " << i;
        EXPECT_NEAR(got[static_cast<size_t>(2 * i + 1)], sin_want, tol)
            << c.name << " p " << p << " pair " << i;
      }
    }
  }
}

// Rounding matters inside the ramp only: with gpt-oss's settings the rounded range [8, 18] and
// the unrounded [8.09, 17.40] give pairs 9..17 other angles, and the pairs outside the same.
TEST(RopeYarn, RoundingTheCorrectionDimsMovesTheRamp) {
  const RopeTable rounded(2000, 64, 150000, 1.0f / 32, {}, 1.0f, yarn_of(4096, true));
  const RopeTable unrounded(2000, 64, 150000, 1.0f / 32, {}, 1.0f, yarn_of(4096, false));
  const auto a = table_cos_sin(rounded, 64, 1999), b = table_cos_sin(unrounded, 64, 1999);
  for (const size_t i : {9u, 13u, 17u}) {
    EXPECT_GT(std::fabs(a[2 * i] - b[2 * i]) + std::fabs(a[2 * i + 1] - b[2 * i + 1]), 1e-3)
        << "pair " << i;
  }
  for (const size_t i : {0u, 7u, 8u, 18u, 31u}) {
    EXPECT_EQ(a[2 * i], b[2 * i]) << "pair " << i;
    EXPECT_EQ(a[2 * i + 1], b[2 * i + 1]) << "pair " << i;
  }
}

// Without YaRN (ext_factor 0) the table is the plain linear one, bit for bit.
TEST(RopeYarn, OffIsLinearScaling) {
  YarnScaling off = yarn_of(4096, true);
  off.ext_factor = 0.0f;
  const RopeTable linear(300, 64, 150000, 1.0f / 32);
  const RopeTable with_off(300, 64, 150000, 1.0f / 32, {}, 1.0f, off);
  for (int64_t p : {0, 5, 299})
    EXPECT_EQ(table_cos_sin(linear, 64, p), table_cos_sin(with_off, 64, p));
}

TEST(RopeYarn, RejectsAMissingOriginalContext) {
  EXPECT_THROW(RopeTable(10, 64, 150000, 1.0f / 32, {}, 1.0f, yarn_of(0, true)), Error);
}

}  // namespace
}  // namespace inferd::kernels

namespace inferd::model {
namespace {

// A GGUF with the required `llama.*` keys, the given rope scaling keys, and no tensors.
std::vector<uint8_t> config_file(const std::function<void(gguf::GgufWriter&)>& add_keys) {
  gguf::GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 2);
  w.set_u32("llama.embedding_length", 64);
  w.set_u32("llama.feed_forward_length", 128);
  w.set_u32("llama.attention.head_count", 4);
  w.set_u32("llama.context_length", 131072);
  w.set_u32("llama.vocab_size", 96);
  w.set_f32("llama.rope.freq_base", 150000.0f);
  add_keys(w);
  return w.build();
}

ModelConfig read_config(const std::function<void(gguf::GgufWriter&)>& add_keys) {
  const std::vector<uint8_t> bytes = config_file(add_keys);
  return ModelConfig::from_gguf(gguf::GgufFile::parse(bytes, "config.gguf"));
}

// gpt-oss's keys: YaRN on, 1 / factor, the original context, default betas, and cos/sin scaled
// by exactly YaRN's own 1 + 0.1 ln 32 (the attention factor cancels to 1).
TEST(RopeScalingConfig, ReadsYarnLikeLlamaCpp) {
  const ModelConfig c = read_config([](gguf::GgufWriter& w) {
    w.set_string("llama.rope.scaling.type", "yarn");
    w.set_f32("llama.rope.scaling.factor", 32.0f);
    w.set_u32("llama.rope.scaling.original_context_length", 4096);
  });
  EXPECT_EQ(c.rope_freq_scale, 1.0f / 32);
  EXPECT_EQ(c.rope_yarn.ext_factor, 1.0f);
  EXPECT_EQ(c.rope_yarn.original_context, 4096);
  EXPECT_EQ(c.rope_yarn.beta_fast, 32.0f);
  EXPECT_EQ(c.rope_yarn.beta_slow, 1.0f);
  EXPECT_TRUE(c.rope_yarn.round_dims);
  EXPECT_NEAR(c.rope_attn_factor, 1.0f, 1e-6f);
}

// Betas and an attention factor from the file; the original context defaults to the trained one.
TEST(RopeScalingConfig, ReadsYarnBetasAndAttentionFactor) {
  const ModelConfig c = read_config([](gguf::GgufWriter& w) {
    w.set_string("llama.rope.scaling.type", "yarn");
    w.set_f32("llama.rope.scaling.factor", 4.0f);
    w.set_f32("llama.rope.scaling.yarn_beta_fast", 16.0f);
    w.set_f32("llama.rope.scaling.yarn_beta_slow", 2.0f);
    w.set_f32("llama.rope.scaling.attn_factor", 0.5f);
  });
  EXPECT_EQ(c.rope_yarn.original_context, 131072);
  EXPECT_EQ(c.rope_yarn.beta_fast, 16.0f);
  EXPECT_EQ(c.rope_yarn.beta_slow, 2.0f);
  EXPECT_NEAR(c.rope_attn_factor, 0.5f, 1e-6f);
}

TEST(RopeScalingConfig, LinearLeavesYarnOff) {
  const ModelConfig c = read_config([](gguf::GgufWriter& w) {
    w.set_string("llama.rope.scaling.type", "linear");
    w.set_f32("llama.rope.scaling.factor", 2.0f);
  });
  EXPECT_EQ(c.rope_freq_scale, 0.5f);
  EXPECT_EQ(c.rope_yarn.ext_factor, 0.0f);
  EXPECT_EQ(c.rope_attn_factor, 1.0f);
}

// Another scaling type fails by its name; so does YaRN without its factor.
TEST(RopeScalingConfig, FailsOnOtherTypesByName) {
  try {
    read_config([](gguf::GgufWriter& w) { w.set_string("llama.rope.scaling.type", "longrope"); });
    FAIL() << "longrope accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'longrope'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(
      read_config([](gguf::GgufWriter& w) { w.set_string("llama.rope.scaling.type", "yarn"); }),
      Error);
}

}  // namespace
}  // namespace inferd::model

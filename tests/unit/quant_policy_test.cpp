// The per-tensor type rules of quant/type_policy.h on synthetic models: which layers get more
// bits in each mix, what the output and embeddings get, and the row-length fallbacks.
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "quant/type_policy.h"

namespace inferd::quant {
namespace {

// A Llama-shaped tensor list: the table llama.cpp's converter writes, in file order.
std::vector<TensorDesc> llama_tensors(int n_layer, uint64_t embd, uint64_t kv, uint64_t ff,
                                      uint64_t vocab, bool tied) {
  std::vector<TensorDesc> t;
  t.push_back({"token_embd.weight", DType::F16, {embd, vocab}});
  t.push_back({"output_norm.weight", DType::F32, {embd}});
  if (!tied) t.push_back({"output.weight", DType::F16, {embd, vocab}});
  for (int i = 0; i < n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    t.push_back({p + "attn_norm.weight", DType::F32, {embd}});
    t.push_back({p + "attn_q.weight", DType::F16, {embd, embd}});
    t.push_back({p + "attn_k.weight", DType::F16, {embd, kv}});
    t.push_back({p + "attn_v.weight", DType::F16, {embd, kv}});
    t.push_back({p + "attn_output.weight", DType::F16, {embd, embd}});
    t.push_back({p + "ffn_norm.weight", DType::F32, {embd}});
    t.push_back({p + "ffn_gate.weight", DType::F16, {embd, ff}});
    t.push_back({p + "ffn_up.weight", DType::F16, {embd, ff}});
    t.push_back({p + "ffn_down.weight", DType::F16, {ff, embd}});
  }
  return t;
}

std::map<std::string, DType> choose(const ModelShape& m, const std::vector<TensorDesc>& t,
                                    FileType f, bool pure = false) {
  std::vector<TypeChoice> c = choose_types(m, t, f, pure);
  std::map<std::string, DType> out;
  for (size_t i = 0; i < t.size(); ++i) out[t[i].name] = c[i].type;
  return out;
}

std::string blk(int i, const char* what) {
  return "blk." + std::to_string(i) + "." + what + ".weight";
}

// A 32-layer 4096-wide model with grouped-query attention (8 kv heads of 32) and its own output.
struct Llama8B {
  ModelShape shape{"llama", 32, 32, 8, 0};
  std::vector<TensorDesc> tensors = llama_tensors(32, 4096, 1024, 14336, 128256, false);
};

// llama.cpp's "more bits" layers of a 32-layer model: the first and last 4 and every third in
// between.
const std::set<int> kMoreBits32 = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};

TEST(QuantPolicy, Q4_K_M) {
  Llama8B m;
  auto types = choose(m.shape, m.tensors, FileType::Q4_K_M);
  EXPECT_EQ(types["token_embd.weight"], DType::Q4_K);
  EXPECT_EQ(types["output.weight"], DType::Q6_K);
  EXPECT_EQ(types["output_norm.weight"], DType::F32);
  for (int i = 0; i < 32; ++i) {
    const DType more = kMoreBits32.count(i) ? DType::Q6_K : DType::Q4_K;
    EXPECT_EQ(types[blk(i, "attn_v")], more) << i;
    EXPECT_EQ(types[blk(i, "ffn_down")], more) << i;
    EXPECT_EQ(types[blk(i, "attn_q")], DType::Q4_K) << i;
    EXPECT_EQ(types[blk(i, "attn_k")], DType::Q4_K) << i;
    EXPECT_EQ(types[blk(i, "attn_output")], DType::Q4_K) << i;
    EXPECT_EQ(types[blk(i, "ffn_gate")], DType::Q4_K) << i;
    EXPECT_EQ(types[blk(i, "ffn_up")], DType::Q4_K) << i;
    EXPECT_EQ(types[blk(i, "attn_norm")], DType::F32) << i;
  }
}

TEST(QuantPolicy, Q5_K_M) {
  Llama8B m;
  auto types = choose(m.shape, m.tensors, FileType::Q5_K_M);
  EXPECT_EQ(types["token_embd.weight"], DType::Q5_K);
  EXPECT_EQ(types["output.weight"], DType::Q6_K);
  for (int i = 0; i < 32; ++i) {
    const DType more = kMoreBits32.count(i) ? DType::Q6_K : DType::Q5_K;
    EXPECT_EQ(types[blk(i, "attn_v")], more) << i;
    EXPECT_EQ(types[blk(i, "ffn_down")], more) << i;
    EXPECT_EQ(types[blk(i, "ffn_up")], DType::Q5_K) << i;
  }
}

TEST(QuantPolicy, SmallMixes) {
  Llama8B m;
  auto s = choose(m.shape, m.tensors, FileType::Q4_K_S);
  auto q3 = choose(m.shape, m.tensors, FileType::Q3_K_M);
  auto q2 = choose(m.shape, m.tensors, FileType::Q2_K);
  auto iq = choose(m.shape, m.tensors, FileType::IQ4_XS);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(s[blk(i, "attn_v")], i < 4 ? DType::Q5_K : DType::Q4_K) << i;
    EXPECT_EQ(s[blk(i, "ffn_down")], i < 4 ? DType::Q5_K : DType::Q4_K) << i;
    EXPECT_EQ(q3[blk(i, "attn_v")], i < 2 ? DType::Q5_K : DType::Q4_K) << i;
    EXPECT_EQ(q3[blk(i, "ffn_down")], i < 2 ? DType::Q5_K : DType::Q4_K) << i;
    EXPECT_EQ(q3[blk(i, "attn_output")], DType::Q4_K) << i;
    EXPECT_EQ(q3[blk(i, "attn_q")], DType::Q3_K) << i;
    EXPECT_EQ(q2[blk(i, "attn_v")], DType::Q4_K) << i;  // 4 query heads per kv head
    EXPECT_EQ(q2[blk(i, "ffn_down")], DType::Q3_K) << i;
    EXPECT_EQ(q2[blk(i, "attn_output")], DType::Q3_K) << i;
    EXPECT_EQ(q2[blk(i, "ffn_up")], DType::Q2_K) << i;
    EXPECT_EQ(iq[blk(i, "attn_v")], DType::Q5_K) << i;
    EXPECT_EQ(iq[blk(i, "ffn_down")], i < 4 ? DType::Q5_K : DType::IQ4_XS) << i;
    EXPECT_EQ(iq[blk(i, "ffn_gate")], DType::IQ4_XS) << i;
  }
  for (auto* types : {&s, &q3, &q2, &iq}) EXPECT_EQ((*types)["output.weight"], DType::Q6_K);
}

TEST(QuantPolicy, WholeTypeMixes) {
  Llama8B m;
  auto q6 = choose(m.shape, m.tensors, FileType::Q6_K);
  auto q8 = choose(m.shape, m.tensors, FileType::Q8_0);
  auto q4 = choose(m.shape, m.tensors, FileType::Q4_0);
  for (const TensorDesc& t : m.tensors) {
    if (t.shape.size() == 1) {
      EXPECT_EQ(q6[t.name], DType::F32);
      continue;
    }
    EXPECT_EQ(q6[t.name], DType::Q6_K) << t.name;
    EXPECT_EQ(q8[t.name], DType::Q8_0) << t.name;
    EXPECT_EQ(q4[t.name], t.name == "output.weight" ? DType::Q6_K : DType::Q4_0) << t.name;
  }
}

TEST(QuantPolicy, PureGivesEveryWeightOneType) {
  Llama8B m;
  auto types = choose(m.shape, m.tensors, FileType::Q4_K_M, /*pure=*/true);
  for (const TensorDesc& t : m.tensors) {
    EXPECT_EQ(types[t.name], t.shape.size() == 1 ? DType::F32 : DType::Q4_K) << t.name;
  }
}

// SmolLM2-135M: 30 layers of 576 (not a multiple of 256), 3 kv heads of 64, tied embeddings.
TEST(QuantPolicy, RowLengthFallbacksAndTiedEmbeddings) {
  ModelShape shape{"llama", 30, 9, 3, 0};
  auto tensors = llama_tensors(30, 576, 192, 1536, 49152, true);
  // "More bits" layers of 30: the first and last 3 or 4 and every third in between.
  const std::set<int> more = {0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29};
  auto types = choose(shape, tensors, FileType::Q4_K_M);
  std::vector<TypeChoice> choices = choose_types(shape, tensors, FileType::Q4_K_M, false);
  EXPECT_EQ(types["token_embd.weight"], DType::Q8_0);  // tied: the output rule, 576 % 256 != 0
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(types[blk(i, "attn_q")], DType::Q5_0) << i;  // Q4_K -> Q5_0
    EXPECT_EQ(types[blk(i, "attn_v")], more.count(i) ? DType::Q8_0 : DType::Q5_0) << i;
    // ffn_down's rows are 1536 = 6 * 256 long: no fallback.
    EXPECT_EQ(types[blk(i, "ffn_down")], more.count(i) ? DType::Q6_K : DType::Q4_K) << i;
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].name == blk(5, "attn_v")) {
      EXPECT_TRUE(choices[i].fell_back);
      EXPECT_EQ(choices[i].wanted, DType::Q6_K);
    }
    if (tensors[i].name == blk(5, "ffn_down")) {
      EXPECT_FALSE(choices[i].fell_back);
    }
  }
  auto q5 = choose(shape, tensors, FileType::Q5_K_M);
  auto iq = choose(shape, tensors, FileType::IQ4_XS);
  auto q3 = choose(shape, tensors, FileType::Q3_K_M);
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(q5[blk(i, "ffn_up")], DType::Q5_1) << i;    // Q5_K -> Q5_1
    EXPECT_EQ(iq[blk(i, "ffn_up")], DType::IQ4_NL) << i;  // IQ4_XS -> IQ4_NL
    EXPECT_EQ(q3[blk(i, "ffn_up")], DType::Q4_0) << i;    // Q3_K -> Q4_0
  }
}

TEST(QuantPolicy, OddRowsFallBackToF16) {
  ModelShape shape{"llama", 1, 1, 1, 0};
  std::vector<TensorDesc> t = {{"blk.0.ffn_up.weight", DType::F32, {100, 64}},
                               {"blk.0.ffn_down.weight", DType::F32, {64, 100}}};
  auto types = choose(shape, t, FileType::Q8_0);
  EXPECT_EQ(types["blk.0.ffn_up.weight"], DType::F16);
  EXPECT_EQ(types["blk.0.ffn_down.weight"], DType::Q8_0);
}

TEST(QuantPolicy, WhatStaysUnquantized) {
  EXPECT_FALSE(allows_quantization({"blk.0.attn_norm.weight", DType::F32, {4096}}));
  EXPECT_FALSE(allows_quantization({"blk.0.attn_q_norm.weight", DType::F32, {128, 1}}));
  EXPECT_FALSE(allows_quantization({"blk.0.ffn_gate_inp.weight", DType::F32, {4096, 8}}));
  EXPECT_FALSE(allows_quantization({"blk.0.attn_q.bias", DType::F32, {4096, 2}}));
  EXPECT_FALSE(allows_quantization({"position_embd.weight", DType::F32, {768, 1024}}));
  EXPECT_FALSE(allows_quantization({"rope_freqs.weight", DType::F32, {64}}));
  EXPECT_TRUE(allows_quantization({"blk.0.attn_q.weight", DType::F16, {4096, 4096}}));
  EXPECT_TRUE(allows_quantization({"blk.0.ffn_up_exps.weight", DType::F16, {4096, 1024, 8}}));
}

TEST(QuantPolicy, ProcessingOrderIsByLayerThenName) {
  std::vector<TensorDesc> t = {{"blk.10.attn_q.weight", DType::F32, {32, 32}},
                               {"blk.2.ffn_up.weight", DType::F32, {32, 32}},
                               {"output.weight", DType::F32, {32, 32}},
                               {"blk.2.attn_k.weight", DType::F32, {32, 32}},
                               {"token_embd.weight", DType::F32, {32, 32}}};
  std::vector<size_t> order = processing_order(t);
  std::vector<std::string> names;
  for (size_t i : order) names.push_back(t[i].name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"output.weight", "token_embd.weight", "blk.2.attn_k.weight",
                                      "blk.2.ffn_up.weight", "blk.10.attn_q.weight"}));
}

TEST(QuantPolicy, FileTypeNames) {
  EXPECT_EQ(parse_file_type("q4_k_m"), FileType::Q4_K_M);
  EXPECT_EQ(parse_file_type("Q4_K"), FileType::Q4_K_M);
  EXPECT_EQ(parse_file_type("IQ4_XS"), FileType::IQ4_XS);
  EXPECT_FALSE(parse_file_type("Q4_K_X").has_value());
  EXPECT_FALSE(parse_file_type("IQ2_XXS").has_value());  // needs an importance matrix
  EXPECT_EQ(static_cast<uint32_t>(FileType::Q4_K_M), 15u);
  EXPECT_EQ(static_cast<uint32_t>(FileType::Q8_0), 7u);
  EXPECT_EQ(static_cast<uint32_t>(FileType::IQ4_XS), 30u);
  EXPECT_EQ(file_type_name(15), "Q4_K_M");
  EXPECT_EQ(file_type_name(3), "Q4_1");
  EXPECT_EQ(file_type_name(19), "IQ2_XXS");
  EXPECT_FALSE(file_type_name(5).has_value());
}

}  // namespace
}  // namespace inferd::quant

// `inferd quantize`'s file rewrite: a tiny GGUF written, quantized, reopened; types, order,
// metadata and values checked; bad inputs refused before anything is written. Also the
// streaming GGUF writer it uses.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "kernels/kernels.h"
#include "quant/quantize.h"
#include "quant/quantize_file.h"
#include "random_data.h"
#include "tensor/half.h"
#include "util/error.h"

namespace inferd::quant {
namespace {

using testing::random_floats;

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/inferd_quant_" + name;
}

std::vector<uint8_t> encode(DType type, const std::vector<float>& x) {
  std::vector<uint8_t> out(*row_bytes(type, x.size()));
  quantizer_for(type)(x.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}

std::vector<float> decode(const gguf::TensorInfo& t) {
  std::vector<float> y(t.num_elements());
  const kernels::WeightKernels* k = kernels::reference_kernels().for_weight(t.type);
  if (k == nullptr || k->dequantize == nullptr) {
    ADD_FAILURE() << "no reference dequantizer for " << dtype_name(t.type);
    return y;
  }
  k->dequantize(t.data, y.data(), static_cast<int64_t>(y.size()));
  return y;
}

double relative_rmse(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0;
  double ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    ref += double(x[i]) * x[i];
  }
  return std::sqrt(err / ref);
}

// A two-layer model 256 wide (so the k-quants fit), tied embeddings, weights in F16, BF16 and
// F32, plus metadata the rewrite must carry over.
struct TinyModel {
  std::map<std::string, std::vector<float>> values;
  std::string path;

  explicit TinyModel(const std::string& name, DType matrix_type = DType::F16) {
    path = temp_path(name);
    gguf::GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_string("general.name", "tiny");
    w.set_u32("general.file_type", 1);
    w.set_u32("llama.block_count", 2);
    w.set_u32("llama.embedding_length", 256);
    w.set_u32("llama.attention.head_count", 4);
    w.set_u32("llama.attention.head_count_kv", 1);
    w.set_strings("tokenizer.ggml.tokens", {"a", "b", "c"});
    w.set_u32("split.count", 1);
    uint32_t seed = 1;
    auto add = [&](const std::string& tensor, DType type, std::vector<uint64_t> shape) {
      uint64_t n = 1;
      for (uint64_t d : shape) n *= d;
      std::vector<float> x = random_floats(static_cast<int64_t>(n), seed++, 0.05f);
      if (type == DType::F32 && shape.size() == 1) {
        for (float& v : x) v += 1.0f;
      }
      // The stored values are what the file holds (F16/BF16 rounding included).
      std::vector<uint8_t> bytes = encode(type, x);
      values[tensor] = x;
      w.add_tensor(tensor, type, shape, bytes);
    };
    // File order differs from llama.cpp's (by layer, then name) on purpose.
    add("blk.1.ffn_down.weight", matrix_type, {512, 256});
    add("token_embd.weight", matrix_type, {256, 64});
    add("output_norm.weight", DType::F32, {256});
    for (int i = 0; i < 2; ++i) {
      const std::string p = "blk." + std::to_string(i) + ".";
      add(p + "attn_norm.weight", DType::F32, {256});
      add(p + "attn_q.weight", DType::BF16, {256, 256});
      add(p + "attn_v.weight", matrix_type, {256, 64});
      add(p + "ffn_up.weight", DType::F32, {256, 512});
      if (i == 0) add(p + "ffn_down.weight", matrix_type, {512, 256});
    }
    w.write(path);
  }
  ~TinyModel() { std::filesystem::remove(path); }
};

TEST(QuantFile, Q4_K_MRoundTrip) {
  TinyModel model("in_q4km.gguf");
  const std::string out = temp_path("out_q4km.gguf");
  ThreadPool pool(2);
  std::vector<TensorReport> reports;
  QuantizeOptions options;
  options.file_type = FileType::Q4_K_M;
  QuantizeSummary summary = quantize_file(model.path, out, options, pool,
                                          [&](const TensorReport& r) { reports.push_back(r); });
  ASSERT_EQ(reports.size(), 12u);
  EXPECT_EQ(summary.tensors, 12u);
  EXPECT_EQ(summary.fallbacks, 0u);
  EXPECT_EQ(summary.file_bytes_out, std::filesystem::file_size(out));
  EXPECT_LT(summary.tensor_bytes_out, summary.tensor_bytes_in / 2);

  gguf::GgufFile file = gguf::GgufFile::open(out);
  // llama-quantize's order: tensors outside the blocks first, then by layer, each by name.
  std::vector<std::string> names;
  for (const auto& t : file.tensors()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "output_norm.weight", "token_embd.weight", "blk.0.attn_norm.weight",
                       "blk.0.attn_q.weight", "blk.0.attn_v.weight", "blk.0.ffn_down.weight",
                       "blk.0.ffn_up.weight", "blk.1.attn_norm.weight", "blk.1.attn_q.weight",
                       "blk.1.attn_v.weight", "blk.1.ffn_down.weight", "blk.1.ffn_up.weight"}));
  // Of two layers only the second is a "more bits" layer (i >= 7n/8 = 1; the first eighth is
  // empty), so its attn_v and ffn_down get Q6_K; the tied embedding gets the output's Q6_K;
  // norms stay F32.
  std::map<std::string, DType> expected = {
      {"output_norm.weight", DType::F32},     {"token_embd.weight", DType::Q6_K},
      {"blk.0.attn_norm.weight", DType::F32}, {"blk.0.attn_q.weight", DType::Q4_K},
      {"blk.0.attn_v.weight", DType::Q4_K},   {"blk.0.ffn_down.weight", DType::Q4_K},
      {"blk.0.ffn_up.weight", DType::Q4_K},   {"blk.1.attn_norm.weight", DType::F32},
      {"blk.1.attn_q.weight", DType::Q4_K},   {"blk.1.attn_v.weight", DType::Q6_K},
      {"blk.1.ffn_down.weight", DType::Q6_K}, {"blk.1.ffn_up.weight", DType::Q4_K}};
  for (const auto& t : file.tensors()) {
    EXPECT_EQ(t.type, expected[t.name]) << t.name;
    const std::vector<float>& x = model.values[t.name];
    const std::vector<float> y = decode(t);
    const double bound = t.type == DType::F32 ? 0.0 : t.type == DType::Q6_K ? 0.021 : 0.08;
    EXPECT_LE(relative_rmse(x, y), bound) << t.name;
  }
  EXPECT_EQ(file.get_string("general.name"), "tiny");
  EXPECT_EQ(file.get_int("llama.block_count"), 2);
  EXPECT_EQ(file.require_array("tokenizer.ggml.tokens").strings("tokens"),
            (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(file.get_int("general.file_type"), 15);
  EXPECT_EQ(file.get_int("general.quantization_version"), 2);
  EXPECT_FALSE(file.has("split.count"));
  // The two keys set here come last, quantization_version first (as llama-quantize writes).
  const auto& meta = file.metadata();
  ASSERT_GE(meta.size(), 2u);
  EXPECT_EQ(meta[meta.size() - 2].first, "general.quantization_version");
  EXPECT_EQ(meta.back().first, "general.file_type");
  EXPECT_EQ(meta.back().second.type(), gguf::ValueType::UINT32);
  std::filesystem::remove(out);
}

TEST(QuantFile, PureQ8_0AndThreadCountsAgree) {
  TinyModel model("in_q8.gguf");
  QuantizeOptions options;
  options.file_type = FileType::Q8_0;
  options.pure = true;
  const std::string out1 = temp_path("out_q8_1.gguf");
  const std::string out3 = temp_path("out_q8_3.gguf");
  ThreadPool one(1);
  ThreadPool three(3);
  quantize_file(model.path, out1, options, one, nullptr);
  quantize_file(model.path, out3, options, three, nullptr);
  gguf::GgufFile a = gguf::GgufFile::open(out1);
  gguf::GgufFile b = gguf::GgufFile::open(out3);
  ASSERT_EQ(a.file_size(), b.file_size());
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    const auto& t = a.tensors()[i];
    EXPECT_EQ(t.type, t.shape.size() == 1 ? DType::F32 : DType::Q8_0) << t.name;
    EXPECT_EQ(0, std::memcmp(t.data, b.tensors()[i].data, t.num_bytes)) << t.name;
    if (t.type == DType::Q8_0) {
      EXPECT_LT(relative_rmse(model.values[t.name], decode(t)), 0.007);
    }
  }
  EXPECT_EQ(a.get_int("general.file_type"), 7);
  std::filesystem::remove(out1);
  std::filesystem::remove(out3);
}

TEST(QuantFile, QuantizedInputNeedsAllowRequantize) {
  TinyModel model("in_requant.gguf", DType::Q8_0);
  const std::string out = temp_path("out_requant.gguf");
  ThreadPool pool(1);
  QuantizeOptions options;
  options.file_type = FileType::Q4_0;
  try {
    quantize_file(model.path, out, options, pool, nullptr);
    FAIL() << "quantized input accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--allow-requantize"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(out));
  options.allow_requantize = true;
  quantize_file(model.path, out, options, pool, nullptr);
  gguf::GgufFile file = gguf::GgufFile::open(out);
  const gguf::TensorInfo* up = file.find_tensor("blk.0.ffn_up.weight");
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->type, DType::Q4_0);
  EXPECT_LT(relative_rmse(model.values["blk.0.ffn_up.weight"], decode(*up)), 0.095);
  // Q8_0 input whose type is the target stays as it was, byte for byte.
  options.file_type = FileType::Q8_0;
  options.allow_requantize = false;
  quantize_file(model.path, out, options, pool, nullptr);
  std::filesystem::remove(out);
}

TEST(QuantFile, BadInputs) {
  ThreadPool pool(1);
  QuantizeOptions options;
  EXPECT_THROW(
      quantize_file(temp_path("does_not_exist.gguf"), temp_path("x.gguf"), options, pool, nullptr),
      Error);
  TinyModel model("in_same.gguf");
  EXPECT_THROW(quantize_file(model.path, model.path, options, pool, nullptr), Error);
  // The input is untouched.
  EXPECT_NO_THROW(gguf::GgufFile::open(model.path));
}

TEST(GgufStreamWriter, MatchesTheInMemoryWriter) {
  gguf::GgufWriter whole;
  gguf::GgufWriter streamed;
  std::vector<std::vector<uint8_t>> datas;
  for (auto* w : {&whole, &streamed}) {
    w->set_string("general.architecture", "llama");
    w->set_u32("x", 7);
  }
  const std::vector<std::vector<uint64_t>> shapes = {{3}, {32, 2}, {5, 1}, {1}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    uint64_t n = 1;
    for (uint64_t d : shapes[i]) n *= d;
    std::vector<float> x = random_floats(static_cast<int64_t>(n), static_cast<uint32_t>(i));
    std::vector<uint8_t> bytes(n * 4);
    if (n > 0) std::memcpy(bytes.data(), x.data(), bytes.size());
    whole.add_tensor("t" + std::to_string(i), DType::F32, shapes[i], bytes);
    streamed.declare_tensor("t" + std::to_string(i), DType::F32, shapes[i]);
    datas.push_back(bytes);
  }
  EXPECT_THROW(streamed.build(), Error);  // declared tensors have no bytes to build from
  const std::string path = temp_path("stream.gguf");
  {
    gguf::GgufStreamWriter out(streamed, path);
    // Pieces that cross tensor boundaries.
    std::vector<uint8_t> all;
    for (const auto& d : datas) all.insert(all.end(), d.begin(), d.end());
    out.write({all.data(), 5});
    out.write({all.data() + 5, all.size() - 5});
    EXPECT_THROW(out.write({all.data(), 1}), Error);  // past the last tensor
    out.finish();
  }
  std::vector<uint8_t> expected = whole.build();
  std::vector<uint8_t> got(std::filesystem::file_size(path));
  std::FILE* f = std::fopen(path.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fread(got.data(), 1, got.size(), f), got.size());
  std::fclose(f);
  // Identical but for the padding after the last tensor, which the stream writer adds.
  ASSERT_GE(got.size(), expected.size());
  EXPECT_EQ(got.size() % 32, 0u);
  EXPECT_TRUE(std::equal(expected.begin(), expected.end(), got.begin()));
  gguf::GgufFile file = gguf::GgufFile::open(path);
  EXPECT_EQ(file.tensors().size(), 4u);
  std::filesystem::remove(path);
}

TEST(GgufStreamWriter, UnfinishedFilesAreRemoved) {
  gguf::GgufWriter header;
  header.declare_tensor("t", DType::F32, {8});
  const std::string path = temp_path("unfinished.gguf");
  {
    gguf::GgufStreamWriter out(header, path);
    std::vector<uint8_t> half(16);
    out.write(half);
    EXPECT_THROW(out.finish(), Error);
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace inferd::quant

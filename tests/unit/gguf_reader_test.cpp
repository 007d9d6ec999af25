// GGUF reader: round trips through the writer, and malformed files that must each give one
// clean inferd::Error naming the problem (never a crash, never a read past the buffer).
#include <cstring>
#include <fstream>

#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "util/error.h"

namespace inferd::gguf {
namespace {

std::vector<uint8_t> f32_bytes(size_t count, float start) {
  std::vector<uint8_t> out(count * 4);
  for (size_t i = 0; i < count; ++i) {
    float v = start + static_cast<float>(i);
    std::memcpy(out.data() + i * 4, &v, 4);
  }
  return out;
}

// A small but complete file: scalars of every type, arrays (strings, ints, nested), two tensors.
GgufWriter sample_writer() {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set("test.u8", Value::of_unsigned(ValueType::UINT8, 200));
  w.set("test.i8", Value::of_signed(ValueType::INT8, -100));
  w.set("test.u16", Value::of_unsigned(ValueType::UINT16, 60000));
  w.set("test.i16", Value::of_signed(ValueType::INT16, -30000));
  w.set_u32("llama.block_count", 30);
  w.set_i32("test.i32", -7);
  w.set("test.u64", Value::of_unsigned(ValueType::UINT64, 1ull << 40));
  w.set("test.i64", Value::of_signed(ValueType::INT64, -(1ll << 40)));
  w.set_f32("test.f32", 0.5f);
  w.set("test.f64", Value::of_float(ValueType::FLOAT64, 1e-300));
  w.set_bool("test.bool", true);
  w.set_strings("tokenizer.ggml.tokens", {"a", "b", "", "ü"});
  w.set_i32s("tokenizer.ggml.token_type", {1, 1, 3, 1});
  Array inner1{ValueType::INT32, {Value::of_signed(ValueType::INT32, 1)}};
  Array inner2{ValueType::INT32, {}};
  Array outer{ValueType::ARRAY, {Value::of_array(inner1), Value::of_array(inner2)}};
  w.set("test.nested", Value::of_array(outer));
  w.add_tensor("a", DType::F32, {4, 2}, f32_bytes(8, 0));
  w.add_tensor("b", DType::F32, {3}, f32_bytes(3, 100));
  return w;
}

std::vector<uint8_t> sample_bytes(GgufWriter::Layout* layout = nullptr) {
  return sample_writer().build(layout);
}

// Parses and returns the error message; fails the test if parsing succeeds.
std::string parse_error(const std::vector<uint8_t>& bytes) {
  try {
    GgufFile::parse(bytes, "bad.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "malformed file parsed without error";
  return "";
}

template <typename T>
void poke(std::vector<uint8_t>& bytes, uint64_t offset, T value) {
  ASSERT_LE(offset + sizeof(T), bytes.size());
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

TEST(GgufReader, RoundTripsEveryValueType) {
  auto bytes = sample_bytes();
  GgufFile file = GgufFile::parse(bytes);
  EXPECT_EQ(file.version(), 3u);
  EXPECT_EQ(file.architecture(), "llama");
  EXPECT_EQ(file.require_int("llama.block_count"), 30);
  EXPECT_EQ(file.get_int("test.u8"), 200);
  EXPECT_EQ(file.get_int("test.i8"), -100);
  EXPECT_EQ(file.get_int("test.u16"), 60000);
  EXPECT_EQ(file.get_int("test.i16"), -30000);
  EXPECT_EQ(file.get_int("test.i32"), -7);
  EXPECT_EQ(file.get_int("test.u64"), 1ll << 40);
  EXPECT_EQ(file.get_int("test.i64"), -(1ll << 40));
  EXPECT_FLOAT_EQ(*file.get_float("test.f32"), 0.5f);
  EXPECT_DOUBLE_EQ(*file.get_float("test.f64"), 1e-300);
  EXPECT_EQ(file.get_bool("test.bool"), true);
  auto tokens = file.require_array("tokenizer.ggml.tokens").strings("tokens");
  EXPECT_EQ(tokens, (std::vector<std::string>{"a", "b", "", "ü"}));
  EXPECT_EQ(file.require_array("tokenizer.ggml.token_type").ints("types"),
            (std::vector<int64_t>{1, 1, 3, 1}));
  const Array& nested = file.require_array("test.nested");
  ASSERT_EQ(nested.items.size(), 2u);
  EXPECT_EQ(nested.items[0].as_array()->ints("inner"), std::vector<int64_t>{1});
  EXPECT_TRUE(nested.items[1].as_array()->items.empty());
  EXPECT_EQ(file.metadata().front().first, "general.architecture");  // file order is kept
}

TEST(GgufReader, TensorTableAndData) {
  auto bytes = sample_bytes();
  GgufFile file = GgufFile::parse(bytes);
  ASSERT_EQ(file.tensors().size(), 2u);
  const TensorInfo* a = file.find_tensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<uint64_t>{4, 2}));
  EXPECT_EQ(a->num_bytes, 32u);
  EXPECT_EQ(a->shape_string(), "[4, 2]");
  const TensorInfo* b = file.find_tensor("b");
  ASSERT_NE(b, nullptr);
  float first = 0;
  std::memcpy(&first, b->data, 4);
  EXPECT_EQ(first, 100.0f);
  EXPECT_EQ(file.data_offset() % file.alignment(), 0u);
  EXPECT_EQ(file.find_tensor("missing"), nullptr);
}

TEST(GgufReader, CustomAlignmentAndVersion2) {
  GgufWriter w(2, 64);
  w.set_string("general.architecture", "llama");
  w.add_tensor("x", DType::F32, {3}, f32_bytes(3, 0));
  w.add_tensor("y", DType::F32, {5}, f32_bytes(5, 0));
  auto bytes = w.build();
  GgufFile file = GgufFile::parse(bytes);
  EXPECT_EQ(file.version(), 2u);
  EXPECT_EQ(file.alignment(), 64u);
  EXPECT_EQ(file.find_tensor("y")->offset, 64u);
  EXPECT_EQ(file.data_offset() % 64, 0u);
}

TEST(GgufReader, TypedGettersNameTheKey) {
  auto bytes = sample_bytes();
  GgufFile file = GgufFile::parse(bytes);
  EXPECT_EQ(file.get_string("nope"), std::nullopt);
  try {
    file.get_string("llama.block_count");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("llama.block_count"), std::string::npos);
  }
  try {
    file.require_int("llama.context_length");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("llama.context_length"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos);
  }
}

TEST(GgufReader, OpensFilesFromDisk) {
  std::string path = ::testing::TempDir() + "/inferd_sample.gguf";
  sample_writer().write(path);
  GgufFile file = GgufFile::open(path);
  EXPECT_EQ(file.tensors().size(), 2u);
  EXPECT_THROW(GgufFile::open(path + ".does-not-exist"), Error);
}

// ---- malformed files -------------------------------------------------------------------

struct Malformed {
  std::string name;
  std::function<void(std::vector<uint8_t>&, const GgufWriter::Layout&)> corrupt;
  std::string expected;  // a fragment the error message must contain
};

void PrintTo(const Malformed& m, std::ostream* os) {
  *os << m.name;
}

class GgufMalformed : public ::testing::TestWithParam<Malformed> {};

TEST_P(GgufMalformed, GivesCleanError) {
  GgufWriter::Layout layout;
  auto bytes = sample_bytes(&layout);
  GetParam().corrupt(bytes, layout);
  std::string message = parse_error(bytes);
  EXPECT_NE(message.find(GetParam().expected), std::string::npos) << message;
  EXPECT_NE(message.find("bad.gguf"), std::string::npos) << message;
}

// Offsets inside the sample file, from its layout.
uint64_t kv_start(const GgufWriter::Layout& l, size_t i) {
  return l.metadata_starts.at(i);
}
uint64_t info_start(const GgufWriter::Layout& l, size_t i) {
  return l.tensor_info_starts.at(i);
}
// Tensor "a": name length(8) + "a"(1) + n_dims(4) + 2 dims(16) + type(4) -> offset field at +33.
constexpr uint64_t kTensorATypeField = 8 + 1 + 4 + 16;
constexpr uint64_t kTensorAOffsetField = kTensorATypeField + 4;

void truncate_to(std::vector<uint8_t>& b, uint64_t size) {
  b.resize(size);
}

const Malformed kMalformed[] = {
    {"Empty", [](auto& b, auto&) { b.clear(); }, "truncated file: magic"},
    {"BadMagic", [](auto& b, auto&) { b[0] = 'X'; }, "not a GGUF file"},
    {"Version1", [](auto& b, auto&) { poke<uint32_t>(b, 4, 1); }, "version 1 is not supported"},
    {"BigEndianVersion", [](auto& b, auto&) { poke<uint32_t>(b, 4, 0x03000000); }, "big-endian"},
    {"TruncatedInHeader", [](auto& b, auto&) { truncate_to(b, 12); },
     "truncated file: tensor_count"},
    {"HugeTensorCount", [](auto& b, auto&) { poke<uint64_t>(b, 8, ~0ull); }, "tensor_count"},
    {"HugeKvCount", [](auto& b, auto&) { poke<uint64_t>(b, 16, 1ull << 60); }, "metadata_kv_count"},
    {"TruncatedInKey", [](auto& b, auto& l) { truncate_to(b, kv_start(l, 0) + 10); },
     "metadata key #0"},
    {"HugeKeyLength", [](auto& b, auto& l) { poke<uint64_t>(b, kv_start(l, 0), 1ull << 62); },
     "metadata key #0 length"},
    {"EmptyKey", [](auto& b, auto& l) { poke<uint64_t>(b, kv_start(l, 0), 0); }, "is empty"},
    {"BadUtf8InKey", [](auto& b, auto& l) { b[kv_start(l, 0) + 8 + 3] = 0xC0; }, "not valid UTF-8"},
    {"UnknownValueType", [](auto& b, auto& l) { poke<uint32_t>(b, kv_start(l, 0) + 8 + 20, 99); },
     "unknown value type 99"},
    {"TruncatedInStringValue",
     [](auto& b, auto& l) { truncate_to(b, kv_start(l, 0) + 8 + 20 + 4 + 8 + 2); },
     "'general.architecture' length 5 exceeds"},
    {"HugeStringValue",
     [](auto& b, auto& l) { poke<uint64_t>(b, kv_start(l, 0) + 8 + 20 + 4, ~0ull - 3); },
     "exceeds the"},
    {"BoolNotZeroOrOne", [](auto& b, auto& l) { b[kv_start(l, 11) + 8 + 9 + 4] = 7; },
     "bool value 7"},
    {"HugeArrayCount",
     [](auto& b, auto& l) { poke<uint64_t>(b, kv_start(l, 12) + 8 + 21 + 4 + 4, 1ull << 61); },
     "cannot fit"},
    {"UnknownArrayElementType",
     [](auto& b, auto& l) { poke<uint32_t>(b, kv_start(l, 12) + 8 + 21 + 4, 13); },
     "unknown value type 13"},
    {"TruncatedInArray", [](auto& b, auto& l) { truncate_to(b, kv_start(l, 13) - 3); },
     "truncated"},
    {"DuplicateKey", [](auto& b, auto& l) { std::memcpy(&b[kv_start(l, 2) + 8], "test.u8", 7); },
     "duplicate metadata key"},
    {"TruncatedInTensorInfo", [](auto& b, auto& l) { truncate_to(b, info_start(l, 0) + 12); },
     "n_dims of tensor 'a'"},
    {"TooManyDims", [](auto& b, auto& l) { poke<uint32_t>(b, info_start(l, 0) + 9, 5); },
     "5 dimensions"},
    {"ZeroDims", [](auto& b, auto& l) { poke<uint32_t>(b, info_start(l, 0) + 9, 0); },
     "0 dimensions"},
    {"OverflowingShape",
     [](auto& b, auto& l) {
       poke<uint64_t>(b, info_start(l, 0) + 13, 1ull << 40);
       poke<uint64_t>(b, info_start(l, 0) + 21, 1ull << 40);
     },
     "overflows"},
    {"UnknownTensorType",
     [](auto& b, auto& l) { poke<uint32_t>(b, info_start(l, 0) + kTensorATypeField, 4); },
     "unknown tensor type 4"},
    {"RowNotWholeBlocks",
     [](auto& b, auto& l) { poke<uint32_t>(b, info_start(l, 0) + kTensorATypeField, 8); },
     "not a multiple of the Q8_0 block size"},
    {"MisalignedOffset",
     [](auto& b, auto& l) { poke<uint64_t>(b, info_start(l, 1) + 8 + 1 + 4 + 8 + 4, 4); },
     "not a multiple of the alignment"},
    {"OffsetPastEnd",
     [](auto& b, auto& l) { poke<uint64_t>(b, info_start(l, 1) + 8 + 1 + 4 + 8 + 4, 1ull << 20); },
     "runs past the end"},
    {"OffsetOverflows",
     [](auto& b, auto& l) { poke<uint64_t>(b, info_start(l, 1) + 8 + 1 + 4 + 8 + 4, ~0ull - 31); },
     "runs past the end"},
    {"OverlappingTensors",
     [](auto& b, auto& l) { poke<uint64_t>(b, info_start(l, 1) + 8 + 1 + 4 + 8 + 4, 0); },
     "overlaps"},
    {"DuplicateTensorName", [](auto& b, auto& l) { b[info_start(l, 1) + 8] = 'a'; },
     "duplicate tensor name 'a'"},
    {"TruncatedInData", [](auto& b, auto& l) { truncate_to(b, l.data_start + 40); },
     "runs past the end"},
    {"BadUtf8InTensorName", [](auto& b, auto& l) { b[info_start(l, 0) + 8] = 0xFF; },
     "not valid UTF-8"},
    {"TensorOffsetFieldTruncated",
     [](auto& b, auto& l) { truncate_to(b, info_start(l, 0) + kTensorAOffsetField + 3); },
     "offset of tensor 'a'"},
};

INSTANTIATE_TEST_SUITE_P(Files, GgufMalformed, ::testing::ValuesIn(kMalformed),
                         [](const auto& info) { return info.param.name; });

TEST(GgufReader, AlignmentMustBePowerOfTwoUint32) {
  GgufWriter w;
  w.set_u32("general.alignment", 48);
  EXPECT_NE(parse_error(w.build()).find("not a power of two"), std::string::npos);
  GgufWriter w2;
  w2.set_string("general.alignment", "32");
  EXPECT_NE(parse_error(w2.build()).find("general.alignment must be uint32"), std::string::npos);
}

TEST(GgufReader, DeeplyNestedArraysAreRejected) {
  Array array{ValueType::INT32, {}};
  for (int depth = 0; depth < 20; ++depth) {
    array = Array{ValueType::ARRAY, {Value::of_array(array)}};
  }
  GgufWriter w;
  w.set("deep", Value::of_array(array));
  EXPECT_NE(parse_error(w.build()).find("nested deeper"), std::string::npos);
}

// Every prefix of a valid file is either a valid file or a clean error: truncation inside
// every section and every field.
TEST(GgufReader, EveryTruncationIsCleanError) {
  auto bytes = sample_bytes();
  size_t errors = 0;
  for (size_t size = 0; size < bytes.size(); ++size) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + size);
    try {
      GgufFile::parse(prefix);
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_EQ(errors, bytes.size());  // the last tensor's data is needed, so none may parse
}

// Quantized tensors whose table entry does not fit their type: written to disk and opened the
// way a model is, each must be an error naming the tensor.
std::string open_error(const std::vector<uint8_t>& bytes, const std::string& file_name) {
  const std::string path = ::testing::TempDir() + "/" + file_name;
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  try {
    GgufFile::open(path);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << file_name << " opened without error";
  return "";
}

TEST(GgufReader, QuantizedRowOfPartialSuperBlocksIsNamed) {
  // 256 values of Q4_K as two rows of 128: whole blocks in total, half a block per row.
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.add_tensor("blk.0.ffn_down.weight", DType::Q4_K, {128, 2}, std::vector<uint8_t>(144, 0));
  const std::string error = open_error(w.build(), "inferd_partial_blocks.gguf");
  EXPECT_NE(error.find("tensor 'blk.0.ffn_down.weight'"), std::string::npos) << error;
  EXPECT_NE(error.find("row length 128 is not a multiple of the Q4_K block size 256"),
            std::string::npos)
      << error;
}

TEST(GgufReader, QuantizedTensorShorterThanItsShapeIsNamed) {
  for (DType type : {DType::Q6_K, DType::Q5_0, DType::IQ4_XS}) {
    GgufWriter w;
    w.set_string("general.architecture", "llama");
    const uint64_t cols = 512;
    const auto bytes = static_cast<size_t>(*row_bytes(type, cols * 2));
    w.add_tensor("token_embd.weight", type, {cols, 2}, std::vector<uint8_t>(bytes, 0));
    GgufWriter::Layout layout;
    auto file = w.build(&layout);
    // The table now says 3 rows; the data holds 2 (and the alignment padding).
    poke<uint64_t>(file, layout.tensor_info_starts[0] + 8 + 17 + 4 + 8, 3);
    const std::string error = open_error(file, "inferd_short_tensor.gguf");
    EXPECT_NE(error.find("tensor 'token_embd.weight' data [0, +" +
                         std::to_string(*row_bytes(type, cols * 3)) + ") runs past the end"),
              std::string::npos)
        << dtype_name(type) << ": " << error;
  }
}

}  // namespace
}  // namespace inferd::gguf

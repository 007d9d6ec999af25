// Embeddings: the engine's hidden-state requests on the tiny model (pooling is what it claims to
// be, results do not depend on batching, chunking or the prefix cache), and the server's request
// parsing and response bodies (llama-server's and OpenAI's forms, reranking) without a socket.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "server/api/embeddings.h"
#include "tiny_engine.h"
#include "tokenizer/toy_vocab.h"
#include "toy_server_context.h"
#include "util/error.h"

namespace inferd::engine {
namespace {

using ServerEmbedEngine = TinyEngineFixture;

constexpr size_t kEmbd = 64;  // the tiny model's hidden size

// Runs one embedding request per prompt, all queued before the first step; returns each
// result's vector.
std::vector<std::vector<float>> embed(Engine& engine,
                                      const std::vector<std::vector<int32_t>>& prompts,
                                      Pooling pooling) {
  std::vector<std::shared_ptr<Collect>> outs;
  for (const std::vector<int32_t>& prompt : prompts) {
    auto out = std::make_shared<Collect>();
    Request r;
    r.prompt = prompt;
    r.embed = pooling;
    r.output = out;
    engine.add_request(std::move(r));
    outs.push_back(out);
  }
  engine.run_until_idle();
  std::vector<std::vector<float>> vectors;
  for (const auto& out : outs) {
    EXPECT_EQ(out->result_.finish_reason, FinishReason::kStop) << out->result_.error;
    EXPECT_EQ(out->result_.stats.completion_tokens, 0);
    EXPECT_TRUE(out->tokens_.empty() && out->text_.empty());  // nothing was sampled
    vectors.push_back(out->result_.embedding);
  }
  return vectors;
}

std::vector<float> embed_one(Engine& engine, const std::vector<int32_t>& prompt, Pooling pooling) {
  return embed(engine, {prompt}, pooling).front();
}

double max_difference(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
  return worst;
}

TEST_F(ServerEmbedEngine, PooledVectorsArePoolsOfThePerTokenOnes) {
  auto e = engine(4);
  const std::vector<int32_t> p = prompt(21);
  const std::vector<float> rows = embed_one(*e, p, Pooling::kNone);
  ASSERT_EQ(rows.size(), p.size() * kEmbd);
  for (const float v : rows) ASSERT_TRUE(std::isfinite(v));
  const std::span<const float> all(rows);

  std::vector<float> mean(kEmbd, 0.0f);
  for (size_t t = 0; t < p.size(); ++t)
    for (size_t j = 0; j < kEmbd; ++j)
      mean[j] += rows[t * kEmbd + j] / static_cast<float>(p.size());
  EXPECT_LT(max_difference(embed_one(*e, p, Pooling::kMean), mean), 1e-5);
  // The first and last rows are taken as they are: the same computation, the same bits.
  EXPECT_EQ(embed_one(*e, p, Pooling::kCls),
            std::vector<float>(rows.begin(), rows.begin() + kEmbd));
  EXPECT_EQ(embed_one(*e, p, Pooling::kLast),
            std::vector<float>(all.end() - static_cast<std::ptrdiff_t>(kEmbd), all.end()));
}

TEST_F(ServerEmbedEngine, SameInputSameVectorOtherInputOtherVector) {
  auto e = engine(4);
  const std::vector<int32_t> a = prompt(12);
  std::vector<int32_t> b = a;
  b[5] = b[5] == 7 ? 8 : 7;  // one token differs
  for (const Pooling pooling : {Pooling::kMean, Pooling::kLast}) {
    const std::vector<float> first = embed_one(*e, a, pooling);
    EXPECT_EQ(embed_one(*e, a, pooling), first);
    EXPECT_GT(max_difference(embed_one(*e, b, pooling), first), 1e-4);
  }
  // A causal model's first position has seen only the first token.
  EXPECT_EQ(embed_one(*e, a, Pooling::kCls), embed_one(*e, b, Pooling::kCls));
}

TEST_F(ServerEmbedEngine, BatchedInputsGiveTheVectorsOfSingleOnes) {
  const std::vector<std::vector<int32_t>> prompts = {prompt(5), prompt(40), prompt(17), prompt(2)};
  for (const Pooling pooling : {Pooling::kNone, Pooling::kMean, Pooling::kLast}) {
    auto together = engine(4);
    const std::vector<std::vector<float>> batched = embed(*together, prompts, pooling);
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto alone = engine(4);
      EXPECT_EQ(embed_one(*alone, prompts[i], pooling), batched[i]) << "prompt " << i;
    }
  }
}

TEST_F(ServerEmbedEngine, ChunkedPrefillAndPrefixCacheChangeNothing) {
  const std::vector<int32_t> p = prompt(70);
  auto whole = engine(4, /*prefix_cache=*/false);
  const std::vector<float> mean = embed_one(*whole, p, Pooling::kMean);
  const std::vector<float> last = embed_one(*whole, p, Pooling::kLast);

  EngineConfig small = config(4);
  small.max_batched_tokens = 16;  // the prompt takes five steps
  auto chunked = engine(small);
  EXPECT_EQ(embed_one(*chunked, p, Pooling::kMean), mean);
  // Its blocks are now in the prefix cache: a mean must still see every position, and the last
  // token's state is the same when the prompt's start comes from the cache.
  EXPECT_EQ(embed_one(*chunked, p, Pooling::kMean), mean);
  EXPECT_EQ(embed_one(*chunked, p, Pooling::kLast), last);
  EXPECT_GT(chunked->prefix_cache_stats().hit_tokens, 0);
}

TEST_F(ServerEmbedEngine, GenerationBesideEmbeddingsIsUnchanged) {
  const std::vector<int32_t> p = prompt(9);
  const auto generate = [&](Engine& e) {
    auto out = std::make_shared<Collect>();
    Request r;
    r.prompt = p;
    r.sampling.temperature = 0;
    r.max_tokens = 8;
    r.output = out;
    e.add_request(std::move(r));
    return out;
  };
  auto alone = engine(4);
  const auto reference = generate(*alone);
  alone->run_until_idle();
  auto mixed = engine(4);
  const auto out = generate(*mixed);
  const std::vector<float> v = embed_one(*mixed, prompt(30), Pooling::kMean);  // runs both
  EXPECT_EQ(out->result_.output_tokens, reference->result_.output_tokens);
  EXPECT_EQ(v.size(), kEmbd);
}

TEST_F(ServerEmbedEngine, PromptLongerThanTheContextIsRefused) {
  auto e = engine(4);  // context 256
  Request r;
  r.prompt = prompt(257);
  r.embed = Pooling::kLast;
  r.output = std::make_shared<Collect>();
  EXPECT_THROW(e->add_request(r), Error);
  r.prompt = prompt(256);  // the whole context: nothing is generated after it
  EXPECT_NO_THROW(e->add_request(r));
  e->run_until_idle();
}

}  // namespace
}  // namespace inferd::engine

namespace inferd::server {
namespace {

using json = nlohmann::ordered_json;

class ServerEmbedParse : public ::testing::Test {
 protected:
  // Byte tokens: ids 0 and 1 are <s> and </s>, byte b is id 2 + b; no BOS is added.
  ToyServerContext toy_{{.control = {"<s>", "</s>"}, .add_bos = false, .add_eos = false}};
  ParseContext ctx() const { return toy_.context(32); }
  EmbeddingOptions options(engine::Pooling pooling = engine::Pooling::kLast) const {
    EmbeddingOptions o;
    o.embeddings = true;
    o.pooling = pooling;
    return o;
  }
  EmbeddingRequest parse(const json& body, bool oai = true) const {
    return parse_embedding_request(body, oai, options(), ctx());
  }
  int status_of(const json& body, const EmbeddingOptions& o, bool oai = true) const {
    try {
      parse_embedding_request(body, oai, o, ctx());
      return 200;
    } catch (const ApiError& e) {
      return e.status;
    }
  }
  static int32_t id(char c) { return 2 + static_cast<unsigned char>(c); }
};

TEST_F(ServerEmbedParse, InputShapes) {
  using V = std::vector<std::vector<int32_t>>;
  EXPECT_EQ(parse({{"input", "ab"}}).inputs, (V{{id('a'), id('b')}}));
  EXPECT_EQ(parse({{"input", {"ab", "c"}}}).inputs, (V{{id('a'), id('b')}, {id('c')}}));
  EXPECT_EQ(parse({{"input", {12, 34}}}).inputs, (V{{12, 34}}));  // token ids: one input
  EXPECT_EQ(parse({{"input", json::array({12, "a", 34})}}).inputs, (V{{12, id('a'), 34}}));
  EXPECT_EQ(parse({{"input", json::array({json::array({1, 2}), "c"})}}).inputs,
            (V{{1, 2}, {id('c')}}));
  EXPECT_EQ(parse({{"input", {{"prompt_string", "a"}}}}).inputs, (V{{id('a')}}));
  const json parts = {{"content", json::array({{{"type", "text"}, {"text", "a"}},
                                               {{"type", "text"}, {"text", "b"}}})}};
  EXPECT_EQ(parse({{"input", parts}}).inputs, parse({{"input", "ab"}}).inputs);
  EXPECT_EQ(parse({{"input", json::array({"ab", parts})}}).inputs.size(), 2u);
  // llama-server's "content" answers in its own form, even on /v1.
  const EmbeddingRequest native = parse({{"content", "ab"}, {"encoding_format", "base64"}});
  EXPECT_FALSE(native.oai);
  EXPECT_TRUE(native.base64);
  EXPECT_EQ(parse({{"input", "a"}, {"embd_normalize", -1}}).normalize, -1);
}

TEST_F(ServerEmbedParse, BadInputsAreRefused) {
  const EmbeddingOptions o = options();
  for (const json& input :
       {json::array(), json(""), json({{"content", "string"}}),
        json({{"content", json::array({{{"type", "unknown"}}})}}),
        json({{"content", json::array({{{"type", "image_url"}, {"image_url", {{"url", "x"}}}}})}}),
        json::array({1, 100000}), json(3.5), json::array({"a", json::array()})}) {
    EXPECT_EQ(status_of({{"input", input}}, o), 400) << input.dump();
  }
  EXPECT_EQ(status_of({{"prompt", "a"}}, o), 400);
  EXPECT_EQ(status_of({{"input", "a"}, {"encoding_format", "hex"}}, o), 400);
  EmbeddingOptions off = o;
  off.embeddings = false;
  EXPECT_EQ(status_of({{"input", "a"}}, off), 501);
  // One vector per token has no OpenAI form; llama-server's route carries it.
  EXPECT_EQ(status_of({{"input", "a"}}, options(engine::Pooling::kNone)), 400);
  EXPECT_EQ(status_of({{"input", "a"}}, options(engine::Pooling::kNone), false), 200);
  try {
    parse({{"input", std::string(33, 'x')}});
    FAIL() << "a 33-token input fits a 32-token context";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("too large"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse({{"input", std::string(32, 'x')}}).inputs[0].size(), 32u);
}

TEST_F(ServerEmbedParse, Normalization) {
  std::vector<float> v = {3, -4, 0};
  normalize_embedding(v, 2);
  EXPECT_NEAR(v[0], 0.6f, 1e-7);
  EXPECT_NEAR(v[1], -0.8f, 1e-7);
  std::vector<float> m = {1, -2};
  normalize_embedding(m, 0);  // the largest magnitude becomes the int16 range's
  EXPECT_NEAR(m[1], -32760.0f, 1e-2);
  std::vector<float> raw = {1, 2};
  normalize_embedding(raw, -1);
  EXPECT_EQ(raw, (std::vector<float>{1, 2}));
  std::vector<float> zero = {0, 0};
  normalize_embedding(zero, 2);
  EXPECT_EQ(zero, (std::vector<float>{0, 0}));
}

TEST_F(ServerEmbedParse, Base64MatchesRfc4648) {
  const auto b64 = [](std::string_view s) {
    return base64_encode({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
  };
  EXPECT_EQ(b64(""), "");
  EXPECT_EQ(b64("f"), "Zg==");
  EXPECT_EQ(b64("fo"), "Zm8=");
  EXPECT_EQ(b64("foo"), "Zm9v");
  EXPECT_EQ(b64("foob"), "Zm9vYg==");
  EXPECT_EQ(b64("foobar"), "Zm9vYmFy");
}

TEST_F(ServerEmbedParse, OpenAiAndNativeBodies) {
  EmbeddingRequest r = parse({{"input", {"a", "bc"}}});
  std::vector<EmbeddingOutput> outputs = {{{3, 4}, 1}, {{0, 2}, 2}};
  const json oai = embeddings_response(r, outputs, false, 2, "toy");
  EXPECT_EQ(oai["model"], "toy");
  EXPECT_EQ(oai["object"], "list");
  EXPECT_EQ(oai["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(oai["usage"]["total_tokens"], 3);
  ASSERT_EQ(oai["data"].size(), 2u);
  EXPECT_EQ(oai["data"][1]["index"], 1);
  EXPECT_EQ(oai["data"][1]["object"], "embedding");
  EXPECT_NEAR(oai["data"][0]["embedding"][0].get<double>(), 0.6, 1e-7);  // unit length
  EXPECT_NEAR(oai["data"][1]["embedding"][1].get<double>(), 1.0, 1e-7);

  r.base64 = true;
  const json encoded = embeddings_response(r, outputs, false, 2, "toy");
  EXPECT_EQ(encoded["data"][0]["encoding_format"], "base64");
  std::vector<float> unit = {3, 4};
  normalize_embedding(unit, 2);
  EXPECT_EQ(encoded["data"][0]["embedding"],
            base64_encode({reinterpret_cast<const uint8_t*>(unit.data()), 8}));

  // Per token: llama-server's array, a row per token, as computed.
  EmbeddingRequest native = parse({{"content", "ab"}}, false);
  const json rows = embeddings_response(native, {{{3, 4, 5, 6}, 2}}, true, 2, "toy");
  ASSERT_TRUE(rows.is_array());
  EXPECT_EQ(rows[0]["index"], 0);
  EXPECT_EQ(rows[0]["embedding"], json::parse("[[3.0, 4.0], [5.0, 6.0]]"));
}

TEST_F(ServerEmbedParse, Rerank) {
  EmbeddingOptions o = options();
  set_pooling(o, "rank");
  EXPECT_TRUE(o.rank);
  const json body = {{"query", "q"}, {"documents", {"a", "bc", "d"}}, {"top_n", 2}};
  const RerankRequest r = parse_rerank_request(body, o, ctx());
  ASSERT_EQ(r.inputs.size(), 3u);
  EXPECT_EQ(r.inputs[1], (std::vector<int32_t>{id('q'), id('b'), id('c')}));
  const std::vector<double> scores = {0.1, 0.9, 0.5};
  const std::vector<int64_t> tokens = {2, 3, 2};
  const json jina = rerank_response(r, scores, tokens, "toy");
  ASSERT_EQ(jina["results"].size(), 2u);
  EXPECT_EQ(jina["results"][0]["index"], 1);
  EXPECT_EQ(jina["results"][1]["index"], 2);
  EXPECT_EQ(jina["usage"]["prompt_tokens"], 7);

  const RerankRequest tei = parse_rerank_request(
      {{"query", "q"}, {"texts", {"a", "bc", "d"}}, {"return_text", true}}, o, ctx());
  const json list = rerank_response(tei, scores, tokens, "toy");
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0]["score"], 0.9);
  EXPECT_EQ(list[0]["text"], "bc");

  for (const json& docs : {json::array(), json(nullptr), json(123), json::array({1, 2, 3})}) {
    EXPECT_THROW(parse_rerank_request({{"query", "q"}, {"documents", docs}}, o, ctx()), ApiError)
        << docs.dump();
  }
  EXPECT_THROW(parse_rerank_request({{"documents", {"a"}}}, o, ctx()), ApiError);
  try {
    parse_rerank_request(body, options(), ctx());
    FAIL() << "reranking without --reranking";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 501);
  }
  EXPECT_THROW(set_pooling(o, "max"), Error);
}

}  // namespace
}  // namespace inferd::server

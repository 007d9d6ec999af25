#include "server/api/embeddings.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>

#include "util/error.h"

namespace inferd::server {
namespace {

using json = nlohmann::ordered_json;

[[noreturn]] void bad(const char* param, std::string message) {
  throw ApiError(400, std::move(message), param);
}

// A list whose items are all token ids or strings (llama-server's "mixed" prompt); an empty
// list counts, and gives no tokens.
bool is_mixed_prompt(const json& v) {
  return v.is_array() && std::all_of(v.begin(), v.end(), [](const json& item) {
           return item.is_string() || item.is_number_integer();
         });
}

// Whether a list holds a token id anywhere at its top level: then it is one prompt, not a list
// of prompts.
bool holds_a_number(const json& v) {
  return v.is_array() &&
         std::any_of(v.begin(), v.end(), [](const json& item) { return item.is_number(); });
}

// A string, or ids and strings in a list: the strings tokenized in place, special tokens added
// only when the prompt starts with text (as llama-server does).
std::vector<int32_t> tokenize_mixed(const json& prompt, const tokenizer::Tokenizer& tok,
                                    const char* param) {
  if (prompt.is_string()) return tok.encode(prompt.get<std::string>(), true, true);
  std::vector<int32_t> ids;
  const int32_t n_vocab = tok.vocab().size();
  bool first = true;
  for (const json& item : prompt) {
    if (item.is_string()) {
      const std::vector<int32_t> piece = tok.encode(item.get<std::string>(), first, true);
      ids.insert(ids.end(), piece.begin(), piece.end());
    } else {
      const int64_t id = item.is_number_integer() ? item.get<int64_t>() : -1;
      if (id < 0 || id >= n_vocab)
        bad(param, fmt::format("token ids must be integers in [0, {})", n_vocab));
      ids.push_back(static_cast<int32_t>(id));
    }
    first = false;
  }
  return ids;
}

// OpenAI's content parts: the text parts joined, then tokenized as one string. This server's
// models read text only, so a media part is refused rather than dropped.
std::vector<int32_t> tokenize_parts(const json& content, const tokenizer::Tokenizer& tok,
                                    const char* param) {
  if (!content.is_array()) bad(param, "'content' of an input must be a list of content parts");
  std::string text;
  for (const json& part : content) {
    const json* type = part.is_object() && part.contains("type") ? &part["type"] : nullptr;
    if (type == nullptr || !type->is_string())
      bad(param, "each content part must be an object with a \"type\"");
    const std::string name = type->get<std::string>();
    if (name == "text") {
      if (!part.contains("text") || !part["text"].is_string())
        bad(param, "a text content part needs a string \"text\"");
      text += part["text"].get<std::string>();
    } else if (name == "image_url" || name == "input_audio" || name == "input_video" ||
               name == "video_url") {
      bad(param,
          fmt::format("content parts of type '{}' are not supported: the model reads text", name));
    } else {
      bad(param, fmt::format("unknown content part type '{}' (expected 'text')", name));
    }
  }
  return tok.encode(text, true, true);
}

std::vector<int32_t> tokenize_input(const json& entry, const tokenizer::Tokenizer& tok,
                                    const char* param) {
  if (entry.is_object() && entry.contains("content"))
    return tokenize_parts(entry["content"], tok, param);
  if (entry.is_string() || is_mixed_prompt(entry)) return tokenize_mixed(entry, tok, param);
  if (entry.is_object() && entry.contains("prompt_string")) {
    if (entry.contains("multimodal_data"))
      bad(param, "multimodal_data is not supported: the model reads text");
    const json& prompt = entry["prompt_string"];
    if (!prompt.is_string() && !is_mixed_prompt(prompt))
      bad(param, "'prompt_string' must be a string");
    return tokenize_mixed(prompt, tok, param);
  }
  bad(param, fmt::format("'{}' items must be strings, lists of token ids (or of ids and strings), "
                         "{{\"prompt_string\"}} or {{\"content\": [parts]}} objects",
                         param));
}

// Each `key` in `text` replaced by `value` (never searched again inside what was put in).
void replace_all(std::string& text, std::string_view key, const std::string& value) {
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
    text.replace(at, key.size(), value);
}

// Every prompt of a request must have tokens and fit one sequence's context.
void check_lengths(const std::vector<std::vector<int32_t>>& inputs, const ParseContext& ctx,
                   const char* param) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto n = static_cast<int64_t>(inputs[i].size());
    // A model that adds no BOS has no token for an empty text.
    if (n == 0) bad(param, fmt::format("input {} is empty: it has no tokens", i));
    if (n > ctx.context) {
      throw ApiError(400,
                     fmt::format("input {} ({} tokens) is too large to process: this server's "
                                 "context holds {} tokens per sequence",
                                 i, n, ctx.context),
                     param, "exceed_context_size_error");
    }
  }
}

}  // namespace

void set_pooling(EmbeddingOptions& options, std::string_view name) {
  static constexpr std::array<std::pair<std::string_view, engine::Pooling>, 4> kNames = {{
      {"none", engine::Pooling::kNone},
      {"mean", engine::Pooling::kMean},
      {"cls", engine::Pooling::kCls},
      {"last", engine::Pooling::kLast},
  }};
  options.rank = name == "rank";
  if (options.rank) {  // a pair's score is read from its last token (a causal model's)
    options.pooling = engine::Pooling::kLast;
    return;
  }
  for (const auto& [known, pooling] : kNames) {
    if (name == known) {
      options.pooling = pooling;
      return;
    }
  }
  fail("unknown pooling '{}' (expected none, mean, cls, last or rank)", name);
}

bool set_pooling_from_file(EmbeddingOptions& options, int64_t llama_pooling_type) {
  static constexpr std::array<std::string_view, 5> kByNumber = {"none", "mean", "cls", "last",
                                                                "rank"};
  if (llama_pooling_type < 0 || llama_pooling_type >= std::ssize(kByNumber)) return false;
  set_pooling(options, kByNumber[static_cast<size_t>(llama_pooling_type)]);
  return true;
}

EmbeddingRequest parse_embedding_request(const json& body, bool oai_route,
                                         const EmbeddingOptions& options, const ParseContext& ctx) {
  if (!options.embeddings) {
    throw ApiError(501, "this server does not serve embeddings: start it with --embedding", "",
                   "not_supported_error");
  }
  if (oai_route && options.pooling == engine::Pooling::kNone && !options.rank) {
    throw ApiError(400,
                   "pooling 'none' gives a vector per token, which the OpenAI form cannot carry: "
                   "use /embeddings, or start the server with --pooling mean, cls or last");
  }
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  check_model(body, ctx);
  EmbeddingRequest out;
  out.oai = oai_route;
  out.lora_scales = parse_lora_scales(body, ctx);
  const char* param = "input";
  const json* input = nullptr;
  if (body.contains("input")) {
    input = &body["input"];
  } else if (body.contains("content")) {  // llama-server's own field, answered in its own form
    input = &body["content"];
    param = "content";
    out.oai = false;
  } else {
    bad("input", "'input' (or 'content') is required");
  }
  if (body.contains("model")) {
    if (!body["model"].is_string()) bad("model", "'model' must be a string");
    out.model = body["model"].get<std::string>();
  }
  if (body.contains("encoding_format")) {
    const json& format = body["encoding_format"];
    if (!format.is_string() || (format != "float" && format != "base64"))
      bad("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
    out.base64 = format == "base64";
  }
  if (body.contains("embd_normalize")) {
    if (!body["embd_normalize"].is_number_integer())
      bad("embd_normalize", "'embd_normalize' must be an integer (-1, 0, 2 or a p-norm's p)");
    out.normalize = body["embd_normalize"].get<int>();
  }
  const tokenizer::Tokenizer& tok = *ctx.tokenizer;
  if (input->is_array() && !holds_a_number(*input)) {  // several inputs
    for (const json& entry : *input) out.inputs.push_back(tokenize_input(entry, tok, param));
  } else {
    out.inputs.push_back(tokenize_input(*input, tok, param));
  }
  if (out.inputs.empty()) bad(param, fmt::format("'{}' must not be an empty list", param));
  check_lengths(out.inputs, ctx, param);
  return out;
}

void normalize_embedding(std::span<float> values, int norm) {
  if (norm < 0) return;  // as computed
  double sum = 0;
  if (norm == 0) {  // into the int16 range, by the largest magnitude
    for (const float v : values) sum = std::max(sum, static_cast<double>(std::abs(v)));
    sum /= 32760.0;
  } else if (norm == 2) {
    for (const float v : values) sum += static_cast<double>(v) * v;
    sum = std::sqrt(sum);
  } else {
    for (const float v : values) sum += std::pow(std::abs(static_cast<double>(v)), norm);
    sum = std::pow(sum, 1.0 / norm);
  }
  const double scale = sum > 0 ? 1.0 / sum : 0.0;  // an all-zero vector stays zero
  for (float& v : values) v = static_cast<float>(v * scale);
}

std::string base64_encode(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = uint32_t{bytes[i]} << 16 | uint32_t{bytes[i + 1]} << 8 | bytes[i + 2];
    for (int shift = 18; shift >= 0; shift -= 6) out += kDigits[(v >> shift) & 63];
  }
  if (const size_t rest = bytes.size() - i; rest > 0) {
    const uint32_t v = uint32_t{bytes[i]} << 16 | (rest == 2 ? uint32_t{bytes[i + 1]} << 8 : 0);
    out += kDigits[(v >> 18) & 63];
    out += kDigits[(v >> 12) & 63];
    out += rest == 2 ? kDigits[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

json embeddings_response(const EmbeddingRequest& request, std::vector<EmbeddingOutput> outputs,
                         bool per_token, int64_t n_embd, const std::string& model_name) {
  const auto width = static_cast<size_t>(n_embd);
  if (!per_token) {
    for (EmbeddingOutput& o : outputs) normalize_embedding(o.values, request.normalize);
  }
  if (!request.oai) {
    json list = json::array();
    for (size_t i = 0; i < outputs.size(); ++i) {
      json rows = json::array();
      const std::vector<float>& v = outputs[i].values;
      for (size_t at = 0; at + width <= v.size(); at += width)
        rows.push_back(std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(at),
                                          v.begin() + static_cast<std::ptrdiff_t>(at + width)));
      list.push_back({{"index", i}, {"embedding", std::move(rows)}});
    }
    return list;
  }
  static_assert(std::endian::native == std::endian::little, "base64 embeddings are little-endian");
  json data = json::array();
  int64_t tokens = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::vector<float>& v = outputs[i].values;
    json item;
    if (request.base64) {
      const auto* bytes = reinterpret_cast<const uint8_t*>(v.data());
      item = {{"embedding", base64_encode({bytes, v.size() * sizeof(float)})},
              {"index", i},
              {"object", "embedding"},
              {"encoding_format", "base64"}};
    } else {
      item = {{"embedding", v}, {"index", i}, {"object", "embedding"}};
    }
    data.push_back(std::move(item));
    tokens += outputs[i].prompt_tokens;
  }
  return {{"model", request.model.empty() ? model_name : request.model},
          {"object", "list"},
          {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}},
          {"data", std::move(data)}};
}

RerankRequest parse_rerank_request(const json& body, const EmbeddingOptions& options,
                                   const ParseContext& ctx) {
  if (!options.rank) {
    throw ApiError(501, "this server does not rerank: start it with --reranking", "",
                   "not_supported_error");
  }
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  check_model(body, ctx);
  RerankRequest out;
  out.lora_scales = parse_lora_scales(body, ctx);
  if (!body.contains("query")) bad("query", "'query' is required");
  if (!body["query"].is_string()) bad("query", "'query' must be a string");
  const std::string query = body["query"].get<std::string>();
  out.tei = body.contains("texts");
  const char* param = body.contains("documents") ? "documents" : "texts";
  const json* docs = body.contains(param) ? &body[param] : nullptr;
  if (docs == nullptr || !docs->is_array() || docs->empty() ||
      !std::all_of(docs->begin(), docs->end(), [](const json& d) { return d.is_string(); }))
    bad(param, fmt::format("'{}' must be a non-empty list of strings", param));
  for (const json& d : *docs) out.documents.push_back(d.get<std::string>());
  out.top_n = std::ssize(out.documents);
  if (body.contains("top_n")) {
    const json& n = body["top_n"];
    if (!n.is_number_integer() || n.get<int64_t>() < 0)
      bad("top_n", "'top_n' must be a non-negative integer");
    out.top_n = std::min(out.top_n, n.get<int64_t>());
  }
  if (body.contains("return_text")) {
    if (!body["return_text"].is_boolean())
      bad("return_text", "'return_text' must be true or false");
    out.return_text = out.tei && body["return_text"].get<bool>();
  }
  if (body.contains("model")) {
    if (!body["model"].is_string()) bad("model", "'model' must be a string");
    out.model = body["model"].get<std::string>();
  }
  const tokenizer::Tokenizer& tok = *ctx.tokenizer;
  const tokenizer::Vocab& vocab = tok.vocab();
  // Without a prompt of the model's own, the pair is [BOS] query [EOS] document [EOS], each
  // marker where the vocabulary adds it to a text (EOS, or SEP when it has none).
  const int32_t end =
      vocab.special().eos != tokenizer::kNoToken ? vocab.special().eos : vocab.special().sep;
  for (const std::string& doc : out.documents) {
    std::vector<int32_t> ids;
    if (!options.rerank_template.empty()) {
      std::string prompt = options.rerank_template;
      replace_all(prompt, "{query}", query);
      replace_all(prompt, "{document}", doc);
      ids = tok.encode(prompt, false, true);
    } else {
      if (vocab.add_bos() && vocab.special().bos != tokenizer::kNoToken)
        ids.push_back(vocab.special().bos);
      const std::vector<int32_t> q = tok.encode(query, false, false);
      ids.insert(ids.end(), q.begin(), q.end());
      if (vocab.add_eos() && end != tokenizer::kNoToken) ids.push_back(end);
      const std::vector<int32_t> d = tok.encode(doc, false, false);
      ids.insert(ids.end(), d.begin(), d.end());
      if (vocab.add_eos() && end != tokenizer::kNoToken) ids.push_back(end);
    }
    out.inputs.push_back(std::move(ids));
  }
  check_lengths(out.inputs, ctx, param);
  return out;
}

double rerank_score(std::span<const float> embedding) {
  return embedding.empty() ? -1e6 : static_cast<double>(embedding[0]);
}

json rerank_response(const RerankRequest& request, std::span<const double> scores,
                     std::span<const int64_t> prompt_tokens, const std::string& model_name) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  order.resize(std::min(order.size(), static_cast<size_t>(std::max<int64_t>(0, request.top_n))));
  const char* label = request.tei ? "score" : "relevance_score";
  json results = json::array();
  for (const size_t i : order) {
    json item = {{"index", i}, {label, scores[i]}};
    if (request.return_text) item["text"] = request.documents[i];
    results.push_back(std::move(item));
  }
  if (request.tei) return results;
  const int64_t tokens = std::accumulate(prompt_tokens.begin(), prompt_tokens.end(), int64_t{0});
  return {{"model", request.model.empty() ? model_name : request.model},
          {"object", "list"},
          {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}},
          {"results", std::move(results)}};
}

}  // namespace inferd::server

// llama-server's embeddings and reranking APIs: request bodies -> token lists for the engine's
// embedding requests (engine::Request::embed), finished hidden states -> response bodies. Pure
// functions; the HTTP handlers (http_server.cpp) only submit and wait.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/api/openai_request.h"

namespace inferd::server {

// What the server was started with (--embedding, --pooling, --reranking).
struct EmbeddingOptions {
  bool embeddings = false;  // the embedding routes answer (--embedding, or --reranking)
  bool rank = false;        // --reranking / --pooling rank: the rerank routes answer
  engine::Pooling pooling = engine::Pooling::kLast;
  // The model's own reranking prompt (tokenizer.chat_template.rerank), with {query} and
  // {document} in it; empty: query and document are joined with the vocabulary's markers.
  std::string rerank_template;
};

// --pooling NAME: none, mean, cls, last, rank (rank also turns the rerank routes on). An unknown
// name is an inferd::Error listing the known ones.
void set_pooling(EmbeddingOptions& options, std::string_view name);
// llama.cpp's number for a pooling type (a GGUF's `<arch>.pooling_type`): 0 none, 1 mean, 2 cls,
// 3 last, 4 rank; false for another.
bool set_pooling_from_file(EmbeddingOptions& options, int64_t llama_pooling_type);

struct EmbeddingRequest {
  bool oai = true;  // OpenAI's list object; false: llama-server's own array
  bool base64 = false;
  // llama-server's embd_normalize: -1 none, 0 scaled into the int16 range by the largest
  // magnitude, 2 euclidean (the default), p > 0 the p-norm.
  int normalize = 2;
  std::string model;  // the body's "model", reported back; empty: the server's name
  std::vector<std::vector<int32_t>> inputs;
  std::vector<float> lora_scales;  // engine::Request::lora_scales
};

// POST /v1/embeddings (oai_route) or /embeddings, /embedding. "input" (or, llama-server's form,
// "content", which always answers in its own format): a string, a list of token ids, a list
// mixing both, an object {"prompt_string"} or {"content": [text parts]}, or a list of those
// for several inputs. ApiError: the server is not serving embeddings (501), per-token pooling on
// the OpenAI route, an empty or malformed input, token ids outside the vocabulary, an input
// longer than the context (400).
EmbeddingRequest parse_embedding_request(const nlohmann::ordered_json& body, bool oai_route,
                                         const EmbeddingOptions& options, const ParseContext& ctx);

// Scales `values` in place as embd_normalize `norm` says (EmbeddingRequest::normalize).
void normalize_embedding(std::span<float> values, int norm);

// One finished input: the engine's RequestResult::embedding and its prompt's length.
struct EmbeddingOutput {
  std::vector<float> values;  // [rows, n_embd]: one row when pooled, one per token otherwise
  int64_t prompt_tokens = 0;
};

// The answer to an embedding request, outputs in input order. Pooled vectors are normalized as
// the request says; per-token ones (Pooling::kNone) are returned as computed, as llama-server
// does. OpenAI form: {"model", "object": "list", "usage", "data": [{"embedding", "index",
// "object"}]} with base64 strings of little-endian float32 when asked; llama-server's form:
// [{"index", "embedding": [[...], ...]}].
nlohmann::ordered_json embeddings_response(const EmbeddingRequest& request,
                                           std::vector<EmbeddingOutput> outputs, bool per_token,
                                           int64_t n_embd, const std::string& model_name);

// The bytes as base64 (RFC 4648, with padding).
std::string base64_encode(std::span<const uint8_t> bytes);

struct RerankRequest {
  bool tei = false;          // "texts" given: Text Embeddings Inference's answer, a bare list
  bool return_text = false;  // TEI only: each result carries its document
  int64_t top_n = 0;         // results kept, best first
  std::string model;
  std::vector<std::string> documents;
  std::vector<std::vector<int32_t>> inputs;  // per document: the query and it, as one prompt
  std::vector<float> lora_scales;            // engine::Request::lora_scales
};

// POST /rerank (also /reranking, /v1/rerank, /v1/reranking): {"query", "documents" (Jina) or
// "texts" (TEI), "top_n", "return_text"}. ApiError: the server was not started with
// --reranking (501), a missing query, documents that are not a non-empty list of strings, a
// pair longer than the context (400).
RerankRequest parse_rerank_request(const nlohmann::ordered_json& body,
                                   const EmbeddingOptions& options, const ParseContext& ctx);

// The score of one pair from its engine result (Pooling::kLast): the first component of the
// last token's hidden state, as llama-server reads a reranker's classification output (a model
// without a classification head gives its hidden state's first component there too).
double rerank_score(std::span<const float> embedding);

// The answer, best score first, cut to top_n: Jina's {"model", "object": "list", "usage",
// "results": [{"index", "relevance_score"}]} or TEI's [{"index", "score"(, "text")}].
nlohmann::ordered_json rerank_response(const RerankRequest& request, std::span<const double> scores,
                                       std::span<const int64_t> prompt_tokens,
                                       const std::string& model_name);

}  // namespace inferd::server

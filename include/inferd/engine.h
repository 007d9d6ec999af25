// inferd as a library: open a GGUF model, then generate from many prompts or chats at once
// through the engine's continuous-batching scheduler, streaming text as it is made.
//
//   inferd::Engine engine("model.gguf");
//   auto outputs = engine.generate({"The capital of France is"}, inferd::SamplingParams::greedy());
//   std::cout << outputs[0].outputs[0].text;
//
// Nothing of the engine's internals is visible here (the implementation is behind a pointer),
// so a program builds against the installed headers alone and links libinferd
// (find_package(inferd) / pkg-config inferd). The C ABI is inferd/inferd.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "inferd/error.h"
#include "inferd/outputs.h"
#include "inferd/sampling_params.h"

namespace inferd {

// The library's version, "MAJOR.MINOR.PATCH".
const char* version();

enum class KvCacheType { kF16, kQ8_0, kQ4_0 };
enum class Device { kCpu, kCuda };
// Where structured output's grammar masks are computed: on a thread of their own during the
// forward pass (kOn), after it on the compute threads (kOff), or kOn when a CPU is free (kAuto).
enum class GrammarThread { kAuto, kOn, kOff };

// Speculative decoding, as `inferd run --spec ...` and vLLM's speculative_config name it.
struct SpeculativeOptions {
  std::string method =
      "off";                // off, ngram, draft (draft_model), mtp, eagle3 (draft_model: the head)
  std::string draft_model;  // GGUF file of the draft model or EAGLE-3 head
  int32_t num_tokens = 6;   // most draft tokens per sequence and step
  int32_t prompt_lookup_min = 2;
  int32_t prompt_lookup_max = 5;
  int32_t max_step_rows =
      16;  // drafts stop when a step's decode rows would pass this (0: no limit)
};

struct EngineOptions {
  int threads = 0;          // compute threads; 0: the number of cores, at most 4
  bool pin_threads = true;  // each thread on its own CPU when there are as many as CPUs allowed
  int64_t context = 0;      // tokens per sequence (prompt + output); 0: the model's, at most 4096
  int max_seqs = 16;        // sequences decoded together (each choice of each prompt is one)
  int64_t max_batched_tokens = 512;  // tokens per engine step (prompt chunks and decodes)
  KvCacheType kv_cache_type_k = KvCacheType::kF16;
  KvCacheType kv_cache_type_v = KvCacheType::kF16;
  // With a Q8_0 or Q4_0 cache: F16 copies of each sequence's first block and of at least its
  // latest this many keys, which attention reads instead of their quantized ones; 0: none.
  int kv_exact_recent_tokens = 32;
  bool swa_full = false;       // sliding-window layers keep every position (llama.cpp --swa-full)
  bool prefix_caching = true;  // a prompt starts from the longest prefix still in the KV cache
  Device device = Device::kCpu;
  // The model split over this many ranks of an MPI job (mpirun -n N); the other ranks must run
  // the worker loop, as the `inferd` command does. 1 in a plain process.
  int tensor_parallel = 1;
  // Or by layers (pipeline parallelism), over this many ranks; not with tensor_parallel.
  int pipeline_parallel = 1;
  // Or each rank holding the whole model and computing its own sequences (data parallelism).
  int data_parallel = 1;
  // With tensor_parallel or data_parallel: a mixture of experts' experts spread whole over the
  // ranks (data parallel: each token sent to its experts' ranks and back).
  bool expert_parallel = false;
  GrammarThread grammar_thread = GrammarThread::kAuto;
  SpeculativeOptions speculative;
  // chat(): a built-in template name ("chatml", "llama3", ...) or a template file; empty: the
  // model's own.
  std::string chat_template;
  // LoRA adapters (llama.cpp's GGUF adapters) applied to every request: the model computes
  // W x + scale * alpha / rank * B (A x) for each weight they adapt (llama.cpp's
  // --lora-scaled). CPU, one rank.
  struct LoraAdapter {
    std::string path;
    float scale = 1.0f;
  };
  std::vector<LoraAdapter> lora_adapters;
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

struct ModelInfo {
  std::string architecture;  // general.architecture: "llama", "qwen3", ...
  std::string name;          // general.name, if the file has one
  int32_t n_vocab = 0;
  int64_t context_length = 0;  // the context it was trained with
  int64_t context = 0;         // tokens per sequence this engine allows
  bool has_chat_template = false;
};

// Counters since the engine was opened (what `inferd run` prints after its text).
struct EngineStats {
  int threads = 0;
  int64_t peak_kv_bytes = 0;
  int64_t computed_tokens = 0;  // prompt and generated tokens run through the model
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
  int64_t spec_drafts = 0;  // speculative verification steps with a draft
  int64_t spec_draft_tokens = 0;
  int64_t spec_accepted_tokens = 0;
  int64_t grammar_masks = 0;  // structured output: token masks computed, and how long they took
  double grammar_mask_median_us = 0;
  double grammar_mask_p99_us = 0;
  double grammar_mask_mean_us = 0;
  double grammar_apply_median_us = 0;
};

// One model and its KV cache. Thread safety: every member function may be called from any
// thread; calls are served one at a time (a second generate() waits for the first), and the
// prompts of one call are batched together. Cancel a call in progress with its CancelToken.
class Engine {
 public:
  // Loads the model (GGUF) and sizes the KV cache. Throws inferd::Error naming the problem (no
  // such file, a bad file, an architecture or option it cannot run).
  explicit Engine(const std::string& model_path, const EngineOptions& options = {});
  ~Engine();
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Generates for every prompt (encoded with the model's BOS; special-token texts are read as
  // the tokens) and returns their outputs in the prompts' order. All prompts run through the
  // scheduler together. Bad parameters or a prompt that does not fit the context: inferd::Error,
  // and nothing runs.
  std::vector<RequestOutput> generate(const std::vector<std::string>& prompts,
                                      const SamplingParams& params = {},
                                      const StreamCallback& on_delta = {},
                                      const CancelToken& cancel = {});
  // The same from token ids.
  std::vector<RequestOutput> generate_tokens(const std::vector<std::vector<int32_t>>& prompts,
                                             const SamplingParams& params = {},
                                             const StreamCallback& on_delta = {},
                                             const CancelToken& cancel = {});
  // One prompt.
  RequestOutput complete(const std::string& prompt, const SamplingParams& params = {},
                         const StreamCallback& on_delta = {}, const CancelToken& cancel = {});

  // A conversation through the chat template (EngineOptions::chat_template, else the model's),
  // answered as the assistant.
  RequestOutput chat(const std::vector<ChatMessage>& messages, const SamplingParams& params = {},
                     const StreamCallback& on_delta = {}, const CancelToken& cancel = {});
  // Many conversations, batched.
  std::vector<RequestOutput> chat_batch(const std::vector<std::vector<ChatMessage>>& conversations,
                                        const SamplingParams& params = {},
                                        const StreamCallback& on_delta = {},
                                        const CancelToken& cancel = {});
  // The prompt text chat() would generate from.
  std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt = true) const;

  // add_special: the model's BOS (and EOS where it adds one); special-token texts become tokens.
  std::vector<int32_t> tokenize(std::string_view text, bool add_special = true) const;
  std::string detokenize(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  // One more LoRA adapter (llama.cpp's GGUF form) at scale 0, after EngineOptions::lora_adapters
  // and those added before; returns its index in SamplingParams::lora_scales, through which a
  // call applies it (vLLM loads a LoRARequest's adapter so, when a request first names it).
  // Waits for a running call to end. Throws inferd::Error naming what is wrong (the file, a
  // split model, a CUDA engine); the engine is then as it was.
  size_t add_lora_adapter(const std::string& path);

  ModelInfo model_info() const;
  EngineStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace inferd

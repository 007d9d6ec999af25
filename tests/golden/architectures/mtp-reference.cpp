// llama.cpp's multi-token-prediction (MTP, "nextn") draft head on a Qwen3.5 file, driven the way
// common/speculative.cpp's draft-mtp drives it, for the golden data of make-golden.
//
//   mtp-reference MODEL.gguf N_DRAFT N_GREEDY < prompts    (one prompt a line: token ids)
//
// Built by make-golden against the llama.cpp sources' include/, src/llama-ext.h (the staging
// API: llama_set_embeddings_nextn, llama_get_embeddings_nextn[_ith]) and ggml/include, and linked
// to the built libllama.so; it never enters inferd's build. Writes one JSON object a prompt line:
//
//   prompt_ids           the prompt
//   target_top_logprobs  the target's top-10 [id, logprob] after the prompt
//   target_greedy_ids    the target's greedy continuation (N_GREEDY tokens; the first is x)
//   draft_ids            the MTP head's N_DRAFT drafted tokens (argmax of each step)
//   draft_top_logprobs   each draft step's top-10 [id, logprob]
//
// Log-probabilities are a log-softmax of the raw logits over the whole vocabulary; top-10 ties
// go to the lower id. The feeding, as common_speculative_impl_draft_mtp::process() and draft():
// the target decodes the prompt (positions 0..n-1) with its nextn embeddings on and unmasked, so
// it returns h_nextn (the output-normed last hidden state) of every token; the MTP context then
// decodes the same tokens at the same positions, token k paired with the target's h row k-1 and
// token 0 with the pending row (zeros at the start), which fills its own KV cache and outputs
// nothing; the pending row becomes h row n-1. x = the target's argmax after the prompt. Draft
// step 1 decodes x at position n with the pending row; step i+1 decodes step i's drafted token
// at position n+i with the MTP context's own h_nextn row of step i.
//
// Settings: 2 threads, context 1024, batch and micro-batch 512, one sequence, F16 K/V, flash
// attention off; the MTP context is created against the target (ctx_type MTP, ctx_other).
//
//   mtp-reference --eagle3 HEAD.gguf MODEL.gguf N_DRAFT N_GREEDY < prompts
//
// does the same for an EAGLE-3 head (architecture eagle3), as common_speculative_impl_draft_
// eagle3 feeds it: the target decodes the prompt with the inputs of the head's target_layers
// extracted (llama_set_embeddings_layer_inp) for every token; the head's encoder turns each
// token's three rows, side by side, into g (its nextn embeddings); its decoder then decodes the
// pairs (prompt token k + 1, g row k) at positions k = 0..n-2, outputting nothing. Draft step 1
// decodes (x, g row n-1) at position n-1; step i+1 (step i's drafted token, the head's own
// pre-norm nextn row of step i) at position n-1+i. The head's context has ctx_other = the target
// (for the embeddings or output it takes from it) and the target's other settings.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "llama-ext.h"
#include "llama.h"

namespace {

constexpr int kTop = 10;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "mtp-reference: %s\n", what.c_str());
  std::exit(1);
}

void Quiet(ggml_log_level level, const char* text, void*) {
  if (level >= GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

// The top kTop of a log-softmax over the whole vocabulary, and the argmax.
struct Top {
  std::vector<std::pair<int, double>> entries;
  int argmax() const { return entries.front().first; }
};

Top TopLogprobs(const float* logits, int n_vocab) {
  double max = logits[0];
  for (int i = 1; i < n_vocab; ++i) max = std::max(max, double(logits[i]));
  double sum = 0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i]) - max);
  const double lse = max + std::log(sum);
  std::vector<int> ids(n_vocab);
  for (int i = 0; i < n_vocab; ++i) ids[i] = i;
  std::partial_sort(ids.begin(), ids.begin() + kTop, ids.end(), [&](int a, int b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  Top top;
  for (int k = 0; k < kTop; ++k) top.entries.push_back({ids[k], double(logits[ids[k]]) - lse});
  return top;
}

// A one-sequence batch of tokens, each optionally paired with an h row (the MTP input).
class Batch {
 public:
  explicit Batch(llama_context* ctx) : batch_(llama_batch_ext_init(ctx)) {}
  ~Batch() { llama_batch_ext_free(batch_); }
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  void Clear() { llama_batch_ext_clear(batch_); }
  int Add(llama_token id, llama_pos pos, bool output, const float* h = nullptr, int n_embd = 0) {
    const int idx = llama_batch_ext_add_token(batch_, 0, id);
    if (idx < 0) Die("llama_batch_ext_add_token failed");
    const llama_pos p[4] = {pos, 0, 0, 0};
    llama_batch_ext_set_pos(batch_, idx, p);
    if (h && !llama_batch_ext_set_embd_token(batch_, idx, {h, 1, size_t(n_embd)})) {
      Die("llama_batch_ext_set_embd_token failed");
    }
    if (output) llama_batch_ext_set_output_logits(batch_, idx, true);
    return idx;
  }
  void Decode(llama_context* ctx, const char* what) {
    const int rc = llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, batch_);
    if (rc != 0) Die(std::string("llama_process (") + what + ") returned " + std::to_string(rc));
  }

 private:
  llama_batch_ext* batch_;
};

void PrintTop(std::ostream& out, const Top& top) {
  out << '[';
  for (size_t k = 0; k < top.entries.size(); ++k) {
    char value[32];
    std::snprintf(value, sizeof value, "%.9g", top.entries[k].second);
    out << (k ? ", " : "") << '[' << top.entries[k].first << ", " << value << ']';
  }
  out << ']';
}

void PrintIds(std::ostream& out, const std::vector<llama_token>& ids) {
  out << '[';
  for (size_t k = 0; k < ids.size(); ++k) out << (k ? ", " : "") << ids[k];
  out << ']';
}

}  // namespace

// The next prompt line's token ids; empty at the end of the input (blank lines are skipped).
std::vector<llama_token> NextPrompt() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::vector<llama_token> prompt;
    for (llama_token id; in >> id;) prompt.push_back(id);
    if (!prompt.empty()) return prompt;
  }
  return {};
}

// Empties both contexts' memories and decodes the prompt on the target, logits for its last
// token only: the target's top after the prompt.
Top DecodePrompt(llama_context* tgt, llama_context* dft, Batch& tbatch,
                 const std::vector<llama_token>& prompt, int n_vocab) {
  const int n = int(prompt.size());
  llama_memory_clear(llama_get_memory(tgt), true);
  llama_memory_clear(llama_get_memory(dft), true);
  tbatch.Clear();
  for (int k = 0; k < n; ++k) tbatch.Add(prompt[k], k, k == n - 1);
  tbatch.Decode(tgt, "target prompt");
  return TopLogprobs(llama_get_logits_ith(tgt, n - 1), n_vocab);
}

// The target's greedy continuation of a prompt it has decoded, whose argmax is `first`.
std::vector<llama_token> Greedy(llama_context* tgt, Batch& tbatch, llama_token first, int n,
                                int n_greedy, int n_vocab) {
  std::vector<llama_token> greedy = {first};
  while (int(greedy.size()) < n_greedy) {
    tbatch.Clear();
    tbatch.Add(greedy.back(), n + int(greedy.size()) - 1, true);
    tbatch.Decode(tgt, "target greedy");
    greedy.push_back(TopLogprobs(llama_get_logits_ith(tgt, 0), n_vocab).argmax());
  }
  return greedy;
}

void PrintCase(const std::vector<llama_token>& prompt, const Top& target_top,
               const std::vector<llama_token>& greedy, const std::vector<llama_token>& draft_ids,
               const std::vector<Top>& draft_tops) {
  std::ostringstream out;
  out << "{\"prompt_ids\": ";
  PrintIds(out, prompt);
  out << ", \"target_top_logprobs\": ";
  PrintTop(out, target_top);
  out << ", \"target_greedy_ids\": ";
  PrintIds(out, greedy);
  out << ", \"draft_ids\": ";
  PrintIds(out, draft_ids);
  out << ", \"draft_top_logprobs\": [";
  for (size_t i = 0; i < draft_tops.size(); ++i) {
    if (i) out << ", ";
    PrintTop(out, draft_tops[i]);
  }
  out << "]}\n";
  std::cout << out.str() << std::flush;
}

// The draft steps and the output line of one prompt: the target's argmax x at `position` with
// `hidden` (h or g of the position before), then each drafted token one position further with the
// draft context's own nextn row of the step before; then the target's greedy continuation.
void DraftAndPrint(llama_context* tgt, Batch& tbatch, llama_context* dft, Batch& dbatch,
                   const std::vector<llama_token>& prompt, const Top& target_top,
                   std::vector<float> hidden, int position, int n_draft, int n_greedy,
                   int n_vocab) {
  const size_t n_embd = hidden.size();
  std::vector<llama_token> draft_ids;
  std::vector<Top> draft_tops;
  llama_token last = target_top.argmax();
  for (int i = 0; i < n_draft; ++i) {
    dbatch.Clear();
    const int idx = dbatch.Add(last, position + i, true, hidden.data(), int(n_embd));
    dbatch.Decode(dft, "draft");
    draft_tops.push_back(TopLogprobs(llama_get_logits_ith(dft, idx), n_vocab));
    last = draft_tops.back().argmax();
    draft_ids.push_back(last);
    const float* h = llama_get_embeddings_nextn_ith(dft, idx);
    if (!h) Die("the draft context gave no nextn embedding");
    hidden.assign(h, h + n_embd);
  }
  const int n = int(prompt.size());
  PrintCase(prompt, target_top, Greedy(tgt, tbatch, target_top.argmax(), n, n_greedy, n_vocab),
            draft_ids, draft_tops);
}

llama_context_params ContextParams() {
  llama_context_params cparams = llama_context_default_params();
  cparams.n_ctx = 1024;
  cparams.n_batch = 512;
  cparams.n_ubatch = 512;
  cparams.n_seq_max = 1;
  cparams.n_threads = 2;
  cparams.n_threads_batch = 2;
  cparams.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cparams.type_k = GGML_TYPE_F16;
  cparams.type_v = GGML_TYPE_F16;
  cparams.no_perf = true;
  return cparams;
}

llama_model* Load(const char* path, bool mtp) {
  llama_model_params mparams = llama_model_default_params();
  mparams.n_gpu_layers = 0;
  mparams.load_mtp = mtp;
  mparams.progress_callback = [](float, void*) { return true; };  // no progress dots
  llama_model* model = llama_model_load_from_file(path, mparams);
  if (!model) Die(std::string("cannot load ") + path);
  return model;
}

// The EAGLE-3 mode (the header says how it feeds the head).
int Eagle3(const char* head_path, const char* model_path, int n_draft, int n_greedy) {
  llama_model* model = Load(model_path, false);
  llama_model* head = Load(head_path, false);
  const int n_layers = llama_model_target_layer_ids_n(head);
  const int32_t* layers = llama_model_target_layer_ids(head);
  if (n_layers != 3) Die("the head names no 3 target layers");
  llama_context* tgt = llama_init_from_model(model, ContextParams());
  if (!tgt) Die("cannot create the target context");
  llama_context_params dparams = ContextParams();
  dparams.n_rs_seq = 0;
  dparams.ctx_other = tgt;
  llama_context* dft = llama_init_from_model(head, dparams);
  if (!dft) Die("cannot create the EAGLE-3 context");
  for (int k = 0; k < n_layers; ++k) llama_set_embeddings_layer_inp(tgt, uint32_t(layers[k]), true);
  llama_set_embeddings_nextn(dft, true, /*masked=*/true);

  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  const int n_embd_tgt = llama_model_n_embd(model);
  const int n_embd = llama_model_n_embd(head);
  const int n_features = n_layers * n_embd_tgt;
  Batch tbatch(tgt), dbatch(dft);
  for (std::vector<llama_token> prompt; !(prompt = NextPrompt()).empty();) {
    const int n = int(prompt.size());
    const Top target_top = DecodePrompt(tgt, dft, tbatch, prompt, n_vocab);
    std::vector<float> features(size_t(n) * n_features);
    for (int k = 0; k < n_layers; ++k) {
      const float* rows = llama_get_embeddings_layer_inp(tgt, uint32_t(layers[k]));
      if (!rows) Die("the target gave no input of layer " + std::to_string(layers[k]));
      for (int t = 0; t < n; ++t)
        std::copy_n(rows + size_t(t) * n_embd_tgt, n_embd_tgt,
                    features.data() + size_t(t) * n_features + size_t(k) * n_embd_tgt);
    }

    // The encoder: g of every prompt token.
    llama_batch_ext* enc = llama_batch_ext_init(dft);
    for (int t = 0; t < n; ++t) {
      const int idx = llama_batch_ext_add_embd(enc, 0, {features.data() + size_t(t) * n_features, 1, size_t(n_features)});
      if (idx < 0) Die("llama_batch_ext_add_embd failed");
      const llama_pos p[4] = {t, 0, 0, 0};
      llama_batch_ext_set_pos(enc, idx, p);
      llama_batch_ext_set_output_embd(enc, idx, true);
    }
    if (llama_process(dft, LLAMA_PROCESS_TYPE_ENCODE, enc) != 0) Die("the EAGLE-3 encoder failed");
    llama_batch_ext_free(enc);
    const float* g_rows = llama_get_embeddings_nextn(dft);
    if (!g_rows) Die("the EAGLE-3 encoder gave no g");
    const std::vector<float> g(g_rows, g_rows + size_t(n) * n_embd);

    if (n > 1) {
      dbatch.Clear();
      for (int k = 0; k + 1 < n; ++k) dbatch.Add(prompt[k + 1], k, false, g.data() + size_t(k) * n_embd, n_embd);
      dbatch.Decode(dft, "EAGLE-3 prompt");
    }
    // Draft step 1 pairs x with g of the prompt's last position, at that position.
    DraftAndPrint(tgt, tbatch, dft, dbatch, prompt, target_top,
                  std::vector<float>(g.begin() + size_t(n - 1) * n_embd, g.end()), n - 1, n_draft,
                  n_greedy, n_vocab);
  }
  llama_free(dft);
  llama_free(tgt);
  llama_model_free(head);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}

int main(int argc, char** argv) {
  llama_log_set(Quiet, nullptr);
  llama_backend_init();
  if (argc == 6 && std::string(argv[1]) == "--eagle3")
    return Eagle3(argv[2], argv[3], std::atoi(argv[4]), std::atoi(argv[5]));
  if (argc != 4)
    Die("usage: mtp-reference MODEL.gguf N_DRAFT N_GREEDY < prompts, or mtp-reference --eagle3 "
        "HEAD.gguf MODEL.gguf N_DRAFT N_GREEDY < prompts");
  const int n_draft = std::atoi(argv[2]);
  const int n_greedy = std::atoi(argv[3]);
  if (n_draft < 1 || n_greedy < 1) Die("N_DRAFT and N_GREEDY must be positive");

  llama_model* model = Load(argv[1], true);
  if (llama_model_n_layer_nextn(model) != 1) Die("the model has no single MTP block");

  const llama_context_params cparams = ContextParams();
  llama_context* tgt = llama_init_from_model(model, cparams);
  if (!tgt) Die("cannot create the target context");

  // As common_speculative_init_result does for draft-mtp without a separate draft model.
  llama_context_params dparams = cparams;
  dparams.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
  dparams.n_rs_seq = 0;
  dparams.ctx_other = tgt;
  llama_context* dft = llama_init_from_model(model, dparams);
  if (!dft) Die("cannot create the MTP context");

  // As common_speculative_impl_draft_mtp's constructor.
  llama_set_embeddings_nextn(tgt, true, /*masked=*/false);
  llama_set_embeddings_nextn(dft, true, /*masked=*/true);

  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  const int n_embd = llama_model_n_embd_out(model);
  Batch tbatch(tgt), dbatch(dft);

  for (std::vector<llama_token> prompt; !(prompt = NextPrompt()).empty();) {
    const int n = int(prompt.size());
    // The target's prompt (with h_nextn of every token).
    const Top target_top = DecodePrompt(tgt, dft, tbatch, prompt, n_vocab);
    const float* h_tgt = llama_get_embeddings_nextn(tgt);
    if (!h_tgt) Die("the target gave no nextn embeddings");

    // process(): the same tokens, token k with h row k-1, token 0 with the pending row (zeros).
    const std::vector<float> zeros(n_embd, 0.0f);
    dbatch.Clear();
    for (int k = 0; k < n; ++k) {
      const float* h = k == 0 ? zeros.data() : h_tgt + size_t(k - 1) * n_embd;
      dbatch.Add(prompt[k], k, false, h, n_embd);
    }
    dbatch.Decode(dft, "MTP prompt");

    // draft(): x at position n with the pending row (the target's h row n-1), then each drafted
    // token with the MTP's own h_nextn row of the step before.
    DraftAndPrint(tgt, tbatch, dft, dbatch, prompt, target_top,
                  std::vector<float>(h_tgt + size_t(n - 1) * n_embd, h_tgt + size_t(n) * n_embd), n,
                  n_draft, n_greedy, n_vocab);
  }

  llama_free(dft);
  llama_free(tgt);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}

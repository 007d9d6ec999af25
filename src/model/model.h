// Model: one architecture's forward pass over a Batch and the KV cache. Architectures live
// in model/archs/<arch>.cpp and are found by name through the registry (model/registry.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "kv/kv_cache.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/lora.h"
#include "util/error.h"
#include "util/machine_memory.h"
#include "util/thread_pool.h"

namespace inferd::dist {
class Communicator;
}

namespace inferd::model {

// What one rank of a model needs of its machine's memory for the KV pool (Model::rank_memory).
struct RankMemory {
  uint32_t machine = 0;     // util/machine_memory.h: ranks with the same id share memory
  int64_t available = -1;   // bytes its machine could give now (-1: unknown)
  int64_t block_bytes = 0;  // one KV block of every group, of this rank's layers and heads
};

class Model;

// Where the forward pass runs: this process's CPU cores, or one CUDA device (src/cuda/).
enum class Device { kCpu, kCuda };

struct ModelOptions {
  int64_t max_batch_tokens = 512;  // work buffers are sized for this many tokens per forward
  int64_t max_context = 0;         // 0: the model's trained context
  Device device = Device::kCpu;
  // Run the file's multi-token-prediction block (`nextn_predict_layers`) as a drafter
  // (forward_mtp); its K/V join the cache as one more layer (ModelConfig::mtp).
  bool mtp = false;
  // The target of an EAGLE-3 draft head (architecture `eagle3`), whose token embeddings and
  // vocabulary projection the head takes where its file has none of its own; it must outlive
  // the head.
  const Model* target = nullptr;
  // Tensor parallelism (dist/model_parallel.h): this process's rank of the ranks that split
  // the model, each loading its shard; rank 0 tells the others what to do. nullptr or one rank:
  // the whole model here.
  dist::Communicator* tp = nullptr;
  // Pipeline parallelism (dist/model_parallel.h): the same, each rank loading a run of layers.
  dist::Communicator* pp = nullptr;
  // Data parallelism (dist/model_parallel.h, model/data_parallel.h): each rank holds the whole
  // model and runs its own sequences of every batch.
  dist::Communicator* dp = nullptr;
  // Expert parallelism (with tp or dp): each rank holds whole experts, 1/ranks of them, instead
  // of a slice of every expert's columns (which is not implemented); with tp, attention splits
  // as without; with dp, the tokens go to their experts' ranks and back (all-to-all).
  bool expert_parallel = false;
  // A quantized KV cache's keys stored equalized by the layer's query and key norms (decoder's
  // set_key_equalizer); off only to measure what it does (tests).
  bool equalize_quantized_keys = true;
  // LoRA adapters (model/lora.h): each token at its sequence's scales (BatchSequence::
  // lora_scales), else at the specs'; CPU executor, one rank.
  std::vector<LoraSpec> lora = {};
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // Runs the batch through the model, writing its K/V into `cache` at the blocks of the
  // sequences' tables, and fills logits: [batch.logit_rows.size(), n_vocab]. Does not allocate.
  virtual void forward(const Batch& batch, kv::KvCache& cache, float* logits, ThreadPool& pool) = 0;
  // Several batches in flight (pipeline parallelism, vLLM's virtual engines): how many batches
  // may be launched before the first is finished, 1 for a model that runs in one place. A
  // pipeline of N ranks takes N: while rank r runs batch b, rank 0 may start b + r.
  virtual int pipeline_depth() const { return 1; }
  // forward in two halves, for pipeline_depth() above 1: launch_forward runs this process's part
  // of the batch and hands it on; finish_forward waits for what the other ranks computed and
  // fills the logits (as forward does). Batches finish in the order they were launched, each
  // with its own `slot` in [0, pipeline_depth()) that no other batch in flight uses; between
  // the two calls the batch's arrays, its sequences' block tables and its hidden buffer stay
  // as they are, and only other launches and finishes run (no forward). Here (depth 1): all of
  // it at launch.
  virtual void launch_forward(const Batch& batch, kv::KvCache& cache, float* logits,
                              ThreadPool& pool, int /*slot*/) {
    forward(batch, cache, logits, pool);
  }
  virtual void finish_forward(const Batch& /*batch*/, float* /*logits*/, ThreadPool& /*pool*/,
                              int /*slot*/) {}
  // Multi-token prediction (ModelConfig::mtp): the file's MTP block over the batch's tokens,
  // each token t paired with hidden_in[t] (the final hidden state, as Batch::token_hidden
  // gives it, of the position before t), writing the block's K/V at the tokens' positions.
  // Fills logits [batch.logit_rows.size(), n_vocab] (its guesses at the token after the next)
  // and hidden_out [batch.logit_rows.size(), n_embd] (its own final hidden state of those rows,
  // the hidden_in of a chained draft). Does not allocate. An EAGLE-3 head runs the same way,
  // hidden_in being g (encode_features, or its own hidden_out: the residual stream before its
  // output norm); logits outside its draft vocabulary are -inf.
  virtual void forward_mtp(const Batch& /*batch*/, const float* /*hidden_in*/,
                           kv::KvCache& /*cache*/, float* /*logits*/, float* /*hidden_out*/,
                           ThreadPool& /*pool*/) {
    fail("{}: this executor runs no multi-token-prediction block", config().name);
  }
  // One more LoRA adapter (model/lora.h) after the load, its scale for sequences that give none
  // spec.scale; between forward passes only. An inferd::Error names what is wrong (the file, or
  // an executor or split model that takes none), and the model is then as it was.
  virtual void add_lora_adapter(const LoraSpec& spec) {
    fail("{}: this executor takes no LoRA adapters ({})", config().name, spec.path);
  }
  // The token embeddings [n_vocab, n_embd] and the vocabulary projection [n_vocab, n_embd], for
  // a draft head that shares them (ModelOptions::target); nullptr where the executor keeps them
  // elsewhere.
  virtual const kernels::WeightMatrix* token_embedding() const { return nullptr; }
  virtual const kernels::WeightMatrix* output_projection() const { return nullptr; }
  // An EAGLE-3 head (architecture `eagle3`): the target's layers whose inputs it reads
  // (Batch::feature_layers), and g = fc(features) for n_tokens of them: features
  // [n_tokens, feature_layers().size() * the target's n_embd] to g [n_tokens, n_embd], the
  // hidden_in of forward_mtp. Does not allocate.
  virtual std::span<const int> feature_layers() const { return {}; }
  virtual void encode_features(const float* /*features*/, int64_t /*n_tokens*/, float* /*g*/,
                               ThreadPool& /*pool*/) {
    fail("{}: this model is no EAGLE-3 head", config().name);
  }
  // Each rank's memory and KV block bytes for a cache of the shape `one_block` (one block of
  // every group, no state slots), rank 0 first, measured by every rank after its load (a
  // split model's rank 0 asks the others): the engine sizes the pool so that every machine
  // holds what its ranks allocate. One process: itself.
  virtual std::vector<RankMemory> rank_memory(const kv::KvCacheConfig& one_block) {
    return {{machine_id(), available_memory_bytes(), kv::KvCache(one_block).bytes()}};
  }
  // Called once the engine has made the model's KV cache (tensor parallelism: rank 0 tells the
  // other ranks to make theirs alike, with pools of `threads`).
  virtual void attach_cache(const kv::KvCacheConfig& /*config*/, int /*threads*/) {}
  // Whether the K/V of `cache`'s blocks live in the executor's device memory (the cache then
  // keeps only the block tables and pools: KvCacheConfig::host_storage false).
  virtual bool kv_on_device() const { return false; }
  // Device bytes the KV blocks may take (kv_on_device executors), -1 when not on a device.
  virtual int64_t device_memory_for_kv() const { return -1; }
  // Copies block `from` of KV group `group` to block `to` (a beam's copy-on-write).
  virtual void copy_kv_block(kv::KvCache& cache, size_t group, int32_t from, int32_t to) {
    cache.copy_block(group, from, to);
  }
  // State slots (kv/kv_cache.h: a hybrid model's recurrent state, a quantized cache's exact
  // copies): a slot copied to another (a fork; from KvCache::kNoSlot: cleared for a new
  // sequence), a state slot saved into a snapshot slot and a snapshot loaded into a state slot
  // (prefix caching). Through the model so that the ranks of a split model do it alike.
  virtual void copy_state(kv::KvCache& cache, int32_t from, int32_t to) {
    cache.copy_state(from, to);
  }
  virtual void save_state_snapshot(kv::KvCache& cache, int32_t state, int32_t snapshot) {
    cache.save_snapshot(state, snapshot);
  }
  virtual void load_state_snapshot(kv::KvCache& cache, int32_t snapshot, int32_t state) {
    cache.load_snapshot(snapshot, state);
  }
  // Data parallelism (model/data_parallel.h): the rank whose memory holds a KV block's K/V, or a
  // snapshot's state, as written so far; -1 when none does (never written, or not split by
  // sequences). A prefix-cache hit takes only what the rank of its first block holds.
  virtual bool splits_sequences() const { return false; }
  virtual int rank_of_block(size_t /*group*/, int32_t /*block*/) const { return -1; }
  virtual int rank_of_snapshot(int32_t /*snapshot*/) const { return -1; }
  // A KV cache shape that fits this model, its sliding-window layers in a group of their own
  // with as many blocks as the full-attention group (callers may give it fewer), and for a
  // hybrid model or a quantized cache a state slot for each of `max_sequences` sequences at
  // once (the recurrent state; the exact copies).
  // exact_recent_tokens: a quantized cache's exact copies (KvCacheConfig), 0: none.
  kv::KvCacheConfig kv_config(int32_t num_blocks, int block_size = 16, DType key_type = DType::F16,
                              DType value_type = DType::F16, int32_t max_sequences = 1,
                              int exact_recent_tokens = kv::kDefaultExactRecentTokens) const {
    const ModelConfig& c = config();
    const bool recurrent = c.recurrent_state_floats > 0;
    // A quantized cache in host memory keeps exact copies of each sequence's first and latest
    // blocks (kv/kv_cache.h), in a state slot per sequence as a hybrid model's state.
    const bool exact = (key_type != DType::F16 || value_type != DType::F16) && !kv_on_device() &&
                       exact_recent_tokens > 0;
    // Layers without K/V of their own: the recurrent ones and those that read another's.
    std::vector<bool> stateless = c.recurrent_layers;
    if (!c.kv_source_layers.empty()) {
      stateless.resize(static_cast<size_t>(c.n_layers), false);
      for (int l = 0; l < c.n_layers; ++l)
        if (c.kv_layer(l) != l) stateless[static_cast<size_t>(l)] = true;
    }
    // The MTP block attends over K/V of its own: a full-attention layer after the trunk's.
    std::vector<bool> sliding = c.sliding_layers;
    if (c.mtp) {
      if (!stateless.empty()) stateless.push_back(false);
      if (!sliding.empty()) sliding.push_back(false);
    }
    return {c.n_layers + (c.mtp ? 1 : 0),
            c.n_kv_heads,
            c.head_dim,
            block_size,
            num_blocks,
            key_type,
            value_type,
            std::move(sliding),
            c.sliding_window,
            num_blocks,
            !kv_on_device(),
            std::move(stateless),
            c.recurrent_state_floats,
            recurrent || exact ? max_sequences : 0,
            0,
            c.sliding_n_kv_heads,
            c.sliding_head_dim,
            c.value_head_dim,
            false,
            c.remote_layers,
            exact ? exact_recent_tokens : 0};
  }
  // Whether sequences carry a recurrent state (a hybrid model): it must be in a state slot
  // (BatchSequence::state_slot), and it cannot be rebuilt from cached KV blocks.
  bool has_recurrent_state() const { return config().recurrent_state_floats > 0; }
};

}  // namespace inferd::model

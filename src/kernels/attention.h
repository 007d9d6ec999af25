// Attention of query tokens over one sequence's paged KV cache, flash-style: scores are made a
// block of keys at a time with an online softmax, never as a full score matrix. GQA-aware: the
// query heads that share a kv head are processed together, so each K/V block is read once for
// all of them and for several query tokens.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/kernels.h"
#include "kv/kv_cache.h"

namespace inferd::kernels {

struct AttentionShape {
  int n_heads = 0;
  int n_kv_heads = 0;  // query head h reads kv head h / (n_heads / n_kv_heads) (GQA)
  int head_dim = 0;  // of queries and keys
  float scale = 0;  // usually 1 / sqrt(head_dim)
  // Sliding window: a query at position p sees keys p - window + 1 .. p only; 0: all keys.
  int window = 0;
  // Soft-capped scores (Gemma 2): softcap * tanh(scale * q.k / softcap); 0: plain scale * q.k.
  float softcap = 0;
  // Attention sinks (gpt-oss `attn_sinks`), [n_heads] or null: one learned logit per query head
  // that joins the softmax's denominator as it is (not scaled, not soft-capped, seen by every
  // query whatever its window) but carries no value, so a head can attend to "nothing". Finite
  // or -inf (-inf: no sink).
  const float* sinks = nullptr;
  // The values' head size where it differs from the keys' (DeepSeek's MLA, decompressed); 0:
  // head_dim. The output has n_heads heads of it.
  int value_dim = 0;
  int value_head_dim() const { return value_dim > 0 ? value_dim : head_dim; }
};

// One unit of attention work: the query heads of one kv head, for up to
// attention_tile_tokens(shape) consecutive tokens of one sequence.
struct AttentionTile {
  const float* q;            // [n_tokens, n_heads * head_dim], the tile's first token
  const int32_t* positions;  // [n_tokens] each token attends to keys [0, position] (or its window)
  int n_tokens;
  int kv_head;
  float* out;  // [n_tokens, n_heads * value_head_dim()]
};

// The keys and values another tile will read: attend_tile fetches them into L2 a little at a
// time while it computes its own. A decode step's KV comes from memory and takes longer to read
// than to multiply, so the thread that will run that tile should find it in cache.
struct AttentionPrefetch {
  std::span<const int32_t> block_table;
  int kv_head = 0;
  int64_t first_key = 0;  // keys [first_key, n_keys) of the sequence
  int64_t n_keys = 0;
};

// F16 copies of some of one sequence's K/V blocks (kv/kv_cache.h, "Exact copies"), rotated as
// the cache's: a row whose query lies in block qb reads key block b from its copy, where there
// is one, when b == 0 or qb - window_blocks < b <= qb; every other key from the cache.
struct ExactBlocks {
  int window_blocks = 0;
  int64_t first_block = 0;  // keys[i] and values[i] hold block first_block + i
  std::span<const uint16_t* const> keys;    // kv head 0's F16 keys [head_dim, block_size]; null: no copy
  std::span<const uint16_t* const> values;  // kv head 0's F16 values [block_size, value_dim]
  const uint16_t* sink_keys = nullptr;      // block 0's when first_block > 0; null: no copy
  const uint16_t* sink_values = nullptr;
  size_t key_stride = 0, value_stride = 0;  // halves from one kv head's block to the next

  // Block b's copy for kv head h (values or keys), or null.
  const uint16_t* copy(int64_t b, int kv_head, bool value) const {
    const uint16_t* p = nullptr;
    if (b >= first_block && b - first_block < std::ssize(keys)) {
      p = (value ? values : keys)[static_cast<size_t>(b - first_block)];
    } else if (b == 0) {
      p = value ? sink_values : sink_keys;
    }
    return p == nullptr ? nullptr : p + static_cast<size_t>(kv_head) * (value ? value_stride : key_stride);
  }
};

// How many tokens one tile takes: as many as keep (query heads per kv head) x tokens rows in
// registers, at least 1.
int attention_tile_tokens(const AttentionShape& shape);

// `next`, when given, is fetched into L2 while this tile runs; `exact`, when given, are the
// sequence's F16 copies that replace some of its quantized blocks.
void attend_tile(const AttentionTile& tile, const kv::KvCache& cache, int layer,
                 std::span<const int32_t> block_table, const AttentionShape& shape,
                 const AttentionPrefetch* next = nullptr,
                 const KernelTable& table = active_kernels(), const ExactBlocks* exact = nullptr);

}  // namespace inferd::kernels

#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/kernels.h"
#include "util/error.h"

namespace inferd::kernels {
namespace {

constexpr int kMaxHeadDim = 512;
constexpr int kMaxBlockSize = 256;
// A tile aims at 16 query rows (heads x tokens), which keeps its working set in L1; models
// with more query heads per kv head (MQA) take one token per tile, up to 64 rows.
constexpr int kTargetRows = 16;
constexpr int kMaxRows = 64;
// A tile's queries and accumulators: 64 rows of up to 256 dimensions, or fewer rows of more
// (Gemma 4's 512-dimension heads, 4 query heads a kv head: 16 rows).
constexpr int kMaxTileValues = kMaxRows * 256;
// Scores are made for a chunk of several KV blocks before the softmax state is updated, so the
// per-row bookkeeping (max, rescale of the accumulator) is paid once per chunk, not per block:
// with few rows (decode) it would otherwise cost as much as the dot products. A chunk holds
// kChunkKeys keys (whole blocks); with the usual 16 rows its scores take 16 KiB, in L1.
// Chunks lie at fixed positions of the sequence (multiples of the chunk size), whatever the
// tile: a row's online softmax then meets its keys in the same groups, and rounds the same,
// whichever tokens share its tile. So a token's attention output does not depend on how its
// prompt was cut into steps, on what it was batched with, or on which blocks came from the
// prefix cache.
constexpr int kChunkKeys = 256;

// Asks for `bytes` from p into L2 ahead of their use. A sequence's KV blocks lie anywhere in the
// pool, so the hardware prefetcher cannot guess the next one; with many sequences in a batch
// their KV is far larger than the caches and comes from memory.
inline void prefetch_to_l2(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(c + offset, 0, 2);
}

// Fetches another tile's K/V blocks into L2 in steps, one share per block this tile scores, so
// the requests are spread over this tile's work instead of queueing up at once.
class NextTilePrefetcher {
 public:
  NextTilePrefetcher(const AttentionPrefetch* next, const kv::KvCache& cache, int layer,
                     int64_t own_blocks)
      : next_(next), cache_(cache), layer_(layer) {
    if (next_ == nullptr) return;
    done_ = next_->first_key / cache.block_size();
    total_ = (next_->n_keys + cache.block_size() - 1) / cache.block_size();
    total_ = std::min<int64_t>(total_, static_cast<int64_t>(next_->block_table.size()));
    per_step_ = own_blocks > 0 ? (total_ - done_ + own_blocks - 1) / own_blocks : total_;
  }
  // Fetches the next share; finish() fetches whatever is left.
  void step() { fetch(per_step_); }
  void finish() { fetch(total_); }

 private:
  void fetch(int64_t count) {
    for (; count > 0 && done_ < total_; --count, ++done_) {
      const int32_t block = next_->block_table[static_cast<size_t>(done_)];
      prefetch_to_l2(cache_.key_block(layer_, block, next_->kv_head), cache_.key_block_bytes(layer_));
      prefetch_to_l2(cache_.value_block(layer_, block, next_->kv_head),
                     cache_.value_block_bytes(layer_));
    }
  }

  const AttentionPrefetch* next_;
  const kv::KvCache& cache_;
  int layer_;
  int64_t total_ = 0, done_ = 0, per_step_ = 0;
};

// Per-row state of the online softmax.
struct RowState {
  float max = -std::numeric_limits<float>::infinity();
  float sum = 0;
};

// What a row's accumulated values are multiplied by at the end: 1 / its softmax denominator.
// A sink logit (AttentionShape::sinks) joins that denominator without adding a value: with
// m' = max(m, sink), the keys' weights (made relative to m) take exp(m - m') and the sink adds
// exp(sink - m'). Done once after the last chunk rather than in it, so the result does not
// depend on where chunks start; a sink of -inf leaves exactly 1 / sum.
float output_scale(const RowState& state, const float* sink) {
  if (sink == nullptr) return 1.0f / state.sum;
  const float max = std::max(state.max, *sink);
  const float correction = std::exp(state.max - max);
  return correction / (state.sum * correction + std::exp(*sink - max));
}

// Scores of the tile's rows for one block's keys, in the form the cache stores them.
void score_block(const AttentionKernels& k, const kv::KvCache& cache, int layer, int32_t block,
                 int kv_head, int head_dim, const float* q, int rows, float* s, int s_stride) {
  const int block_size = cache.block_size();
  switch (cache.key_type()) {
    case DType::Q8_0:
      return k.scores_q8(cache.keys_q8(layer, block, kv_head),
                         cache.key_scales(layer, block, kv_head), block_size, head_dim, q, rows, s,
                         s_stride);
    case DType::Q4_0:
      return k.scores_q4(cache.keys_q4(layer, block, kv_head),
                         cache.key_scales_q4(layer, block, kv_head), block_size, head_dim, q, rows,
                         s, s_stride);
    default:  // F16 (the cache accepts no other type)
      return k.scores(cache.keys(layer, block, kv_head), block_size, head_dim, q, rows, s,
                      s_stride);
  }
}

// acc[r, :] += the weights p of row r times the values of a chunk's `blocks`, n_keys in all
// (the last block may be part full); p[r * p_stride + j] weighs the chunk's value j. F16 values
// go to the kernel in one call (accumulate_blocks), the quantized ones a block at a time.
void accumulate_chunk(const AttentionKernels& k, const kv::KvCache& cache, int layer,
                      std::span<const int32_t> blocks, int kv_head, int n_keys, int value_dim,
                      const float* p, int p_stride, int rows, float* acc) {
  const int block_size = cache.block_size();
  if (cache.value_type() == DType::F16) {
    const uint16_t* values[kChunkKeys];
    for (size_t i = 0; i < blocks.size(); ++i) values[i] = cache.values(layer, blocks[i], kv_head);
    return k.accumulate_blocks(values, block_size, n_keys, value_dim, p, p_stride, rows, acc);
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    const int j0 = static_cast<int>(i) * block_size, keys = std::min(block_size, n_keys - j0);
    if (cache.value_type() == DType::Q8_0) {
      k.accumulate_q8(cache.values_q8(layer, blocks[i], kv_head),
                      cache.value_scales(layer, blocks[i], kv_head), keys, value_dim, p + j0,
                      p_stride, rows, acc);
    } else {  // Q4_0 (the cache accepts no other type)
      k.accumulate_q4(cache.values_q4(layer, blocks[i], kv_head),
                      cache.value_scales_q4(layer, blocks[i], kv_head), keys, value_dim, p + j0,
                      p_stride, rows, acc);
    }
  }
}

}  // namespace

int attention_tile_tokens(const AttentionShape& shape) {
  const int group = shape.n_heads / shape.n_kv_heads;
  return std::max(1, kTargetRows / group);
}

void attend_tile(const AttentionTile& tile, const kv::KvCache& cache, int layer,
                 std::span<const int32_t> block_table, const AttentionShape& shape,
                 const AttentionPrefetch* next, const KernelTable& table,
                 const ExactBlocks* exact) {
  const int group = shape.n_heads / shape.n_kv_heads, head_dim = shape.head_dim;
  const int value_dim = shape.value_head_dim();  // the accumulators' and the output's
  const int rows = group * tile.n_tokens, block_size = cache.block_size();
  if (rows > kMaxRows || std::max(head_dim, value_dim) > kMaxHeadDim ||
      rows * std::max(head_dim, value_dim) > kMaxTileValues || block_size > kMaxBlockSize) {
    fail("attention: tile of {} rows, head size {} ({} values) or block size {} is above the "
         "limits", rows, head_dim, value_dim, block_size);
  }
  const AttentionKernels& k = table.attention;
  const int64_t q_stride = int64_t{shape.n_heads} * head_dim;
  const int64_t out_stride = int64_t{shape.n_heads} * value_dim;
  // Row r = token t * group + head g. Queries meeting F16 keys are rounded to f16 like them, as
  // llama.cpp does before its f16 dot products; Q8_0 and Q4_0 keys meet them as they are.
  alignas(64) float q[kMaxTileValues];              // [rows, head_dim]
  alignas(64) float acc[kMaxTileValues];            // [rows, value_dim]
  alignas(64) float scores[kMaxRows * kChunkKeys];  // [rows, chunk_keys]
  RowState state[kMaxRows];
  int32_t first_key[kMaxRows], last_key[kMaxRows];  // the keys row r sees: [first, last]
  int32_t max_position = 0, min_first_key = std::numeric_limits<int32_t>::max();
  // Keys and values the cache keeps rotated (kv_cache.h): queries rotated as the keys are, the
  // output rotated back.
  const int key_rotation = cache.key_rotation(layer), value_rotation = cache.value_rotation(layer);
  for (int t = 0; t < tile.n_tokens; ++t) {
    for (int g = 0; g < group; ++g) {
      const int r = t * group + g;
      const float* src = tile.q + t * q_stride + int64_t{tile.kv_head * group + g} * head_dim;
      std::copy(src, src + head_dim, q + r * head_dim);
      if (cache.key_type() == DType::F16) k.round_to_fp16(q + r * head_dim, head_dim);
      if (key_rotation > 0) kv::hadamard_rotate(q + r * head_dim, head_dim, key_rotation);
      last_key[r] = tile.positions[t];
      first_key[r] = shape.window > 0 ? std::max(0, tile.positions[t] - shape.window + 1) : 0;
      min_first_key = std::min(min_first_key, first_key[r]);
    }
    max_position = std::max(max_position, tile.positions[t]);
  }
  std::fill(acc, acc + rows * value_dim, 0.0f);
  // Whole blocks per chunk; scores of row r, chunk key j are at scores[r * chunk_keys + j].
  const int chunk_blocks = std::max(1, kChunkKeys / block_size);
  const int chunk_keys = chunk_blocks * block_size;
  const int64_t n_keys = int64_t{max_position} + 1;
  // Blocks wholly before every row's window are never read (a sliding layer's old blocks may
  // already be gone from the table): the chunk that holds the first block seen starts at a
  // multiple of the chunk size, and its blocks before that one are skipped.
  const int64_t first_block_seen = int64_t{min_first_key} / block_size;
  const int64_t first_start = first_block_seen * block_size / chunk_keys * chunk_keys;
  NextTilePrefetcher prefetcher(next, cache, layer,
                                (n_keys + block_size - 1) / block_size - first_block_seen);
  // Gemma 2's softcap of a row's scores [lo, hi), in place; the scale they take after it.
  const auto softcapped = [&](float* s, int lo, int hi) {
    if (shape.softcap <= 0) return shape.scale;
    table.softcap(s + lo, hi - lo, shape.scale / shape.softcap, shape.softcap);
    return 1.0f;
  };
  // Row r's scores [lo, hi) of a chunk of `count` keys, scaled, into its online softmax: their
  // exps stay in s (0 elsewhere in the chunk) for the values, and the accumulator is rescaled to
  // the new maximum.
  const auto fold = [&](int r, float* s, int lo, int hi, int count, float scale) {
    const float chunk_max = k.scale_max(s + lo, hi - lo, scale, state[r].max);
    std::fill(s, s + lo, 0.0f);
    std::fill(s + hi, s + count, 0.0f);
    const float correction = std::exp(state[r].max - chunk_max);
    state[r].sum = state[r].sum * correction + k.exp_sum(s + lo, hi - lo, chunk_max);
    if (correction != 1.0f) {
      for (int d = 0; d < value_dim; ++d) acc[r * value_dim + d] *= correction;
    }
    state[r].max = chunk_max;
  };
  // Whether row r reads key block b from its exact copy (ExactBlocks): block 0 when the row
  // sees it, and the row's own block and the window_blocks - 1 before it.
  const auto reads_copy = [&](int r, int64_t b) {
    const int64_t own = last_key[r] / block_size;
    const bool wanted = (b == 0 && first_key[r] < block_size) ||
                        (b <= own && b > own - exact->window_blocks);
    return wanted && exact->copy(b, tile.kv_head, false) != nullptr;
  };
  for (int64_t start = first_start; start < n_keys; start += chunk_keys) {
    const int64_t first_block = start / block_size;
    const int count = static_cast<int>(std::min<int64_t>(chunk_keys, n_keys - start));
    const int n_blocks = (count + block_size - 1) / block_size;
    // Blocks of the chunk before every row's window: no scores (each row's [lo, hi) starts
    // after them) and no values.
    const int skip = static_cast<int>(std::max<int64_t>(0, first_block_seen - first_block));
    // No prefetch of the chunk's own blocks here: a decode tile's KV was fetched while the
    // previous tile ran (`next`), a prompt's was just written and is in cache, and a burst of
    // prefetches for lines already present or on their way only held the core up (measured:
    // the tiles ran up to 15% faster without it, from cache and from memory).
    for (int i = skip; i < n_blocks; ++i) {
      const int32_t block = block_table[static_cast<size_t>(first_block + i)];
      score_block(k, cache, layer, block, tile.kv_head, head_dim, q, rows, scores + i * block_size,
                  chunk_keys);
      prefetcher.step();
    }
    for (int r = 0; r < rows; ++r) {
      float* s = scores + r * chunk_keys;
      // Keys [lo, hi) of the chunk are this row's; those before its window, past its position
      // (causal mask) or past the chunk's end take no weight.
      const int lo = static_cast<int>(std::clamp<int64_t>(first_key[r] - start, 0, count));
      const int hi =
          std::max(lo, static_cast<int>(std::clamp<int64_t>(last_key[r] + 1 - start, 0, count)));
      const float scale = softcapped(s, lo, hi);
      // Keys this row reads from their exact copies below weigh nothing here (exp(-inf) = 0).
      bool any = hi > lo;
      if (exact != nullptr && any) {
        int kept = hi - lo;
        for (int i = skip; i < n_blocks; ++i) {
          if (!reads_copy(r, first_block + i)) continue;
          const int a = std::max(lo, i * block_size), b = std::min(hi, (i + 1) * block_size);
          for (int j = a; j < b; ++j) s[j] = -std::numeric_limits<float>::infinity();
          kept -= std::max(0, b - a);
        }
        any = kept > 0;
      }
      if (!any) {
        std::fill(s, s + count, 0.0f);
        continue;
      }
      fold(r, s, lo, hi, count, scale);
    }
    accumulate_chunk(k, cache, layer,
                     block_table.subspan(static_cast<size_t>(first_block + skip),
                                         static_cast<size_t>(n_blocks - skip)),
                     tile.kv_head, count - skip * block_size, value_dim, scores + skip * block_size,
                     chunk_keys, rows, acc);
  }
  prefetcher.finish();
  if (exact != nullptr) {
    // The exact copies, a block at a time, block 0 first, then ascending: each a chunk of its
    // own, so a row meets its copies in one order whatever rows share its tile. The queries are
    // rounded to f16 as for an F16 cache: each product of two halves is exact in a float, so a
    // score does not depend on how a kernel orders or fuses its multiply-adds (which may differ
    // with the number of rows).
    for (int r = 0; r < rows; ++r) k.round_to_fp16(q + r * head_dim, head_dim);
    int64_t lowest = std::numeric_limits<int64_t>::max(), highest = -1;
    for (int r = 0; r < rows; ++r) {
      lowest = std::min<int64_t>(lowest, last_key[r] / block_size - exact->window_blocks + 1);
      highest = std::max<int64_t>(highest, last_key[r] / block_size);
    }
    const auto attend_copy = [&](int64_t b) {
      bool anyone = false;
      for (int r = 0; r < rows && !anyone; ++r) anyone = reads_copy(r, b);
      if (!anyone) return;
      const int64_t start = b * block_size;
      const int count = static_cast<int>(std::min<int64_t>(block_size, n_keys - start));
      k.scores(exact->copy(b, tile.kv_head, false), block_size, head_dim, q, rows, scores,
               chunk_keys);
      for (int r = 0; r < rows; ++r) {
        float* s = scores + r * chunk_keys;
        const int lo = static_cast<int>(std::clamp<int64_t>(first_key[r] - start, 0, count));
        const int hi =
            std::max(lo, static_cast<int>(std::clamp<int64_t>(last_key[r] + 1 - start, 0, count)));
        if (!reads_copy(r, b) || hi == lo) {
          std::fill(s, s + count, 0.0f);
          continue;
        }
        fold(r, s, lo, hi, count, softcapped(s, lo, hi));
      }
      k.accumulate(exact->copy(b, tile.kv_head, true), count, value_dim, scores, chunk_keys, rows,
                   acc);
    };
    attend_copy(0);
    for (int64_t b = std::max<int64_t>(1, lowest); b <= highest; ++b) attend_copy(b);
  }
  for (int t = 0; t < tile.n_tokens; ++t) {
    for (int g = 0; g < group; ++g) {
      const int r = t * group + g;
      const int head = tile.kv_head * group + g;
      float* dst = tile.out + t * out_stride + int64_t{head} * value_dim;
      const float inv =
          output_scale(state[r], shape.sinks != nullptr ? &shape.sinks[head] : nullptr);
      for (int d = 0; d < value_dim; ++d) dst[d] = acc[r * value_dim + d] * inv;
      if (value_rotation > 0) kv::hadamard_rotate(dst, value_dim, value_rotation);
    }
  }
}

}  // namespace inferd::kernels

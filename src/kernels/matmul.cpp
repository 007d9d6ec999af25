#include "kernels/matmul.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "util/error.h"

namespace inferd::kernels {
namespace {

// Below this many tokens, converting activations on the calling thread is cheaper than a
// parallel region.
constexpr int64_t kSerialQuantizeTokens = 4;
// Tokens per call for the padded last group of a matrix (its tile lives on the stack), so that
// its token offsets fall on the bf16 route's activation tiles and on the int8 panels (of 8 or
// 24 tokens, PackedKernels::act_panel_tokens).
constexpr int64_t kMaxTokensPerPartialTile = 48;
static_assert(kMaxTokensPerPartialTile % kBf16TileTokens == 0 &&
              kMaxTokensPerPartialTile % kMaxActPanelTokens == 0);
// From this many tokens the i-quants decode each super-block once for all of them
// (matmul_iq_tiles) instead of in every token's row dot.
constexpr int64_t kIqTileMinTokens = 4;
// A packed matmul hands its groups to the threads in chunks (see matmul_packed): about this many
// a thread, and none smaller than this many weight bytes times tokens.
constexpr int64_t kChunksPerThread = 16;
constexpr int64_t kMinChunkBytes = 256 << 10;
// The most weights one matmul_many call takes (q/k/v, gate/up: 3 at most today).
constexpr size_t kMaxTargets = 8;

void check_scratch(const ActivationScratch& scratch, size_t need, int64_t n_tokens, int64_t cols) {
  if (need > scratch.size()) {
    fail("matmul: activation scratch of {} bytes is too small for {} tokens x {} columns",
         scratch.size(), n_tokens, cols);
  }
}

// The input of a packed matmul: float rows for F16 groups; for the others int8 blocks for rows
// [0, split) and, where the caller marked rows [split, n_tokens) for it, bf16 tiles for those.
struct PackedInput {
  const float* x;  // [n_tokens, cols]
  // rows [0, split) as int8 blocks, in panels of act_panel tokens (packed.h, act_block_index)
  const ActQ8Block* act;
  int64_t act_panel;
  // rows [split, n_tokens) in bf16, tiled as kernels.h says, or null
  const uint16_t* x_bf16;
  int64_t cols;
  int64_t split;
};

// Runs the group kernel of p's format on tokens [t0, t0 + count) of `n_groups` groups from g
// (2 only on the bf16 side); the range lies on one side of in.split, and t0 - split is a
// multiple of 16 on the bf16 side.
void call_group_kernel(const PackedWeights& p, int64_t g, int64_t n_groups, const PackedInput& in,
                       int64_t t0, int64_t count, float* y, int64_t y_stride,
                       const KernelTable& table) {
  const int64_t blocks = p.blocks_per_row();
  const PackedFormat format = p.format();
  if (format == PackedFormat::F16) {
    table.packed.f16(p.group(g), blocks, in.x + t0 * in.cols, in.cols, count, y, y_stride);
  } else if (t0 >= in.split) {
    const GroupGemmBf16Fn kernel = format == PackedFormat::Q8_0     ? table.packed.q8_0_bf16
                                   : format == PackedFormat::Q4_K   ? table.packed.q4_k_bf16
                                   : format == PackedFormat::Q5_K   ? table.packed.q5_k_bf16
                                   : format == PackedFormat::Q6_K   ? table.packed.q6_k_bf16
                                   : format == PackedFormat::IQ4_XS ? table.packed.iq4_xs_bf16
                                   : format == PackedFormat::Q3_K   ? table.packed.q3_k_bf16
                                   : format == PackedFormat::Q2_K   ? table.packed.q2_k_bf16
                                                                    : table.packed.q4_bf16;
    kernel(p.group(g), n_groups, blocks, in.x_bf16 + (t0 - in.split) * in.cols, in.cols, count, y,
           y_stride);
  } else {
    const GroupGemmFn kernel = format == PackedFormat::Q4_0     ? table.packed.q4_0
                               : format == PackedFormat::Q4_1   ? table.packed.q4_1
                               : format == PackedFormat::Q4_K   ? table.packed.q4_k
                               : format == PackedFormat::Q5_K   ? table.packed.q5_k
                               : format == PackedFormat::Q6_K   ? table.packed.q6_k
                               : format == PackedFormat::IQ4_XS ? table.packed.iq4_xs
                               : format == PackedFormat::Q5_1   ? table.packed.q5_1
                               : format == PackedFormat::MXFP4  ? table.packed.mxfp4
                               : format == PackedFormat::Q3_K   ? table.packed.q3_k
                               : format == PackedFormat::Q2_K   ? table.packed.q2_k
                                                                : table.packed.q8_0;
    const int64_t act_blocks = in.cols / kPackCols;
    kernel(p.group(g), blocks, in.act + act_block_index(t0, 0, in.act_panel, act_blocks),
           in.act_panel, count, y, y_stride);
  }
}

// Multiplies group g of a packed matrix (and g + 1 when n_groups is 2, full groups only) by
// the tokens [begin, end) (one side of the split). The last group of a matrix whose rows are
// not a multiple of 16 is computed into a small tile and only its real rows are copied.
void run_packed_rows(const PackedWeights& p, int64_t g, int64_t n_groups, const PackedInput& in,
                     int64_t begin, int64_t end, float* y, const KernelTable& table) {
  const int64_t rows = p.rows(), row0 = g * kPackRows;
  if (row0 + n_groups * kPackRows <= rows) {
    call_group_kernel(p, g, n_groups, in, begin, end - begin, y + begin * rows + row0, rows, table);
    return;
  }
  float tile[kMaxTokensPerPartialTile * kPackRows];
  for (int64_t t0 = begin; t0 < end; t0 += kMaxTokensPerPartialTile) {
    const int64_t count = std::min<int64_t>(kMaxTokensPerPartialTile, end - t0);
    call_group_kernel(p, g, 1, in, t0, count, tile, kPackRows, table);
    for (int64_t t = 0; t < count; ++t) {
      std::memcpy(y + (t0 + t) * rows + row0, tile + t * kPackRows,
                  static_cast<size_t>(rows - row0) * sizeof(float));
    }
  }
}

// Groups [lo, hi) of p: all of them on the int8 (or F16) side first, then on the bf16 side, so
// that a thread changes tile configurations once per matrix rather than per group. The bf16
// side takes full groups two at a time.
void run_packed_groups(const PackedWeights& p, int64_t lo, int64_t hi, const PackedInput& in,
                       int64_t n_tokens, float* y, const KernelTable& table) {
  const int64_t split = p.has_bf16_route() ? in.split : n_tokens;
  if (split > 0) {
    for (int64_t g = lo; g < hi; ++g) run_packed_rows(p, g, 1, in, 0, split, y, table);
  }
  if (split < n_tokens) {
    for (int64_t g = lo; g < hi;) {
      const int64_t n = g + 1 < hi && (g + 2) * kPackRows <= p.rows() ? 2 : 1;
      run_packed_rows(p, g, n, in, split, n_tokens, y, table);
      g += n;
    }
  }
}

// The targets for which `keep` holds, in their order, copied into `out`.
template <typename Keep>
std::span<const MatmulTarget> select(std::span<const MatmulTarget> targets,
                                     std::array<MatmulTarget, kMaxTargets>& out, Keep keep) {
  if (targets.size() > out.size()) fail("matmul_many: more than {} targets", out.size());
  size_t n = 0;
  for (const MatmulTarget& t : targets)
    if (keep(t)) out[n++] = t;
  return {out.data(), n};
}

bool takes_q8k_activations(const MatmulTarget& t) {
  return uses_q8k_activations(t.w->packed->format());
}

// The targets' int8 layouts all take one activation rounding: Q8_K's (uses_q8k_activations) or
// the 32-wide one (matmul_many splits a mix).
void matmul_packed(std::span<const MatmulTarget> targets, const float* x, int64_t n_tokens,
                   int64_t bf16_from, ActivationScratch& scratch, ThreadPool& pool,
                   const KernelTable& table) {
  const int64_t cols = targets[0].w->cols, blocks = cols / kPackCols;
  const QuantizeActFn quantize_act =
      std::any_of(targets.begin(), targets.end(), takes_q8k_activations)
          ? table.packed.quantize_act_k
          : table.packed.quantize_act;
  const bool needs_int8 = std::any_of(targets.begin(), targets.end(), [](const MatmulTarget& t) {
    return t.w->packed->format() != PackedFormat::F16;
  });
  // The bf16 route is taken only when every int8 target has kernels for it.
  const bool bf16_ok = std::all_of(targets.begin(), targets.end(), [](const MatmulTarget& t) {
    return t.w->packed->format() == PackedFormat::F16 || t.w->packed->has_bf16_route();
  });
  const int64_t split = needs_int8 && bf16_ok && table.packed.bf16_route
                            ? std::clamp<int64_t>(bf16_from, 0, n_tokens)
                            : n_tokens;
  // One panel of all the int8 rows and the padding, or panels of the table's size. Rows that
  // fit in one panel of the table's size keep the one padded panel: decode with its 64-byte
  // blocks side by side instead of 17 blocks apart ran slower (1B-shaped Q6_K tg64 27-29 against
  // 29-32 tok/s on the AMD EPYC with AVX-512, alternating runs; the cause is not known).
  const int64_t panel_tokens = table.packed.act_panel_tokens;
  if (panel_tokens > kMaxActPanelTokens ||
      kMaxTokensPerPartialTile % std::max<int64_t>(panel_tokens, 1) != 0)
    fail("matmul: act_panel_tokens {} must be at most {} and divide {}", panel_tokens,
         kMaxActPanelTokens, kMaxTokensPerPartialTile);
  const bool one = panel_tokens == 0 || split <= panel_tokens;
  const int64_t panel = one ? split + kActPaddingTokens : panel_tokens;
  const int64_t panels = one ? 1 : (split + panel - 1) / panel;
  PackedInput in{x, nullptr, panel, nullptr, cols, split};
  // Converts rows [begin, end), split over the threads unless they are few.
  const auto for_each_row = [&](int64_t begin, int64_t end, auto convert) {
    const auto rows = [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) convert(t);
    };
    if (end - begin <= kSerialQuantizeTokens) {
      rows(begin, end);
    } else {
      pool.parallel_for(end - begin, 1, [&](int64_t b, int64_t e) { rows(begin + b, begin + e); });
    }
  };
  // Scratch: the int8 blocks of rows [0, split), then (64-byte aligned) the bf16 tiles of the
  // rest, each with at most kActPaddingTokens rows of padding.
  const size_t int8_bytes =
      needs_int8 && split > 0
          ? (static_cast<size_t>(panels * panel * blocks) * sizeof(ActQ8Block) + 63) / 64 * 64
          : 0;
  const size_t bf16_bytes =
      split < n_tokens
          ? static_cast<size_t>((n_tokens - split + kActPaddingTokens) * cols) * sizeof(uint16_t)
          : 0;
  check_scratch(scratch, int8_bytes + bf16_bytes, n_tokens, cols);
  if (int8_bytes > 0) {
    auto* act = reinterpret_cast<ActQ8Block*>(scratch.data());  // [panels][blocks][panel]
    for_each_row(0, split, [&](int64_t t) {
      quantize_act(x + t * cols, act + act_block_index(t, 0, panel, blocks), cols, panel);
    });
    in.act = act;
  }
  if (bf16_bytes > 0) {
    auto* xb = reinterpret_cast<uint16_t*>(scratch.data() + int8_bytes);
    for_each_row(split, n_tokens, [&](int64_t t) {  // into the tiled layout of packed.h
      for (int64_t c = 0; c < cols; c += kPackCols)
        table.packed.bf16_act(x + t * cols + c, xb + bf16_tile_offset(t - split, c, cols),
                              kPackCols);
    });
    in.x_bf16 = xb;
  }
  int64_t total_groups = 0;
  for (const MatmulTarget& target : targets) total_groups += target.w->packed->groups();
  const auto run_groups = [&](int64_t begin, int64_t end) {
    int64_t first = 0;  // index of the targets' first group in the combined range
    for (const MatmulTarget& target : targets) {
      const PackedWeights& p = *target.w->packed;
      const int64_t lo = std::max(begin, first), hi = std::min(end, first + p.groups());
      if (lo < hi) run_packed_groups(p, lo - first, hi - first, in, n_tokens, target.y, table);
      first += p.groups();
    }
  };
  // Chunks of groups handed to whichever thread is free: on a shared or virtual machine one
  // thread often loses its CPU for a while, and with a fixed split the other then waits for it
  // at the end of every matrix. A chunk is at least kMinChunkBytes of weights times tokens
  // (smaller ones would make the shared counter, and the restart of each memory stream, cost
  // more than they save), and each thread gets about kChunksPerThread of them.
  int64_t group_bytes = 0;  // the most weight bytes one group of the targets holds
  for (const MatmulTarget& target : targets) {
    const PackedWeights& p = *target.w->packed;
    group_bytes = std::max<int64_t>(group_bytes, p.blocks_per_row() * p.block_bytes());
  }
  const int64_t min_chunk =
      (kMinChunkBytes + group_bytes * n_tokens - 1) / (group_bytes * n_tokens);
  const int64_t chunk = std::max(min_chunk, total_groups / (pool.num_threads() * kChunksPerThread));
  pool.parallel_for_chunks(total_groups, chunk, run_groups);
}

// The i-quants' prompt path (kernels/iq_tiles.h): each thread takes groups of 16 rows, decodes
// each of their super-blocks once and multiplies it with every token. The activations' q are
// stored as q + 128 for the tiles.
void matmul_iq_tiles(const WeightMatrix& w, int64_t n_tokens, float* y, const uint8_t* act,
                     size_t act_row, ThreadPool& pool, const KernelTable& table) {
  const int64_t groups = (w.rows + kIqTileRows - 1) / kIqTileRows, blocks = w.cols / kQKK;
  const float factor = iq_final_factor(w.type);
  pool.parallel_for(groups, 1, [&](int64_t begin, int64_t end) {
    IqTile tile;
    for (int64_t g = begin; g < end; ++g) {
      const int64_t r0 = g * kIqTileRows;
      const int n_rows = static_cast<int>(std::min<int64_t>(kIqTileRows, w.rows - r0));
      std::array<const uint8_t*, kIqTileRows> rows{};
      for (int r = 0; r < n_rows; ++r) rows[static_cast<size_t>(r)] = w.row(r0 + r);
      float* out = y + r0;
      for (int64_t t = 0; t < n_tokens; ++t) std::fill_n(out + t * w.rows, n_rows, 0.0f);
      for (int64_t b = 0; b < blocks; ++b) {
        decode_iq_tile(w.type, rows.data(), n_rows, b, tile);
        const auto* a = reinterpret_cast<const BlockQ8_K*>(act) + b;
        table.iq_tile(tile, n_rows, a, static_cast<int64_t>(act_row), n_tokens, out, w.rows);
      }
      if (factor != 1.0f)
        for (int64_t t = 0; t < n_tokens; ++t)
          for (int r = 0; r < n_rows; ++r) out[t * w.rows + r] *= factor;
    }
  });
}

void matmul_rows(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
                 ActivationScratch& scratch, ThreadPool& pool, const KernelTable& table) {
  const WeightKernels* k = table.for_weight(w.type);
  if (k == nullptr) fail("matmul: weight type {} is not supported yet", dtype_name(w.type));
  const size_t act_row = static_cast<size_t>(*row_bytes(k->activation_type, w.cols));
  check_scratch(scratch, act_row * static_cast<size_t>(n_tokens), n_tokens, w.cols);
  uint8_t* act = scratch.data();
  const bool tiles =
      table.iq_tile != nullptr && is_iq_tile_type(w.type) && n_tokens >= kIqTileMinTokens;
  pool.parallel_for(n_tokens, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      uint8_t* row = act + static_cast<size_t>(t) * act_row;
      k->quantize_activation(x + t * w.cols, row, w.cols);
      if (tiles) {
        auto* blocks = reinterpret_cast<BlockQ8_K*>(row);
        for (int64_t b = 0; b < w.cols / kQKK; ++b)
          for (int8_t& q : blocks[b].qs) q = static_cast<int8_t>(static_cast<uint8_t>(q) ^ 0x80);
      }
    }
  });
  if (tiles) return matmul_iq_tiles(w, n_tokens, y, act, act_row, pool, table);
  // Each thread takes a contiguous band of weight rows and streams it once for all tokens.
  constexpr int64_t kRowGrain = 16;
  pool.parallel_for(w.rows, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const uint8_t* wrow = w.row(r);
      for (int64_t t = 0; t < n_tokens; ++t) {
        y[t * w.rows + r] = k->dot(w.cols, wrow, act + static_cast<size_t>(t) * act_row);
      }
    }
  });
}

}  // namespace

void ActivationScratch::reserve(int64_t max_tokens, int64_t max_cols) {
  // F32 is the widest activation format (4 bytes a value); the packed path may hold int8 blocks
  // and bf16 rows at once, each with kActPaddingTokens rows of padding that kernels may read
  // (or the int8 blocks' last panel, part empty).
  const int64_t padded = max_tokens + std::max(kActPaddingTokens, kMaxActPanelTokens);
  const size_t need =
      std::max(static_cast<size_t>(max_tokens * max_cols) * sizeof(float),
               static_cast<size_t>(padded * max_cols / kPackCols) * sizeof(ActQ8Block) + 64 +
                   static_cast<size_t>(padded * max_cols) * sizeof(uint16_t));
  if (buffer_.size() < need) {
    buffer_ = HugePageBuffer(need);
    buffer_.prefault();  // used by every forward pass: fault it in now, not in the first one
  }
}

void matmul_many(std::span<const MatmulTarget> targets, const float* x, int64_t n_tokens,
                 ActivationScratch& scratch, ThreadPool& pool, const KernelTable& table,
                 int64_t bf16_from) {
  if (targets.empty() || n_tokens == 0) return;
  const auto packed = [&](const MatmulTarget& t) {
    return t.w->packed != nullptr && t.w->cols == targets[0].w->cols;
  };
  const auto n_packed = std::count_if(targets.begin(), targets.end(), packed);
  std::array<MatmulTarget, kMaxTargets> part;  // a subset of the targets, on the stack
  if (n_packed > 0 && n_packed < static_cast<std::ptrdiff_t>(targets.size())) {
    // Some weights without a packed layout (a type that has none): those go row by row, the
    // others still together through the packed path.
    for (const MatmulTarget& t : targets)
      if (!packed(t)) matmul_rows(*t.w, x, n_tokens, t.y, scratch, pool, table);
    matmul_many(select(targets, part, packed), x, n_tokens, scratch, pool, table, bf16_from);
    return;
  }
  if (n_packed > 0) {
    const auto k_targets = std::count_if(targets.begin(), targets.end(), takes_q8k_activations);
    if (k_targets == 0 || k_targets == static_cast<std::ptrdiff_t>(targets.size())) {
      matmul_packed(targets, x, n_tokens, bf16_from, scratch, pool, table);
      return;
    }
    // Layouts with both activation roundings (a 256-wide k-quant beside a 32-wide fallback
    // type): one call per rounding, the input converted once for each.
    for (const bool k_kind : {false, true}) {
      const auto same_kind = [&](const MatmulTarget& t) {
        return takes_q8k_activations(t) == k_kind;
      };
      matmul_packed(select(targets, part, same_kind), x, n_tokens, bf16_from, scratch, pool, table);
    }
    return;
  }
  for (const MatmulTarget& t : targets) matmul_rows(*t.w, x, n_tokens, t.y, scratch, pool, table);
}

void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
            ActivationScratch& scratch, ThreadPool& pool, const KernelTable& table,
            int64_t bf16_from) {
  const MatmulTarget target{&w, y};
  matmul_many({&target, 1}, x, n_tokens, scratch, pool, table, bf16_from);
}

void dequantize_row(const WeightMatrix& w, int64_t r, float* out, const KernelTable& table) {
  const WeightKernels* k = table.for_weight(w.type);
  if (k == nullptr) fail("dequantize: weight type {} is not supported yet", dtype_name(w.type));
  k->dequantize(w.row(r), out, w.cols);
}

}  // namespace inferd::kernels

namespace inferd::kernels {
namespace {

// The most items (and so distinct inputs) one matmul_grouped call takes: the gate and up of
// every expert of a layer of 512 (model/moe.cpp's kMaxExperts) and of a shared expert.
constexpr size_t kMaxGroupedInputs = 2 * 512 + 2;

// How an item's input is converted: not at all (F16 groups read floats), to the 32-wide int8
// blocks, or to the 256-wide k-quant rounding (uses_q8k_activations).
enum class InputKind { kFloat, kInt8, kInt8K };

InputKind input_kind(const WeightMatrix& w) {
  if (w.packed->format() == PackedFormat::F16) return InputKind::kFloat;
  return uses_q8k_activations(w.packed->format()) ? InputKind::kInt8K : InputKind::kInt8;
}

// The int8 panel of an input of n tokens, as matmul_packed picks it: one padded panel when the
// rows fit in one of the table's panels, else the table's.
int64_t panel_of(int64_t n, const KernelTable& table) {
  const int64_t panel_tokens = table.packed.act_panel_tokens;
  return panel_tokens == 0 || n <= panel_tokens ? n + kActPaddingTokens : panel_tokens;
}

}  // namespace

int64_t grouped_scratch_tokens(int64_t rows, int64_t inputs) {
  // Each input rounds its tokens up to whole panels plus padding: at most kMaxActPanelTokens.
  return rows + inputs * std::max(kActPaddingTokens, kMaxActPanelTokens);
}

void matmul_grouped(std::span<const GroupedProduct> items, ActivationScratch& scratch,
                    ThreadPool& pool, const KernelTable& table) {
  if (items.empty()) return;
  const int64_t cols = items[0].w->cols, blocks = cols / kPackCols;
  for (const GroupedProduct& item : items)
    if (item.w->cols != cols) fail("matmul_grouped: weights of {} and {} columns", cols, item.w->cols);
  // Weights without a packed layout go row by row (they convert their own input), before the
  // packed items take the scratch.
  for (const GroupedProduct& item : items)
    if (item.w->packed == nullptr && item.n_tokens > 0)
      matmul_rows(*item.w, item.x, item.n_tokens, item.y, scratch, pool, table);

  // The distinct inputs and where each one's int8 blocks go in the scratch.
  struct Input {
    const float* x;
    int64_t n_tokens;
    InputKind kind;
    int64_t panel;
    size_t offset;  // bytes into the scratch
  };
  std::array<Input, kMaxGroupedInputs> inputs;
  std::array<uint16_t, kMaxGroupedInputs> input_of;  // items[i] reads inputs[input_of[i]]
  if (items.size() > kMaxGroupedInputs) fail("matmul_grouped: more than {} items", kMaxGroupedInputs);
  size_t n_inputs = 0, bytes = 0;
  int64_t rows_to_convert = 0, total_groups = 0, group_bytes = 0, token_groups = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const GroupedProduct& item = items[i];
    if (item.w->packed == nullptr || item.n_tokens == 0) continue;
    const InputKind kind = input_kind(*item.w);
    size_t j = 0;
    while (j < n_inputs && !(inputs[j].x == item.x && inputs[j].n_tokens == item.n_tokens &&
                             inputs[j].kind == kind))
      ++j;
    if (j == n_inputs) {
      Input& in = inputs[n_inputs++];
      in = {item.x, item.n_tokens, kind, panel_of(item.n_tokens, table), bytes};
      if (kind != InputKind::kFloat) {
        const int64_t panels = (item.n_tokens + in.panel - 1) / in.panel;
        bytes += (static_cast<size_t>(panels * in.panel * blocks) * sizeof(ActQ8Block) + 63) / 64 * 64;
        rows_to_convert += item.n_tokens;
      }
    }
    input_of[i] = static_cast<uint16_t>(j);
    const PackedWeights& p = *item.w->packed;
    total_groups += p.groups();
    token_groups += p.groups() * item.n_tokens;
    group_bytes = std::max<int64_t>(group_bytes, p.blocks_per_row() * p.block_bytes());
  }
  if (total_groups == 0) return;
  check_scratch(scratch, bytes, rows_to_convert, cols);

  // Converts every int8 input's rows in one region: row r of the concatenated inputs.
  const auto convert = [&](int64_t begin, int64_t end) {
    size_t j = 0;
    int64_t first = 0;  // the concatenated index of inputs[j]'s first row
    for (int64_t r = begin; r < end; ++r) {
      while (inputs[j].kind == InputKind::kFloat || r >= first + inputs[j].n_tokens) {
        if (inputs[j].kind != InputKind::kFloat) first += inputs[j].n_tokens;
        ++j;
      }
      const Input& in = inputs[j];
      const int64_t t = r - first;
      auto* act = reinterpret_cast<ActQ8Block*>(scratch.data() + in.offset);
      const QuantizeActFn quantize =
          in.kind == InputKind::kInt8K ? table.packed.quantize_act_k : table.packed.quantize_act;
      quantize(in.x + t * cols, act + act_block_index(t, 0, in.panel, blocks), cols, in.panel);
    }
  };
  if (rows_to_convert <= kSerialQuantizeTokens) {
    convert(0, rows_to_convert);
  } else {
    pool.parallel_for(rows_to_convert, 1, convert);
  }

  // Groups [begin, end) of the items' groups laid end to end.
  const auto run_groups = [&](int64_t begin, int64_t end) {
    int64_t first = 0;
    for (size_t i = 0; i < items.size() && first < end; ++i) {
      const GroupedProduct& item = items[i];
      if (item.w->packed == nullptr || item.n_tokens == 0) continue;
      const PackedWeights& p = *item.w->packed;
      const int64_t lo = std::max(begin, first), hi = std::min(end, first + p.groups());
      if (lo < hi) {
        const Input& in = inputs[input_of[i]];
        const PackedInput packed_in{
            item.x,
            in.kind == InputKind::kFloat
                ? nullptr
                : reinterpret_cast<const ActQ8Block*>(scratch.data() + in.offset),
            in.panel, nullptr, cols, item.n_tokens};
        run_packed_groups(p, lo - first, hi - first, packed_in, item.n_tokens, item.y, table);
      }
      first += p.groups();
    }
  };
  // Chunks as matmul_packed sizes them, for the mean tokens a group is multiplied by.
  const int64_t mean_tokens = std::max<int64_t>(1, token_groups / total_groups);
  const int64_t min_chunk =
      (kMinChunkBytes + group_bytes * mean_tokens - 1) / (group_bytes * mean_tokens);
  const int64_t chunk = std::max(min_chunk, total_groups / (pool.num_threads() * kChunksPerThread));
  pool.parallel_for_chunks(total_groups, chunk, run_groups);
}

}  // namespace inferd::kernels

// Splits the tokens of one packed group into tiles of at most kMaxTileTokens (or the kernel's
// own maximum) and calls the tile kernel instantiated for each count, so every tile keeps its
// accumulators in registers. Each ISA file instantiates it with tile types from its own anonymous
// namespace, so the instances never mix ISAs at link time.
#pragma once

#include <cstdint>
#include <utility>

#include "kernels/packed.h"

namespace inferd::kernels {

constexpr int kMaxTileTokens = 8;
// The most tokens a step of several may have for its tiles to stream the weights as a decode
// step of a few sequences does (run_small_step; one token has its own tiles).
constexpr int64_t kSmallStepTokens = 16;

namespace {
// The activations of `t` tokens further on, for a row of `act_blocks` int8 blocks in panels of
// `stride` tokens (packed.h, act_block_index; t is a multiple of the panel or within the first),
// or float rows token-major (rows `stride` apart).
constexpr const ActQ8Block* tokens_on(const ActQ8Block* act, int64_t t, int64_t stride,
                                      int64_t act_blocks) {
  return act + act_block_index(t, 0, stride, act_blocks);
}
constexpr const float* tokens_on(const float* x, int64_t t, int64_t stride, int64_t) {
  return x + t * stride;
}
}  // namespace

// Tile<NT>::run(const Block* w, int64_t blocks, const Act* act, int64_t act_stride,
//               float* y, int64_t y_stride) computes NT tokens x 16 rows; Act is ActQ8Block
// for the int8 formats (panels of act_stride tokens, see kernels.h) and float for F16 (rows
// act_stride apart). Tiles take up to MaxTokens tokens (a kernel whose unpacking of the
// weights costs more than its registers can take more tokens to share it); a panel holds a
// whole number of tiles, or all the tokens.
template <typename Block, template <int> class Tile, typename Act = ActQ8Block,
          int MaxTokens = kMaxTileTokens>
inline void run_group_tiles(const uint8_t* group, int64_t blocks, const Act* act,
                            int64_t act_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  const auto* w = reinterpret_cast<const Block*>(group);
  // Runs tile NT on tokens from t; a tile after the group's first finds the weights in cache,
  // and a kernel with a run_cached skips there what it does to stream them from memory. A
  // kernel with a run_small_step streams them its own way in a step of few tokens (decode rows
  // of a few sequences, or drafts being verified), where the group is read about once.
  const auto run_tile = [&]<int NT>(int64_t t) {
    const Act* a = tokens_on(act, t, act_stride, act_blocks_of<Block>(blocks));
    // A kernel that can keep its unpacked operands does so in a prompt: the first tile unpacks
    // and keeps them, the others load them.
    if constexpr (requires { &Tile<NT>::run_store; }) {
      if (n_tokens > kSmallStepTokens) {
        if (t == 0) return Tile<NT>::run_store(w, blocks, a, act_stride, y, y_stride);
        return Tile<NT>::run_load(w, blocks, a, act_stride, y + t * y_stride, y_stride);
      }
    }
    if constexpr (requires { &Tile<NT>::run_cached; }) {
      if (t > 0) return Tile<NT>::run_cached(w, blocks, a, act_stride, y + t * y_stride, y_stride);
    }
    if constexpr (requires { &Tile<NT>::run_small_step; }) {
      if (t == 0 && n_tokens > 1 && n_tokens <= kSmallStepTokens)
        return Tile<NT>::run_small_step(w, blocks, a, act_stride, y, y_stride);
    }
    Tile<NT>::run(w, blocks, a, act_stride, y + t * y_stride, y_stride);
  };
  int64_t t = 0;
  for (; t + MaxTokens <= n_tokens; t += MaxTokens) run_tile.template operator()<MaxTokens>(t);
  const int64_t rest = n_tokens - t;
  // The tile instantiated for the count left over (1 .. MaxTokens - 1).
  const auto run_rest = [&]<int... I>(std::integer_sequence<int, I...>) {
    ((rest == I + 1 ? run_tile.template operator()<I + 1>(t) : void()), ...);
  };
  run_rest(std::make_integer_sequence<int, MaxTokens - 1>{});
}

}  // namespace inferd::kernels

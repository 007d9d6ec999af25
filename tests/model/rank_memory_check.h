// What a split model's ranks report for sizing the KV pool (Model::rank_memory), checked in the
// pipeline- and tensor-parallel tests, where every rank is a thread of one process: one
// machine, memory available, and a block each whose bytes together are the whole model's block
// (each rank keeps its own layers' or heads' K/V).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kv/kv_cache.h"
#include "model/model.h"

namespace inferd::testing {

inline void expect_rank_blocks_make_the_whole(model::Model& split, const model::Model& whole,
                                              int ranks, const std::string& name) {
  const auto one_block = [](const model::Model& m) {
    kv::KvCacheConfig one = m.kv_config(1);
    one.state_floats = 0;  // (the engine counts state slots apart)
    one.num_state_slots = 0;
    return one;
  };
  const std::vector<model::RankMemory> memory = split.rank_memory(one_block(split));
  ASSERT_EQ(std::ssize(memory), ranks) << name;
  int64_t blocks = 0;
  for (const model::RankMemory& m : memory) {
    EXPECT_EQ(m.machine, memory[0].machine) << name;
    EXPECT_GT(m.available, 0) << name;
    EXPECT_GE(m.block_bytes, 0) << name;  // (0: a hybrid's rank of recurrent layers only)
    blocks += m.block_bytes;
  }
  EXPECT_EQ(blocks, kv::KvCache(one_block(whole)).bytes()) << name;
}

}  // namespace inferd::testing

#include "model/exact_copies.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace inferd::model {

bool ExactCopies::plan(const Batch& batch, const kv::KvCache& cache) {
  active_ = cache.has_exact_copies();
  if (!active_) return false;
  window_ = cache.exact_window_blocks();
  block_size_ = cache.block_size();
  const int64_t bs = block_size_;
  entries_.assign(batch.sequences.size(), Entry{});
  if (token_entry_.size() < batch.tokens.size()) token_entry_.resize(batch.tokens.size());
  // Entries of one sequence (one slot) share its staged blocks: the first one stages them all.
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const BatchSequence& seq = batch.sequences[i];
    Entry& e = entries_[i];
    for (int64_t t = seq.token_begin; t < seq.token_end; ++t)
      token_entry_[static_cast<size_t>(t)] = static_cast<int32_t>(i);
    if (seq.state_slot < 0 || seq.token_end <= seq.token_begin) continue;
    if (seq.state_slot >= cache.config().num_state_slots)
      fail("exact copies: state slot {} of a cache with {}", seq.state_slot,
           cache.config().num_state_slots);
    e.slot = seq.state_slot;
    e.owner = i;
    for (size_t j = 0; j < i; ++j) {
      if (entries_[j].slot == e.slot) {
        e.owner = entries_[j].owner;
        break;
      }
    }
    const int32_t first = batch.positions[static_cast<size_t>(seq.token_begin)];
    const int32_t last = batch.positions[static_cast<size_t>(seq.token_end - 1)];
    e.read_first = std::max<int64_t>(1, first / bs - window_ + 1);
    e.read_last = last / bs;
    Entry& owner = entries_[e.owner];
    if (e.owner == i) {
      owner.first_block = first / bs;
      owner.first_offset = static_cast<int>(first % bs);
      owner.last_block = last / bs;
    } else {  // a later part of the same sequence's tokens
      if (first / bs < owner.first_block) {
        owner.first_block = first / bs;
        owner.first_offset = static_cast<int>(first % bs);
      }
      owner.last_block = std::max<int64_t>(owner.last_block, last / bs);
    }
  }
  int64_t staged = 0, pointers = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (e.slot < 0) continue;
    if (e.owner == i) {
      e.stage = staged;
      staged += e.last_block - e.first_block + 1;
    }
    pointers += 2 * (e.read_last - e.read_first + 1);
  }
  size_t key_halves = 0, value_halves = 0;
  for (int l = 0; l < cache.config().n_layers; ++l) {
    if (cache.group_of(l) < 0) continue;
    key_halves = std::max(key_halves, cache.exact_block_halves(l, false));
    value_halves = std::max(value_halves, cache.exact_block_halves(l, true));
  }
  key_block_halves_ = key_halves;
  value_block_halves_ = value_halves;
  const auto need = [](std::vector<uint16_t>& v, size_t n) {
    if (v.size() < n) v.resize(n);  // only when a batch stages more than any before
  };
  need(stage_keys_, static_cast<size_t>(staged) * key_halves);
  need(stage_values_, static_cast<size_t>(staged) * value_halves);
  if (pointers_.size() < static_cast<size_t>(pointers)) pointers_.resize(static_cast<size_t>(pointers));
  blocks_.resize(entries_.size());
  return true;
}

const uint16_t* ExactCopies::staged(const Entry& owner, int64_t block, bool value) const {
  if (block == owner.first_block && !owner.first_staged_whole) return nullptr;
  const int64_t index = owner.stage + block - owner.first_block;
  return value ? stage_values_.data() + index * static_cast<int64_t>(value_block_halves_)
               : stage_keys_.data() + index * static_cast<int64_t>(key_block_halves_);
}

void ExactCopies::begin_layer(int layer, const kv::KvCache& cache) {
  const size_t key_halves = cache.exact_block_halves(layer, false);
  const size_t value_halves = cache.exact_block_halves(layer, true);
  // A first block this step only adds to starts from the copy an earlier step left in the ring;
  // without one (a prefix from the prefix cache, a copy evicted) it has no copy at this step.
  for (size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (e.slot < 0 || e.owner != i) continue;
    e.first_staged_whole = true;
    if (e.first_offset == 0) continue;
    const int entry = cache.exact_entry_of(e.first_block);
    if (cache.exact_tag(e.slot, layer, entry) != e.first_block) {
      e.first_staged_whole = false;
      continue;
    }
    std::memcpy(stage_keys(e.stage), cache.exact_keys(e.slot, layer, entry), key_halves * sizeof(uint16_t));
    std::memcpy(stage_values(e.stage), cache.exact_values(e.slot, layer, entry),
                value_halves * sizeof(uint16_t));
  }
  size_t at = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    kernels::ExactBlocks& b = blocks_[i];
    b = kernels::ExactBlocks{};
    if (e.slot < 0) continue;
    const Entry& owner = entries_[e.owner];
    const auto ring = [&](int64_t block, bool value) -> const uint16_t* {
      const int entry = cache.exact_entry_of(block);
      if (cache.exact_tag(e.slot, layer, entry) != block) return nullptr;
      return value ? cache.exact_values(e.slot, layer, entry) : cache.exact_keys(e.slot, layer, entry);
    };
    const auto copy = [&](int64_t block, bool value) {
      return block >= owner.first_block ? staged(owner, block, value) : ring(block, value);
    };
    const auto n = static_cast<size_t>(e.read_last - e.read_first + 1);
    const uint16_t** keys = pointers_.data() + at;
    const uint16_t** values = keys + n;
    at += 2 * n;
    for (size_t k = 0; k < n; ++k) {
      keys[k] = copy(e.read_first + static_cast<int64_t>(k), false);
      values[k] = copy(e.read_first + static_cast<int64_t>(k), true);
    }
    b.window_blocks = window_;
    b.first_block = e.read_first;
    b.keys = {keys, n};
    b.values = {values, n};
    b.sink_keys = copy(0, false);
    b.sink_values = copy(0, true);
    b.key_stride = cache.exact_key_stride(layer);
    b.value_stride = cache.exact_value_stride(layer);
  }
}

void ExactCopies::store(int layer, int64_t t, int32_t position, const float* k, const float* v,
                        const kv::KvCache& cache) {
  const Entry& e = entries_[static_cast<size_t>(token_entry_[static_cast<size_t>(t)])];
  if (e.slot < 0) return;
  const Entry& owner = entries_[e.owner];
  const int64_t index = owner.stage + position / block_size_ - owner.first_block;
  cache.store_exact(layer, k, v, stage_keys(index), stage_values(index), position % block_size_);
}

void ExactCopies::end_layer(int layer, kv::KvCache& cache) {
  const size_t key_halves = cache.exact_block_halves(layer, false);
  const size_t value_halves = cache.exact_block_halves(layer, true);
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (e.slot < 0 || e.owner != i) continue;
    // The ring keeps the latest window + 1 blocks (one spare: a step that goes back by a
    // rejected draft still finds the blocks before it), entry 0 block 0.
    const auto keep = [&](int64_t block) {
      const int entry = cache.exact_entry_of(block);
      const uint16_t* keys = staged(e, block, false);
      if (keys == nullptr) {
        cache.exact_tag(e.slot, layer, entry) = -1;
        return;
      }
      std::memcpy(cache.exact_keys(e.slot, layer, entry), keys, key_halves * sizeof(uint16_t));
      std::memcpy(cache.exact_values(e.slot, layer, entry), staged(e, block, true),
                  value_halves * sizeof(uint16_t));
      cache.exact_tag(e.slot, layer, entry) = static_cast<int32_t>(block);
    };
    const int64_t from = std::max(e.first_block, e.last_block - window_);
    if (e.first_block == 0 && from > 0) keep(0);
    for (int64_t block = from; block <= e.last_block; ++block) keep(block);
  }
}

}  // namespace inferd::model

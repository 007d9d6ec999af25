// Tensor parallelism (vLLM's --tensor-parallel-size, Megatron's split): N ranks hold one model,
// each a shard of every layer. Rank 0 runs everything else (the HTTP server, the scheduler,
// sampling); before each thing the ranks do together it broadcasts a message saying what, and
// the other ranks (run_worker) follow. A forward pass is one message (the step's batch: tokens,
// positions, the sequences' block tables, the logit rows), after which every rank runs its shard
// with two all-reduces a layer, and the logits' vocabulary slices come together on rank 0.
//
// The split (model/decoder.cpp, WeightLoader::shard): attention heads and KV heads by rank (each
// rank's KV cache holds its heads only), Q/K/V rows and attn_output columns; the feed-forward's
// gate and up rows and down columns; the vocabulary projection by rows. A column split falls on
// the weight type's block boundaries or the load fails naming the tensor. Norms, embeddings and
// the residual stream are whole on every rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "kv/kv_cache.h"
#include "model/batch.h"

namespace inferd::dist {

// What rank 0 tells the others; the first byte of every message.
enum class Op : uint8_t {
  kLoad,       // open this file and load your shard (ModelOptions' sizes)
  kCache,      // make this KV cache and a pool of this many threads
  kForward,    // run this batch
  kCopyBlock,  // copy a KV block (a beam's copy-on-write)
  kStop,       // return from run_worker
};

// Rank 0's side: each fills `out` with one message; Communicator::broadcast sends it.
void encode_load(std::vector<uint8_t>& out, const std::string& path, int64_t max_batch_tokens,
                 int64_t max_context);
void encode_cache(std::vector<uint8_t>& out, const kv::KvCacheConfig& config, int threads);
void encode_forward(std::vector<uint8_t>& out, const model::Batch& batch);
void encode_copy_block(std::vector<uint8_t>& out, size_t group, int32_t from, int32_t to);
void encode_stop(std::vector<uint8_t>& out);

// This process's world for a command given --tensor-parallel `ranks` (`command` names it in
// the error): the world's communicator when it has more than one rank, nullptr when one; an
// inferd::Error when the two numbers differ.
Communicator* tensor_parallel_world(int ranks, const char* command);

// Tells the other ranks to return from run_worker (once; later calls do nothing): rank 0 at
// the end of its command.
void release_workers(Communicator& comm);

// A rank other than 0: follows rank 0's messages until kStop; returns the process's exit
// code. An error here ends the whole job (MPI_Abort), so that rank 0 is never left waiting in
// a collective.
int run_worker(Communicator& comm);

}  // namespace inferd::dist

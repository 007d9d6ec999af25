// Model parallelism over ranks (processes under mpirun, or threads in the tests): N ranks hold
// one model. Rank 0 runs everything else (the HTTP server, the scheduler, sampling); before
// each thing the ranks do together it broadcasts a message saying what, and the other ranks
// (run_worker) follow. A forward pass is one message (the step's batch: tokens, positions, the
// sequences' block tables, the logit rows), after which every rank runs its part.
//
// Tensor parallelism (vLLM's --tensor-parallel-size, Megatron's split; model/decoder.cpp,
// WeightLoader::shard): each rank holds a shard of every layer: attention heads and KV heads by
// rank (each rank's KV cache holds its heads only), Q/K/V rows and attn_output columns; the
// feed-forward's gate and up rows and down columns; the vocabulary projection by rows. A column
// split falls on the weight type's block boundaries or the load fails naming the tensor. Norms,
// embeddings and the residual stream are whole on every rank. Two all-reduces a layer; the
// logits' vocabulary slices come together on rank 0.
//
// Pipeline parallelism (vLLM's --pipeline-parallel-size): each rank holds a contiguous run of
// layers (and its KV cache those layers' K/V only); rank 0 also the token embeddings, the output
// norm and the vocabulary projection. A step's tokens are cut into micro-batches that follow
// one another through the ranks, so that rank r works on micro-batch m + 1 while rank r + 1
// works on m; the last rank hands the final hidden states of the logit rows back to rank 0.
// Several steps may be in flight (Model::launch_forward): rank 0 sends the next step's batch
// while the other ranks still run the one before, and they follow its messages in order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "kv/kv_cache.h"
#include "model/batch.h"
#include "model/model.h"

namespace inferd::dist {

// What rank 0 tells the others; the first byte of every message.
enum class Op : uint8_t {
  kLoad,          // open this file and load your part (ModelOptions' sizes, the parallelism)
  kCache,         // make this KV cache and a pool of this many threads
  kForward,       // run this batch
  kCopyBlock,     // copy a KV block (a beam's copy-on-write)
  kCopyState,     // copy a recurrent state slot (a fork of a hybrid model's sequence)
  kSaveSnapshot,  // save a state slot into a snapshot slot (prefix caching of hybrid models)
  kLoadSnapshot,  // and back
  kReportMemory,  // say your machine's available memory and a KV block's bytes (gather_memory)
  kStop,          // return from run_worker
};

// How the ranks split the model.
enum class Parallelism : uint8_t {
  kTensor,
  kTensorAndExperts,  // tensor parallelism with whole experts by rank (--expert-parallel)
  kPipeline,
  kData,            // every rank the whole model, its own sequences (--data-parallel)
  kDataAndExperts,  // and whole experts by rank, tokens sent to them (with --expert-parallel)
};

// Rank 0's side: each fills `out` with one message; Communicator::broadcast sends it.
void encode_load(std::vector<uint8_t>& out, const std::string& path, int64_t max_batch_tokens,
                 int64_t max_context, Parallelism parallelism);
void encode_cache(std::vector<uint8_t>& out, const kv::KvCacheConfig& config, int threads);
void encode_forward(std::vector<uint8_t>& out, const model::Batch& batch);
void encode_copy_block(std::vector<uint8_t>& out, size_t group, int32_t from, int32_t to);
// kCopyState, kSaveSnapshot or kLoadSnapshot: from slot `from` to slot `to`.
void encode_state_op(std::vector<uint8_t>& out, Op op, int32_t from, int32_t to);
void encode_stop(std::vector<uint8_t>& out);
// kReportMemory for a cache of the shape `one_block`; every rank then calls gather_memory.
void encode_report_memory(std::vector<uint8_t>& out, const kv::KvCacheConfig& one_block);

// Every rank's model::RankMemory on rank 0 (rank order), each measured by that rank: its
// machine, that machine's available memory now, and one block of `one_block`'s shape with the
// rank's own layers (pipeline: `remote_layers` are this rank's). The other ranks get an empty
// list.
std::vector<model::RankMemory> gather_memory(Communicator& comm,
                                             const kv::KvCacheConfig& one_block);

// This process's world for a command given --tensor-parallel and --pipeline-parallel
// (`command` names it in errors): the world's communicator as the split that has more than one
// rank, nullptr for the other (both nullptr: one process). An inferd::Error when the world's
// size is not their product, or when both split (not implemented together).
struct ParallelWorld {
  Communicator* tensor = nullptr;
  Communicator* pipeline = nullptr;
  Communicator* data = nullptr;
  int ranks() const;
  // The split's communicator (nullptr: one process), and its name ("tensor", "pipeline",
  // "data"; "" for one process).
  Communicator* split() const;
  const char* kind() const;
};
// --tensor-parallel, --pipeline-parallel and --data-parallel: at most one of them above 1.
struct ParallelSizes {
  int tensor = 1;
  int pipeline = 1;
  int data = 1;
};
ParallelWorld parallel_world(const ParallelSizes& sizes, const char* command);
// The world of parallel_world() set on a model's options, with --expert-parallel, which spreads
// experts over the tensor- or data-parallel ranks and so needs one of them above 1 (vLLM's
// rule): what the engine and `inferd bench` load a model with.
ParallelWorld apply_parallel_world(model::ModelOptions& options, const ParallelSizes& sizes,
                                   bool expert_parallel, const char* command);

// Tells the other ranks to return from run_worker (once; later calls do nothing): rank 0 at
// the end of its command.
void release_workers(Communicator& comm);

// A rank other than 0: follows rank 0's messages until kStop; returns the process's exit
// code. An error here ends the whole job (MPI_Abort), so that rank 0 is never left waiting in
// a collective.
int run_worker(Communicator& comm);

}  // namespace inferd::dist

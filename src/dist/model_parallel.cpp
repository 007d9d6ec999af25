#include "dist/model_parallel.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <type_traits>

#include <fmt/core.h>

#ifdef INFERD_MPI
#include <mpi.h>
#endif

#include "gguf/gguf.h"
#include "model/registry.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace inferd::dist {
namespace {

// Appends plain values and arrays of them to a message.
class Writer {
 public:
  Writer(std::vector<uint8_t>& out, Op op) : out_(out) {
    out_.clear();
    put(op);
  }
  template <typename T>
  void put(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>);
    append(&value, sizeof(T));
  }
  template <typename T>
  void put_span(std::span<const T> values) {
    put<uint64_t>(values.size());
    append(values.data(), values.size_bytes());
  }
  void put_flags(const std::vector<bool>& flags) {
    put<uint64_t>(flags.size());
    for (const bool f : flags) put<uint8_t>(f ? 1 : 0);
  }
  // One field of a struct (cache_fields).
  template <typename T>
  void operator()(const T& value) {
    if constexpr (std::is_same_v<T, std::vector<bool>>) {
      put_flags(value);
    } else if constexpr (std::is_same_v<T, bool>) {
      put<uint8_t>(value ? 1 : 0);
    } else {
      put(value);
    }
  }

 private:
  void append(const void* from, size_t n) {
    if (n == 0) return;
    const size_t at = out_.size();
    out_.resize(at + n);
    std::memcpy(out_.data() + at, from, n);
  }
  std::vector<uint8_t>& out_;
};

// Reads what a Writer wrote, in the same order; a short message is an error.
class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& in) : in_(in) {}
  template <typename T>
  T get() {
    T value;
    take(&value, sizeof(T));
    return value;
  }
  template <typename T>
  void get_vector(std::vector<T>& out) {
    out.resize(get<uint64_t>());
    take(out.data(), out.size() * sizeof(T));
  }
  std::vector<bool> get_flags() {
    std::vector<bool> flags(get<uint64_t>());
    for (size_t i = 0; i < flags.size(); ++i) flags[i] = get<uint8_t>() != 0;
    return flags;
  }
  template <typename T>
  void operator()(T& value) {
    if constexpr (std::is_same_v<T, std::vector<bool>>) {
      value = get_flags();
    } else if constexpr (std::is_same_v<T, bool>) {
      value = get<uint8_t>() != 0;
    } else {
      value = get<T>();
    }
  }
  std::string get_string() {
    std::vector<char> chars;
    get_vector(chars);
    return {chars.begin(), chars.end()};
  }

 private:
  void take(void* to, size_t n) {
    if (n == 0) return;  // (an empty vector's data() may be null)
    if (at_ + n > in_.size()) fail("model parallel: a message from rank 0 ends early");
    std::memcpy(to, in_.data() + at_, n);
    at_ += n;
  }
  const std::vector<uint8_t>& in_;
  size_t at_ = 0;
};

// A batch as run_worker rebuilds it: the arrays the Batch's spans view.
struct BatchStorage {
  std::vector<int32_t> tokens, positions, logit_rows, hidden_rows;
  std::vector<model::BatchSequence> sequences;
  std::vector<kv::BlockTables> tables;  // [sequence]
  std::vector<float> hidden;            // [hidden_rows, n_embd]
  std::vector<float> margins;           // [tokens] when rank 0 asked for routing margins
  int64_t bf16_rows_begin = 0;
  bool want_margins = false;

  model::Batch batch(int n_embd) {
    hidden.resize(hidden_rows.size() * static_cast<size_t>(n_embd));
    margins.resize(want_margins ? tokens.size() : 0);
    model::Batch b{tokens,
                   positions,
                   sequences,
                   logit_rows,
                   bf16_rows_begin,
                   hidden_rows,
                   hidden.empty() ? nullptr : hidden.data()};
    b.routing_margins = want_margins ? margins.data() : nullptr;
    return b;
  }
};

void decode_forward(Reader& in, BatchStorage& s) {
  in.get_vector(s.tokens);
  in.get_vector(s.positions);
  in.get_vector(s.logit_rows);
  in.get_vector(s.hidden_rows);
  s.bf16_rows_begin = in.get<int64_t>();
  s.want_margins = in.get<uint8_t>() != 0;
  const auto n = in.get<uint64_t>();
  s.sequences.resize(n);
  s.tables.resize(n);
  for (size_t i = 0; i < n; ++i) {
    model::BatchSequence& seq = s.sequences[i];
    seq.token_begin = in.get<int64_t>();
    seq.token_end = in.get<int64_t>();
    seq.state_slot = in.get<int32_t>();
    const auto groups = in.get<uint64_t>();
    if (groups > s.tables[i].size()) fail("model parallel: {} KV groups in a message", groups);
    for (size_t g = 0; g < groups; ++g) in.get_vector(s.tables[i][g]);
    seq.block_tables = &s.tables[i];
  }
}

// Every field of a KvCacheConfig in message order, handed to a Writer or a Reader alike.
template <typename Config, typename Field>
void cache_fields(Config& c, Field& f) {
  f(c.n_layers);
  f(c.n_kv_heads);
  f(c.head_dim);
  f(c.block_size);
  f(c.num_blocks);
  f(c.key_type);
  f(c.value_type);
  f(c.sliding_layers);
  f(c.sliding_window);
  f(c.num_sliding_blocks);
  f(c.host_storage);
  f(c.stateless_layers);
  f(c.state_floats);
  f(c.num_state_slots);
  f(c.num_snapshot_slots);
  f(c.sliding_n_kv_heads);
  f(c.sliding_head_dim);
  f(c.sliding_keeps_all);
  f(c.value_head_dim);
  f(c.remote_layers);
  f(c.exact_recent_tokens);
}

kv::KvCacheConfig decode_cache(Reader& in, int& threads) {
  kv::KvCacheConfig c;
  cache_fields(c, in);
  threads = in.get<int>();
  return c;
}

[[noreturn]] void abort_job(Communicator& comm, const std::string& what) {
  fmt::print(stderr, "inferd rank {}: error: {} (ending the whole job)\n", comm.rank(), what);
  std::fflush(stderr);
#ifdef INFERD_MPI
  if (comm.size() > 1) MPI_Abort(MPI_COMM_WORLD, 1);
#endif
  std::abort();
}

}  // namespace

void encode_load(std::vector<uint8_t>& out, const std::string& path, int64_t max_batch_tokens,
                 int64_t max_context, Parallelism parallelism) {
  Writer w(out, Op::kLoad);
  w.put_span(std::span<const char>(path.data(), path.size()));
  w.put(max_batch_tokens);
  w.put(max_context);
  w.put(parallelism);
}

void encode_cache(std::vector<uint8_t>& out, const kv::KvCacheConfig& c, int threads) {
  Writer w(out, Op::kCache);
  cache_fields(c, w);
  w.put(threads);
}

void encode_report_memory(std::vector<uint8_t>& out, const kv::KvCacheConfig& one_block) {
  Writer w(out, Op::kReportMemory);
  cache_fields(one_block, w);
}

std::vector<model::RankMemory> gather_memory(Communicator& comm,
                                             const kv::KvCacheConfig& one_block) {
  // Four floats a rank, each an integer below 2^24 and so exact: the machine id, the available
  // memory in MiB, and the block's bytes in two 24-bit halves.
  const model::RankMemory mine = {machine_id(), available_memory_bytes(),
                                  kv::KvCache(one_block).bytes()};
  constexpr int kFloats = 4;
  constexpr int64_t kLow = (int64_t{1} << 24) - 1;
  const float send[kFloats] = {
      static_cast<float>(mine.machine),
      mine.available < 0 ? -1.0f : static_cast<float>(mine.available >> 20),
      static_cast<float>(mine.block_bytes >> 24), static_cast<float>(mine.block_bytes & kLow)};
  const std::vector<int64_t> counts(static_cast<size_t>(comm.size()), kFloats);
  std::vector<float> all(comm.rank() == 0 ? kFloats * counts.size() : 0);
  comm.gather(send, comm.rank() == 0 ? all.data() : nullptr, counts);
  std::vector<model::RankMemory> out;
  if (comm.rank() != 0) return out;
  for (size_t r = 0; r < counts.size(); ++r) {
    const float* f = &all[kFloats * r];
    model::RankMemory m;
    m.machine = static_cast<uint32_t>(f[0]);
    m.available = f[1] < 0 ? -1 : static_cast<int64_t>(f[1]) << 20;
    m.block_bytes = (static_cast<int64_t>(f[2]) << 24) + static_cast<int64_t>(f[3]);
    out.push_back(m);
  }
  out[0].available = mine.available;  // rank 0's own, not rounded to MiB
  return out;
}

void encode_forward(std::vector<uint8_t>& out, const model::Batch& batch) {
  Writer w(out, Op::kForward);
  w.put_span(batch.tokens);
  w.put_span(batch.positions);
  w.put_span(batch.logit_rows);
  w.put_span(batch.hidden_rows);
  w.put(batch.bf16_rows_begin);
  w.put<uint8_t>(batch.routing_margins != nullptr ? 1 : 0);  // (data parallelism gathers them)
  w.put<uint64_t>(batch.sequences.size());
  for (const model::BatchSequence& seq : batch.sequences) {
    w.put(seq.token_begin);
    w.put(seq.token_end);
    w.put(seq.state_slot);
    w.put<uint64_t>(seq.block_tables->size());
    for (const std::vector<int32_t>& table : *seq.block_tables)
      w.put_span(std::span<const int32_t>(table));
  }
}

void encode_copy_block(std::vector<uint8_t>& out, size_t group, int32_t from, int32_t to) {
  Writer w(out, Op::kCopyBlock);
  w.put<uint64_t>(group);
  w.put(from);
  w.put(to);
}

void encode_state_op(std::vector<uint8_t>& out, Op op, int32_t from, int32_t to) {
  if (op != Op::kCopyState && op != Op::kSaveSnapshot && op != Op::kLoadSnapshot)
    fail("model parallel: no state operation {}", static_cast<int>(op));
  Writer w(out, op);
  w.put(from);
  w.put(to);
}

void encode_stop(std::vector<uint8_t>& out) {
  Writer w(out, Op::kStop);
}

int ParallelWorld::ranks() const {
  const Communicator* c = split();
  return c != nullptr ? c->size() : 1;
}

Communicator* ParallelWorld::split() const {
  for (Communicator* c : {tensor, pipeline, data})
    if (c != nullptr) return c;
  return nullptr;
}

const char* ParallelWorld::kind() const {
  return tensor != nullptr ? "tensor" : pipeline != nullptr ? "pipeline" : data != nullptr ? "data" : "";
}

ParallelWorld parallel_world(const ParallelSizes& sizes, const char* command) {
  Communicator& comm = world();
  struct Split {
    const char* flag;
    int ranks;
  };
  const Split splits[] = {{"--tensor-parallel", sizes.tensor},
                          {"--pipeline-parallel", sizes.pipeline},
                          {"--data-parallel", sizes.data}};
  const Split* chosen = &splits[0];
  for (const Split& a : splits) {
    if (a.ranks <= 1) continue;
    for (const Split& b : splits)
      if (&b > &a && b.ranks > 1)
        fail("{} {} with {} {}: the two splits together are not implemented; pick one", a.flag,
             a.ranks, b.flag, b.ranks);
    chosen = &a;
  }
  const int ranks = std::max(1, chosen->ranks);
  if (ranks != comm.size())
    fail(
        "{} {} in a job of {} process(es): start it with `mpirun -n {} inferd {} ...` and give "
        "{} the same number",
        chosen->flag, ranks, comm.size(), std::max(ranks, comm.size()), command, chosen->flag);
  ParallelWorld split;
  if (comm.size() <= 1) return split;
  if (sizes.pipeline > 1) {
    split.pipeline = &comm;
  } else if (sizes.data > 1) {
    split.data = &comm;
  } else {
    split.tensor = &comm;
  }
  return split;
}

ParallelWorld apply_parallel_world(model::ModelOptions& options, const ParallelSizes& sizes,
                                   bool expert_parallel, const char* command) {
  const ParallelWorld world = parallel_world(sizes, command);
  if (expert_parallel && world.tensor == nullptr && world.data == nullptr)
    fail(
        "--expert-parallel spreads the experts over the ranks of --tensor-parallel N or "
        "--data-parallel N (N above 1, `mpirun -n N`)");
  options.tp = world.tensor;
  options.pp = world.pipeline;
  options.dp = world.data;
  options.expert_parallel = expert_parallel;
  return world;
}

void release_workers(Communicator& comm) {
  if (comm.size() <= 1 || comm.rank() != 0 || !comm.mark_released()) return;
  std::vector<uint8_t> message;
  encode_stop(message);
  comm.broadcast(message);
}

int run_worker(Communicator& comm) {
  std::unique_ptr<gguf::GgufFile> file;
  std::unique_ptr<model::Model> shard;
  std::unique_ptr<kv::KvCache> cache;
  std::unique_ptr<ThreadPool> pool;
  std::vector<uint8_t> message;
  BatchStorage storage;
  try {
    for (;;) {
      comm.broadcast(message);
      Reader in(message);
      const Op op = in.get<Op>();
      switch (op) {
        case Op::kLoad: {
          const std::string path = in.get_string();
          model::ModelOptions options;
          options.max_batch_tokens = in.get<int64_t>();
          options.max_context = in.get<int64_t>();
          const auto parallelism = in.get<Parallelism>();
          if (parallelism == Parallelism::kPipeline) {
            options.pp = &comm;
          } else if (parallelism == Parallelism::kTensor ||
                     parallelism == Parallelism::kTensorAndExperts) {
            options.tp = &comm;
            options.expert_parallel = parallelism == Parallelism::kTensorAndExperts;
          } else if (parallelism == Parallelism::kData ||
                     parallelism == Parallelism::kDataAndExperts) {
            options.dp = &comm;
            options.expert_parallel = parallelism == Parallelism::kDataAndExperts;
          } else {
            fail("model parallel: an unknown split from rank 0");
          }
          cache.reset();
          shard.reset();
          file = std::make_unique<gguf::GgufFile>(gguf::GgufFile::open(path));
          shard = model::load_model(*file, options);
          break;
        }
        case Op::kCache: {
          int threads = 1;
          kv::KvCacheConfig config = decode_cache(in, threads);
          // A pipeline rank keeps the K/V of its own layers, not rank 0's.
          if (shard) config.remote_layers = shard->config().remote_layers;
          cache = std::make_unique<kv::KvCache>(config);
          if (!pool || pool->num_threads() != threads) pool = std::make_unique<ThreadPool>(threads);
          break;
        }
        case Op::kForward: {
          if (!shard || !cache) fail("a forward pass before the model and its cache");
          decode_forward(in, storage);
          shard->forward(storage.batch(shard->config().n_embd), *cache, nullptr, *pool);
          break;
        }
        case Op::kCopyBlock: {
          if (!cache) fail("a block copy before the cache");
          const auto group = in.get<uint64_t>();
          const auto from = in.get<int32_t>();
          const auto to = in.get<int32_t>();
          if (shard) {  // (a data-parallel rank also notes where the copy's sequence runs)
            shard->copy_kv_block(*cache, group, from, to);
          } else {
            cache->copy_block(group, from, to);
          }
          break;
        }
        case Op::kCopyState:
        case Op::kSaveSnapshot:
        case Op::kLoadSnapshot: {
          if (!cache) fail("a state operation before the cache");
          const auto from = in.get<int32_t>();
          const auto to = in.get<int32_t>();
          // (Through the model: a data-parallel rank also notes where the state is.)
          if (!shard) fail("a state operation before the model");
          if (op == Op::kCopyState) {
            shard->copy_state(*cache, from, to);
          } else if (op == Op::kSaveSnapshot) {
            shard->save_state_snapshot(*cache, from, to);
          } else {
            shard->load_state_snapshot(*cache, from, to);
          }
          break;
        }
        case Op::kReportMemory: {
          kv::KvCacheConfig one_block;
          cache_fields(one_block, in);
          // A pipeline rank's block holds its own layers, as its cache will (kCache).
          if (shard) one_block.remote_layers = shard->config().remote_layers;
          gather_memory(comm, one_block);
          break;
        }
        case Op::kStop:
          return 0;
        default:
          fail("model parallel: an unknown message from rank 0");
      }
    }
  } catch (const std::exception& e) {
    abort_job(comm, e.what());
  }
}

}  // namespace inferd::dist

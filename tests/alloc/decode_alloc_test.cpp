// Counts heap allocations during decode steps of the real engine: the hot loop must make none.
// This executable replaces the global operator new, so it is separate from the other tests.
// Counting covers every thread (the thread pool's workers too) while the window is open.
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "../model/model_fixture.h"
#include "util/paths.h"
#include "util/thread_pool.h"

namespace {

std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};

// A separate function so a debugger can break on the allocation that broke the rule.
[[gnu::noinline]] void note_allocation(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  asm volatile("" : : "r"(size) : "memory");
}

void* allocate(std::size_t size, std::size_t alignment) {
  if (g_counting.load(std::memory_order_relaxed)) note_allocation(size);
  if (size == 0) size = 1;
  void* p = alignment <= alignof(std::max_align_t)
                ? std::malloc(size)
                : std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(std::size_t size) {
  return allocate(size, alignof(std::max_align_t));
}
void* operator new[](std::size_t size) {
  return allocate(size, alignof(std::max_align_t));
}
void* operator new(std::size_t size, std::align_val_t al) {
  return allocate(size, static_cast<std::size_t>(al));
}
void* operator new[](std::size_t size, std::align_val_t al) {
  return allocate(size, static_cast<std::size_t>(al));
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}

namespace inferd::testing {
namespace {

// Counts allocations made while it is alive.
class AllocationWindow {
 public:
  AllocationWindow() : start_(g_allocations.load()) { g_counting.store(true); }
  ~AllocationWindow() { g_counting.store(false); }
  int64_t count() const { return g_allocations.load() - start_; }

 private:
  int64_t start_;
};

// Streams into storage reserved up front, as a real sink (a socket buffer, stdout) would.
class ReservedOutput final : public engine::OutputChannel {
 public:
  ReservedOutput() { text_.reserve(1 << 16); }
  void on_text(std::string_view text) override {
    text_.append(text);
    ++pieces_;
  }
  void on_finish(const engine::RequestResult&) override { ++finishes_; }
  std::string text_;
  int pieces_ = 0;
  int finishes_ = 0;
};

TEST(AllocationCounter, SeesAllocationsOnEveryThread) {
  ThreadPool pool(2);
  AllocationWindow window;
  auto* on_caller = new int(1);
  delete on_caller;
  pool.run([](int thread, int) {
    if (thread == 1) delete new int(2);  // the worker thread
  });
  EXPECT_EQ(window.count(), 2);
}

class DecodeAllocTest : public ModelTest {
 protected:
  static constexpr int kSteps = 100;

  std::shared_ptr<ReservedOutput> submit(engine::Engine& e, const std::string& prompt,
                                         const sampling::SamplingParams& params,
                                         std::vector<std::string> stop = {},
                                         int64_t max_tokens = 3 * kSteps) {
    auto out = std::make_shared<ReservedOutput>();
    engine::Request r;
    r.prompt = e.tokenizer().encode(prompt, true, true);
    r.sampling = params;
    r.max_tokens = max_tokens;  // still decoding when the window closes
    r.ignore_eos = true;
    r.stop = std::move(stop);
    r.output = out;
    e.add_request(std::move(r));
    return out;
  }

  // Runs the prompts' prefill and a few decode steps, then counts over kSteps decode steps.
  int64_t allocations_in_decode(engine::Engine& e,
                                const std::vector<std::shared_ptr<ReservedOutput>>& outs) {
    for (int i = 0; i < 8; ++i) e.step();
    for (const auto& out : outs) EXPECT_GT(out->pieces_, 0) << "decode has not started";
    AllocationWindow window;
    for (int i = 0; i < kSteps; ++i) e.step();
    const int64_t count = window.count();
    for (const auto& out : outs) EXPECT_EQ(out->finishes_, 0) << "finished inside the window";
    return count;
  }

  engine::Engine make_engine(bool speculative = false) { return make_engine(*file_, speculative); }
  static engine::Engine make_engine(const gguf::GgufFile& file, bool speculative) {
    engine::EngineConfig config;
    config.threads = 2;
    config.context = speculative ? 2048 : 512;  // up to 5 tokens a step
    config.max_seqs = 4;
    config.max_batched_tokens = 256;
    if (speculative) {
      config.spec.method = engine::SpecMethod::kNgram;
      config.spec.prompt_lookup_min = 1;
    }
    return engine::Engine(file, config);
  }
};

// A mixture of experts decodes without allocating too: routing, the grouped expert products
// and the weighted sums run in buffers sized at load. The random-weight Qwen3-MoE of
// tests/golden/architectures (16 experts, 4 a token); skipped without it.
TEST_F(DecodeAllocTest, MixtureOfExpertsDecodeAllocatesNothing) {
  const std::string path = cache_dir() + "/golden-models/qwen3moe-seed7.Q8_0.gguf";
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << path << " is absent (tests/golden/architectures/make-golden --models-only)";
  const auto moe_file = gguf::GgufFile::open(path);
  engine::Engine e = make_engine(moe_file, false);
  sampling::SamplingParams greedy;
  greedy.temperature = 0;
  auto a = submit(e, "Write a long story about a lighthouse keeper.", greedy);
  auto b = submit(e, "List the rivers of Europe.", greedy);
  EXPECT_EQ(allocations_in_decode(e, {a, b}), 0);
}

// A hybrid model's recurrent layers decode in the buffers and state slots sized at start-up,
// with n-gram speculation (its state checkpoints and rollbacks) too. The random-weight
// Qwen3.5-MoE of tests/golden/architectures; skipped without it.
TEST_F(DecodeAllocTest, HybridDecodeAllocatesNothing) {
  const std::string path = cache_dir() + "/golden-models/qwen35moe-seed7.Q8_0.gguf";
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << path << " is absent (tests/golden/architectures/make-golden --models-only)";
  const auto hybrid_file = gguf::GgufFile::open(path);
  for (const bool speculative : {false, true}) {
    engine::Engine e = make_engine(hybrid_file, speculative);
    sampling::SamplingParams greedy;
    greedy.temperature = 0;
    auto a = submit(e, "Write a long story about a lighthouse keeper.", greedy);
    auto b = submit(e, "List the rivers of Europe.", greedy);
    EXPECT_EQ(allocations_in_decode(e, {a, b}), 0) << (speculative ? "with drafts" : "");
  }
}

TEST_F(DecodeAllocTest, GreedyDecodeAllocatesNothing) {
  auto e = make_engine();
  sampling::SamplingParams greedy;
  greedy.temperature = 0;
  auto out = submit(e, "Write a long story about a lighthouse keeper.", greedy);
  EXPECT_EQ(allocations_in_decode(e, {out}), 0);
}

TEST_F(DecodeAllocTest, SampledDecodeWithPenaltiesAndStopsAllocatesNothing) {
  auto e = make_engine();
  sampling::SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 40;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  p.repetition_penalty = 1.1f;
  p.presence_penalty = 0.2f;
  p.frequency_penalty = 0.2f;
  p.seed = 42;
  auto out = submit(e, "List some facts about the ocean.", p, {"@@never@@", "qqqqqq"});
  EXPECT_EQ(allocations_in_decode(e, {out}), 0);
}

// Deeply indented code makes tokens of long runs of spaces: text pieces longer than a short
// string's inline storage.
TEST_F(DecodeAllocTest, LongTokenPiecesAllocateNothing) {
  auto e = make_engine();
  sampling::SamplingParams greedy;
  greedy.temperature = 0;
  std::string prompt = "def deep(a, b, c, d, e):\n";
  for (int depth = 1; depth <= 6; ++depth)
    prompt += std::string(4 * depth, ' ') + "if a > " + std::to_string(depth) + ":\n";
  auto out = submit(e, prompt, greedy, {"@@never@@"});
  EXPECT_EQ(allocations_in_decode(e, {out}), 0);
}

TEST_F(DecodeAllocTest, AdmissionIsCounted) {
  // The other tests' zero means something only if the engine's own allocations are seen.
  auto e = make_engine();
  AllocationWindow window;
  sampling::SamplingParams greedy;
  greedy.temperature = 0;
  submit(e, "Hello", greedy);
  EXPECT_GT(window.count(), 0);
}

TEST_F(DecodeAllocTest, ConcurrentDecodeAllocatesNothing) {
  auto e = make_engine();
  sampling::SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<std::shared_ptr<ReservedOutput>> outs = {
      submit(e, "Once upon a time", greedy), submit(e, "def fibonacci(n):", greedy),
      submit(e, "The three primary colors are", greedy)};
  EXPECT_EQ(allocations_in_decode(e, outs), 0);
}

TEST_F(DecodeAllocTest, SpeculativeDecodeAllocatesNothing) {
  auto e = make_engine(true);
  sampling::SamplingParams greedy;
  greedy.temperature = 0;
  sampling::SamplingParams sampled;
  sampled.temperature = 0.7f;
  sampled.seed = 3;
  std::vector<std::shared_ptr<ReservedOutput>> outs = {
      submit(e, "Repeat after me, many times: red, green, blue, red, green, blue,", greedy, {},
             1800),
      submit(e, "Count: one two three one two three one two three", sampled, {}, 1800)};
  const int64_t drafts_before = e.spec_decode_stats().num_draft_tokens;
  EXPECT_EQ(allocations_in_decode(e, outs), 0);
  EXPECT_GT(e.spec_decode_stats().num_draft_tokens, drafts_before + 100) << "drafts were verified";
}

}  // namespace
}  // namespace inferd::testing

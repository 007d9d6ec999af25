// Prompt progress (llama-server's return_progress): a report before the prompt is computed,
// one after each prompt chunk, and none for requests that do not ask.
#include <gtest/gtest.h>

#include "tiny_engine.h"

namespace inferd::engine {
namespace {

class ProgressChannel final : public OutputChannel {
 public:
  void on_text(std::string_view) override {}
  void on_prompt_progress(const PromptProgress& p) override { reports.push_back(p); }
  void on_finish(const RequestResult& r) override { result = r; }
  std::vector<PromptProgress> reports;
  RequestResult result;
};

class PromptProgressTest : public TinyEngineFixture {
 protected:
  std::shared_ptr<ProgressChannel> run(Engine& e, int prompt_len, bool report) {
    auto out = std::make_shared<ProgressChannel>();
    Request r;
    r.prompt = prompt(prompt_len);
    r.max_tokens = 3;
    r.report_progress = report;
    r.output = out;
    e.add_request(std::move(r));
    e.run_until_idle();
    return out;
  }
};

TEST_F(PromptProgressTest, FirstReportIsTheCacheThenOnePerChunk) {
  EngineConfig c = config(2);
  c.max_batched_tokens = 16;
  auto e = engine(c);
  const int len = 40;  // chunks of 16, 16, 8
  auto out = run(*e, len, true);
  ASSERT_EQ(out->reports.size(), 4u);
  EXPECT_EQ(out->reports[0].processed, 0);
  EXPECT_EQ(out->reports[0].cached, 0);
  EXPECT_EQ(out->reports[0].elapsed_s, 0.0);
  EXPECT_EQ(out->reports[1].processed, 16);
  EXPECT_EQ(out->reports[2].processed, 32);
  EXPECT_EQ(out->reports[3].processed, len);
  for (size_t i = 0; i < out->reports.size(); ++i) {
    EXPECT_EQ(out->reports[i].total, len);
    if (i > 0) {
      EXPECT_GE(out->reports[i].elapsed_s, out->reports[i - 1].elapsed_s);
    }
  }

  // The same prompt again: the prefix cache holds its whole blocks, and the first report says so.
  auto again = run(*e, len, true);
  ASSERT_GE(again->reports.size(), 2u);
  EXPECT_EQ(again->reports[0].cached, 32);
  EXPECT_EQ(again->reports[0].processed, 32);
  EXPECT_EQ(again->reports.back().processed, len);
  EXPECT_EQ(again->reports.back().cached, 32);

  EXPECT_TRUE(run(*e, len, false)->reports.empty());
}

}  // namespace
}  // namespace inferd::engine

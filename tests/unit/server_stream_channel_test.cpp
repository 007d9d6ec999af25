// StreamChannel: a token and its text reach the HTTP thread in the same batch, whenever it
// looks; a token whose text never comes is still delivered; the thread is woken once a step.
#include "server/stream_channel.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace inferd::server {
namespace {

using namespace std::chrono_literals;

TEST(StreamChannel, ATokenWaitsForItsText) {
  StreamChannel channel;
  const sampling::TokenLogprob top[] = {{7, -0.1f}};
  channel.on_token(7, -0.1f, top);
  // Taken between the token and its text: nothing yet (not the token alone).
  ChannelBatch early = channel.wait(0ms);
  EXPECT_TRUE(early.tokens.empty());
  EXPECT_TRUE(early.text.empty());
  channel.on_text("seven");
  ChannelBatch both = channel.wait(0ms);
  ASSERT_EQ(both.tokens.size(), 1u);
  EXPECT_EQ(both.tokens[0].token, 7);
  ASSERT_EQ(both.tokens[0].top.size(), 1u);
  EXPECT_EQ(both.text, "seven");
}

TEST(StreamChannel, ATokenWithoutTextGoesWithTheNextOrTheEnd) {
  StreamChannel channel;
  channel.on_token(1, -1.0f, {});  // its text held back (half a character, say)
  channel.on_token(2, -2.0f, {});
  ChannelBatch first = channel.wait(0ms);
  ASSERT_EQ(first.tokens.size(), 1u);
  EXPECT_EQ(first.tokens[0].token, 1);
  channel.on_finish(engine::RequestResult{});
  ChannelBatch last = channel.wait(0ms);
  ASSERT_EQ(last.tokens.size(), 1u);
  EXPECT_EQ(last.tokens[0].token, 2);
  EXPECT_TRUE(last.result.has_value());
}

TEST(StreamChannel, TheReaderWakesAtTheStepEndWithTheWholeStep) {
  // A step that accepted drafts reports several tokens; the connection's thread, already
  // waiting, is woken once for all of them rather than by the first.
  StreamChannel channel;
  ChannelBatch got;
  std::thread reader([&] { got = channel.wait(10s); });
  std::this_thread::sleep_for(20ms);  // the reader is waiting
  channel.on_text("one ");
  std::this_thread::sleep_for(20ms);  // time for a wake-up the first piece must not cause
  channel.on_text("two ");
  channel.on_text("three");
  channel.on_step_end();
  reader.join();
  EXPECT_EQ(got.text, "one two three");
}

}  // namespace
}  // namespace inferd::server

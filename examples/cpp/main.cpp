// inferd's C++ API from a program of its own (examples/cpp/CMakeLists.txt finds the installed
// library): a batch of prompts, a streamed chat answer, n sampled choices and a JSON answer.
//
//   inferd-cpp-example MODEL
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <inferd/engine.h>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " MODEL.gguf\n";
    return 2;
  }
  try {
    inferd::EngineOptions options;
    options.max_seqs = 8;
    inferd::Engine engine(argv[1], options);
    const inferd::ModelInfo info = engine.model_info();
    std::cout << "inferd " << inferd::version() << ", model " << info.architecture << " ("
              << info.n_vocab << " tokens), context " << info.context << "\n";

    // Several prompts in one call: the scheduler batches them.
    inferd::SamplingParams greedy = inferd::SamplingParams::greedy();
    greedy.max_tokens = 12;
    const std::vector<std::string> prompts = {"The capital of France is",
                                              "The largest planet in the solar system is"};
    for (const inferd::RequestOutput& out : engine.generate(prompts, greedy))
      std::cout << "[" << out.index << "] " << out.prompt << out.outputs[0].text << "\n";

    // A chat turn through the model's template, streamed as it is made.
    std::cout << "[chat] ";
    const inferd::RequestOutput answer = engine.chat(
        {{"user", "What is 2 + 2?"}}, greedy,
        [](const inferd::StreamDelta& delta) { std::cout << delta.text << std::flush; });
    std::cout << "\n[chat] finish: " << inferd::finish_reason_name(answer.outputs[0].finish_reason)
              << ", " << answer.outputs[0].token_ids.size() << " tokens\n";

    // Four sampled choices, reproducible with a seed.
    inferd::SamplingParams sampled;
    sampled.n = 4;
    sampled.seed = 42;
    sampled.max_tokens = 8;
    for (const inferd::CompletionOutput& choice :
         engine.complete("Once upon a time", sampled).outputs)
      std::cout << "[choice " << choice.index << "] " << choice.text << "\n";

    // Structured output: the answer is JSON matching the schema.
    inferd::SamplingParams json = greedy;
    json.max_tokens = 60;
    json.json_schema =
        R"({"type":"object","properties":{"city":{"type":"string","maxLength":20}},"required":["city"]})";
    std::cout << "[json] " << engine.chat({{"user", "Name a city in JSON."}}, json).outputs[0].text
              << "\n";
  } catch (const inferd::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

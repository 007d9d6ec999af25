// Jinja feature snippets against Python's jinja2 (tests/golden/chat_templates/golden.json,
// "snippets"): each renders byte for byte as jinja2 renders it, or fails where jinja2 fails.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/parser.h"
#include "util/error.h"

namespace inferd::jinja {
namespace {

// Dicts keep the key order of the file (ordered_json), as jinja2 saw them.
Value from_json(const nlohmann::ordered_json& j) {
  if (j.is_null()) return Value::none();
  if (j.is_boolean()) return Value(j.get<bool>());
  if (j.is_number_integer()) return Value(j.get<int64_t>());
  if (j.is_number_float()) return Value(j.get<double>());
  if (j.is_string()) return Value(j.get<std::string>());
  if (j.is_array()) {
    List out;
    for (const auto& x : j) out.push_back(from_json(x));
    return Value(std::move(out));
  }
  Dict out;
  for (const auto& [k, v] : j.items()) out.set(k, from_json(v));
  return Value(std::move(out));
}

TEST(JinjaGolden, SnippetsRenderAsJinja2Does) {
  std::ifstream in(std::string(INFERD_SOURCE_DIR) + "/tests/golden/chat_templates/golden.json");
  ASSERT_TRUE(in.good());
  const auto golden = nlohmann::ordered_json::parse(in);
  Dict globals;
  for (const auto& [k, v] : golden["snippet_vars"].items()) globals.set(k, from_json(v));
  globals.set("raise_exception", Value(Function([](const Args& a) -> Value {
                throw Error(a.positional.empty() ? "" : a.positional[0].to_string());
              })));
  int checked = 0;
  for (const auto& s : golden["snippets"]) {
    const std::string source = s["template"];
    if (s.contains("error")) {
      EXPECT_THROW(render(parse_template(source), globals), Error)
          << source << "\njinja2: " << s["error"].get<std::string>();
    } else {
      try {
        EXPECT_EQ(render(parse_template(source), globals), s["expected"].get<std::string>())
            << source;
      } catch (const Error& e) {
        ADD_FAILURE() << source << "\nfailed: " << e.what();
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 60);
}

}  // namespace
}  // namespace inferd::jinja

#include "server/api/infill.h"

#include <algorithm>

#include <fmt/format.h>

#include "server/json/fields.h"
#include "tokenizer/tokenizer.h"

namespace inferd::server {
namespace {

using json = nlohmann::ordered_json;
using Tokens = std::vector<int32_t>;
using json_fields::text;

}  // namespace

json infill_to_native(const json& body, const ParseContext& ctx) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  const tokenizer::Tokenizer& tok = *ctx.tokenizer;
  const tokenizer::SpecialIds& special = tok.vocab().special();
  std::string missing;
  for (const auto& [id, name] :
       {std::pair{special.fim_pre, "prefix"}, std::pair{special.fim_suf, "suffix"},
        std::pair{special.fim_mid, "middle"}}) {
    if (id == tokenizer::kNoToken)
      missing += fmt::format("{}{}", missing.empty() ? "" : ", ", name);
  }
  if (!missing.empty()) {
    throw ApiError(501, fmt::format("this model has no fill-in-the-middle token for: {}", missing),
                   "", "not_supported_error");
  }
  const std::string prefix = text(body, "input_prefix", true);
  const std::string suffix = text(body, "input_suffix", true);
  const std::string typed = text(body, "prompt", false);
  const auto encode = [&](const std::string& text) { return tok.encode(text, false, false); };

  Tokens extra;  // the project's other files, oldest first
  if (body.contains("input_extra")) {
    const json& files = body["input_extra"];
    if (!files.is_array())
      throw ApiError(400, "'input_extra' must be a list of {\"filename\", \"text\"}",
                     "input_extra");
    if (special.fim_rep != tokenizer::kNoToken) {
      extra.push_back(special.fim_rep);
      const Tokens project = encode("myproject\n");
      extra.insert(extra.end(), project.begin(), project.end());
    }
    for (const json& file : files) {
      if (!file.is_object() || !file.contains("text") || !file["text"].is_string())
        throw ApiError(400, "each 'input_extra' entry needs a string 'text'", "input_extra");
      if (file.contains("filename") && !file["filename"].is_string())
        throw ApiError(400, "an 'input_extra' entry's 'filename' must be a string", "input_extra");
      const std::string name = file.value("filename", std::string("tmp"));
      // Without a file separator token, a plain-text divider that models read as one.
      const Tokens head = special.fim_sep != tokenizer::kNoToken
                              ? encode(name + "\n")
                              : encode("\n\n--- snippet ---\n\n");
      if (special.fim_sep != tokenizer::kNoToken) extra.push_back(special.fim_sep);
      extra.insert(extra.end(), head.begin(), head.end());
      const Tokens text = encode(file["text"].get<std::string>());
      extra.insert(extra.end(), text.begin(), text.end());
    }
  }
  if (special.fim_sep != tokenizer::kNoToken && !extra.empty()) {
    extra.push_back(special.fim_sep);  // the file being edited
    const Tokens name = encode("filename\n");
    extra.insert(extra.end(), name.begin(), name.end());
  }

  Tokens before = encode(prefix), after = encode(suffix);
  const Tokens typed_ids = encode(typed);
  const bool bos = tok.vocab().add_bos() && special.bos != tokenizer::kNoToken;
  // The prompt's budget: 3/4 of the context, the rest left for the answer.
  const auto budget = static_cast<size_t>(std::max<int64_t>(ctx.context * 3 / 4, 1));
  const size_t fixed = 3 + (bos ? 1 : 0) + typed_ids.size();
  const auto total = [&] { return fixed + extra.size() + before.size() + after.size(); };
  if (total() > budget) {
    const size_t cut = std::min(extra.size(), total() - budget);
    extra.erase(extra.begin(), extra.begin() + static_cast<std::ptrdiff_t>(cut));
  }
  // Then the code around the cursor: the suffix keeps at least a quarter of what is left (more
  // when the prefix is short), the prefix its end (the lines just before the cursor).
  const size_t left = budget > fixed + extra.size() ? budget - fixed - extra.size() : 0;
  if (before.size() + after.size() > left) {
    after.resize(std::min(after.size(), std::max(left / 4, left - std::min(left, before.size()))));
    const size_t keep = left - after.size();
    before.erase(before.begin(), before.end() - static_cast<std::ptrdiff_t>(keep));
  }

  Tokens prompt = extra;
  if (bos) prompt.insert(prompt.begin(), special.bos);
  prompt.push_back(special.fim_pre);
  prompt.insert(prompt.end(), before.begin(), before.end());
  prompt.insert(prompt.end(), typed_ids.begin(), typed_ids.end());
  prompt.push_back(special.fim_suf);
  prompt.insert(prompt.end(), after.begin(), after.end());
  prompt.push_back(special.fim_mid);

  json native = body;
  for (const char* field : {"input_prefix", "input_suffix", "input_extra"}) native.erase(field);
  native["prompt"] = prompt;
  return native;
}

}  // namespace inferd::server

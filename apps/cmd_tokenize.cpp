// `inferd tokenize` and `inferd detokenize`: the model's tokenizer at the terminal, for
// checking prompts and comparing against other tools.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8_scan.h"
#include "util/error.h"

namespace inferd::app {
namespace {

std::unique_ptr<tokenizer::Tokenizer> load_tokenizer(const std::string& model) {
  std::string path = model.empty() ? default_model_path() : model;
  gguf::GgufFile file = gguf::GgufFile::open(path);
  return tokenizer::Tokenizer::from_gguf(file);
}

// A piece as a readable single-line literal: control characters, quotes, backslashes and
// bytes that do not form a whole UTF-8 character (pieces can split one) are escaped.
std::string escape_piece(const std::string& piece) {
  std::string out;
  size_t pos = 0;
  while (pos < piece.size()) {
    tokenizer::Utf8Unit unit = tokenizer::scan_utf8(piece, pos);
    auto c = static_cast<unsigned char>(piece[pos]);
    if (unit.kind != tokenizer::Utf8Unit::Kind::kValid) {
      for (size_t k = 0; k < unit.length; ++k) {
        out += fmt::format("\\x{:02x}", static_cast<unsigned char>(piece[pos + k]));
      }
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\\' || c == '\'') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out.append(piece, pos, unit.length);
    }
    pos += unit.length;
  }
  return out;
}

std::string read_stdin() {
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open {}", path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Accepts "1 2 3", "1,2,3", "[1, 2, 3]" or any mix, spread over one or more arguments.
std::vector<int32_t> parse_ids(const std::vector<std::string>& args) {
  std::vector<int32_t> ids;
  for (const std::string& arg : args) {
    size_t pos = 0;
    while (pos < arg.size()) {
      if (std::string(" ,\t\n[]").find(arg[pos]) != std::string::npos) {
        ++pos;
        continue;
      }
      size_t end = arg.find_first_of(" ,\t\n[]", pos);
      std::string word = arg.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
      size_t used = 0;
      long long value = 0;
      try {
        value = std::stoll(word, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != word.size() || value < INT32_MIN || value > INT32_MAX) {
        fail("'{}' is not a token id", word);
      }
      ids.push_back(static_cast<int32_t>(value));
      pos = end == std::string::npos ? arg.size() : end;
    }
  }
  return ids;
}

struct TokenizeOptions {
  std::string model;
  std::string text;
  std::string file;
  bool json = false;
  bool ids_only = false;
  bool no_bos = false;
  bool no_parse_special = false;
};

void run_tokenize(const TokenizeOptions& opt) {
  auto tok = load_tokenizer(opt.model);
  std::string text;
  if (!opt.file.empty()) {
    text = read_file(opt.file);
  } else if (opt.text == "-") {
    text = read_stdin();
  } else {
    text = opt.text;
  }
  std::vector<int32_t> ids = tok->encode(text, !opt.no_bos, !opt.no_parse_special);
  if (opt.ids_only) {
    // One line "[1, 2, 3]", as llama-tokenize --ids prints it, so outputs compare directly.
    fmt::print("[{}]\n", fmt::join(ids, ", "));
    return;
  }
  if (opt.json) {
    nlohmann::json pieces = nlohmann::json::array();
    for (int32_t id : ids) pieces.push_back(tok->token_piece(id));
    nlohmann::json out = {{"ids", ids}, {"pieces", pieces}};
    // A piece can be part of a character; such bytes become U+FFFD in the JSON.
    fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    return;
  }
  for (int32_t id : ids) fmt::print("{}\t'{}'\n", id, escape_piece(tok->token_piece(id)));
}

}  // namespace

void register_tokenize(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "Show the token ids and pieces of a text");
  auto opt = std::make_shared<TokenizeOptions>();
  cmd->add_option("-m,--model", opt->model, "GGUF file (default: the fetched SmolLM2)");
  auto* text = cmd->add_option("text", opt->text, "Text to tokenize; '-' reads standard input");
  auto* file = cmd->add_option("-f,--file", opt->file, "Read the text from a file, as its bytes");
  text->excludes(file);
  file->excludes(text);
  cmd->add_flag("--json", opt->json, "Print {\"ids\": [...], \"pieces\": [...]}");
  cmd->add_flag("--ids", opt->ids_only, "Print only the ids, as one line [1, 2, 3]");
  cmd->add_flag("--no-bos", opt->no_bos, "Do not add BOS/EOS even if the model asks for them");
  cmd->add_flag("--no-parse-special", opt->no_parse_special,
                "Treat special-token texts such as <|im_start|> as plain text");
  cmd->callback([opt, text, file] {
    if (text->count() == 0 && file->count() == 0) fail("tokenize needs a TEXT argument or -f FILE");
    run_tokenize(*opt);
  });
}

void register_detokenize(CLI::App& app) {
  auto* cmd = app.add_subcommand("detokenize", "Turn token ids back into text");
  auto model = std::make_shared<std::string>();
  auto args = std::make_shared<std::vector<std::string>>();
  auto skip_special = std::make_shared<bool>(false);
  cmd->add_option("-m,--model", *model, "GGUF file (default: the fetched SmolLM2)");
  cmd->add_option("ids", *args, "Token ids, as separate arguments or one '1,2,3' string")
      ->required();
  cmd->add_flag("--skip-special", *skip_special, "Leave out control tokens such as BOS");
  cmd->callback([model, args, skip_special] {
    auto tok = load_tokenizer(*model);
    std::string text = tok->decode(parse_ids(*args), *skip_special);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
  });
}

}  // namespace inferd::app

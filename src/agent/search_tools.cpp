// grep_search and file_glob_search, and the glob matching they share.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "agent/builtin_tools.h"
#include "agent/tool_runtime.h"

namespace inferd::agent {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

namespace {

constexpr long long kGlobMaxResults = 100;
constexpr size_t kGrepMaxMatches = 100;
constexpr long long kGrepMaxContext = 10;
// A longer line is shown cut (minified code would otherwise fill the answer).
constexpr size_t kGrepMaxLineBytes = 1000;
// Bigger files are skipped: logs and data, rarely what a search is after.
constexpr size_t kGrepMaxFileBytes = 8 * 1024 * 1024;
constexpr auto kGrepTimeBudget = std::chrono::seconds(30);
// Bounds a pathological pattern's backtracking on one line.
constexpr uint32_t kRegexMatchLimit = 1000000;

// One element of a glob.
struct GlobToken {
  enum class Kind { kChar, kOne, kClass, kStar, kAnyDirs, kAnything };
  Kind kind = Kind::kChar;
  char c = 0;            // kChar
  std::string_view set;  // kClass: between the brackets, without a leading ! or ^
  bool negated = false;  // kClass
};

GlobToken glob_token(GlobToken::Kind kind, char c = 0) {
  GlobToken token;
  token.kind = kind;
  token.c = c;
  return token;
}

std::vector<GlobToken> tokenize_glob(std::string_view pattern) {
  std::vector<GlobToken> tokens;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '*' && i + 1 < pattern.size() && pattern[i + 1] == '*') {
      const bool dirs = i + 2 < pattern.size() && pattern[i + 2] == '/';
      tokens.push_back(glob_token(dirs ? GlobToken::Kind::kAnyDirs : GlobToken::Kind::kAnything));
      i += dirs ? 2 : 1;
    } else if (c == '*') {
      tokens.push_back(glob_token(GlobToken::Kind::kStar));
    } else if (c == '?') {
      tokens.push_back(glob_token(GlobToken::Kind::kOne));
    } else if (c == '\\' && i + 1 < pattern.size()) {
      tokens.push_back(glob_token(GlobToken::Kind::kChar, pattern[++i]));
    } else if (c == '[') {
      size_t start = i + 1;
      const bool negated =
          start < pattern.size() && (pattern[start] == '!' || pattern[start] == '^');
      if (negated) ++start;
      // A ']' right after the opening bracket is one of the set, not its end.
      const size_t close = pattern.find(']', start < pattern.size() ? start + 1 : start);
      if (close == std::string_view::npos) {
        tokens.push_back(glob_token(GlobToken::Kind::kChar, c));  // no end: a plain '['
        continue;
      }
      GlobToken token = glob_token(GlobToken::Kind::kClass);
      token.set = pattern.substr(start, close - start);
      token.negated = negated;
      tokens.push_back(token);
      i = close;
    } else {
      tokens.push_back(glob_token(GlobToken::Kind::kChar, c));
    }
  }
  return tokens;
}

bool in_class(const GlobToken& token, char c) {
  bool found = false;
  const std::string_view set = token.set;
  for (size_t i = 0; i < set.size() && !found; ++i) {
    if (i + 2 < set.size() && set[i + 1] == '-') {
      found = static_cast<unsigned char>(set[i]) <= static_cast<unsigned char>(c) &&
              static_cast<unsigned char>(c) <= static_cast<unsigned char>(set[i + 2]);
      i += 2;
    } else {
      found = set[i] == c;
    }
  }
  return found != token.negated;
}

// The last component of a '/'-separated path.
std::string_view basename_of(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

struct PcreFree {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
  void operator()(pcre2_match_context* context) const { pcre2_match_context_free(context); }
};

// A compiled grep pattern.
class LineMatcher {
 public:
  // Empty error(): ready.
  LineMatcher(const std::string& pattern, bool literal, bool ignore_case) {
    // UTF with invalid sequences allowed: files are mostly UTF-8, but not all of them.
    uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
    if (literal) options |= PCRE2_LITERAL;
    if (ignore_case) options |= PCRE2_CASELESS;
    int code = 0;
    PCRE2_SIZE offset = 0;
    code_.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                              &code, &offset, nullptr));
    if (code_ == nullptr) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(code, message.data(), message.size());
      error_ = fmt::format("invalid regular expression at offset {}: {}", offset,
                           reinterpret_cast<const char*>(message.data()));
      return;
    }
    pcre2_jit_compile(code_.get(), PCRE2_JIT_COMPLETE);  // faster if it works; same matches
    data_.reset(pcre2_match_data_create_from_pattern(code_.get(), nullptr));
    context_.reset(pcre2_match_context_create(nullptr));
    pcre2_set_match_limit(context_.get(), kRegexMatchLimit);
  }

  const std::string& error() const { return error_; }

  // A line the pattern cannot be decided on within its limit counts as not matching.
  bool matches(std::string_view line) const {
    return pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(line.data()), line.size(), 0, 0,
                       data_.get(), context_.get()) >= 0;
  }

 private:
  std::unique_ptr<pcre2_code, PcreFree> code_;
  std::unique_ptr<pcre2_match_data, PcreFree> data_;
  std::unique_ptr<pcre2_match_context, PcreFree> context_;
  std::string error_;
};

bool looks_binary(std::string_view content) {
  return std::memchr(content.data(), '\0', std::min<size_t>(content.size(), 8192)) != nullptr;
}

bool included(std::string_view rel, const std::string& include, const std::string& exclude) {
  return path_glob_match(include, rel) && (exclude.empty() || !path_glob_match(exclude, rel));
}

class GrepSearchTool final : public BuiltinTool {
 public:
  GrepSearchTool()
      : BuiltinTool(
            "grep_search", "Search in files", false,
            "Find the lines matching a regular expression (PCRE) in a file or in the files "
            "under a directory, shown as path:line (path:number:line with line numbers). "
            "Binary files, files over 8 MiB and directories such as .git, node_modules and "
            "build are skipped. include and exclude are globs: one without '/' (\"*.cpp\") "
            "matches file names at any depth, one with '/' the path below the directory.",
            {{"path", schema_property("string", "File or directory to search")},
             {"pattern", schema_property("string",
                                         "Regular expression (or plain text with "
                                         "literal)")},
             {"include", schema_property("string", "Glob of the files to search (default: all)")},
             {"exclude", schema_property("string", "Glob of files to leave out")},
             {"return_line_numbers", schema_property("boolean", "Show line numbers")},
             {"literal", schema_property("boolean", "Take the pattern as plain text")},
             {"ignore_case", schema_property("boolean", "Ignore case")},
             {"context_lines",
              schema_property("integer", fmt::format("Lines to show before and after each match "
                                                     "(default 0, at most {})",
                                                     kGrepMaxContext))}},
            {"path", "pattern"}) {}

 protected:
  ojson run(const ToolCall& call) override {
    const json& params = call.params;
    const std::string path = string_param(params, "path", ".");
    const std::string pattern = string_param(params, "pattern");
    const std::string include = string_param(params, "include", "");
    const std::string exclude = string_param(params, "exclude", "");
    const long long context =
        std::clamp(int_param(params, "context_lines", 0), 0LL, kGrepMaxContext);
    const bool numbers = bool_param(params, "return_line_numbers", false) || context > 0;
    const LineMatcher matcher(pattern, bool_param(params, "literal", false),
                              bool_param(params, "ignore_case", false));
    if (!matcher.error().empty()) return {{"error", matcher.error()}};

    const auto workspace = open_workspace(call);
    const std::string base = workspace->resolve(path);
    // (file to read, path to show)
    std::vector<std::pair<std::string, std::string>> files;
    bool incomplete = false;
    const FileInfo info = workspace->stat(base);
    if (info.type == FileInfo::Type::kFile) {
      files.emplace_back(base, path);
    } else if (info.type == FileInfo::Type::kDir) {
      const Listing listing = workspace->list(base, 0, EntryKind::kFiles);
      incomplete = listing.incomplete;
      for (const ListEntry& entry : listing.entries) {
        if (included(entry.path, include, exclude)) {
          files.emplace_back(base + "/" + entry.path, entry.path);
        }
      }
    } else {
      return {{"error", "no such file or directory: " + path}};
    }

    std::string text;
    size_t total = 0;
    size_t skipped_large = 0;
    bool limit_reached = false;
    bool out_of_time = false;
    const auto deadline = std::chrono::steady_clock::now() + kGrepTimeBudget;
    for (const auto& [file, shown] : files) {
      if (limit_reached) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        out_of_time = true;
        break;
      }
      const ReadResult read = workspace->read(file, kGrepMaxFileBytes);
      if (!read.ok || looks_binary(read.data)) continue;
      if (read.truncated) {
        ++skipped_large;
        continue;
      }
      const std::vector<std::string_view> lines = split_lines(read.data);
      for (size_t i = 0; i < lines.size(); ++i) {
        if (!matcher.matches(lines[i])) continue;
        if (total == kGrepMaxMatches) {
          limit_reached = true;
          break;
        }
        ++total;
        const size_t first = i - std::min<size_t>(i, static_cast<size_t>(context));
        const size_t last = std::min(lines.size() - 1, i + static_cast<size_t>(context));
        for (size_t k = first; k <= last; ++k) {
          // grep's marks: ':' after the path of a matching line, '-' of a context line.
          const char mark = k == i ? ':' : '-';
          text += shown;
          text += mark;
          if (numbers) text += fmt::format("{}{}", k + 1, mark);
          const std::string_view line = lines[k];
          text.append(line.substr(0, utf8_cut(line, kGrepMaxLineBytes)));
          if (line.size() > kGrepMaxLineBytes) text += " [line cut]";
          text += '\n';
        }
        if (context > 0) text += "--\n";
      }
    }

    text += fmt::format("\n---\nTotal matches: {}\n", total);
    if (limit_reached) {
      text += fmt::format("[stopped at {} matches: narrow the path, pattern or include]\n",
                          kGrepMaxMatches);
    }
    if (out_of_time) {
      text += fmt::format("[stopped after {} s: narrow the path or include]\n",
                          kGrepTimeBudget.count());
    }
    if (skipped_large > 0) {
      text += fmt::format("[{} files over {} MiB not searched]\n", skipped_large,
                          kGrepMaxFileBytes >> 20);
    }
    if (incomplete) text += "[some directories could not be listed in full]\n";
    return {{"plain_text_response", text}};
  }
};

class FileGlobSearchTool final : public BuiltinTool {
 public:
  FileGlobSearchTool()
      : BuiltinTool(
            "file_glob_search", "Find files", false,
            "List the files (or directories) under a directory whose path matches a glob, "
            "relative to that directory; directories end with '/'. A glob without '/' "
            "(\"*.cpp\") matches names at any depth; one with '/' (\"src/**/*.h\") the path "
            "below the directory. Directories such as .git, node_modules and build are listed "
            "but not searched.",
            {{"path", schema_property("string", "Directory to search")},
             {"include", schema_property("string", "Glob to match (default \"**\": all)")},
             {"exclude", schema_property("string", "Glob of entries to leave out")},
             {"type", schema_property("string", "\"file\" (default), \"dir\" or \"all\"")},
             {"max_depth", schema_property("integer",
                                           "Levels to descend: 1 is the directory's own entries "
                                           "(default 0: no limit)")},
             {"limit", schema_property("integer", fmt::format("Entries to return (default and "
                                                              "most {})",
                                                              kGlobMaxResults))}},
            {"path"}) {}

 protected:
  ojson run(const ToolCall& call) override {
    const json& params = call.params;
    const std::string path = string_param(params, "path", ".");
    const std::string include = string_param(params, "include", "**");
    const std::string exclude = string_param(params, "exclude", "");
    const std::string type = string_param(params, "type", "file");
    const long long depth = int_param(params, "max_depth", 0);
    const int max_depth = static_cast<int>(std::clamp(depth, 0LL, 1LL << 20));
    const long long requested = int_param(params, "limit", kGlobMaxResults);
    if (requested < 1) {
      return {{"error", fmt::format("invalid limit: {} (it must be 1 or more)", requested)}};
    }
    const size_t limit = static_cast<size_t>(std::min(requested, kGlobMaxResults));
    EntryKind kind;
    if (type == "file") {
      kind = EntryKind::kFiles;
    } else if (type == "dir") {
      kind = EntryKind::kDirs;
    } else if (type == "all") {
      kind = EntryKind::kAll;
    } else {
      return {{"error",
               fmt::format("invalid type: '{}' (expected \"file\", \"dir\" or \"all\")", type)}};
    }

    const auto workspace = open_workspace(call);
    const std::string base = workspace->resolve(path);
    if (workspace->stat(base).type != FileInfo::Type::kDir) {
      return {{"error", "not a directory: " + path}};
    }
    const Listing listing = workspace->list(base, max_depth, kind);

    std::string text;
    ojson entries = ojson::array();
    size_t total = 0;
    for (const ListEntry& entry : listing.entries) {
      if (!included(entry.path, include, exclude)) continue;
      if (++total > limit) continue;  // counted, not shown
      text += entry.path;
      text += entry.is_dir ? "/\n" : "\n";
      entries.push_back({{"path", entry.path}, {"type", entry.is_dir ? "dir" : "file"}});
    }
    text += fmt::format("\n---\nTotal matches: {}\n", total);
    if (total > limit) {
      text += fmt::format("[showing the first {} of {}: narrow the glob to see others]\n", limit,
                          total);
    }
    if (listing.incomplete) {
      text +=
          "[the listing is incomplete: a time or size budget ran out, or a directory was "
          "unreadable]\n";
    }
    // `entries` and `base` are for programs (the web page's file picker); the model reads the
    // text.
    return {{"plain_text_response", text}, {"entries", entries}, {"base", base}};
  }
};

}  // namespace

bool glob_match(std::string_view pattern, std::string_view text) {
  // Which positions of `text` the tokens so far can end at: linear in each token, so no
  // pattern (however many stars) makes it blow up as backtracking can.
  std::vector<char> reach(text.size() + 1, 0);
  std::vector<char> next(text.size() + 1, 0);
  reach[0] = 1;
  for (const GlobToken& token : tokenize_glob(pattern)) {
    std::fill(next.begin(), next.end(), 0);
    bool seen = false;  // kAnyDirs: some earlier position was reachable
    for (size_t j = 0; j <= text.size(); ++j) {
      switch (token.kind) {
        case GlobToken::Kind::kChar:
          if (j > 0) next[j] = reach[j - 1] && text[j - 1] == token.c;
          break;
        case GlobToken::Kind::kOne:
          if (j > 0) next[j] = reach[j - 1] && text[j - 1] != '/';
          break;
        case GlobToken::Kind::kClass:
          if (j > 0) next[j] = reach[j - 1] && text[j - 1] != '/' && in_class(token, text[j - 1]);
          break;
        case GlobToken::Kind::kStar:
          next[j] = reach[j] || (j > 0 && next[j - 1] && text[j - 1] != '/');
          break;
        case GlobToken::Kind::kAnything:
          next[j] = reach[j] || (j > 0 && next[j - 1]);
          break;
        case GlobToken::Kind::kAnyDirs:
          // No directory, or anything that ends with '/'.
          if (j > 0) seen = seen || reach[j - 1];
          next[j] = reach[j] || (j > 0 && seen && text[j - 1] == '/');
          break;
      }
    }
    reach.swap(next);
  }
  return reach[text.size()] != 0;
}

bool path_glob_match(std::string_view pattern, std::string_view rel_path) {
  if (pattern.size() > 1 && pattern.back() == '/') pattern.remove_suffix(1);  // "src/": the dir
  if (pattern.empty()) return true;
  if (pattern.substr(0, 2) == "./") pattern.remove_prefix(1);  // the same as "/..."
  if (pattern.find('/') == std::string_view::npos) {
    return glob_match(pattern, basename_of(rel_path));
  }
  if (pattern[0] == '/') return glob_match(pattern.substr(1), rel_path);
  if (pattern.substr(0, 2) == "**") return glob_match(pattern, rel_path);
  return glob_match("**/" + std::string(pattern), rel_path);
}

std::unique_ptr<Tool> make_grep_search_tool() {
  return std::make_unique<GrepSearchTool>();
}

std::unique_ptr<Tool> make_file_glob_search_tool() {
  return std::make_unique<FileGlobSearchTool>();
}

}  // namespace inferd::agent

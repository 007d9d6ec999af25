// String helpers with Python's rules where chat templates can tell the difference: strip()
// and split() know Unicode whitespace; case changes are ASCII-only (see chat_template.h).
#pragma once

#include <string>
#include <vector>

namespace inferd::jinja {

// Python's str.strip / lstrip / rstrip; empty `chars` means whitespace.
std::string strip(const std::string& s, const std::string& chars, bool left, bool right);
// Python's str.split(sep, maxsplit); empty `sep` splits on runs of whitespace.
std::vector<std::string> split(const std::string& s, const std::string& sep, int64_t maxsplit);
// Replaces the first `count` occurrences (all when count < 0), as Python's str.replace.
std::string replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count, size_t max_size);
std::string to_upper(std::string s);
std::string to_lower(std::string s);
std::string capitalize(const std::string& s);
std::string title(const std::string& s);

}  // namespace inferd::jinja

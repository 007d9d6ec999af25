// String helpers with Python's rules where chat templates can tell the difference: strip()
// and split() know Unicode whitespace; case changes know the scripts case_mapping.cpp lists.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace inferd::jinja {

// Python's str.strip / lstrip / rstrip; empty `chars` means whitespace.
std::string strip(const std::string& s, const std::string& chars, bool left, bool right);
// Python's str.split(sep, maxsplit); empty `sep` splits on runs of whitespace.
std::vector<std::string> split(const std::string& s, const std::string& sep, int64_t maxsplit);
// Python's str.rsplit(sep, maxsplit): splits from the right.
std::vector<std::string> rsplit(const std::string& s, const std::string& sep, int64_t maxsplit);
// Replaces the first `count` occurrences (all when count < 0), as Python's str.replace.
std::string replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count, size_t max_size);
// Byte length of the (Unicode) whitespace character at s[i], 0 when there is none.
size_t whitespace_length(const std::string& s, size_t i);
// Python's str.upper/lower/capitalize/title (case_mapping.cpp): Latin, Cyrillic and uncased
// scripts; changing the case of other cased scripts is an error.
std::string to_upper(const std::string& s);
std::string to_lower(const std::string& s);
std::string capitalize(const std::string& s);
std::string title(const std::string& s);
// jinja2's title filter (not str.title): the first character after a run of whitespace,
// '-', '(', '{', '[' or '<' is upper case, the rest lower case.
std::string jinja_title(const std::string& s);
// Python's str.splitlines(): breaks at \n, \r\n, \r, \v, \f, \x1c-\x1e, U+0085, U+2028/9.
std::vector<std::string> splitlines(const std::string& s);
// str.islower() (`lower` true) or str.isupper(): some cased letter, and all of that case.
bool is_cased(const std::string& s, bool lower);
// Python's \w+ word count (the wordcount filter).
int64_t word_count(const std::string& s);

}  // namespace inferd::jinja

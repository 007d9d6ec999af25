// Jinja's sequence filters as jinja2 defines them. map, select, reject, selectattr,
// rejectattr, unique, items and reverse return generators there, and so here: printing one
// is an error, `|list` or a loop consumes it, and a second pass finds it empty.
#include <algorithm>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/filter_helpers.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/text.h"
#include "util/error.h"

namespace inferd::jinja {

Value follow(const Value& v, const std::string& path, Location where, size_t max_size) {
  Value out = v;
  for (const std::string& part : split(path, ".", -1)) {
    const bool index = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    out = item(out, index ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part), where,
               max_size);
  }
  return out;
}

Value sort_key(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value(to_lower(v.as_string())) : v;
}

bool less_than(const Value& a, const Value& b, Location where) {
  if (a.is_list() && b.is_list()) {
    const List &x = a.as_list(), &y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equal(x[i], y[i])) continue;
      return less_than(x[i], y[i], where);
    }
    return x.size() < y.size();
  }
  return compare_op("<", a, b, where);
}

namespace {

// The key a sort uses: the item or its attributes (`attribute="a,b"` sorts by both).
Value multi_key(const Value& x, const std::string& attributes, bool case_sensitive, Location where,
                size_t max_size) {
  if (attributes.empty()) return sort_key(x, case_sensitive);
  const std::vector<std::string> paths = split(attributes, ",", -1);
  if (paths.size() == 1) return sort_key(follow(x, paths[0], where, max_size), case_sensitive);
  List keys;
  for (const std::string& p : paths)
    keys.push_back(sort_key(follow(x, p, where, max_size), case_sensitive));
  return Value(std::move(keys));
}

// select / reject / selectattr / rejectattr: keep items whose test (or truth) matches `keep`.
Value select(const Value& v, const Args& args, bool by_attribute, bool keep, Location where,
             size_t max_size) {
  if (!v.truthy()) return Value::generator({});  // jinja2 checks `if value:` first (None too)
  const size_t first = by_attribute ? 1 : 0;
  if (by_attribute && args.positional.empty())
    syntax_error(where, "selectattr/rejectattr: missing parameter for attribute name");
  Args test_args;
  for (size_t i = first + 1; i < args.positional.size(); ++i)
    test_args.positional.push_back(args.positional[i]);
  test_args.keywords = args.keywords;
  List out;
  for (const Value& x : iterate(v, "select")) {
    const Value subject =
        by_attribute ? follow(x, args.positional[0].to_string(), where, max_size) : x;
    bool passed = subject.truthy();
    if (args.positional.size() > first) {
      const std::string test = args.positional[first].to_string();
      auto result = apply_test(test, subject, test_args, where);
      if (!result) syntax_error(where, "unknown test '" + test + "'");
      passed = *result;
    }
    if (passed == keep) out.push_back(x);
  }
  return Value::generator(std::move(out));
}

Value map_items(const Value& v, const Args& args, Location where, size_t max_size) {
  if (!v.truthy()) return Value::generator({});  // as select: a falsy value maps to nothing
  List out;
  const Value* attr = args.keyword("attribute");
  if (args.positional.empty() && attr != nullptr) {
    const Value* fallback = args.keyword("default");
    for (const Value& x : iterate(v, "map")) {
      Value got = follow(x, attr->to_string(), where, max_size);
      out.push_back(got.is_undefined() && fallback != nullptr && !fallback->is_none() ? *fallback
                                                                                      : got);
    }
    return Value::generator(std::move(out));
  }
  if (args.positional.empty()) syntax_error(where, "map requires a filter argument");
  const std::string filter = args.positional[0].to_string();
  Args rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keywords = args.keywords;
  for (const Value& x : iterate(v, "map")) {
    auto mapped = apply_filter(filter, x, rest, where, max_size);
    if (!mapped) syntax_error(where, "unknown filter '" + filter + "'");
    out.push_back(*mapped);
  }
  return Value::generator(std::move(out));
}

Value sorted(const Value& v, const Args& args, Location where, size_t max_size) {
  List out = iterate(v, "sort");
  const bool reverse = bool_arg(args, 0, "reverse");
  const bool case_sensitive = bool_arg(args, 1, "case_sensitive");
  const std::string attr = string_arg(args, 2, "attribute", "");
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& x : out) keyed.emplace_back(multi_key(x, attr, case_sensitive, where, max_size), x);
  // Python's sort is stable in both directions.
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? less_than(b.first, a.first, where) : less_than(a.first, b.first, where);
  });
  out.clear();
  for (auto& [k, x] : keyed) out.push_back(std::move(x));
  return Value(std::move(out));
}

Value dictsort(const Value& v, const Args& args, Location where) {
  if (!v.is_mapping()) syntax_error(where, "dictsort of a " + v.type_name());
  const bool case_sensitive = bool_arg(args, 0, "case_sensitive");
  const std::string by = string_arg(args, 1, "by", "key");
  if (by != "key" && by != "value") syntax_error(where, "dictsort: by must be 'key' or 'value'");
  const bool reverse = bool_arg(args, 2, "reverse");
  List pairs;
  for (const auto& [k, x] : v.as_dict().items) pairs.push_back(Value::tuple(List{k, x}));
  auto key = [&](const Value& pair) {
    return sort_key(pair.as_list()[by == "key" ? 0 : 1], case_sensitive);
  };
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
    return reverse ? less_than(key(b), key(a), where) : less_than(key(a), key(b), where);
  });
  return Value(std::move(pairs));
}

Value min_or_max(const std::string& name, const Value& v, const Args& args, Location where,
                 size_t max_size) {
  const List items = iterate(v, name);
  if (items.empty()) return Value::missing("No aggregated item, sequence was empty.");
  const bool cs = bool_arg(args, 0, "case_sensitive");
  const std::string attr = string_arg(args, 1, "attribute", "");
  size_t best = 0;
  Value best_key = multi_key(items[0], attr, cs, where, max_size);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = multi_key(items[i], attr, cs, where, max_size);
    if (name == "min" ? less_than(k, best_key, where) : less_than(best_key, k, where)) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}

}  // namespace

std::optional<Value> sequence_filter(const std::string& name, const Value& v, const Args& args,
                                     Location where, size_t max_size) {
  if (name == "first") {
    if (v.is_generator()) {
      Generator& g = v.as_generator();
      if (g.next < g.items.size()) return g.items[g.next++];
      return Value::missing("No first item, sequence was empty.");
    }
    List items = iterate(v, "first");
    if (items.empty()) return Value::missing("No first item, sequence was empty.");
    return items.front();
  }
  if (name == "last") {
    if (v.is_generator())
      syntax_error(where, "last of a generator ('generator' object is not reversible)");
    List items = iterate(v, "last");
    if (items.empty()) return Value::missing("No last item, sequence was empty.");
    return items.back();
  }
  if (name == "join") {
    std::string out;
    const std::string sep = string_arg(args, 0, "d", "");
    const std::string attr = string_arg(args, 1, "attribute", "");
    List items = iterate(v, "join");
    for (size_t i = 0; i < items.size(); ++i) {
      out += (i ? sep : "") +
             (attr.empty() ? items[i] : follow(items[i], attr, where, max_size)).to_string();
      if (out.size() > max_size) syntax_error(where, "join exceeds the size limit");
    }
    return Value(out);
  }
  if (name == "list") return Value(iterate(v, "list"));
  if (name == "items") {
    List out;
    if (!v.is_undefined() && !v.is_mapping())
      syntax_error(where, "items of a " + v.type_name() + " (it needs a mapping)");
    if (v.is_mapping()) {
      for (const auto& [k, x] : v.as_dict().items) out.push_back(Value::tuple(List{k, x}));
    }
    return Value::generator(std::move(out));
  }
  if (name == "reverse") {
    if (v.is_string()) {
      auto chars = characters(v.as_string());
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
      return Value(out);
    }
    const bool was_generator = v.is_generator();
    List out = iterate(v, "reverse");
    std::reverse(out.begin(), out.end());
    // reversed() of a list is an iterator; a generator is listed first and reversed in place.
    return was_generator ? Value(std::move(out)) : Value::generator(std::move(out));
  }
  if (name == "sort") return sorted(v, args, where, max_size);
  if (name == "dictsort") return dictsort(v, args, where);
  if (name == "unique") {
    const bool cs = bool_arg(args, 0, "case_sensitive");
    const std::string attr = string_arg(args, 1, "attribute", "");
    List out, seen;
    for (const Value& x : iterate(v, "unique")) {
      Value k = multi_key(x, attr, cs, where, max_size);
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, k); })) {
        seen.push_back(std::move(k));
        out.push_back(x);
      }
    }
    return Value::generator(std::move(out));
  }
  if (name == "min" || name == "max") return min_or_max(name, v, args, where, max_size);
  if (name == "sum") {
    const std::string attr = string_arg(args, 0, "attribute", "");
    Value total = args.get(1, "start") ? *args.get(1, "start") : Value(0);
    for (const Value& x : iterate(v, "sum"))
      total = binary_op("+", total, attr.empty() ? x : follow(x, attr, where, max_size), where,
                        max_size);
    return total;
  }
  if (name == "select" || name == "reject")
    return select(v, args, false, name == "select", where, max_size);
  if (name == "selectattr" || name == "rejectattr")
    return select(v, args, true, name == "selectattr", where, max_size);
  if (name == "map") return map_items(v, args, where, max_size);
  if (name == "batch") {
    const int64_t size = int_arg(args, 0, "linecount", 0);
    if (size <= 0) syntax_error(where, "batch size must be positive");
    const Value* fill = args.get(1, "fill_with");
    List out, current;
    for (const Value& x : iterate(v, "batch")) {
      current.push_back(x);
      if (static_cast<int64_t>(current.size()) == size)
        out.push_back(Value(std::exchange(current, {})));
    }
    if (!current.empty()) {
      if (fill != nullptr && !fill->is_none()) {
        while (static_cast<int64_t>(current.size()) < size) current.push_back(*fill);
      }
      out.push_back(Value(std::move(current)));
    }
    return Value::generator(std::move(out));
  }
  return std::nullopt;
}

}  // namespace inferd::jinja

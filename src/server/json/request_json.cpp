#include "server/json/request_json.h"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "server/api/openai_request.h"

namespace inferd::server {
namespace {

using json = nlohmann::ordered_json;

// Where the parser is, kept from its callbacks: the open objects and arrays, each with the key
// or the index of the value being read. When the parser stops on a value, this names it.
class JsonPath {
 public:
  bool on_event(int, json::parse_event_t event, const json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        next_element();
        if (std::ssize(frames_) >= kMaxJsonDepth)
          throw ApiError(
              400,
              fmt::format("the body nests objects and arrays deeper than {} levels", kMaxJsonDepth),
              describe());
        frames_.push_back({event == json::parse_event_t::array_start, {}, -1});
        break;
      case json::parse_event_t::key:
        frames_.back().key = parsed.get<std::string>();
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames_.pop_back();
        break;
      case json::parse_event_t::value:
        next_element();
        break;
    }
    return true;
  }

  // "messages[1].content", or "" at the top.
  std::string describe() const {
    std::string path;
    for (const Frame& f : frames_) {
      if (f.array) {
        path += fmt::format("[{}]", f.index < 0 ? 0 : f.index);
      } else {
        path += path.empty() ? f.key : "." + f.key;
      }
    }
    return path;
  }

  // The value about to be read (the one the parser failed on) is the next element of an array.
  void step_into_failed_value() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
  }

 private:
  struct Frame {
    bool array;
    std::string key;
    int64_t index;
  };
  void next_element() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
  }
  std::vector<Frame> frames_;
};

}  // namespace

json parse_request_json(std::string_view text) {
  JsonPath path;
  try {
    return json::parse(text, [&path](int depth, json::parse_event_t event, json& parsed) {
      return path.on_event(depth, event, parsed);
    });
  } catch (const json::parse_error& e) {
    throw ApiError(400, fmt::format("the body is not valid JSON: {}", e.what()));
  } catch (const json::out_of_range& e) {  // a number beyond a double's range (1e400)
    path.step_into_failed_value();
    const std::string where = path.describe();
    throw ApiError(400,
                   fmt::format("'{}' holds a number out of range (beyond a double's): {}",
                               where.empty() ? "the body" : where, e.what()),
                   where);
  } catch (const json::exception& e) {
    throw ApiError(400, fmt::format("the body holds a value JSON cannot represent: {}", e.what()));
  }
}

}  // namespace inferd::server

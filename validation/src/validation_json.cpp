#include "validation_json.hpp"

#include <set>
#include <vector>

#include "orrery/base/error.hpp"
#include "orrery/base/units.hpp"

namespace orrery::validation::detail {
namespace {

using nlohmann::json;

// Where the parser stands: one frame per open object or list, so that a duplicate key is named
// by its full path.
struct Frame {
  bool object = false;
  std::set<std::string> keys;
  std::string key;   // objects: the key being read
  size_t index = 0;  // lists: the element being read
};

std::string path_to(const std::vector<Frame>& stack, size_t depth) {
  std::string path;
  for (size_t i = 0; i < depth; ++i) {
    const Frame& f = stack[i];
    if (f.object) {
      path += (path.empty() ? "" : ".") + f.key;
    } else {
      path += "[" + std::to_string(f.index) + "]";
    }
  }
  return path;
}

}  // namespace

json parse_validation_json(const std::string& text, const std::string& file) {
  std::vector<Frame> stack;
  // An element of a list is done at its own value or at the end of its object or list.
  auto element_done = [&stack] {
    if (!stack.empty() && !stack.back().object) ++stack.back().index;
  };
  const json::parser_callback_t track = [&](int /*depth*/, json::parse_event_t event,
                                            json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        stack.emplace_back();
        stack.back().object = event == json::parse_event_t::object_start;
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        stack.pop_back();
        element_done();
        break;
      case json::parse_event_t::key: {
        Frame& top = stack.back();
        top.key = parsed.get<std::string>();
        if (!top.keys.insert(top.key).second) {
          throw base::InputError(file, 0, path_to(stack, stack.size()),
                                 "appears twice in one object (JSON keeps only the last)");
        }
        break;
      }
      case json::parse_event_t::value:
        element_done();
        break;
    }
    return true;
  };
  try {
    return json::parse(text, track);
  } catch (const json::parse_error& e) {
    std::string reason = e.what();
    if (auto pos = reason.find("syntax error"); pos != std::string::npos)
      reason = reason.substr(pos);
    throw base::InputError(file, 0, "", "not valid JSON: " + reason);
  } catch (const json::out_of_range& e) {
    throw base::InputError(
        file, 0, "",
        "not valid JSON: a number too large for a double (" + std::string(e.what()) + ")");
  }
}

std::string above_bound(const json& value, double max, const char* why) {
  if (!(value.get<double>() > max)) return {};
  return "got " + value.dump() + ", expected at most " + base::units::number(max) + " (" + why +
         ")";
}

}  // namespace orrery::validation::detail

#include "yaml_documents.hpp"

#include <sstream>
#include <vector>

#include <yaml-cpp/eventhandler.h>

#include "orrery/base/error.hpp"

namespace orrery::detail {
namespace {

// Where each document starts, and where its first node is (for the line an error names).
class DocumentMarks : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> starts;
  std::vector<YAML::Mark> first_nodes;

  void OnDocumentStart(const YAML::Mark& mark) override {
    starts.push_back(mark);
    awaiting_node_ = true;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { node(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { node(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    node(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    node(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    node(mark);
  }
  void OnMapEnd() override {}

 private:
  void node(const YAML::Mark& mark) {
    if (!awaiting_node_) return;
    first_nodes.push_back(mark);
    awaiting_node_ = false;
  }
  bool awaiting_node_ = false;
};

int line_of(const YAML::Mark& mark) { return mark.line >= 0 ? mark.line + 1 : 0; }

}  // namespace

YAML::Node load_single_document(const std::string& text, std::string_view file) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentMarks marks;
  while (parser.HandleNextDocument(marks)) {
    const size_t n = marks.starts.size();
    if (n >= 2 && marks.starts[n - 1].pos == marks.starts[n - 2].pos) {
      throw base::InputError(std::string(file), line_of(marks.starts[n - 1]), "",
                             "not valid YAML: the parser cannot read on from here (a ',' "
                             "outside [] or {}?)");
    }
  }
  if (marks.starts.size() > 1) {
    const YAML::Mark& second =
        marks.first_nodes.size() > 1 ? marks.first_nodes[1] : marks.starts[1];
    throw base::InputError(std::string(file), line_of(second), "",
                           "holds " + std::to_string(marks.starts.size()) +
                               " YAML documents (separated by '---'); a file holds one");
  }
  return YAML::Load(text);
}

}  // namespace orrery::detail

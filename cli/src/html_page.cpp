#include "html_page.hpp"

#include <span>
#include <string_view>

#include "orrery/base/error.hpp"
#include "orrery/traces/embedded.hpp"

namespace orrery::cli::vega_files {
// third_party/vega/*.min.js, compiled in by orrery_embed (cli/CMakeLists.txt).
std::span<const orrery::EmbeddedFile> embedded_files();
}  // namespace orrery::cli::vega_files

namespace orrery::cli {
namespace {

// Text for an element: &, < and > escaped.
std::string html_text(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '&') {
      out += "&amp;";
    } else if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else {
      out += c;
    }
  }
  return out;
}

// JSON inside a <script> element: "</" would end the element early (a model named "</script>").
std::string script_json(const nlohmann::ordered_json& j) {
  const std::string text = j.dump();
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    out += text[i];
    if (text[i] == '<' && i + 1 < text.size() && text[i + 1] == '/') out += '\\';
  }
  return out;
}

// The library `name` ("vega.min"), in the order the page must load them.
std::string_view library(std::string_view name) {
  for (const auto& f : vega_files::embedded_files()) {
    if (f.name != name) continue;
    // Inlined as is: a "</script" inside would end the element (checked, never true of the
    // vendored builds).
    ORRERY_CHECK(f.text.find("</script") == std::string_view::npos,
                 std::string(name) + " holds </script");
    return f.text;
  }
  ORRERY_CHECK(false, "third_party/vega/" + std::string(name) + ".js is not compiled in");
  return {};
}

constexpr const char* kStyle =
    "body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}"
    "h1{font-size:1.4em}h2{font-size:1.1em;margin-top:2em}p.note{color:#555}"
    "p.error{color:#b00;font-weight:bold}";

// Draws every chart; records the values each view holds, then the count drawn (data-rendered)
// or the first failure (data-error, also on the console and in the page).
constexpr const char* kDrawScript = R"js(
const charts = Array.from(document.querySelectorAll("div.chart"));
Promise.all(charts.map(async (div) => {
  const spec = JSON.parse(document.getElementById(div.dataset.spec).textContent);
  const result = await vegaEmbed(div, spec, {renderer: "svg", actions: false});
  div.dataset.values = JSON.stringify(result.view.data("table"));
})).then(() => {
  document.body.dataset.rendered = String(charts.length);
}).catch((e) => {
  console.error("orrery report: " + e);
  document.body.dataset.error = String(e);
  const p = document.createElement("p");
  p.className = "error";
  p.textContent = "A chart could not be drawn: " + e;
  document.body.prepend(p);
});
)js";

}  // namespace

void HtmlPage::add_note(std::string text) { notes_.push_back(std::move(text)); }

void HtmlPage::add_chart(std::string title, nlohmann::ordered_json spec) {
  charts_.push_back({std::move(title), std::move(spec)});
}

std::string HtmlPage::render() const {
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
      html_text(title_) + "</title>\n<style>" + kStyle + "</style>\n";
  for (const char* name : {"vega.min", "vega-lite.min", "vega-embed.min"}) {
    out += "<script>\n";
    out += library(name);
    out += "\n</script>\n";
  }
  out += "</head>\n<body>\n<h1>" + html_text(title_) + "</h1>\n";
  for (const auto& note : notes_) out += "<p class=\"note\">" + html_text(note) + "</p>\n";
  for (size_t i = 0; i < charts_.size(); ++i) {
    const std::string id = std::to_string(i);
    out += "<section>\n<h2>" + html_text(charts_[i].title) +
           "</h2>\n<div class=\"chart\" id=\"chart" + id + "\" data-spec=\"spec" + id +
           "\"></div>\n<script type=\"application/json\" id=\"spec" + id + "\">" +
           script_json(charts_[i].spec) + "</script>\n</section>\n";
  }
  out += "<script>" + std::string(kDrawScript) + "</script>\n</body>\n</html>\n";
  return out;
}

}  // namespace orrery::cli

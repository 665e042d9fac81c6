#include "attnkit/report/html.h"

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/io/atomic_file.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <regex>
#include <set>
#include <sstream>

namespace attnkit::report {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;  // facts keep their order


// Paragraphs split at blank lines.
std::string paragraphs(const std::string& text) {
  std::string out, current;
  std::istringstream in(text);
  auto flush = [&] {
    if (!current.empty()) out += "<p>" + escape_xml(current) + "</p>\n";
    current.clear();
  };
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) {
      flush();
    } else {
      current += (current.empty() ? "" : "\n") + line;
    }
  }
  flush();
  return out;
}

// Ids are used as HTML ids and anchors: letters, digits, '-' and '_'.
void check_id(const std::string& id, const std::string& what) {
  if (id.empty() || !std::all_of(id.begin(), id.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
      }))
    throw Error(fmt::format("{}: id '{}' must be letters, digits, '-' or '_'", what, id));
}

constexpr const char* kStyle = R"(
body { font-family: system-ui, sans-serif; max-width: 62rem; margin: 2rem auto; padding: 0 1rem;
       color: #1b1f24; line-height: 1.45; }
h1 { font-size: 1.7rem; margin-bottom: .2rem; }
h2 { border-bottom: 1px solid #d0d7de; padding-bottom: .2rem; margin-top: 2.2rem; }
nav a { margin-right: 1rem; }
table { border-collapse: collapse; margin: .8rem 0; font-size: .92rem; }
th, td { border: 1px solid #d0d7de; padding: .25rem .6rem; text-align: left; }
th { background: #f6f8fa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
caption { caption-side: top; text-align: left; font-weight: 600; padding-bottom: .3rem; }
figure { margin: 1rem 0; }
figure svg { max-width: 100%; height: auto; }
figcaption { font-size: .9rem; color: #57606a; }
.met { color: #1a7f37; font-weight: 600; }
.missed { color: #cf222e; font-weight: 600; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .1rem 1rem; font-size: .9rem; }
dl.facts dt { font-weight: 600; }
dl.facts dd { margin: 0; font-family: ui-monospace, monospace; overflow-wrap: anywhere; }
@media print { nav { display: none; } h2 { break-before: auto; } figure, table { break-inside: avoid; } }
)";

bool numeric(const std::string& cell) {
  static const std::regex number(R"re(^\s*[-+]?[0-9.,]+(e[-+]?[0-9]+)?\s*(%|x|×|ms|s)?\s*$)re");
  return !cell.empty() && std::regex_match(cell, number);
}

std::string render_table(const Table& t, const std::string& where) {
  std::string out = "<table>\n";
  if (!t.caption.empty()) out += "<caption>" + escape_xml(t.caption) + "</caption>\n";
  out += "<thead><tr>";
  for (const auto& c : t.columns) out += "<th>" + escape_xml(c) + "</th>";
  out += "</tr></thead>\n<tbody>\n";
  for (size_t r = 0; r < t.rows.size(); ++r) {
    if (t.rows[r].size() != t.columns.size())
      throw Error(fmt::format("{}: table '{}' row {} has {} cells for {} columns", where, t.caption, r + 1,
                              t.rows[r].size(), t.columns.size()));
    out += "<tr>";
    for (const auto& cell : t.rows[r])
      out += (numeric(cell) ? "<td class=\"num\">" : "<td>") + escape_xml(cell) + "</td>";
    out += "</tr>\n";
  }
  return out + "</tbody>\n</table>\n";
}

std::string headline_html(const Headline& h) {
  std::string mark;
  if (h.met) mark = *h.met ? " <span class=\"met\">(target met)</span>" : " <span class=\"missed\">(target missed)</span>";
  return "<li>" + escape_xml(h.label) + ": <strong>" + escape_xml(h.value) + "</strong>" + mark + "</li>\n";
}

}  // namespace

std::string inline_svg(const std::string& svg, const std::string& prefix) {
  std::string s = svg;
  // Prolog, doctype and comments carry no drawing (and the doctype names an external DTD).
  s = std::regex_replace(s, std::regex(R"re(<\?xml[^>]*\?>)re"), "");
  s = std::regex_replace(s, std::regex(R"re(<!DOCTYPE[^>]*>)re", std::regex::icase), "");
  s = std::regex_replace(s, std::regex(R"re(<!--[\s\S]*?-->)re"), "");
  // Inline SVG in HTML needs no namespace declarations; drop them so that no URL is left.
  s = std::regex_replace(s, std::regex(R"re(\s+xmlns(:[A-Za-z]+)?\s*=\s*("[^"]*"|'[^']*'))re"), "");
  const auto start = s.find_first_not_of(" \t\r\n");
  if (start == std::string::npos || s.compare(start, 4, "<svg") != 0 || s.find("</svg>") == std::string::npos)
    throw Error("figure: not an SVG document (expected an <svg> element)");
  s.erase(0, start);
  if (std::regex_search(s, std::regex(R"re(<script|<foreignObject|\bon[a-z]+\s*=)re", std::regex::icase)))
    throw Error("figure: SVG with scripts or event handlers cannot be inlined");
  // Every reference must point inside the document: href="#id" or url(#id).
  static const std::regex href(R"re(href\s*=\s*("([^"]*)"|'([^']*)'))re");
  for (auto it = std::sregex_iterator(s.begin(), s.end(), href); it != std::sregex_iterator(); ++it) {
    const std::string target = (*it)[2].matched ? (*it)[2].str() : (*it)[3].str();
    if (target.empty() || target[0] != '#')
      throw Error(fmt::format("figure: SVG refers to '{}' outside itself", target));
  }
  if (std::regex_search(s, std::regex(R"re(url\(\s*['"]?[^#'")\s])re")))
    throw Error("figure: SVG refers to a url() outside itself");
  // Ids: prefixed, with their references.
  s = std::regex_replace(s, std::regex(R"re(\bid\s*=\s*(["'])([^"']+)\1)re"), "id=\"" + prefix + "$2\"");
  s = std::regex_replace(s, std::regex(R"re(href\s*=\s*(["'])#([^"']+)\1)re"), "href=\"#" + prefix + "$2\"");
  s = std::regex_replace(s, std::regex(R"re(url\(\s*#([^)\s]+)\s*\))re"), "url(#" + prefix + "$1)");
  return s;
}

std::string escape_xml(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string render_html(const Page& page) {
  std::vector<const Section*> sections;
  std::set<std::string> ids;
  for (const auto& s : page.sections) {
    check_id(s.id, "report section");
    if (s.title.empty()) throw Error(fmt::format("report section '{}': no title", s.id));
    if (!ids.insert(s.id).second) throw Error(fmt::format("report: two sections with id '{}'", s.id));
    sections.push_back(&s);
  }
  std::stable_sort(sections.begin(), sections.end(), [](const Section* a, const Section* b) {
    return a->order != b->order ? a->order < b->order : a->id < b->id;
  });

  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
                    "<title>" + escape_xml(page.title) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
  out += "<header>\n<h1>" + escape_xml(page.title) + "</h1>\n<nav>";
  for (const auto* s : sections) out += "<a href=\"#" + s->id + "\">" + escape_xml(s->title) + "</a>";
  out += "</nav>\n</header>\n";

  out += "<section id=\"summary\">\n<h2>Summary</h2>\n<ul>\n";
  for (const auto* s : sections)
    for (const auto& h : s->headlines) out += headline_html(h);
  out += "</ul>\n</section>\n";

  int figure_number = 0;
  for (const auto* s : sections) {
    const std::string where = "report section '" + s->id + "'";
    out += "<section id=\"" + s->id + "\">\n<h2>" + escape_xml(s->title) + "</h2>\n";
    for (const auto& b : s->blocks) {
      const int kinds = int(b.text.has_value()) + int(b.table.has_value()) + int(b.figure.has_value());
      if (kinds != 1) throw Error(fmt::format("{}: a block must be exactly one of text, table, figure", where));
      if (b.text) out += paragraphs(*b.text);
      if (b.table) out += render_table(*b.table, where);
      if (b.figure) {
        ++figure_number;
        std::string svg;
        try {
          svg = inline_svg(b.figure->svg, fmt::format("f{}-", figure_number));
        } catch (const Error& e) {
          throw Error(fmt::format("{}: {}", where, e.what()));
        }
        out += "<figure>\n" + svg + "\n";
        if (!b.figure->caption.empty()) out += "<figcaption>" + escape_xml(b.figure->caption) + "</figcaption>\n";
        out += "</figure>\n";
      }
    }
    out += "</section>\n";
  }

  if (!page.facts.empty()) {
    out += "<section id=\"facts\">\n<h2>How this was made</h2>\n<dl class=\"facts\">\n";
    for (const auto& [key, value] : page.facts) out += "<dt>" + escape_xml(key) + "</dt><dd>" + escape_xml(value) + "</dd>\n";
    out += "</dl>\n</section>\n";
  }
  return out + "</body>\n</html>\n";
}

Section read_section(const fs::path& section_json) {
  const std::string where = section_json.string();
  json j;
  try {
    j = json::parse(read_file(section_json, "report section"));
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: not valid JSON ({})", where, e.what()));
  }
  auto text = [&](const json& obj, const char* key, bool required) -> std::string {
    if (!obj.contains(key)) {
      if (required) throw Error(fmt::format("{}: missing '{}'", where, key));
      return {};
    }
    if (!obj.at(key).is_string()) throw Error(fmt::format("{}: '{}' must be a string", where, key));
    return obj.at(key).get<std::string>();
  };
  auto strings = [&](const json& arr, const char* what) {
    if (!arr.is_array()) throw Error(fmt::format("{}: {} must be an array", where, what));
    std::vector<std::string> out;
    for (const auto& v : arr) {
      if (!v.is_string()) throw Error(fmt::format("{}: {} must hold strings", where, what));
      out.push_back(v.get<std::string>());
    }
    return out;
  };
  if (!j.is_object()) throw Error(fmt::format("{}: expected a JSON object", where));
  Section s;
  s.id = text(j, "id", true);
  s.title = text(j, "title", true);
  if (j.contains("order")) {
    if (!j["order"].is_number_integer()) throw Error(fmt::format("{}: 'order' must be an integer", where));
    s.order = j["order"].get<int>();
  }
  for (const char* key : {"headlines", "blocks"})
    if (j.contains(key) && !j[key].is_array()) throw Error(fmt::format("{}: '{}' must be an array", where, key));
  for (const auto& h : j.value("headlines", json::array())) {
    if (!h.is_object()) throw Error(fmt::format("{}: headlines must be objects", where));
    Headline headline{text(h, "label", true), text(h, "value", true), std::nullopt};
    if (h.contains("met")) {
      if (!h["met"].is_boolean()) throw Error(fmt::format("{}: headline 'met' must be true or false", where));
      headline.met = h["met"].get<bool>();
    }
    s.headlines.push_back(std::move(headline));
  }
  for (const auto& b : j.value("blocks", json::array())) {
    if (!b.is_object() || b.size() != 1)
      throw Error(fmt::format("{}: each block is an object with one of 'text', 'table', 'figure'", where));
    Block block;
    if (b.contains("text")) {
      block.text = text(b, "text", true);
    } else if (b.contains("table")) {
      const auto& t = b["table"];
      if (!t.is_object()) throw Error(fmt::format("{}: a table must be an object", where));
      Table table{text(t, "caption", false), strings(t.value("columns", json::array()), "table columns"), {}};
      const auto rows = t.value("rows", json::array());
      if (!rows.is_array()) throw Error(fmt::format("{}: table rows must be an array", where));
      for (const auto& row : rows) table.rows.push_back(strings(row, "table rows"));
      block.table = std::move(table);
    } else if (b.contains("figure")) {
      const auto& f = b["figure"];
      if (!f.is_object()) throw Error(fmt::format("{}: a figure must be an object", where));
      const std::string file = text(f, "svg", true);
      if (file.empty() || fs::path(file).is_absolute() || file.find("..") != std::string::npos)
        throw Error(fmt::format("{}: figure file '{}' must be a path inside the section's folder", where, file));
      std::string svg;
      try {
        svg = read_file(section_json.parent_path() / file, "figure");
      } catch (const Error& e) {
        throw Error(fmt::format("{}: {}", where, e.what()));
      }
      block.figure = Figure{text(f, "caption", false), std::move(svg)};
    } else {
      throw Error(fmt::format("{}: unknown block '{}' (use text, table or figure)", where, b.begin().key()));
    }
    s.blocks.push_back(std::move(block));
  }
  return s;
}

Page read_page(const fs::path& run_dir) {
  if (!fs::is_directory(run_dir)) throw Error(fmt::format("report: {} is not a directory", run_dir.string()));
  Page page;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(run_dir))
    if (entry.is_directory() && fs::is_regular_file(entry.path() / "section.json"))
      files.push_back(entry.path() / "section.json");
  std::sort(files.begin(), files.end());
  for (const auto& f : files) page.sections.push_back(read_section(f));
  if (page.sections.empty())
    throw Error(fmt::format("report: no stage results (*/section.json) in {}", run_dir.string()));
  const fs::path facts = run_dir / "facts.json";
  if (fs::exists(facts)) {
    json j;
    try {
      j = json::parse(read_file(facts, "report facts"));
    } catch (const json::exception& e) {
      throw Error(fmt::format("{}: not valid JSON ({})", facts.string(), e.what()));
    }
    if (!j.is_object()) throw Error(fmt::format("{}: expected an object of strings", facts.string()));
    for (const auto& [key, value] : j.items()) {
      if (!value.is_string()) throw Error(fmt::format("{}: '{}' must be a string", facts.string(), key));
      page.facts.emplace_back(key, value.get<std::string>());
    }
  }
  return page;
}

void write_section(const Section& section, const fs::path& stage_dir) {
  fs::create_directories(stage_dir);
  json blocks = json::array();
  int figures = 0;
  for (const auto& b : section.blocks) {
    if (b.text) blocks.push_back({{"text", *b.text}});
    if (b.table) blocks.push_back({{"table", {{"caption", b.table->caption}, {"columns", b.table->columns}, {"rows", b.table->rows}}}});
    if (b.figure) {
      const std::string file = fmt::format("figure-{}.svg", ++figures);
      io::write_file_atomically((stage_dir / file).string(), b.figure->svg);
      blocks.push_back({{"figure", {{"caption", b.figure->caption}, {"svg", file}}}});
    }
  }
  json headlines = json::array();
  for (const auto& h : section.headlines) {
    json item = {{"label", h.label}, {"value", h.value}};
    if (h.met) item["met"] = *h.met;
    headlines.push_back(std::move(item));
  }
  const json j = {{"order", section.order}, {"id", section.id}, {"title", section.title},
                  {"headlines", std::move(headlines)}, {"blocks", std::move(blocks)}};
  io::write_file_atomically((stage_dir / "section.json").string(), j.dump(2) + "\n");
}

void write_facts(const std::vector<std::pair<std::string, std::string>>& facts, const fs::path& run_dir) {
  json j = json::object();
  for (const auto& [key, value] : facts) j[key] = value;
  fs::create_directories(run_dir);
  io::write_file_atomically((run_dir / "facts.json").string(), j.dump(2) + "\n");
}

void write_html(const Page& page, const fs::path& path) {
  io::write_file_atomically(path.string(), render_html(page));
}

}  // namespace attnkit::report

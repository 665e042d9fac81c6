#pragma once
// The demo's report: one self-contained HTML page (inline CSS and SVG, no script, nothing fetched).
//
// Each demo stage writes RUN_DIR/<stage>/section.json (schema below) and its SVG files next to
// it; the page is a pure function of those files, so `attnkit report RUN_DIR` rebuilds it at any
// time. section.json:
//   {"order": 10, "id": "oracles", "title": "...",
//    "headlines": [{"label": "...", "value": "...", "met": true}],   // "met" optional
//    "blocks": [{"text": "..."},
//               {"table": {"caption": "...", "columns": ["..."], "rows": [["..."]]}},
//               {"figure": {"caption": "...", "svg": "file.svg"}}]}   // file relative to the section
// Text is plain (escaped on output); a blank line in it starts a new paragraph.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace attnkit::report {

struct Headline {
  std::string label, value;
  std::optional<bool> met;  // a target met or not; none = just a number
};

struct Table {
  std::string caption;
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;  // each row has columns.size() cells
};

struct Figure {
  std::string caption;
  std::string svg;  // SVG document text (as gnuplot writes it); inlined into the page
};

struct Block {  // exactly one of the three is set
  std::optional<std::string> text;
  std::optional<Table> table;
  std::optional<Figure> figure;
};

struct Section {
  int order = 0;  // sections are shown by increasing order, then id
  std::string id, title;
  std::vector<Headline> headlines;  // also collected into the page's summary
  std::vector<Block> blocks;
};

struct Page {
  std::string title = "attnkit report";
  std::vector<std::pair<std::string, std::string>> facts;  // machine, threads, versions, command …
  std::vector<Section> sections;
};

// `text` with & < > " ' written as character references, for HTML or SVG text and attributes.
std::string escape_xml(const std::string& text);

// The HTML text of the page. Throws attnkit::Error for a section without id or title, duplicate
// section ids, a block that is not exactly one kind, a table row of the wrong width, or an SVG
// that is not an <svg> element or refers to anything outside itself (http:, file:, //…).
std::string render_html(const Page& page);

// The SVG text made fit for inlining: XML prolog, doctype, comments and namespace declarations
// removed, every id (and every reference to one) prefixed with `prefix` so that several figures
// on one page do not share ids. Throws attnkit::Error as render_html does for a bad SVG.
std::string inline_svg(const std::string& svg, const std::string& prefix);

// One section from RUN_DIR/<stage>/section.json; errors name the file.
Section read_section(const std::filesystem::path& section_json);

// Every RUN_DIR/*/section.json, in order, with the page facts from RUN_DIR/facts.json if present
// ({"key": "value", ...}). Throws attnkit::Error if there is no section.
Page read_page(const std::filesystem::path& run_dir);

// Writes `section` as stage_dir/section.json, its figures as stage_dir/figure-N.svg (created
// atomically, the folder too if missing), so that read_section gives the section back.
void write_section(const Section& section, const std::filesystem::path& stage_dir);

// Writes run_dir/facts.json (atomically) in the given order.
void write_facts(const std::vector<std::pair<std::string, std::string>>& facts, const std::filesystem::path& run_dir);

// render_html written atomically to `path`.
void write_html(const Page& page, const std::filesystem::path& path);

}  // namespace attnkit::report

// The demo report page: sections in order, everything escaped, SVG inlined without outside
// references or id clashes, section.json files read strictly.
#include "attnkit/error.h"
#include "attnkit/report/html.h"
#include "attnkit/report/plot.h"
#include "support/test_files.h"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>

namespace attnkit::report {
namespace {

using attnkit::testing::error_of;
using attnkit::testing::scratch_directory;

// The shape of what gnuplot's svg terminal writes.
const std::string kGnuplotLike = R"svg(<?xml version="1.0" encoding="utf-8"  standalone="no"?>
<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">
<svg
 viewBox="0 0 300 200"
 xmlns="http://www.w3.org/2000/svg"
 xmlns:xlink="http://www.w3.org/1999/xlink"
>
<!-- a comment -->
<g id="gnuplot_canvas">
<defs><path id='gpPt0' d='M-1,0 h2'/><clipPath id="clip1"><rect width="5" height="5"/></clipPath></defs>
<use xlink:href='#gpPt0' x="3" y="4"/>
<g clip-path="url(#clip1)"><text>a &lt; b</text></g>
</g>
</svg>
)svg";

Page two_sections() {
  Page page;
  page.title = "attnkit <demo>";
  page.facts = {{"machine", "2 cores"}, {"command", "attnkit demo --out x"}};
  Section late{20, "late", "Second", {{"speed-up", "3.1x", true}}, {}};
  late.blocks.push_back(Block{std::string("first paragraph\nsame paragraph\n\nsecond & last"), {}, {}});
  Section early{10, "early", "First", {{"max error", "1e-7", false}, {"steps", "300", std::nullopt}}, {}};
  early.blocks.push_back(Block{{}, Table{"errors", {"variant", "max |err|"}, {{"softmax", "1.2e-07"}, {"<b>", "x"}}}, {}});
  early.blocks.push_back(Block{{}, {}, Figure{"a plot", kGnuplotLike}});
  early.blocks.push_back(Block{{}, {}, Figure{"the same plot again", kGnuplotLike}});
  page.sections = {late, early};
  return page;
}

TEST(HtmlReport, SectionsInOrderWithSummaryAndFacts) {
  const std::string html = render_html(two_sections());
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  const auto summary = html.find("<section id=\"summary\">");
  const auto early = html.find("<section id=\"early\">"), late = html.find("<section id=\"late\">");
  ASSERT_NE(summary, std::string::npos);
  ASSERT_NE(early, std::string::npos);
  ASSERT_NE(late, std::string::npos);
  EXPECT_LT(summary, early);
  EXPECT_LT(early, late);
  // Headlines of every section, in section order, with targets marked.
  EXPECT_LT(html.find("max error: <strong>1e-7</strong> <span class=\"missed\">(target missed)"),
            html.find("speed-up: <strong>3.1x</strong> <span class=\"met\">(target met)"));
  EXPECT_NE(html.find("<li>steps: <strong>300</strong></li>"), std::string::npos);
  EXPECT_NE(html.find("<p>first paragraph\nsame paragraph</p>\n<p>second &amp; last</p>"), std::string::npos);
  EXPECT_NE(html.find("<dt>machine</dt><dd>2 cores</dd>\n<dt>command</dt>"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"num\">1.2e-07</td>"), std::string::npos);
  // Text is escaped everywhere.
  EXPECT_NE(html.find("<title>attnkit &lt;demo&gt;</title>"), std::string::npos);
  EXPECT_NE(html.find("<td>&lt;b&gt;</td>"), std::string::npos);
  EXPECT_EQ(html.find("<b>"), std::string::npos);
  // Self-contained: no URL, no script.
  EXPECT_EQ(html.find("http"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<?xml"), std::string::npos);
}

TEST(HtmlReport, InlinedSvgIdsArePrefixedPerFigure) {
  const std::string html = render_html(two_sections());
  std::set<std::string> ids;
  const std::regex id(R"re(\bid="([^"]+)\")re");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), id); it != std::sregex_iterator(); ++it)
    EXPECT_TRUE(ids.insert((*it)[1]).second) << "duplicate id " << (*it)[1];
  for (const char* want : {"f1-gnuplot_canvas", "f1-gpPt0", "f2-gpPt0", "f2-clip1"}) EXPECT_TRUE(ids.count(want)) << want;
  EXPECT_NE(html.find("xlink:href=\"#f2-gpPt0\""), std::string::npos);
  EXPECT_NE(html.find("clip-path=\"url(#f1-clip1)\""), std::string::npos);
  EXPECT_EQ(html.find("a comment"), std::string::npos);
}

TEST(HtmlReport, BadPagesAreErrors) {
  auto page = two_sections();
  page.sections[1].id = "late";
  EXPECT_NE(error_of([&] { render_html(page); }).find("two sections with id 'late'"), std::string::npos);
  page = two_sections();
  page.sections[0].id = "has space";
  EXPECT_NE(error_of([&] { render_html(page); }).find("id 'has space'"), std::string::npos);
  page = two_sections();
  page.sections[1].blocks[0].table->rows.push_back({"one cell"});
  EXPECT_NE(error_of([&] { render_html(page); }).find("row 3 has 1 cells for 2 columns"), std::string::npos);
  page = two_sections();
  page.sections[1].blocks.push_back(Block{std::string("text"), Table{}, {}});
  EXPECT_NE(error_of([&] { render_html(page); }).find("exactly one of"), std::string::npos);
  const std::vector<std::pair<std::string, std::string>> bad_svgs = {
      {"<p>not svg</p>", "not an SVG"},
      {"<svg><image href=\"http://example.com/a.png\"/></svg>", "refers to 'http://example.com/a.png'"},
      {"<svg><image href='//example.com/a.png'/></svg>", "refers to '//example.com/a.png'"},
      {"<svg><rect fill=\"url(https://x/y#z)\"/></svg>", "url() outside itself"},
      {"<svg><script>alert(1)</script></svg>", "scripts"},
      {"<svg><rect onload=\"alert(1)\"/></svg>", "scripts"},
  };
  for (const auto& [svg, message] : bad_svgs) {
    page = two_sections();
    page.sections[1].blocks[1].figure->svg = svg;
    const auto error = error_of([&] { render_html(page); });
    EXPECT_NE(error.find("report section 'early': figure: "), std::string::npos) << svg << ": " << error;
    EXPECT_NE(error.find(message), std::string::npos) << svg << ": " << error;
  }
}

void write(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

TEST(HtmlReport, PageFromRunDirectory) {
  const auto dir = scratch_directory("report");
  write(dir / "b-speed" / "section.json",
        R"js({"order": 2, "id": "speed", "title": "Speed", "headlines": [{"label": "x", "value": "2", "met": true}],
            "blocks": [{"figure": {"caption": "c", "svg": "plot.svg"}}, {"text": "done"}]})js");
  write(dir / "b-speed" / "plot.svg", kGnuplotLike);
  write(dir / "a-oracles" / "section.json",
        R"js({"order": 1, "id": "oracles", "title": "Oracles",
            "blocks": [{"table": {"caption": "t", "columns": ["a", "b"], "rows": [["1", "2"]]}}]})js");
  write(dir / "facts.json", R"js({"zeta": "first", "alpha": "second"})js");
  write(dir / "no-section" / "other.json", "{}");
  const auto page = read_page(dir);
  ASSERT_EQ(page.sections.size(), 2u);
  EXPECT_EQ(page.sections[0].id, "oracles");
  EXPECT_EQ(page.sections[1].blocks[0].figure->caption, "c");
  EXPECT_TRUE(*page.sections[1].headlines[0].met);
  ASSERT_EQ(page.facts.size(), 2u);
  EXPECT_EQ(page.facts[0].first, "zeta");  // file order, not sorted
  write_html(page, dir / "report.html");
  std::ifstream in(dir / "report.html");
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(html, render_html(page));
}

TEST(HtmlReport, WrittenSectionsReadBack) {
  const auto dir = scratch_directory("report");
  const auto page = two_sections();
  for (const auto& s : page.sections) write_section(s, dir / s.id);
  write_facts(page.facts, dir);
  auto back = read_page(dir);
  back.title = page.title;  // the title is not part of the run directory
  EXPECT_EQ(render_html(back), render_html(page));
  EXPECT_TRUE(std::filesystem::exists(dir / "early" / "figure-2.svg"));
}

TEST(HtmlReport, BadRunDirectoriesAreErrors) {
  const auto dir = scratch_directory("report");
  EXPECT_NE(error_of([&] { read_page(dir); }).find("no stage results"), std::string::npos);
  EXPECT_NE(error_of([&] { read_page(dir / "missing"); }).find("is not a directory"), std::string::npos);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "not valid JSON"},
      {"[]", "expected a JSON object"},
      {R"js({"title": "t"})js", "missing 'id'"},
      {R"js({"id": "a", "title": 3})js", "'title' must be a string"},
      {R"js({"id": "a", "title": "t", "order": "1"})js", "'order' must be an integer"},
      {R"js({"id": "a", "title": "t", "blocks": {}})js", "'blocks' must be an array"},
      {R"js({"id": "a", "title": "t", "blocks": [{"video": "x"}]})js", "unknown block 'video'"},
      {R"js({"id": "a", "title": "t", "blocks": [{"figure": {"svg": "../x.svg"}}]})js", "inside the section's folder"},
      {R"js({"id": "a", "title": "t", "blocks": [{"figure": {"svg": "gone.svg"}}]})js", "gone.svg"},
      {R"js({"id": "a", "title": "t", "headlines": [{"label": "l", "value": "v", "met": 1}]})js", "'met' must be true or false"},
  };
  for (const auto& [json, message] : cases) {
    write(dir / "s" / "section.json", json);
    const auto error = error_of([&] { read_page(dir); });
    EXPECT_NE(error.find("section.json"), std::string::npos) << json << ": " << error;
    EXPECT_NE(error.find(message), std::string::npos) << json << ": " << error;
  }
}

TEST(HtmlReport, RealGnuplotSvgInlines) {
  LinePlot plot;
  plot.title = "t";
  plot.log_y = true;
  plot.series = {Series{"a", {1, 2, 3}, {1, 10, 100}}, Series{"b", {1, 2, 3}, {2, 3, 4}, "points"}};
  const std::string svg = inline_svg(render_svg(plot), "p-");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(svg.find("http"), std::string::npos);
  EXPECT_EQ(svg.find(" id='"), std::string::npos);  // every id rewritten with the prefix
  EXPECT_NE(svg.find("id=\"p-"), std::string::npos);
}

}  // namespace
}  // namespace attnkit::report

"""The demo's HTML report end to end: `attnkit demo --out DIR` writes a page that parses, whose
every section has content, whose plots are inline, and that fetches nothing; `attnkit report`
rebuilds the same page from the run directory."""
import html.parser
import os
import subprocess
import tempfile
import unittest

import runner

BUILD = runner.build_dir()
CLI = os.path.join(BUILD, "attnkit")


class Page(html.parser.HTMLParser):
    """Sections with their text and the elements inside them; every URL-bearing attribute."""
    VOID = {"meta", "br", "img", "link", "input", "hr", "wbr", "col", "area", "base", "source"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.sections, self.urls, self.tags = [], {}, [], set()
        self.current = None

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        attrs = dict(attrs)
        if tag == "section":
            self.current = attrs.get("id")
            self.sections[self.current] = {"text": "", "tags": set()}
        elif self.current:
            self.sections[self.current]["tags"].add(tag)
        for name in ("href", "src", "xlink:href", "action", "data"):
            if name in attrs:
                self.urls.append(attrs[name])
        if tag not in self.VOID and not tag.endswith("/"):
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if self.stack and self.stack[-1] == tag:
            self.stack.pop()

    def handle_endtag(self, tag):
        if tag not in self.stack:
            raise AssertionError(f"</{tag}> closes nothing")
        while self.stack.pop() != tag:
            pass
        if tag == "section":
            self.current = None

    def handle_data(self, data):
        if self.current:
            self.sections[self.current]["text"] += data


class Report(unittest.TestCase):
    def test_demo_writes_a_self_contained_page(self):
        with tempfile.TemporaryDirectory() as out:
            r = subprocess.run([CLI, "--threads", "1", "demo", "--n", "32", "--out", out],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            path = os.path.join(out, "report.html")
            self.assertIn(f"report: {path}", r.stdout)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            page = Page()
            page.feed(text)
            page.close()
            self.assertEqual(page.stack, [], "unclosed elements")
            self.assertIn("oracles", page.sections)
            self.assertIn("summary", page.sections)
            for sid, s in page.sections.items():
                self.assertTrue(s["text"].strip(), f"section {sid} is empty")
            self.assertIn("table", page.sections["oracles"]["tags"])
            self.assertIn("target met", page.sections["summary"]["text"])
            for url in page.urls:
                self.assertTrue(url.startswith("#"), f"outside reference {url}")
            self.assertNotIn("http", text)
            self.assertNotIn("//", text.replace("://", ""))  # no protocol-relative resource
            self.assertNotIn("<script", text)
            self.assertNotIn("<link", text)
            # Rebuilt from the run directory: the same page.
            again = os.path.join(out, "again.html")
            r = subprocess.run([CLI, "report", out, "--out", again], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(again, encoding="utf-8") as f:
                self.assertEqual(f.read(), text)

    def test_report_of_a_directory_without_stages_is_a_one_line_error(self):
        with tempfile.TemporaryDirectory() as out:
            r = subprocess.run([CLI, "report", out], capture_output=True, text=True)
            self.assertEqual(r.returncode, 2)
            self.assertEqual(r.stderr.strip().count("\n"), 0, r.stderr)
            self.assertIn("no stage results", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(out, "report.html")))


if __name__ == "__main__":
    runner.run()

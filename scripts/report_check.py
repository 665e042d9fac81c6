#!/usr/bin/env python3
"""Checks a report.html as a reader and as a browser sees it.

    /usr/bin/python3 scripts/report_check.py REPORT.html [--screenshot PNG] [--no-browser]

1. Static: the HTML parses with balanced elements; there is a summary and at least one section;
   every <section> has a heading and content beyond it; every figure is an inline <svg>; nothing
   refers outside the file (no src/href/xlink:href/url(...)/@import to http:, https:, file: or //,
   no <script>, <link>, <img>, <iframe>, <object> or <embed>).
2. Browser (Debian's chromium, headless; installed by scripts/setup.sh): loads the file with
   console logging on; fails on any console message of level warning or error, on a failed
   resource load, or when the DOM it rendered has a section without text; writes a full-page
   screenshot to --screenshot.
Prints one line per problem and exits 1 if there is any; prints "report_check: ok ..." otherwise.
"""
import argparse
import html.parser
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}
FORBIDDEN = {"script", "link", "img", "iframe", "object", "embed"}
OUTSIDE = re.compile(r"^\s*(https?:|file:|//|ftp:)", re.I)
CSS_OUTSIDE = re.compile(r"(@import|url\(\s*['\"]?\s*(https?:|file:|//))", re.I)


class Checker(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.problems = [], []
        self.sections = []  # [heading text, other text, figures]
        self.svgs = 0
        self.summary = False
        self.in_style = False

    def handle_starttag(self, tag, attrs):
        if tag in FORBIDDEN:
            self.problems.append(f"<{tag}> element (the page must be self-contained, without scripts)")
        for name, value in attrs:
            if name in ("src", "href", "xlink:href", "action", "poster") and value and OUTSIDE.match(value):
                self.problems.append(f"<{tag} {name}=\"{value[:60]}\"> refers outside the file")
            if name == "style" and value and CSS_OUTSIDE.search(value):
                self.problems.append(f"<{tag} style> refers outside the file")
            if name == "id" and value == "summary" or (name == "class" and value and "summary" in value.split()):
                self.summary = True
        if tag == "svg":
            self.svgs += 1
            if self.sections:
                self.sections[-1][2] += 1
        if tag == "section":
            self.sections.append(["", "", 0])
        if tag == "style":
            self.in_style = True
        if tag not in VOID:
            self.stack.append((tag, self.getpos()))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID and self.stack and self.stack[-1][0] == tag:
            self.stack.pop()

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack:
            self.problems.append(f"</{tag}> at line {self.getpos()[0]} closes nothing")
            return
        open_tag, pos = self.stack.pop()
        if open_tag != tag:
            self.problems.append(f"</{tag}> at line {self.getpos()[0]} closes <{open_tag}> of line {pos[0]}")
        if tag == "style":
            self.in_style = False

    def handle_data(self, data):
        if self.in_style:
            if CSS_OUTSIDE.search(data):
                self.problems.append("the style sheet refers outside the file")
            return
        if self.sections and self.stack:
            inside_heading = any(t in ("h2", "h3") for t, _ in self.stack)
            self.sections[-1][0 if inside_heading else 1] += data.strip()


def static_check(text):
    checker = Checker()
    checker.feed(text)
    checker.close()
    problems = list(checker.problems)
    if checker.stack:
        problems.append("unclosed elements: " + ", ".join(f"<{t}> (line {p[0]})" for t, p in checker.stack[-5:]))
    if not checker.summary:
        problems.append("no summary (an element with id or class 'summary')")
    if not checker.sections:
        problems.append("no <section>")
    for i, (heading, body, figures) in enumerate(checker.sections, 1):
        if not heading:
            problems.append(f"section {i} has no heading")
        if not body and not figures:
            problems.append(f"section {i} ({heading[:40]!r}) has no content")
    return problems, checker


def find_browser():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def browser_check(report, screenshot):
    browser = find_browser()
    if browser is None:
        return ["no chromium on PATH (scripts/setup.sh installs Debian's chromium)"], None
    problems = []
    url = Path(report).resolve().as_uri()
    with tempfile.TemporaryDirectory() as profile:
        common = [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-extensions", "--disable-background-networking", "--disable-sync",
                  "--disable-default-apps", "--mute-audio", f"--user-data-dir={profile}",
                  "--enable-logging=stderr", "--v=0", "--log-level=0"]
        dom = subprocess.run(common + ["--virtual-time-budget=3000", "--dump-dom", url],
                             capture_output=True, text=True, timeout=180)
        if dom.returncode != 0:
            problems.append(f"chromium --dump-dom exited with {dom.returncode}: "
                            f"{(dom.stderr.strip().splitlines() or [''])[-1][:200]}")
        for line in dom.stderr.splitlines():
            # Console messages of the page: "[...:INFO:CONSOLE(LINE)] "message", source: URL (LINE)"
            if ":CONSOLE" in line and "source: file://" in line:
                problems.append("console message: " + line.split("] ", 1)[-1][:200])
            if "Failed to load resource" in line or "net::ERR_" in line:
                problems.append("failed resource load: " + line.split("] ", 1)[-1][:200])
        rendered, checker = static_check(dom.stdout) if dom.stdout.strip() else (["chromium rendered no DOM"], None)
        problems += [f"rendered DOM: {p}" for p in rendered if "no summary" not in p or checker is None]
        if screenshot:
            shot = subprocess.run(common + ["--hide-scrollbars", "--window-size=1280,2400",
                                            f"--screenshot={Path(screenshot).resolve()}", url],
                                  capture_output=True, text=True, timeout=180)
            if shot.returncode != 0 or not Path(screenshot).exists() or Path(screenshot).stat().st_size < 1000:
                problems.append(f"no screenshot written to {screenshot}")
    return problems, checker


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("report")
    p.add_argument("--screenshot", default="")
    p.add_argument("--no-browser", action="store_true")
    a = p.parse_args(argv)
    text = Path(a.report).read_text(encoding="utf-8")
    problems, checker = static_check(text)
    if not a.no_browser:
        more, _ = browser_check(a.report, a.screenshot)
        problems += more
    for problem in problems:
        print(f"report_check: {a.report}: {problem}")
    if problems:
        return 1
    print(f"report_check: ok: {a.report}: {len(checker.sections)} sections, {checker.svgs} inline figures"
          + ("" if a.no_browser else ", no console messages in chromium")
          + (f", screenshot {a.screenshot}" if a.screenshot else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Shared by the tokenizer CLI peer tests (test_unigram_cli.py, test_decoder_families_tokenizer_cli.py):
the test venv's Python (scripts/peer_python.sh), a tests/text/hf_*_reference.py script run in it,
and `attnkit tokenize`."""
import json
import os
import subprocess
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def peer_python():
    p = subprocess.run([os.path.join(ROOT, "scripts", "peer_python.sh")], capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else None


def reference_configs(script, out_dir):
    """Runs tests/text/SCRIPT on the varied corpus, its tokenizers saved under out_dir; returns its
    configs by name. Skips the test class when the venv is missing."""
    python = peer_python()
    if python is None:
        raise unittest.SkipTest("the Python peer venv is missing (run scripts/setup.sh)")
    p = subprocess.run([python, os.path.join(ROOT, "tests", "text", script),
                        os.path.join(ROOT, "tests", "text", "fixtures", "varied_texts.json"), out_dir],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{script} failed: " + p.stderr)
    return {c["name"]: c for c in json.loads(p.stdout)["configs"]}


def tokenize(build_dir, directory, stdin, *extra, timeout=300):
    """`attnkit tokenize --tokenizer DIRECTORY EXTRA...` on stdin: the finished process."""
    return subprocess.run([os.path.join(build_dir, "attnkit"), "tokenize", "--tokenizer", directory, *extra],
                          input=stdin, capture_output=True, text=True, timeout=timeout)

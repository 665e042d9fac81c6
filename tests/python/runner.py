"""Shared entry point of the python test files: ctest runs them as
`python3 tests/python/test_x.py --build-dir BUILD`; they print "N passed, M failed" and exit 1 on
any failure."""
import argparse
import sys
import unittest


def build_dir():
    """The --build-dir argument (default "build"); the rest of argv is left for unittest."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", default="build")
    args, rest = parser.parse_known_args()
    sys.argv = [sys.argv[0]] + rest
    return args.build_dir


def run():
    result = unittest.main(module="__main__", argv=sys.argv, exit=False, verbosity=1).result
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)

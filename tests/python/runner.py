"""Shared entry point of the python test files: ctest runs them as
`python3 tests/python/test_x.py --build-dir BUILD`; they print "N passed, M failed" and exit 1 on
any failure."""
import argparse
import importlib.util
import os
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_in_peer_venv(module):
    """Makes sure the calling test file runs where `module` (e.g. "transformers") can be imported:
    ctest starts it with Debian's /usr/bin/python3; if the module is missing there, the file is
    run again (same arguments) with the test venv's Python that scripts/setup.sh made
    (scripts/peer_python.sh prints it). A missing venv, or a venv without the module, ends the
    test with one line saying to run scripts/setup.sh. The venv's python is a symlink to
    /usr/bin/python3, so the environment, not the path, marks the second run."""
    if importlib.util.find_spec(module) is not None:
        return
    script = os.path.abspath(sys.argv[0])
    name = os.path.basename(script)
    if os.environ.get("ATTNKIT_IN_PEER_VENV"):
        sys.exit(f"{name}: the test venv has no {module}; run scripts/setup.sh")
    p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "peer_python.sh")], capture_output=True, text=True)
    python = p.stdout.strip()
    if p.returncode != 0 or not python:
        sys.exit(f"{name}: {p.stderr.strip() or 'no Python test venv; run scripts/setup.sh'}")
    os.environ["ATTNKIT_IN_PEER_VENV"] = "1"
    os.execv(python, [python, script] + sys.argv[1:])


SKIP = 77  # ctest reports a test that exits with it as skipped (SKIP_RETURN_CODE)


def cache_dir():
    """attnkit's cache folder: $ATTNKIT_CACHE or ~/.cache/attnkit (venvs, weights, node)."""
    return os.environ.get("ATTNKIT_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "attnkit"))


def run_in_venv_py(modules=()):
    """Makes sure the calling test file runs where transformers >= 5 and `modules` (e.g. "gguf")
    import: if this Python lacks them, the file is run again (same arguments) with the Python of
    the Python package's venv (cache_dir()/venv-py, scripts/python_package_venv.sh; `make test`
    makes it in the background). While that venv is not finished the test exits SKIP with one line
    saying why; a finished venv without them ends it with an error."""
    try:
        for module in modules:
            importlib.import_module(module)
        import transformers
        if int(transformers.__version__.split(".")[0]) >= 5:
            return
    except ImportError:
        pass
    script = os.path.abspath(sys.argv[0])
    name = os.path.basename(script)
    venv = os.path.join(cache_dir(), "venv-py")
    wanted = ", ".join(("transformers 5.x",) + tuple(modules))
    if os.environ.get("ATTNKIT_IN_VENV_PY"):
        sys.exit(f"{name}: {venv} lacks {wanted}; remove it and run scripts/python_package_venv.sh")
    if not os.path.exists(os.path.join(venv, ".attnkit-requirements.sha256")):
        print(f"{name}: skipped: no finished Python package venv at {venv} ({wanted}); "
              f"`make test` makes it in the background, or run scripts/python_package_venv.sh", flush=True)
        sys.exit(SKIP)
    os.environ["ATTNKIT_IN_VENV_PY"] = "1"
    python = os.path.join(venv, "bin", "python")
    os.execv(python, [python, script] + sys.argv[1:])


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

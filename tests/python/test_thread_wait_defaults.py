"""src/process_start.cpp: attnkit's executables start libgomp with GOMP_SPINCOUNT=10000 unless the
user set GOMP_SPINCOUNT or OMP_WAIT_POLICY. libgomp prints the settings it read in its own
constructor (OMP_DISPLAY_ENV=VERBOSE), so this shows the default is in place before LibTorch's
libraries start, and that a user's value wins; with `--threads 1` (no pool has a worker to spin)
the program is not started again and libgomp keeps its own default."""
import os
import re
import subprocess
import unittest

import runner

BUILD = runner.build_dir()
CLI = os.path.join(BUILD, "attnkit")
OURS = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT")


def spincount(*args, **extra):
    env = {k: v for k, v in os.environ.items() if k not in OURS}
    env.update(OMP_DISPLAY_ENV="VERBOSE", **extra)
    r = subprocess.run([CLI, *args, "--version"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    m = re.search(r"GOMP_SPINCOUNT = '(\w+)'", r.stderr)
    assert m, "libgomp printed no GOMP_SPINCOUNT:\n" + r.stderr
    return m.group(1)


class ThreadWaitDefaults(unittest.TestCase):
    def test_default_reaches_libgomp(self):
        self.assertEqual(spincount(), "10000")

    def test_one_thread_starts_once(self):
        # libgomp's own default (300000 spins) shows the execve() was skipped.
        self.assertEqual(spincount("--threads", "1"), "300000")
        self.assertEqual(spincount("--threads=1"), "300000")
        self.assertEqual(spincount("--threads", "2"), "10000")
        self.assertEqual(spincount("--threads", "1", "--threads", "2"), "10000")

    def test_user_values_win(self):
        self.assertEqual(spincount(GOMP_SPINCOUNT="777"), "777")
        self.assertNotEqual(spincount(OMP_WAIT_POLICY="ACTIVE"), "10000")
        self.assertEqual(spincount(OMP_WAIT_POLICY="PASSIVE"), "0")


if __name__ == "__main__":
    runner.run()

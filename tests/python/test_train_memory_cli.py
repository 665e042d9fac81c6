#!/usr/bin/python3
"""attnkit train refuses a model that cannot fit in memory before allocating it (issue 32's three
commands): each ends (well within the 60 s timeout: no hang) with one line naming the setting, the
estimate and the limit, its peak resident memory that of a process that allocated no model (below
2 GB: LibTorch's start-up alone is a few hundred MB), and writes no run directory. Memory, not wall
time, says "before allocating": on a loaded machine the process start alone can take seconds."""
import os
import resource
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402

BUILD_DIR = "build"


class TrainMemoryCli(unittest.TestCase):
    def refused(self, *settings):
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = os.path.join(tmp, "run")
            p = subprocess.run([os.path.join(BUILD_DIR, "attnkit"), "--threads", "1", "train",
                                "--task.name", "copy", "--run.dir", run_dir, *settings],
                               capture_output=True, text=True, timeout=60)
            # The largest peak resident set of this test's children so far, in KiB (Linux).
            peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            self.assertNotEqual(p.returncode, 0, p.stderr)
            self.assertLess(peak_mb, 2048, p.stderr)
            lines = [line for line in p.stderr.splitlines() if line.strip()]
            self.assertEqual(len(lines), 1, p.stderr)
            self.assertFalse(os.path.exists(run_dir), "a refused run wrote its directory")
            return lines[0]

    def test_many_layers(self):
        line = self.refused("--model.layers", "100000")
        self.assertIn("model.layers = 100000,", line)
        self.assertRegex(line, r"training needs about [0-9.]+ [kMGTPE]?B \([0-9.e+]+ parameters x 4 float32 copies")
        self.assertRegex(line, r"more than the [0-9.]+ [kMGTPE]?B this process may use \((MemAvailable|the cgroup)")

    def test_absurd_layer_count_does_not_hang(self):
        line = self.refused("--model.layers", "100000000000")
        self.assertIn("model.layers = 100000000000,", line)
        self.assertIn("this process may use", line)

    def test_huge_hidden(self):
        line = self.refused("--model.hidden", "1000000000")
        self.assertIn("model.hidden = 1000000000,", line)
        self.assertIn("this process may use", line)

    def test_overflowing_size(self):
        line = self.refused("--model.hidden", "4000000000000000000")
        self.assertIn("model.hidden: 4000000000000000000 is larger than 2^40", line)


if __name__ == "__main__":
    BUILD_DIR = runner.build_dir()
    runner.run()

#!/usr/bin/python3
"""attnkit data lra-pathfinder and the LRA image tasks end to end: split files of the documented
size, the same bytes for the same seed, a sample sheet, train + eval on the test split, lra-image on
Debian's Fashion-MNIST when installed, and one-line errors."""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402

BUILD_DIR = "build"
FASHION = "/usr/share/datasets/fashion-mnist"
TINY_MODEL = ["--task.batch_size", "4", "--model.hidden", "16", "--model.layers", "1", "--model.heads", "2",
              "--run.steps", "2"]


def attnkit(*argv):
    p = subprocess.run([os.path.join(BUILD_DIR, "attnkit"), "--threads", "1", "--quiet", *argv],
                       capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def read(path):
    with open(path, "rb") as f:
        return f.read()


class LraCli(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def pathfinder(self, out, *extra):
        rc, _, err = attnkit("data", "lra-pathfinder", "--out", out, "--train", "12", "--val", "6", "--test", "4",
                             *extra)
        self.assertEqual(rc, 0, err)

    def test_pathfinder_files_train_and_eval(self):
        a, b, c = (os.path.join(self.dir, name) for name in ("a", "b", "c"))
        self.pathfinder(a, "--seed", "5")
        self.pathfinder(b, "--seed", "5")
        self.pathfinder(c, "--seed", "6")
        for split, count in (("train", 12), ("val", 6), ("test", 4)):
            name = f"pathfinder32_{split}.bin"
            data = read(os.path.join(a, name))
            self.assertEqual(data[:8], b"APATHF01")
            self.assertEqual(len(data), 20 + count * 1025)
            self.assertEqual(data, read(os.path.join(b, name)))
            self.assertNotEqual(data, read(os.path.join(c, name)))
            labels = [data[20 + i * 1025] for i in range(count)]
            self.assertEqual(sorted(set(labels)), [0, 1])
            self.assertEqual(sum(labels), count // 2)

        run = os.path.join(self.dir, "run")
        rc, _, err = attnkit("train", "--task.name", "lra-pathfinder", "--task.data", a, "--run.dir", run,
                             *TINY_MODEL)
        self.assertEqual(rc, 0, err)
        rc, out, err = attnkit("eval", "--run", run, "--split", "test", "--examples", "0")
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"^step 2 split test accuracy=")

    def test_sample_sheets_and_errors(self):
        sheet = os.path.join(self.dir, "s.svg")
        rc, _, err = attnkit("data", "lra-pathfinder", "--samples", sheet, "--sample-count", "4", "--size", "128")
        self.assertEqual(rc, 0, err)
        svg = read(sheet).decode()
        self.assertTrue(svg.startswith("<svg"))
        self.assertEqual(svg.count("connected</text>"), 4)
        for argv, expected in (
                ((), "give --out DIR, --samples FILE or both"),
                (("--out", os.path.join(self.dir, "x"), "--paddles", "40"), "do not fit a 32x32 image"),
                (("--samples", os.path.join(self.dir, "s.png")), "must be .svg or .pgm")):
            rc, _, err = attnkit("data", "lra-pathfinder", *argv)
            self.assertEqual(rc, 2, err)
            self.assertIn(expected, err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "x")))
        rc, _, err = attnkit("train", "--task.name", "lra-image", "--run.dir", os.path.join(self.dir, "r"))
        self.assertEqual(rc, 2)
        self.assertIn("task 'lra-image' needs task.data (the Fashion-MNIST directory", err)

    @unittest.skipUnless(os.path.isfile(os.path.join(FASHION, "t10k-labels-idx1-ubyte.gz")),
                         "dataset-fashion-mnist is not installed")
    def test_image_on_fashion_mnist(self):
        run = os.path.join(self.dir, "image")
        rc, _, err = attnkit("train", "--task.name", "lra-image", "--task.data", FASHION, "--run.dir", run,
                             "--task.eval_examples", "16", *TINY_MODEL)
        self.assertEqual(rc, 0, err)
        rc, out, err = attnkit("eval", "--run", run, "--split", "test", "--examples", "40")
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"^step 2 split test accuracy=")


if __name__ == "__main__":
    BUILD_DIR = runner.build_dir()
    runner.run()

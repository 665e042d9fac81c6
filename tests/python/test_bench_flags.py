"""Every benchmark executable parses its flags like the `attnkit` CLI (tools/flags.h): --help prints
the usage, exits 0, and runs and writes nothing; an unknown flag or a bad value is one line on
stderr, "PROGRAM: error: ... (see PROGRAM --help)", with a non-zero status and nothing on stdout.
The benchmarks are built only with ATTNKIT_BUILD_BENCH (on by default); a binary that is not in
the build folder is skipped, by name."""
import os
import subprocess
import tempfile
import unittest

import runner

BUILD = os.path.abspath(runner.build_dir())

# Each benchmark with a bad value that its flag parsing must refuse, and the words that say why.
BENCHES = {
    "attnkit_bench_attention": (["--n", "0"], "--n"),
    "attnkit_bench_train": (["--n", "many"], "--n"),
    "attnkit_bench_decode": (["--mode", "fast"], "--mode"),
    "attnkit_bench_heads": (["--pruned", "2"], "--pruned"),
    "attnkit_tokenizer_bench": (["scratch", "and-more"], "and-more"),
}


def run(argv, cwd):
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)


def run_each(commands):
    """Runs (argv, cwd) pairs one after another; their results in order."""
    return [run(*c) for c in commands]


class BenchFlags(unittest.TestCase):
    def built(self):
        """(name, path, bad value) of each benchmark in the build folder."""
        out = []
        for name, bad in BENCHES.items():
            path = os.path.join(BUILD, name)
            if os.path.exists(path):
                out.append((name, path, bad))
            else:
                print(f"skipped {name}: not built (ATTNKIT_BUILD_BENCH=OFF?)")
        return out

    def assert_one_line_error(self, r, name, *words):
        self.assertNotEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout, "")
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith(f"{name}: error: "), lines[0])
        self.assertTrue(lines[0].endswith(f"--help)"), lines[0])
        for word in words:
            self.assertIn(word, lines[0])

    def check_each(self, argv_of, check):
        """Runs each built benchmark with argv_of(bad value) in an empty folder of its own, then
        check(name, result) and that the folder is still empty."""
        benches = self.built()
        with tempfile.TemporaryDirectory() as root:
            cwds = [os.path.join(root, name) for name, _, _ in benches]
            for cwd in cwds:
                os.mkdir(cwd)
            results = run_each([([path, *argv_of(bad)], cwd) for (_, path, bad), cwd in zip(benches, cwds)])
            for (name, _, _), cwd, r in zip(benches, cwds, results):
                with self.subTest(bench=name):
                    check(name, r)
                    self.assertEqual(os.listdir(cwd), [], f"{name} wrote into its working directory")

    def test_help_prints_the_usage_and_runs_nothing(self):
        def check(name, r):
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("Usage:", r.stdout)
            self.assertIn("--help", r.stdout)
            self.assertNotIn("corpus:", r.stdout)  # the tokenizer benchmark's first line when it runs
            self.assertFalse([l for l in r.stdout.splitlines() if l.startswith("{")])  # JSON result lines
        self.check_each(lambda bad: ["--help"], check)

    def test_an_unknown_flag_is_a_one_line_error(self):
        self.check_each(lambda bad: ["--no-such-flag"],
                        lambda name, r: self.assert_one_line_error(r, name, "--no-such-flag"))

    def test_a_bad_value_is_a_one_line_error(self):
        self.check_each(lambda bad: bad[0],
                        lambda name, r: self.assert_one_line_error(r, name, BENCHES[name][1]))

    def test_the_cli_names_the_subcommand_whose_help_to_read(self):
        cli = os.path.join(BUILD, "attnkit")
        with tempfile.TemporaryDirectory() as cwd:
            top, train = run_each([([cli, "--no-such-flag"], cwd), ([cli, "train", "--no-such-flag"], cwd)])
            self.assert_one_line_error(top, "attnkit", "(see attnkit --help)")  # CLI11: a subcommand is required
            self.assert_one_line_error(train, "attnkit", "--no-such-flag", "(see attnkit train --help)")
            self.assertEqual(os.listdir(cwd), [])

    def test_the_cli_reports_output_it_could_not_write(self):
        # The output is flushed when a command ends (the process then ends with _exit): a full
        # disk behind stdout is one line and status 2, not a silent success.
        cli = os.path.join(BUILD, "attnkit")
        if not os.path.exists("/dev/full"):
            self.skipTest("no /dev/full")
        with open("/dev/full", "w") as full:
            r = subprocess.run([cli, "--version"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith("attnkit: error: cannot write the output"), lines[0])
        ok = subprocess.run([cli, "--version"], capture_output=True, text=True, timeout=60)
        self.assertEqual((ok.returncode, ok.stderr), (0, ""))
        self.assertTrue(ok.stdout.strip())


if __name__ == "__main__":
    runner.run()

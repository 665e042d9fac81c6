"""ATTNKIT_KERNEL_ISA forces a copy of the fused kernels (docs/testing.md): each copy this CPU can
run is the one that runs and gives a finite result, and a bad value is a one-line error (of
ATTNKIT_GEMM and ATTNKIT_FUSED_STEP too)."""
import os
import subprocess
import unittest

import runner

BUILD = runner.build_dir()
CLI = os.path.join(BUILD, "attnkit")


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def runnable():
    flags = cpu_flags()
    out = ["baseline"]
    if {"avx2", "fma"} <= flags:
        out.append("avx2")
    if {"avx512f", "avx512vl", "avx512bw", "avx512dq", "fma"} <= flags:
        out.append("avx512")
    return out


def attention(isa, kind="linear"):
    env = dict(os.environ, ATTNKIT_KERNEL_ISA=isa)
    return subprocess.run([CLI, "attention", "--kind", kind, "--causal", "--n", "64", "--repeat", "1"],
                          env=env, capture_output=True, text=True)


class KernelIsa(unittest.TestCase):
    def test_each_runnable_copy_is_the_one_that_runs(self):
        for isa in runnable():
            for kind in ("linear", "softmax"):
                r = attention(isa, kind)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn(f", {isa} kernels)", r.stdout)
                self.assertRegex(r.stdout, r"finite\s+yes")

    def test_auto_is_the_best_copy(self):
        r = attention("auto")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f", {runnable()[-1]} kernels)", r.stdout)

    def test_bad_values_are_one_line_errors(self):
        r = attention("sse9")
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(r.stderr.strip().count("\n"), 0, r.stderr)
        self.assertIn("ATTNKIT_KERNEL_ISA: unknown value 'sse9'; use baseline, avx2, avx512 or auto", r.stderr)
        if "avx512" not in runnable():
            r = attention("avx512")
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("this CPU runs at most", r.stderr)


class ProcessSettings(unittest.TestCase):
    """ATTNKIT_GEMM and ATTNKIT_FUSED_STEP are read before any work: a bad value is one line."""

    def test_bad_values_are_one_line_errors(self):
        for name, value, message in (
                ("ATTNKIT_GEMM", "mkl", "ATTNKIT_GEMM"),
                ("ATTNKIT_FUSED_STEP", "yes", "ATTNKIT_FUSED_STEP: expected 0 or 1, got 'yes'")):
            env = dict(os.environ, **{name: value})
            r = subprocess.run([CLI, "attention", "--kind", "softmax", "--n", "8", "--repeat", "1"],
                               env=env, capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0, name)
            self.assertEqual(r.stderr.strip().count("\n"), 0, r.stderr)
            self.assertIn(message, r.stderr)
            self.assertEqual(r.stdout, "", name)


if __name__ == "__main__":
    runner.run()

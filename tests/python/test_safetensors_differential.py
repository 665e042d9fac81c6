#!/usr/bin/python3
"""Differential check of attnkit's safetensors reader against the reference `safetensors` package
(docs/robustness.md): for every hand-made malformed or valid file below, and every file of the
fuzz seed corpus and fuzz findings (fuzz/corpus/safetensors, fuzz/regressions/safetensors),
`attnkit inspect FILE` accepts exactly when safetensors.torch.load_file accepts, and when it
refuses it prints one line naming the file.

Runs under the Python test venv (scripts/peer_python.sh, made by scripts/setup.sh), re-executing
itself there when started by Debian's python3; a missing venv is a failure with a hint.

Known, intended differences (listed in KNOWN_DIFFERENCES, checked to still differ); in each,
attnkit refuses what safetensors 0.4.2 accepts:
  * BOOL tensors whose bytes are not 0 or 1: they would be invalid C++ bools; the reference hands
    them to torch as they are.
  * A tensor name, or a "__metadata__" key, that appears twice: the reference keeps the last one
    silently (serde's map), so two readers could see different tensors; attnkit names the key.
  * A zero-element shape whose other dimensions multiply beyond 2^63 ([0, 2^62, 2^62]): ATen
    could not compute its strides.
"""
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


import runner  # noqa: E402

runner.run_in_peer_venv("safetensors")

import safetensors  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402


BUILD_DIR = "build"


def header_file(header, data=b"", length=None):
    """bytes of a safetensors file: 8-byte length (default: the header's), header, data."""
    if isinstance(header, (dict, list)):
        header = json.dumps(header)
    if isinstance(header, str):
        header = header.encode("utf-8")
    n = len(header) if length is None else length
    return struct.pack("<Q", n) + header + data


def entry(dtype, shape, begin, end, **more):
    e = {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}
    e.update(more)
    return e


def nested(depth):
    """A JSON value with `depth` nested arrays."""
    return "[" * depth + "]" * depth


F32x2 = b"\x00\x00\x80\x3f" * 2  # two float32 ones


def hand_made_cases():
    """(name, bytes) pairs: every class the reference rejects, and valid neighbours of each."""
    c = []
    ok = {"a": entry("F32", [2], 0, 8)}
    c.append(("valid", header_file(ok, F32x2)))
    c.append(("valid_padded_header", header_file(json.dumps(ok) + "        ", F32x2)))
    c.append(("valid_empty", header_file("{}")))
    c.append(("valid_metadata", header_file({"__metadata__": {"k": "v"}, **ok}, F32x2)))
    c.append(("valid_metadata_null", header_file({"__metadata__": None, **ok}, F32x2)))
    c.append(("valid_zero_dim", header_file({"s": entry("F64", [], 0, 8)}, b"\0" * 8)))
    c.append(("valid_empty_tensor", header_file({"e": entry("F32", [0, 3], 0, 0), **{"a": entry("F32", [2], 0, 8)}}, F32x2)))
    c.append(("valid_unknown_field", header_file({"a": entry("F32", [2], 0, 8, extra=[1, {"x": None}])}, F32x2)))
    c.append(("valid_all_dtypes", header_file(
        {"f64": entry("F64", [1], 0, 8), "f32": entry("F32", [1], 8, 12), "f16": entry("F16", [1], 12, 14),
         "bf16": entry("BF16", [1], 14, 16), "i64": entry("I64", [1], 16, 24), "i32": entry("I32", [1], 24, 28),
         "i16": entry("I16", [1], 28, 30), "i8": entry("I8", [1], 30, 31), "u8": entry("U8", [1], 31, 32),
         "bool": entry("BOOL", [1], 32, 33)}, b"\0" * 33)))
    c.append(("valid_unicode_name", header_file({"ä\u4e2d": entry("U8", [1], 0, 1)}, b"\x07")))
    c.append(("valid_escaped_nul_in_name", header_file('{"a\\u0000b": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}', b"\x07")))
    # File shorter than 8 bytes.
    for n in range(8):
        c.append((f"short_{n}_bytes", b"\x02" * n))
    # Header length over 100 MB, or past the end of the file.
    c.append(("header_length_over_limit", header_file("{}", length=100_000_001)))
    c.append(("header_length_max_u64", header_file("{}", length=2**64 - 1)))
    c.append(("header_length_past_end", header_file("{}", length=3)))
    c.append(("header_length_zero", header_file("", length=0)))
    c.append(("header_length_shorter_than_json", header_file('{"a": 1}', length=4)))
    # Header not UTF-8, not JSON, not starting with '{'.
    c.append(("header_not_utf8", header_file(b'{"a\xff": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}', b"\x01")))
    c.append(("header_overlong_utf8", header_file(b'{"\xc0\xaf": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}', b"\x01")))
    c.append(("header_not_json", header_file('{"a": }')))
    c.append(("header_truncated_json", header_file('{"a": {"dtype": "F32"')))
    c.append(("header_trailing_garbage", header_file('{}x')))
    c.append(("header_two_objects", header_file('{}{}')))
    c.append(("header_leading_space", header_file(' {}')))
    c.append(("header_leading_newline", header_file('\n{}')))
    c.append(("header_array", header_file('[]')))
    c.append(("header_string", header_file('"x"')))
    c.append(("header_null", header_file('null')))
    c.append(("header_nul_byte", header_file(b'{}\x00')))
    c.append(("header_nul_in_string", header_file(b'{"a\x00": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}', b"\x01")))
    c.append(("header_lone_surrogate", header_file('{"\\ud800": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}', b"\x01")))
    c.append(("header_control_char", header_file('{"a\tb": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}', b"\x01")))
    c.append(("header_leading_whitespace_ok", header_file(' \n\t{}')))
    c.append(("header_trailing_whitespace_ok", header_file('{}\n\t \r')))
    c.append(("header_bom", header_file(b'\xef\xbb\xbf{}')))
    c.append(("header_number_overflow", header_file(
        '{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "x": 1e400}}', b"\x01")))
    c.append(("header_huge_integer", header_file(
        '{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "x": 123456789012345678901234567890}}', b"\x01")))
    # Nesting depth (serde_json refuses 128 levels, the outer object and the entry included).
    for depth in (1, 124, 125, 126, 127, 5000):
        c.append((f"nesting_{depth}", header_file(
            '{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "x": ' + nested(depth) + "}}", b"\x01")))
    # Duplicate keys.
    c.append(("duplicate_field", header_file('{"a": {"dtype": "U8", "dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}', b"\x01")))
    c.append(("duplicate_metadata", header_file('{"__metadata__": {}, "__metadata__": {}}')))
    c.append(("duplicate_metadata_key_other_type", header_file('{"__metadata__": {"k": "1", "k": 2}}')))
    # Offsets that overlap, leave gaps or run backwards; beyond the buffer.
    c.append(("offsets_overlap", header_file({"a": entry("U8", [2], 0, 2), "b": entry("U8", [2], 1, 3)}, b"\0" * 3)))
    c.append(("offsets_same_range", header_file({"a": entry("U8", [2], 0, 2), "b": entry("U8", [2], 0, 2)}, b"\0" * 2)))
    c.append(("offsets_gap", header_file({"a": entry("U8", [1], 0, 1), "b": entry("U8", [1], 2, 3)}, b"\0" * 3)))
    c.append(("offsets_gap_at_start", header_file({"a": entry("U8", [1], 1, 2)}, b"\0" * 2)))
    c.append(("offsets_backwards", header_file({"a": entry("U8", [0], 2, 1)}, b"\0" * 2)))
    c.append(("offsets_beyond_buffer", header_file({"a": entry("U8", [4], 0, 4)}, b"\0" * 2)))
    c.append(("offsets_huge", header_file({"a": entry("U8", [1], 2**64 - 1, 2**64)}, b"\0")))
    c.append(("offsets_three", header_file('{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1, 2]}}', b"\0")))
    c.append(("offsets_one", header_file('{"a": {"dtype": "U8", "shape": [1], "data_offsets": [1]}}', b"\0")))
    c.append(("offsets_negative", header_file('{"a": {"dtype": "U8", "shape": [1], "data_offsets": [-1, 0]}}', b"\0")))
    c.append(("offsets_float", header_file('{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1.0]}}', b"\0")))
    c.append(("offsets_exponent", header_file('{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1e0]}}', b"\0")))
    c.append(("offsets_strings", header_file('{"a": {"dtype": "U8", "shape": [1], "data_offsets": ["0", "1"]}}', b"\0")))
    c.append(("offsets_missing", header_file('{"a": {"dtype": "U8", "shape": [1]}}', b"\0")))
    # Shape x dtype size overflow; size not matching the offsets; odd shapes.
    c.append(("shape_bytes_overflow", header_file({"a": entry("F32", [2**62, 8], 0, 0)})))
    c.append(("shape_elements_overflow", header_file({"a": entry("U8", [2**32, 2**32], 0, 0)})))
    c.append(("shape_element_over_u64", header_file('{"a": {"dtype": "U8", "shape": [18446744073709551616], "data_offsets": [0, 0]}}')))
    c.append(("shape_bytes_mismatch", header_file({"a": entry("F32", [3], 0, 8)}, F32x2)))
    c.append(("shape_bytes_mismatch_short", header_file({"a": entry("F32", [1], 0, 8)}, F32x2)))
    c.append(("shape_negative", header_file('{"a": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 0]}}')))
    c.append(("shape_minus_zero", header_file('{"a": {"dtype": "U8", "shape": [-0], "data_offsets": [0, 0]}}')))
    c.append(("offsets_minus_zero", header_file('{"a": {"dtype": "U8", "shape": [1], "data_offsets": [-0, 1]}}', b"\0")))
    c.append(("shape_zero_elements_ok", header_file({"a": entry("U8", [0, 2**63 - 1], 0, 0)})))
    c.append(("shape_dimension_2_63", header_file({"a": entry("U8", [0, 2**63], 0, 0)})))
    c.append(("shape_float", header_file('{"a": {"dtype": "U8", "shape": [1.5], "data_offsets": [0, 1]}}', b"\0")))
    c.append(("shape_not_array", header_file('{"a": {"dtype": "U8", "shape": 1, "data_offsets": [0, 1]}}', b"\0")))
    c.append(("shape_missing", header_file('{"a": {"dtype": "U8", "data_offsets": [0, 1]}}', b"\0")))
    # Trailing bytes after the last tensor.
    c.append(("trailing_bytes", header_file(ok, F32x2 + b"\0")))
    c.append(("trailing_bytes_no_tensors", header_file("{}", b"\0")))
    # dtype and entry types; metadata types.
    c.append(("dtype_unknown", header_file({"a": entry("F7", [1], 0, 1)}, b"\0")))
    c.append(("dtype_lowercase", header_file({"a": entry("u8", [1], 0, 1)}, b"\0")))
    c.append(("dtype_number", header_file('{"a": {"dtype": 1, "shape": [1], "data_offsets": [0, 1]}}', b"\0")))
    c.append(("entry_not_object", header_file('{"a": [1, 2]}')))
    c.append(("entry_null", header_file('{"a": null}')))
    c.append(("metadata_number_value", header_file('{"__metadata__": {"k": 1}}')))
    c.append(("metadata_array", header_file('{"__metadata__": ["k"]}')))
    c.append(("metadata_string", header_file('{"__metadata__": "k"}')))
    return c


# name -> the verdicts (attnkit, reference) that are known and intended to differ.
KNOWN_DIFFERENCES = {
    "bool_byte_2": (False, True),
    "duplicate_tensor_same": (False, True),
    "duplicate_tensor_different": (False, True),
    "duplicate_metadata_key": (False, True),
    "shape_zero_elements_strides_overflow": (False, True),
}


def known_difference_cases():
    return [
        ("bool_byte_2", header_file({"b": entry("BOOL", [2], 0, 2)}, b"\x01\x02")),
        ("duplicate_tensor_same", header_file(
            '{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, '
            '"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}', b"\x01")),
        ("duplicate_tensor_different", header_file(
            '{"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}, '
            '"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}', b"\x01")),
        ("duplicate_metadata_key", header_file('{"__metadata__": {"k": "1", "k": "2"}}')),
        ("shape_zero_elements_strides_overflow", header_file({"a": entry("U8", [0, 2**62, 2**62], 0, 0)})),
    ]


def corpus_cases():
    cases = []
    for folder in ("corpus", "regressions"):
        for path in sorted(glob.glob(os.path.join(ROOT, "fuzz", folder, "safetensors", "*"))):
            with open(path, "rb") as f:
                cases.append((f"{folder}/{os.path.basename(path)}", f.read()))
    return cases


def reference_accepts(path):
    try:
        load_file(path)
        return True, ""
    except Exception as e:  # noqa: BLE001 - any refusal counts
        return False, f"{type(e).__name__}: {e}"


def attnkit_accepts(path):
    p = subprocess.run([os.path.join(BUILD_DIR, "attnkit"), "--threads", "1", "inspect", path],
                       capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


class SafetensorsDifferential(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def check(self, cases, known=None):
        known = known or {}
        mismatches = []
        for name, data in cases:
            path = os.path.join(self.tmp.name, name.replace("/", "_") + ".safetensors")
            with open(path, "wb") as f:
                f.write(data)
            ref_ok, ref_why = reference_accepts(path)
            rc, out, err = attnkit_accepts(path)
            ours_ok = rc == 0
            if rc not in (0, 2):
                mismatches.append(f"{name}: attnkit exited {rc} (crash?): {err.strip()[-300:]}")
                continue
            if not ours_ok:
                lines = err.strip().splitlines()
                if len(lines) != 1 or path not in lines[0]:
                    mismatches.append(f"{name}: attnkit's refusal is not one line naming the file: {err!r}")
            verdicts = (ours_ok, ref_ok)
            expected_same = name not in known
            if expected_same and ours_ok != ref_ok:
                mismatches.append(f"{name}: attnkit {'accepts' if ours_ok else 'refuses'} "
                                  f"({err.strip()}), safetensors {safetensors.__version__} "
                                  f"{'accepts' if ref_ok else 'refuses'} ({ref_why})")
            if not expected_same and verdicts != known[name]:
                mismatches.append(f"{name}: the known difference is gone: attnkit {ours_ok}, reference {ref_ok}")
        self.assertEqual(mismatches, [], "\n".join(mismatches))

    def test_hand_made(self):
        cases = hand_made_cases()
        self.assertGreater(len(cases), 60)
        self.check(cases)

    def test_known_differences(self):
        self.check(known_difference_cases(), KNOWN_DIFFERENCES)

    def test_fuzz_corpus_and_findings(self):
        cases = corpus_cases()
        self.assertGreater(len(cases), 0, "fuzz/corpus/safetensors is empty")
        self.check(cases)

    def test_round_trip_of_reference_files(self):
        """Files the reference writes load in attnkit with the same names, dtypes and shapes."""
        from safetensors.torch import save
        tensors = {"w": torch.randn(3, 4), "h": torch.ones(2, dtype=torch.float16),
                   "i": torch.arange(5), "b": torch.tensor([True, False]), "z": torch.zeros(0, 2)}
        path = os.path.join(self.tmp.name, "ref.safetensors")
        with open(path, "wb") as f:
            f.write(save(tensors, metadata={"format": "pt"}))
        rc, out, err = attnkit_accepts(path)
        self.assertEqual(rc, 0, err)
        listed = {}
        for line in out.splitlines():
            item = json.loads(line)
            if "name" in item:
                listed[item["name"]] = item["shape"]
        self.assertEqual(listed, {k: list(v.shape) for k, v in tensors.items()})


if __name__ == "__main__":
    BUILD_DIR = runner.build_dir()
    runner.run()

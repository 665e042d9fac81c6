#!/usr/bin/python3
"""torch.ops.attnkit.* (libattnkit_ops.so) vs the eager formulas, in ONE Python process.

    /usr/bin/python3 bench/torch_ops_vs_eager.py [--lib build/libattnkit_ops.so] [--n 1024 4096]
        [--kinds ...] [--modes fwd fwdbwd] [--causal both|yes|no] [--threads 2] [--json]

Shows that Python users of the torch.ops get the fused kernels: their times should match the C++
binary (bench/compare.py puts both side by side) and beat the eager formulas of
bench/peers/attention_peer.py, which this script imports (same formulas, same sampling rule).
Also reports max |Δ| between the two forward outputs. Memory is not measured here (one process);
bench/compare.py measures it per case in fresh processes.
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
from attention_peer import EAGER, take_samples  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def torch_ops(kind):
    ops = torch.ops.attnkit
    if kind == "softmax":
        return lambda q, k, v, causal: ops.softmax_attention(q, k, v, None, causal)
    if kind == "linear":
        return lambda q, k, v, causal: ops.linear_attention(q, k, v, "elu", causal)
    return lambda q, k, v, causal: ops.cosformer_attention(q, k, v, causal)


def time_op(op, q, k, v, causal, grad_out, a):
    def one_call():
        start = time.perf_counter()
        out = op(q, k, v, causal=causal)
        if grad_out is not None:
            out.backward(grad_out)
            q.grad = k.grad = v.grad = None
        del out
        return time.perf_counter() - start

    _, samples = take_samples(one_call, a.repeat, a.min_time, a.max_time)
    return statistics.median(samples) * 1e3


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lib", default=str(REPO / "build" / "libattnkit_ops.so"))
    p.add_argument("--n", nargs="+", type=int, default=[1024, 4096])
    p.add_argument("--kinds", nargs="+", choices=sorted(EAGER), default=["softmax", "linear",
                                                                        "cosformer"])
    p.add_argument("--modes", nargs="+", choices=["fwd", "fwdbwd"], default=["fwd", "fwdbwd"])
    p.add_argument("--causal", choices=["both", "yes", "no"], default="both")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--min-time", type=float, default=0.5)
    p.add_argument("--max-time", type=float, default=4.0)
    p.add_argument("--json", action="store_true", help="one JSON line per case")
    a = p.parse_args()

    torch.ops.load_library(a.lib)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    causal_values = {"both": [False, True], "yes": [True], "no": [False]}[a.causal]
    if not a.json:
        print(f"{'kind':9s} {'n':>5s} {'mode':6s} causal {'torch.ops ms':>12s} {'eager ms':>10s} "
              f"{'speed-up':>8s} {'max |Δ|':>8s}")
    for kind in a.kinds:
        for n in a.n:
            shape = (1, a.heads, n, a.dim)
            base = [torch.randn(shape) for _ in range(3)]
            for causal in causal_values:
                with torch.no_grad():
                    diff = (torch_ops(kind)(*base, causal=causal)
                            - EAGER[kind](*base, causal=causal)).abs().max().item()
                for mode in a.modes:
                    backward = mode == "fwdbwd"
                    q, k, v = (t.clone().requires_grad_(backward) for t in base)
                    grad_out = torch.randn(shape) if backward else None
                    ops_ms = time_op(torch_ops(kind), q, k, v, causal, grad_out, a)
                    eager_ms = time_op(EAGER[kind], q, k, v, causal, grad_out, a)
                    record = {"kind": kind, "n": n, "mode": mode, "causal": causal,
                              "ops_ms": ops_ms, "eager_ms": eager_ms, "max_abs_diff": diff}
                    if a.json:
                        print(json.dumps(record), flush=True)
                    else:
                        print(f"{kind:9s} {n:5d} {mode:6s} {'yes' if causal else 'no':6s} "
                              f"{ops_ms:12.2f} {eager_ms:10.2f} {eager_ms / ops_ms:7.1f}× "
                              f"{diff:8.1e}", flush=True)


if __name__ == "__main__":
    main()

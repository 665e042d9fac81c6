#!/usr/bin/python3
"""Machine reference numbers for the benchmark report; prints one JSON line.

    /usr/bin/python3 bench/peers/machine_reference.py [--size 2048] [--threads 2] [--repeat 10]

- sgemm: torch.mm of two float32 [size, size] matrices, GFLOP/s = 2·size³ / time, from the median
  and the best of `repeat` timed calls after one untimed warm-up. The practical FLOP/s ceiling
  the attention numbers are set against.
- first touch: GiB/s of filling a freshly allocated 512 MiB tensor (page faults included) vs
  refilling it. Every large temporary an implementation allocates per call pays the first rate
  (glibc returns big blocks to the OS on free), so it explains much of the eager peer's time.
"""
import argparse
import json
import statistics
import time

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=2048)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=10)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    x = torch.randn(a.size, a.size)
    y = torch.randn(a.size, a.size)
    out = torch.empty(a.size, a.size)
    torch.mm(x, y, out=out)
    times = []
    for _ in range(a.repeat):
        start = time.perf_counter()
        torch.mm(x, y, out=out)
        times.append(time.perf_counter() - start)
    flop = 2.0 * a.size ** 3
    print(json.dumps({
        "size": a.size, "threads": torch.get_num_threads(), "runs": a.repeat,
        "median_gflops": flop / statistics.median(times) / 1e9,
        "best_gflops": flop / min(times) / 1e9,
        **first_touch_gib_per_s(),
    }), flush=True)


def first_touch_gib_per_s(gib=0.5, repeat=3):
    """Median GiB/s of fill_ on fresh allocations and on an already touched one."""
    fresh, touched = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        block = torch.empty(int(gib * 2 ** 30) // 4)
        block.fill_(1.0)
        fresh.append(time.perf_counter() - start)
        start = time.perf_counter()
        block.fill_(2.0)
        touched.append(time.perf_counter() - start)
        del block
    return {"first_touch_gib_s": gib / statistics.median(fresh),
            "touched_fill_gib_s": gib / statistics.median(touched)}


if __name__ == "__main__":
    main()

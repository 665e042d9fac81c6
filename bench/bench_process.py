"""The benchmark drivers' child processes, in one place: the thread environment they run under, and
a run that gives back the child's output or says in one line why it failed (bench/train_compare.py,
bench/mlm_compare.py, bench/decode_*.py, bench/pruned_speed.py)."""
import json
import os
import statistics
import subprocess
import sys
import tempfile


def load_averages():
    """The 1, 5 and 15 minute load averages as the decoding tables print them: "1.09, 2.21, 1.58"."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def machine_isa():
    """The machine line of the decoding tables: CPU model, CPU count, its vector ISA (attnkit's
    kernels run their AVX-512 copy where avx512f is present, else AVX2) and the int8 / bf16
    extensions a peer's library may use (avx512_vnni, avx512_bf16, amx_int8)."""
    flags, model = set(), "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
            elif line.startswith("model name") and model == "?":
                model = line.split(":", 1)[1].strip()
    isa = "AVX-512 (avx512f)" if "avx512f" in flags else "AVX2, no avx512f" if "avx2" in flags else "no AVX2"
    extras = [f for f in ("avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8") if f in flags]
    return f"{model}, {os.cpu_count()} CPUs, {isa}" + (f" ({', '.join(extras)})" if extras else "")


def thread_env(threads, extra=None):
    """os.environ with OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = `threads`, then `extra` over it."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    env.update(extra or {})
    return env


def failure(p):
    """One line on why a finished child failed: its signal (the OOM killer's SIGKILL leaves nothing
    on stderr), else its last line of stderr."""
    if p.returncode < 0:
        return f"killed by signal {-p.returncode}" + (" (out of memory?)" if p.returncode == -9 else "")
    return (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1][:200]


def run_json(argv, timeout, env=None):
    """The child's last line of stdout as JSON, or {"error": one line} when it timed out or failed:
    a failed case is a row of the table, not the end of the run."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout} s"}
    if p.returncode != 0:
        return {"error": failure(p)}
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_or_exit(argv, who, env=None):
    """The child's stdout; a failure ends the driver (named `who`) with the command and the end of
    the child's stderr."""
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"{who}: {' '.join(argv)} failed ({failure(p)}):\n{p.stderr[-3000:]}")
    return p.stdout


def cached_test_eval(build, run, out, extra, who, checkpoint="best"):
    """`attnkit eval` of run's `checkpoint` on every example of its test split, made once: `extra(tmp)`
    adds the flags that write tmp (--items, or --paired-bs ... --json), which becomes `out`; an
    existing `out` is read instead. Returns out's JSON."""
    if not os.path.exists(out):
        tmp = out + ".tmp"
        run_or_exit([os.path.join(build, "attnkit"), "--threads", "1", "--quiet", "eval", "--run", run,
                     "--checkpoint", checkpoint, "--split", "test", "--examples", "0", *extra(tmp)], who)
        os.replace(tmp, out)
    with open(out) as f:
        return json.load(f)


def mean_sd(values):
    """Mean and sample standard deviation (0 for one value) of per-seed results."""
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def compare_items(build, a, b, who):
    """`attnkit compare` of two stored evaluations' items (the JSON objects `eval --items` wrote):
    the paired bootstrap of A - B (1,000 resamples, sacreBLEU's seed), no model needed. Returns
    {difference, low, high, verdict, items, a_score, b_score} (verdict "a", "b" or "level")."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = [os.path.join(tmp, name) for name in ("a.json", "b.json", "out.json")]
        for path, items in zip(paths, (a, b)):
            with open(path, "w") as f:
                json.dump(items, f)
        run_or_exit([os.path.join(build, "attnkit"), "--quiet", "compare", *paths[:2], "--json", paths[2]], who)
        with open(paths[2]) as f:
            p = json.load(f)
    d = p["difference"]
    return {"difference": d["score"], "low": d["low"], "high": d["high"], "verdict": p["verdict"],
            "items": p["items"], "a_score": p["a"]["score"], "b_score": p["b"]["score"]}


# Issue 44's rule for a speed verdict: "met" only when the ratio of every one of at least this many
# alternating rounds (attnkit, then the peer, round after round) is on the right side of the target.
VERDICT_ROUNDS = 5


def round_verdict(ours, theirs, target=1.0):
    """The verdict of paired per-round seconds (ours[i] and theirs[i] from round i): ("met" |
    "missed" | "not settled" | "too few rounds", min ratio, max ratio), ratio = theirs / ours (> 1:
    attnkit faster). Met: every round's ratio >= target; missed: every round's < target."""
    ratios = [t / o for o, t in zip(ours, theirs)]
    low, high = min(ratios), max(ratios)
    if len(ratios) < VERDICT_ROUNDS:
        return "too few rounds", low, high
    return ("met" if low >= target else "missed" if high < target else "not settled"), low, high


def ct2_target_line(row, what):
    """The docs' line of one decoding cell against issue 43's target (>= 1x CTranslate2): the ratio
    of the best times, the CPU-time ratio beside it, and where the row has per-round times
    (attnkit_rounds, ct2_rounds), the verdict of the rounds' spread (round_verdict); rows of older
    runs without them keep PASS / MISS of the best times."""
    ratio, cpu = row["ct2"] / row["attnkit"], row["ct2_cpu"] / row["attnkit_cpu"]
    if "attnkit_rounds" in row and "ct2_rounds" in row:
        verdict, low, high = round_verdict(row["attnkit_rounds"], row["ct2_rounds"])
        return (f"- target >= 1x CTranslate2 ({what}): best {ratio:.2f}x, rounds {low:.2f}x-{high:.2f}x "
                f"over {len(row['attnkit_rounds'])}: {verdict.upper()} (CPU time: {cpu:.2f}x)")
    return f"- target >= 1x CTranslate2 ({what}): {ratio:.2f}x {'PASS' if ratio >= 1 else 'MISS'} (CPU time: {cpu:.2f}x)"

"""Helpers of the scripts that train cells under `/usr/bin/time -v -o FILE` (bench/listops_seeds.py,
bench/lra_results.py, bench/pretrain_results.py, bench/pretrained_heads_results.py): the numbers of
its reports, the machine line of their tables, an atomic JSON write and the rewrite of a doc's
generated part (and its re-rendering from the JSON alone)."""
import json
import os
import platform
import re
import sys


def read_gnu_time(path):
    """CPU seconds (user + system), wall seconds and peak RSS (MiB) from /usr/bin/time -v's FILE;
    a FILE of several reports (`time -a`: a process and its resumptions) gives their sums of CPU
    and wall seconds and the largest peak."""
    text = open(path).read()
    cpu, wall, peak = 0.0, 0.0, 0.0
    reports = text.split("Command being timed")[1:] or [text]
    for report in reports:
        field = lambda name: re.search(re.escape(name) + r":\s*(\S+)", report).group(1)  # noqa: E731
        w = 0.0
        for part in field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":"):
            w = w * 60 + float(part)
        cpu += float(field("User time (seconds)")) + float(field("System time (seconds)"))
        wall += w
        peak = max(peak, int(field("Maximum resident set size (kbytes)")) / 1024)
    return cpu, wall, peak


def read_run_times(run):
    """CPU seconds, wall seconds and peak RSS (MiB) of a run directory's parts, RUN/time-N.txt (one
    per process that trained it: the first and each resume). An empty report is a part that was
    killed (the session ended) and resumed later: its training time is in the checkpoint's
    cpu_seconds, its process totals are lost."""
    cpu_total, wall_total, peak = 0.0, 0.0, 0.0
    for f in sorted(os.listdir(run)):
        if f.startswith("time-") and os.path.getsize(os.path.join(run, f)) > 0:
            c, w, p = read_gnu_time(os.path.join(run, f))
            cpu_total, wall_total, peak = cpu_total + c, wall_total + w, max(peak, p)
    return cpu_total, wall_total, peak


# A one-thread run that had the CPU for less than this share of its wall time shared its core with
# other processes: a CPU second there can buy fewer steps (the other processes' cache and memory
# traffic), so CPU-budgeted runs compare like for like only when they ran under the same load.
SHARED_CPU = 0.9


def cpu_share(record):
    """CPU seconds per wall second of a run's record (process_cpu_s / wall_s), None without them."""
    cpu, wall = record.get("process_cpu_s"), record.get("wall_s")
    return cpu / wall if cpu and wall else None


def shared_runs(shares):
    """"softmax 0.51, ..." of the runs, {name: cpu_share}, that shared their core; "" if none did."""
    return ", ".join(f"{name} {share:.2f}" for name, share in shares.items()
                     if share is not None and share < SHARED_CPU)


def machine():
    """The machine line of the cell tables: CPU model and core count."""
    model = ""
    try:
        model = re.search(r"^model name\s*:\s*(.+)$", open("/proc/cpuinfo").read(), re.M).group(1)
    except (OSError, AttributeError):
        pass
    return f"{model or platform.machine()}, {os.cpu_count()} cores (one thread per cell)"


def machine_isa():
    """machine() without the per-cell note, with the vector instructions the kernels use here
    (", AVX-512" or ", AVX2 only"): the line of experiments that ran with several threads."""
    isa = ", AVX-512" if "avx512f" in open("/proc/cpuinfo").read() else ", AVX2 only"
    return machine().replace(" (one thread per cell)", "") + isa


DATE_KEYS = ("date", "generated")


def write_json(path, value, indent=1):
    """Writes value as JSON (indented unless indent=None) to path through a temporary file and a
    rename (atomic). A dict equal to the file's but for its date ("date" or "generated") takes the
    file's date back (value is changed in place, before the caller renders its docs from it): a
    re-run that finds nothing new leaves the JSON and its docs as they were."""
    if isinstance(value, dict) and any(k in value for k in DATE_KEYS) and os.path.isfile(path):
        try:
            with open(path) as f:
                old = json.load(f)
        except (OSError, ValueError):
            old = None
        undated = lambda d: {k: v for k, v in d.items() if k not in DATE_KEYS}  # noqa: E731
        if isinstance(old, dict) and undated(old) == json.loads(json.dumps(undated(value))):
            value.update({k: old[k] for k in DATE_KEYS if k in old and k in value})
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=indent)
        f.write("\n")
    os.replace(tmp, path)


def replace_region(path, begin, end, block):
    """Writes `block` (which starts with `begin` and ends with `end`) over the part of the markdown
    file `path` between those markers, or appends it when the file has none (atomically)."""
    text = "# Results\n"
    if os.path.isfile(path):
        with open(path) as f:
            text = f.read()
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        after = rest.split(end, 1)[1].lstrip("\n")
        text = head + block + ("\n" + after if after else "")  # one blank line before what follows
    else:
        text = text.rstrip("\n") + "\n\n" + block
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def render_from_json(json_path, doc_path, begin, end, markdown, who):
    """--report-only of a driver: its region of doc_path re-rendered by markdown(JSON) from
    json_path; a one-line exit when no run has written that JSON yet."""
    if not os.path.exists(json_path):
        sys.exit(f"{who}: --report-only renders {os.path.relpath(json_path, os.path.dirname(os.path.dirname(doc_path)))}, "
                 "which no run has written yet")
    with open(json_path) as f:
        replace_region(doc_path, begin, end, markdown(json.load(f)))


def add_store_and_docs_arguments(ap, root, json_name, store_layout):
    """--store (finished runs' records under docs/cells/, kept in git), --docs and --report-only of
    an experiment driver that records its runs."""
    ap.add_argument("--store", default=os.path.join(root, "docs", "cells"),
                    help=f"finished runs' records, STORE/{store_layout} (kept in git)")
    ap.add_argument("--docs", default=os.path.join(root, "docs"), help=f"where {json_name} and results.md are")
    ap.add_argument("--report-only", action="store_true", help="re-render the docs from the JSON")


def results_driver_main(description, run_help, json_path, doc, begin, end, markdown, summarize, who):
    """main() of a results driver that summarizes a script's OUT folder (--run, with --build's
    attnkit) into json_path and doc's begin..end region, or re-renders the region from the JSON
    (--report-only)."""
    import argparse
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--run", help=run_help)
    p.add_argument("--build", default=os.path.join(root, "build"), help="the build with attnkit (default: build)")
    p.add_argument("--report-only", action="store_true", help=f"re-render docs from {os.path.relpath(json_path, root)}")
    args = p.parse_args()
    if args.report_only:
        render_from_json(json_path, doc, begin, end, markdown, who)
    elif args.run:
        summary = summarize(args.run, args.build)
        write_json(json_path, summary)
        replace_region(doc, begin, end, markdown(summary))
    else:
        p.error("--run (or --report-only)")
    print(f"{who}.py: wrote " + ("" if args.report_only else f"{os.path.relpath(json_path, root)} and ")
          + os.path.relpath(doc, root))


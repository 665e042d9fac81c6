"""The numbers of a `/usr/bin/time -v -o FILE` report, for the scripts that train under it
(bench/listops_results.py, bench/lra_results.py)."""
import re


def read_gnu_time(path):
    """CPU seconds (user + system), wall seconds and peak RSS (MiB) from /usr/bin/time -v's FILE."""
    text = open(path).read()
    field = lambda name: re.search(re.escape(name) + r":\s*(\S+)", text).group(1)  # noqa: E731
    wall = 0.0
    for part in field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":"):
        wall = wall * 60 + float(part)
    return (float(field("User time (seconds)")) + float(field("System time (seconds)")), wall,
            int(field("Maximum resident set size (kbytes)")) / 1024)

"""The thread-pool waiting settings attnkit's executables give themselves at start-up
(src/process_start.cpp: libgomp's and OpenBLAS's idle workers spin briefly, then sleep), for the
comparison scripts to give a peer where they compare like with like: compare.py gives them to
every process; train_compare.py and decode_compare.py to the peer of their like-for-like columns
only (elsewhere the peer runs as its users run it). A value already in the environment is kept."""

THREAD_WAIT = {"GOMP_SPINCOUNT": "10000", "OPENBLAS_THREAD_TIMEOUT": "16"}
# The libraries' own defaults, given explicitly (an attnkit executable keeps a value that is set):
# libgomp's documented spin count without OMP_WAIT_POLICY, OpenBLAS's compiled THREAD_TIMEOUT.
LIBRARY_DEFAULTS = {"GOMP_SPINCOUNT": "300000", "OPENBLAS_THREAD_TIMEOUT": "28"}


def with_thread_wait(env):
    """`env` (a dict) with the settings added where it has none (OMP_WAIT_POLICY counts for
    GOMP_SPINCOUNT, as in src/process_start.cpp); returns it."""
    if "GOMP_SPINCOUNT" not in env and "OMP_WAIT_POLICY" not in env:
        env["GOMP_SPINCOUNT"] = THREAD_WAIT["GOMP_SPINCOUNT"]
    env.setdefault("OPENBLAS_THREAD_TIMEOUT", THREAD_WAIT["OPENBLAS_THREAD_TIMEOUT"])
    return env

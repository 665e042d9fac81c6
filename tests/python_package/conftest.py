"""The Python package's tests (`make test-python`: builds attnkit into the pinned venv of
scripts/python_package_venv.sh, then runs pytest here). Fixed seeds, small shapes, one thread."""
import glob
import hashlib
import os
import tempfile

import pytest
import torch


def _inductor_cache_per_build():
    """torch.compile's on-disk caches (inductor's FX graph and AOTAutograd caches, default
    /tmp/torchinductor_<user>) key a graph on its ops' names, not on attnkit's kernels or fake
    kernels: a graph compiled against an earlier build of attnkit would be reused with that
    build's output strides and fail inductor's stride checks. One cache folder per build of the
    installed package (a hash of its files) keeps the compile tests honest. An explicit
    TORCHINDUCTOR_CACHE_DIR is left alone."""
    if "TORCHINDUCTOR_CACHE_DIR" in os.environ:
        return
    import attnkit
    digest = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(os.path.dirname(attnkit.__file__), "*"))):
        if os.path.isfile(path):
            with open(path, "rb") as f:
                digest.update(f.read())
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(
        tempfile.gettempdir(), f"attnkit-tests-inductor-{digest.hexdigest()[:16]}")


_inductor_cache_per_build()
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)

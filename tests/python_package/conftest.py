"""The Python package's tests (`make test-python`: builds attnkit into the pinned venv of
scripts/python_package_venv.sh, then runs pytest here). Fixed seeds, small shapes, one thread."""
import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)

import sys
from pathlib import Path

import pytest

import gptcore

# The helpers beside the tests (reference forward, fixture loading) import as plain modules.
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True)
def _restore_threads_and_kernel():
    """Every test leaves the thread count and the kernel as it found them."""
    n = gptcore.get_num_threads()
    yield
    gptcore.set_kernel(None)
    gptcore.set_num_threads(n)

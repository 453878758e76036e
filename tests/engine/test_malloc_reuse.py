"""engine.runtime.parallel.keep_freed_memory: once the runtime is loaded, an array the size of a net's big
activations reuses the memory a freed one left, instead of faulting fresh pages (the second run of a net
did: 7,550 faults); glibc's own environment settings win.  Each check runs in a fresh interpreter: malloc's
settings are per process and this one's heap has a history."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

PROBE = """
import resource, numpy as np
import engine.runtime.parallel as p
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
first = []
for _ in range(3):
    f = faults(); a = np.ones(6_000_000, np.float32); first.append(faults() - f); del a
print(p.KEPT_FREED_MEMORY, first[0], max(first[1:]))
"""


def _probe(**env: str) -> tuple[bool, int, int]:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT), **env}).stdout.split()
    return out[0] == "True", int(out[1]), int(out[2])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_freed_24_mb_array_is_reused_not_faulted_again():
    kept, first, again = _probe()
    assert kept and first > 0
    assert again * 4 < first, (first, again)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_glibc_environment_settings_win():
    kept, first, again = _probe(MALLOC_TRIM_THRESHOLD_="131072")
    assert not kept

"""Dead, foreign and wrong-kind C handles of every type: use after destroy, double destroy,
a stale handle whose address a new object took, a handle of another type, random pointers.
Each must be refused with INVALID_ARGUMENT, Destroy included (it returns the status and leaves
the handle alone). Each handle type runs in its own child process (handle_child.py), so a library that
touches freed memory shows up as a failed test naming the signal, not a dead test run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("handle_child.py")


@pytest.mark.parametrize("kind", ["tensor", "packed", "stream", "event", "kv", "model"])
def test_dead_and_foreign_handles_are_refused(kind):
    run = subprocess.run([sys.executable, str(CHILD), kind], capture_output=True, text=True, timeout=300,
                         env=os.environ.copy())
    if run.returncode < 0:
        pytest.fail(f"the child died of {signal.Signals(-run.returncode).name}:\n{run.stderr[-3000:]}")
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), f"rc {run.returncode}:\n{run.stderr[-3000:]}"

"""The worker's heap settings: a training-like step that frees and reallocates its activations stops
page-faulting them in again, and the memory goes back when a job ends."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="the heap settings are glibc's; elsewhere they are left alone",
)
# heavy: two fresh torch processes training a conv net each, minutes on two busy cores (the tuned one ran past
# 120 s in a full xdist run); pytest -m heavy runs them.
HEAVY = pytest.mark.heavy

# A small convolutional network's training steps (batch 64, 32x32) on a thread other than the main one, as the
# worker's job thread is. Page faults are counts, not times: no timing here.
STEPS = r"""
import json, resource, sys, threading
import torch
from workbench.worker.host_memory import keep_freed_memory, release_freed_memory

tuned = keep_freed_memory() if sys.argv[1] == "tuned" else False
out = {"tuned": tuned}
torch.manual_seed(0)
conv = lambda cin, cout: [torch.nn.Conv2d(cin, cout, 3, padding=1), torch.nn.BatchNorm2d(cout), torch.nn.ReLU()]
net = torch.nn.Sequential(*conv(3, 64), *conv(64, 64), torch.nn.MaxPool2d(2), *conv(64, 128),
                          torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(128, 10))
optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
x, y = torch.randn(64, 3, 32, 32), torch.randint(0, 10, (64,))

def steps():
    for step in range(10):
        if step == 3:  # after the first steps, which fault their memory in whatever the settings
            start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        torch.nn.functional.cross_entropy(net(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    out["faults"] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start

thread = threading.Thread(target=steps)
thread.start()
thread.join()
out["released"] = release_freed_memory()
print(json.dumps(out))
"""  # noqa: E501


def _run(mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", STEPS, mode], capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@HEAVY
def test_freed_activations_are_reused_instead_of_faulted_in_again():
    default, tuned = _run("default"), _run("tuned")
    assert tuned["tuned"] is True
    # glibc's defaults hand freed activations back and fault them in again, tens of thousands of pages in 7
    # steps
    assert default["faults"] > 20_000, default
    assert tuned["faults"] < default["faults"] / 5, (default, tuned)


@HEAVY
def test_a_finished_job_gives_the_kept_memory_back():
    assert _run("tuned")["released"] is True


def test_the_settings_are_applied_once_per_process():
    from workbench.worker.host_memory import keep_freed_memory

    # pytest has started threads of its own by now; the settings still apply (the arena rule only to new
    # threads)
    assert keep_freed_memory() is True
    assert keep_freed_memory() is True

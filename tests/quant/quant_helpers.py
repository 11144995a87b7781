"""What the quantization tests share besides their fixtures (a test module imports these; `from conftest
import` finds another folder's conftest when several test folders run in one process)."""

from __future__ import annotations

from event_recorder import Events  # noqa: F401 (re-exported for the tests)

# About 98.5 % test accuracy in 8 epochs; keep_best off so the run's checkpoint is the final model, not an
# earlier epoch's. A 25 % test split (449 samples, not the default 180) makes one sample 0.22 points, so
# "drops at most 0.5 points" is a statement about accuracy rather than about a single digit.
DIGITS_TRAIN = {
    "dataset": {"name": "digits", "test_fraction": 0.25},
    "model": {"name": "cnn"},
    "epochs": 8,
    "batch_size": 32,
    "lr": 2e-2,
    "scheduler": "onecycle",
    "keep_best": False,
}


def done(result: dict) -> dict:
    assert result["status"] == "done", (result.get("error"), result.get("traceback"))
    return result

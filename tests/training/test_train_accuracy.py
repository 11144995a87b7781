"""The end-to-end quality bar: the small cnn learns the real digits data to at least 97 % test accuracy."""

from __future__ import annotations

import pytest
from training_helpers import done, train


@pytest.mark.slow
def test_cnn_on_digits_reaches_97_percent_in_8_epochs(tmp_path):
    spec = {
        "dataset": {"name": "digits"},
        "model": {"name": "cnn"},
        "epochs": 8,
        "batch_size": 32,
        "lr": 1e-2,
        "scheduler": "onecycle",
    }
    result = done(train(tmp_path, spec))
    assert result["epochs_completed"] == 8
    assert result["final"]["test_accuracy"] >= 0.97, result["final"]

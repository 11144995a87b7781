"""`data info` and the training log agree on how many training samples an image folder has, unreadable files
left out of both (they used to disagree: the log counted files, info counted images)."""

from __future__ import annotations

import re

import numpy as np
from PIL import Image
from training_helpers import Recorder

from workbench.worker.registry import get_task
from workbench.worker.runner import run_task


def _folder(root):
    rng = np.random.default_rng(0)
    for label in ("cat", "dog"):
        (root / label).mkdir(parents=True)
        for i in range(13):
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(root / label / f"{i}.png")
    (root / "cat" / "broken.png").write_bytes(b"not an image")
    (root / "dog" / "broken.png").write_bytes(b"garbage")


def test_info_and_the_training_log_count_the_same_training_samples(tmp_path):
    _folder(tmp_path / "images")
    dataset = {"name": "imagefolder", "root": str(tmp_path / "images")}
    info = run_task(get_task("data.info"), {"dataset": dataset}, emit=lambda *a: None, workspace=tmp_path)
    assert info["status"] == "done", info.get("error")
    events = Recorder()
    trained = run_task(
        get_task("train.classifier"),
        {"dataset": dataset, "model": {"name": "mlp", "num_classes": 2}, "epochs": 1},
        emit=events,
        workspace=tmp_path,
    )
    assert trained["status"] == "done", trained.get("error")
    logged = next(e["text"] for e in events.of("log") if "training samples" in e["text"])
    count = int(re.search(r"([\d,]+) training samples", logged)[1].replace(",", ""))
    assert count == info["num_samples"]["train"]
    assert sum(info["num_samples"].values()) == 26  # the two broken files are in no split's count

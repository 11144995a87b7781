"""The Data tab's worker queries on a user's own Dataset (issue #20): data.page thumbnails with masks blended
in or a table of tensor summaries, data.sample, and data.info's `tasks` and `target_histogram` (built-in sets
too).

In-process: each test writes its own tiny dataset file and calls the real tasks through run_task.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from data_helpers import Recorder

from workbench.worker.data.user_views import PALETTE
from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

HEADER = """\
import torch
from torch.utils.data import Dataset
"""

SEGMENTATION = """
class Squares(Dataset):
    classes = ["background", "square", "bar"]

    def __len__(self):
        return 10

    def __getitem__(self, i):
        image = torch.full((1, 16, 16), 0.5)
        mask = torch.zeros(16, 16, dtype=torch.int64)
        mask[2:8, 2:8] = 1          # a square of class 1 at the top left
        mask[12:14, :] = 2          # a bar of class 2 near the bottom
        return image, mask
"""

TABULAR = """
class Rows(Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, i):
        features = torch.arange(5, dtype=torch.float32) + i   # i .. i+4
        labels = torch.tensor([i % 2, 1, 0], dtype=torch.int64)
        return {"input": (features, torch.zeros(2, 3)), "target": labels}
"""

REGRESSION = """
class Line(Dataset):
    def __len__(self):
        return 40

    def __getitem__(self, i):
        return torch.tensor([float(i), 1.0]), torch.tensor(i / 10.0)
"""

BROKEN = """
class Fragile(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5:
            raise ValueError("sample five is corrupt")
        return torch.zeros(3, 4, 4), i % 2
"""


def write(tmp_path, body: str, name: str = "userdata.py"):
    path = tmp_path / name
    path.write_text(HEADER + textwrap.dedent(body))
    return path


def run(tmp_path, task: str, spec: dict) -> dict:
    result = run_task(get_task(task), spec, emit=Recorder(), workspace=tmp_path)
    assert result["status"] == "done", result.get("error")
    return result


def dataset(path, attr: str, **fields) -> dict:
    # No carving: every sample stays in train, so indices are the user's own.
    return {
        "name": f"file:{path}:{attr}",
        "num_workers": 0,
        "val_fraction": 0.0,
        "test_fraction": 0.0,
        **fields,
    }


def test_segmentation_page_blends_mask_colours_into_thumbnails(tmp_path):
    path = write(tmp_path, SEGMENTATION)
    page = run(tmp_path, "data.page", {"dataset": dataset(path, "Squares"), "count": 4, "thumb_size": 64})
    assert page["view"] == "images" and page["total"] == 10 and page["indices"] == [0, 1, 2, 3]
    images = page["images"]
    assert images.dtype == np.uint8 and images.shape == (4, 16, 16, 3)  # grey made RGB for the colours
    grey = round(0.5 * 255)
    assert tuple(images[0, 0, 0]) == (grey, grey, grey)  # background (class 0) keeps the image
    square = np.round(0.5 * grey + 0.5 * PALETTE[1]).astype(np.uint8)
    bar = np.round(0.5 * grey + 0.5 * PALETTE[2]).astype(np.uint8)
    assert tuple(images[0, 4, 4]) == tuple(square) and tuple(images[0, 12, 5]) == tuple(bar)
    assert tuple(square) != tuple(bar)
    assert page["masks"].shape == (4, 16, 16) and page["masks"][0, 4, 4] == 1 and page["masks"][0, 13, 0] == 2
    assert page["labels"] == [-1] * 4 and page["captions"][0] == "square, bar"
    small = run(tmp_path, "data.page", {"dataset": dataset(path, "Squares"), "count": 2, "thumb_size": 8})
    assert small["images"].shape == (2, 8, 8, 3)
    assert small["masks"][0, 2, 2] == 1  # nearest-neighbour: a class id stays a class id


def test_segmentation_sample_info_tasks_and_pixel_histogram(tmp_path):
    path = write(tmp_path, SEGMENTATION)
    sample = run(tmp_path, "data.sample", {"dataset": dataset(path, "Squares"), "index": 3})
    assert sample["view"] == "images" and sample["user"] is True
    assert sample["image"].shape == (16, 16, 3) and sample["mask"].shape == (16, 16)
    assert [c["name"] for c in sample["mask_classes"]] == ["square", "bar"]
    assert sample["inputs"][0]["shape"] == [1, 16, 16] and sample["target"]["dtype"] == "int64"
    info = run(tmp_path, "data.info", {"dataset": dataset(path, "Squares")})
    tasks = info["tasks"]
    assert tasks["auto"] == "segmentation" and "16×16" in tasks["why"]
    assert set(tasks["unavailable"]) == {"classification", "multilabel", "regression", "detection"}
    assert "task=classification" in tasks["unavailable"]["classification"]
    histogram = info["target_histogram"]
    assert histogram["kind"] == "pixels" and histogram["names"] == ["background", "square", "bar"]
    per_image = [16 * 16 - 36 - 32, 36, 32]
    assert histogram["counts"] == [10 * n for n in per_image] and histogram["sampled"] == 10
    assert info["view"] == "images"


def test_tabular_multilabel_page_is_a_table_with_ranges(tmp_path):
    path = write(tmp_path, TABULAR)
    page = run(tmp_path, "data.page", {"dataset": dataset(path, "Rows"), "offset": 3, "count": 2})
    assert page["view"] == "table" and "images" not in page and page["indices"] == [3, 4]
    row = page["rows"][0]
    assert row["index"] == 3
    features, zeros = row["inputs"]
    assert features["shape"] == [5] and features["dtype"] == "float32"
    assert (features["min"], features["max"], features["mean"]) == (3.0, 7.0, 5.0)
    assert zeros["shape"] == [2, 3] and zeros["max"] == 0.0 and zeros["name"] == "input 1"
    assert row["target"]["shape"] == [3] and row["target"]["text"] == "[1, 1, 0]"
    info = run(tmp_path, "data.info", {"dataset": dataset(path, "Rows")})
    assert info["tasks"]["auto"] == "multilabel" and info["view"] == "table"
    assert "segmentation" in info["tasks"]["unavailable"] and "multilabel" not in info["tasks"]["unavailable"]
    histogram = info["target_histogram"]
    assert histogram["kind"] == "labels" and histogram["counts"] == [6, 12, 0]
    assert histogram["names"] == ["0", "1", "2"]
    sample = run(tmp_path, "data.sample", {"dataset": dataset(path, "Rows"), "index": 2})
    assert sample["view"] == "table" and "image" not in sample and len(sample["inputs"]) == 2


def test_regression_values_histogram_is_bounded_and_reports_progress(tmp_path):
    path = write(tmp_path, REGRESSION)
    recorder = Recorder()
    info = run_task(
        get_task("data.info"), {"dataset": dataset(path, "Line")}, emit=recorder, workspace=tmp_path
    )
    assert info["status"] == "done", info.get("error")
    assert info["tasks"]["auto"] == "regression" and "float" in info["tasks"]["why"]
    assert set(info["tasks"]["unavailable"]) == {"classification", "multilabel", "segmentation", "detection"}
    histogram = info["target_histogram"]
    assert histogram["kind"] == "values" and histogram["sampled"] == 40 and sum(histogram["counts"]) == 40
    assert histogram["edges"][0] == 0.0 and histogram["edges"][-1] == pytest.approx(3.9)
    assert len(histogram["edges"]) == len(histogram["counts"]) + 1
    assert any("reading the targets" in p.get("text", "") for p in recorder.of("progress"))


def test_builtin_set_gets_tasks_and_class_histogram(tmp_path):
    info = run(tmp_path, "data.info", {"dataset": {"name": "digits"}})
    assert info["tasks"]["auto"] == "classification"
    assert set(info["tasks"]["unavailable"]) == {"multilabel", "regression", "segmentation", "detection"}
    assert all(reason for reason in info["tasks"]["unavailable"].values())
    histogram = info["target_histogram"]
    assert histogram["kind"] == "classes" and histogram["counts"] == info["class_counts"]["train"]
    assert histogram["sampled"] == info["num_samples"]["train"]
    page = run(tmp_path, "data.page", {"dataset": {"name": "digits"}, "count": 3})
    assert "view" not in page and page["images"].shape == (3, 8, 8, 1)  # the built-in page is unchanged


def test_failing_getitem_gives_the_datasets_clear_message(tmp_path):
    path = write(tmp_path, BROKEN)
    spec = {"dataset": dataset(path, "Fragile"), "offset": 0, "count": 8}
    result = run_task(get_task("data.page"), spec, emit=Recorder(), workspace=tmp_path)
    assert result["status"] == "failed"
    message = result["error"]["message"]
    assert "sample 5 of the train split failed: ValueError: sample five is corrupt" in message
    assert f"{path}, line" in message and "\n" not in message and "traceback" not in result
    sample = run_task(
        get_task("data.sample"),
        {"dataset": dataset(path, "Fragile"), "index": 5},
        emit=Recorder(),
        workspace=tmp_path,
    )
    assert sample["status"] == "failed" and "sample five is corrupt" in sample["error"]["message"]
    fine = run(tmp_path, "data.page", {"dataset": dataset(path, "Fragile"), "count": 5})
    assert (
        fine["view"] == "images"
        and fine["images"].shape == (5, 4, 4, 3)
        and fine["labels"] == [0, 1, 0, 1, 0]
    )
    refused = run_task(
        get_task("data.page"),
        {"dataset": dataset(path, "Fragile"), "label": 1},
        emit=Recorder(),
        workspace=tmp_path,
    )
    assert refused["status"] == "failed" and refused["error"]["message"].startswith("label:")

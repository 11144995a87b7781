"""The data tasks (`data.info`, `data.page`, `data.sample`) through run_task, the real worker subprocess and
the `workbench data info` command: the result shapes the GUI's dataset panel relies on."""

from __future__ import annotations

import json
import os
import subprocess
import threading

import numpy as np
import pytest
from cli_runner import run_cli
from data_helpers import Recorder, add_bad_files, make_image_folder

from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

INFO_KEYS = {
    "dataset",
    "classes",
    "num_samples",
    "class_counts",
    "sample_shape",
    "mean",
    "std",
    "skipped_files",
    "in_memory",
    "root",
}
PAGE_KEYS = {"request_id", "split", "offset", "total", "indices", "labels", "images"}
SAMPLE_KEYS = {
    "index",
    "split",
    "label",
    "class_name",
    "shape",
    "image",
    "augmented",
    "histogram",
    "path",
    "mean",
    "std",
}
TRACEBACK = "Traceback (most recent call last)"


def run(task: str, spec: dict, workspace, recorder: Recorder | None = None) -> dict:
    return run_task(get_task(task), spec, emit=recorder or Recorder(), workspace=workspace)


def done(result: dict) -> dict:
    assert result["status"] == "done", result.get("error")
    return result


def failed(result: dict) -> str:
    assert result["status"] == "failed", result
    assert "traceback" not in result  # an expected failure, reported as a JobError or SpecError
    return result["error"]["message"]


# -- data.info --------------------------------------------------------------------------------------


def test_info_on_digits_has_every_key_and_consistent_counts(tmp_path):
    result = done(run("data.info", {"dataset": {"name": "digits", "seed": 1}}, tmp_path))
    assert INFO_KEYS <= set(result)
    assert result["dataset"] == "digits" and result["classes"] == [str(i) for i in range(10)]
    assert result["sample_shape"] == [1, 8, 8]
    assert set(result["num_samples"]) == set(result["class_counts"]) == {"train", "val", "test"}
    for split, counts in result["class_counts"].items():
        assert len(counts) == 10 and sum(counts) == result["num_samples"][split]
    assert sum(result["num_samples"].values()) == 1797
    assert len(result["mean"]) == len(result["std"]) == 1 and 0 < result["mean"][0] < 1
    assert result["skipped_files"] == [] and result["in_memory"] is True and result["root"] == ""
    json.dumps(result)  # plain JSON: the command line prints it as it is


def test_info_on_an_image_folder_decodes_everything_and_reports_progress(tmp_path):
    root = tmp_path / "pets"
    make_image_folder(root, per_class=4)
    corrupt, empty = add_bad_files(root, "dog")
    recorder = Recorder()
    result = done(
        run("data.info", {"dataset": {"name": "imagefolder", "root": str(root)}}, tmp_path, recorder)
    )
    assert {item["path"] for item in result["skipped_files"]} == {str(corrupt), str(empty)}
    assert all(item["reason"] for item in result["skipped_files"])
    assert sum(result["num_samples"].values()) == 12  # the two bad files are not counted
    assert sum(sum(c) for c in result["class_counts"].values()) == 12
    assert result["root"] == str(root) and result["sample_shape"] == [3, 12, 10]
    assert len(result["mean"]) == 3
    progress = recorder.of("progress")
    assert progress and any("decoding" in p["text"] for p in progress)
    assert progress[-1]["fraction"] == pytest.approx(1.0)


def test_info_on_a_missing_folder_fails_with_a_message_naming_it(tmp_path):
    missing = tmp_path / "nowhere"
    message = failed(run("data.info", {"dataset": {"name": "imagefolder", "root": str(missing)}}, tmp_path))
    assert str(missing) in message


# -- data.page --------------------------------------------------------------------------------------


def test_page_pages_filters_by_label_and_echoes_the_request(tmp_path):
    base = {"dataset": {"name": "digits"}, "split": "train", "count": 10, "request_id": 41}
    first = done(run("data.page", {**base, "offset": 0}, tmp_path))
    assert PAGE_KEYS <= set(first)
    assert first["request_id"] == 41 and first["split"] == "train" and first["offset"] == 0
    assert first["total"] == 1437 and first["indices"] == list(range(10))
    images = first["images"]
    assert isinstance(images, np.ndarray) and images.dtype == np.uint8 and images.shape == (10, 8, 8, 1)
    second = done(run("data.page", {**base, "offset": 10}, tmp_path))
    assert second["indices"] == list(range(10, 20))
    assert not np.array_equal(second["images"], images)

    info = done(run("data.info", {"dataset": {"name": "digits"}}, tmp_path))
    threes = done(run("data.page", {**base, "label": 3, "count": 500}, tmp_path))
    assert threes["total"] == info["class_counts"]["train"][3] == len(threes["indices"])
    assert set(threes["labels"]) == {3}
    tail = done(run("data.page", {**base, "label": 3, "offset": threes["total"] - 2}, tmp_path))
    assert tail["indices"] == threes["indices"][-2:]
    past = done(run("data.page", {**base, "offset": 5000}, tmp_path))
    assert past["indices"] == [] and past["images"].shape == (0, 8, 8, 1) and past["total"] == 1437


def test_page_downscales_big_images_to_the_thumbnail_size(tmp_path):
    root = tmp_path / "big"
    make_image_folder(root, classes=("a", "b"), per_class=3, size=(96, 96))
    spec = {
        "dataset": {"name": "imagefolder", "root": str(root), "val_fraction": 0, "test_fraction": 0},
        "split": "train",
        "offset": 0,
        "count": 6,
    }
    small = done(run("data.page", {**spec, "thumb_size": 32}, tmp_path))
    assert small["images"].shape == (6, 32, 32, 3) and small["images"].dtype == np.uint8
    native = done(run("data.page", {**spec, "thumb_size": 128}, tmp_path))
    assert native["images"].shape == (6, 96, 96, 3)
    # Antialiased: a thumbnail's mean is close to its image's mean, as a box filter would give.
    assert abs(float(small["images"].mean()) - float(native["images"].mean())) < 3


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"split": "training"}, "split"),
        ({"offset": -1}, "offset"),
        ({"count": "ten"}, "count"),
        ({"label": 10}, "label"),
        ({"thumb_size": 0}, "thumb_size"),
        ({"colour": "red"}, "colour"),
        ({"dataset": {"name": "digits", "seed": -3}}, "dataset.seed"),
    ],
)
def test_page_rejects_bad_requests_naming_the_field(tmp_path, change, field):
    spec = {"dataset": {"name": "digits"}, "split": "train", "offset": 0, "count": 4, **change}
    assert failed(run("data.page", spec, tmp_path)).startswith(f"{field}:")


# -- data.sample ------------------------------------------------------------------------------------


def test_sample_has_every_key_a_histogram_and_the_augmented_image(tmp_path):
    spec = {"dataset": {"name": "digits"}, "split": "val", "index": 7, "augment_seed": 3}
    result = done(run("data.sample", spec, tmp_path))
    assert SAMPLE_KEYS <= set(result)
    assert result["index"] == 7 and result["split"] == "val" and result["path"] == ""
    assert result["class_name"] == str(result["label"]) and result["shape"] == [1, 8, 8]
    image, augmented = result["image"], result["augmented"]
    assert image.shape == (8, 8, 1) and image.dtype == np.uint8
    assert np.array_equal(augmented, image)  # no augment steps
    edges, counts = result["histogram"]["edges"], result["histogram"]["counts"]
    assert edges.shape == (33,) and edges.dtype == np.float32 and edges[0] == 0 and edges[-1] == 256
    assert counts.shape == (1, 32) and counts.dtype == np.int64 and counts.sum(axis=1).tolist() == [64]
    assert counts[0, 0] == int((image < 8).sum())

    spec["dataset"]["augment"] = [{"name": "rotation", "degrees": [30, 60]}]
    rotated = done(run("data.sample", spec, tmp_path))
    assert np.array_equal(rotated["image"], image) and not np.array_equal(rotated["augmented"], image)
    assert np.array_equal(done(run("data.sample", spec, tmp_path))["augmented"], rotated["augmented"])
    other_seed = done(run("data.sample", {**spec, "augment_seed": 4}, tmp_path))
    assert not np.array_equal(other_seed["augmented"], rotated["augmented"])


def test_sample_of_an_image_folder_gives_its_path_and_names_a_broken_file(tmp_path):
    root = tmp_path / "pets"
    paths = make_image_folder(root, classes=("a", "b"), per_class=2, size=(20, 30))
    corrupt, _ = add_bad_files(root, "a")
    dataset = {"name": "imagefolder", "root": str(root), "val_fraction": 0, "test_fraction": 0}
    listed = sorted(map(str, paths + [corrupt, root / "a" / "empty.jpg"]))
    results = {}
    for index in range(6):
        result = run("data.sample", {"dataset": dataset, "split": "train", "index": index}, tmp_path)
        results[index] = result
    good = [r for r in results.values() if r["status"] == "done"]
    assert len(good) == 4 and all(r["path"] in listed and r["image"].shape == (20, 30, 3) for r in good)
    assert all(r["histogram"]["counts"].sum(axis=1).tolist() == [600] * 3 for r in good)
    bad = [failed(r) for r in results.values() if r["status"] != "done"]
    assert any(str(corrupt) in message for message in bad) and len(bad) == 2
    assert failed(
        run("data.sample", {"dataset": dataset, "split": "train", "index": 6}, tmp_path)
    ).startswith("index:")


# -- the real worker process --------------------------------------------------------------------------


@pytest.mark.slow
def test_thumbnail_paging_through_the_real_worker(tmp_path):
    from workbench.client import WorkerManager
    from workbench.protocol import array_from_buffer

    replies: dict[str, object] = {}
    arrived = threading.Condition()

    def listen(kind, payload):
        if kind == "message" and payload.msg_type == "job_reply":
            with arrived:
                replies[payload.parent_id] = payload
                arrived.notify_all()

    def ask(spec: dict):
        record = manager.submit("data.page", spec, workspace=tmp_path, internal=True)
        with arrived:
            assert arrived.wait_for(lambda: record.job_id in replies, timeout=60), "no job_reply"
            return replies[record.job_id]

    manager = WorkerManager(runtime_dir=tmp_path / "runtime", start_timeout=60)
    manager.add_listener(listen)
    try:
        assert manager.start(), manager.detail
        spec = {
            "dataset": {"name": "digits"},
            "split": "test",
            "offset": 0,
            "count": 50,
            "label": -1,
            "thumb_size": 64,
            "request_id": 7,
        }
        msg = ask(spec)
        assert msg.content["status"] == "done" and msg.content["request_id"] == 7
        images = array_from_buffer(msg.content["images"], msg.buffers)
        assert images.shape == (50, 8, 8, 1) and images.dtype == np.uint8 and images.any()
        assert msg.content["total"] == 180 and len(msg.content["indices"]) == 50

        bad = ask({**spec, "split": "nope"})
        assert bad.content["status"] == "failed" and bad.content["error"]["message"].startswith("split:")
        assert "traceback" not in bad.content

        again = ask({**spec, "offset": 50, "request_id": 8})  # the worker is still up and answering
        assert again.content["status"] == "done" and again.content["indices"] == list(range(50, 100))
        assert array_from_buffer(again.content["images"], again.buffers).shape == (50, 8, 8, 1)
        assert manager.state == "ready" and manager.process.poll() is None
    finally:
        manager.shutdown()


# -- the command line -------------------------------------------------------------------------------


def workbench(tmp_path, *args: str) -> subprocess.CompletedProcess:
    argv = ["data", "info", *args, "--json", "--workspace", str(tmp_path)]
    return run_cli(argv, cwd=os.getcwd(), env=os.environ, timeout=120)


@pytest.mark.slow
def test_cli_data_info_prints_the_info_as_json(tmp_path):
    proc = workbench(tmp_path, "--set", "dataset.name=digits")
    assert proc.returncode == 0, proc.stderr
    assert TRACEBACK not in proc.stderr
    result = json.loads(proc.stdout)
    assert INFO_KEYS <= set(result) and result["status"] == "done"
    assert sum(result["num_samples"].values()) == 1797
    assert list((tmp_path / "cache").glob("data-stats-*.json"))  # the statistics are cached in the workspace


@pytest.mark.slow
def test_cli_data_info_on_a_missing_folder_fails_cleanly(tmp_path):
    missing = tmp_path / "no-such-folder"
    proc = workbench(tmp_path, "--set", "dataset.name=imagefolder", "--set", f"dataset.root={missing}")
    assert proc.returncode == 1
    assert TRACEBACK not in proc.stderr + proc.stdout
    result = json.loads(proc.stdout)
    assert result["status"] == "failed" and result["error"]["type"] == "JobError"
    assert str(missing) in result["error"]["message"] and "does not exist" in result["error"]["message"]

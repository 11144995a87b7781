"""Detection through `workbench train`: a synthetic COCO set (PNGs and an instances JSON with category ids
that are not 1..K), torchvision's fasterrcnn_mobilenet_v3_large_320_fpn with model.args, the detector's loss
components per epoch, and a test mAP that pycocotools computes again, to 1e-3, from the two COCO files the run
saves. Real torch, torchvision and pycocotools; the real CLI."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import pytest
from cli_runner import run_cli

from workbench.worker.data.detection.synthetic import write_shapes_coco

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]

SPEC = """
epochs = 2
batch_size = 4
lr = 0.01
optimizer = "sgd"
momentum = 0.9
[dataset]
name = "coco"
root = "{root}"
annotations = "{annotations}"
val_fraction = 0.15
test_fraction = 0.25
[model]
name = "torchvision:fasterrcnn_mobilenet_v3_large_320_fpn"
args = {{min_size = 128, max_size = 128}}
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("det")
    images, annotations = write_shapes_coco(root / "data", 40, seed=0, category_ids=(3, 7, 11))
    spec = root / "spec.toml"
    spec.write_text(SPEC.format(root=images, annotations=annotations))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = run_cli(
        ["train", str(spec), "--workspace", str(root / "ws"), "--json"], cwd=ROOT, env=env, timeout=400
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def _pycocotools_map(folder: Path) -> float:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        truth = COCO(str(folder / "ground_truth_test.json"))
        found = truth.loadRes(str(folder / "predictions_test.json"))
        run = COCOeval(truth, found, "bbox")
        run.evaluate()
        run.accumulate()
        run.summarize()
    return float(run.stats[0])


def test_the_reported_test_map_is_what_pycocotools_computes_from_the_saved_files(trained):
    result, _ = trained
    assert result["status"] == "done" and result["task"] == "detection"
    assert result["monitor"]["name"] == "map" and result["monitor"]["label"] == "mAP"
    folder = Path(result["run_dir"]) / "artifacts"
    predictions = json.loads((folder / "predictions_test.json").read_text())
    truth = json.loads((folder / "ground_truth_test.json").read_text())
    assert predictions and {p["category_id"] for p in predictions} <= {3, 7, 11}  # the file's own ids
    assert [c["id"] for c in truth["categories"]] == [3, 7, 11]
    assert len(truth["images"]) == 10 and all(
        a["iscrowd"] == 0 and a["area"] > 0 for a in truth["annotations"]
    )
    assert result["monitor"]["test"] == pytest.approx(_pycocotools_map(folder), abs=1e-3)
    assert set(result["final"]["test_metrics"]) == {"map", "map_50", "map_75", "mar_100"}


def test_the_spec_and_the_curves_say_what_was_trained(trained):
    result, err = trained
    run = Path(result["run_dir"])
    spec = (run / "spec.toml").read_text()
    assert 'task = "detection"' in spec and "num_classes = 4" in spec  # 3 shapes and the background
    assert "loss_classifier" in err and "loss_rpn_box_reg" in err and "val mAP" in err
    evaluation = json.loads((run / "evaluation.json").read_text())
    assert evaluation["task"] == "detection" and evaluation["monitor"]["name"] == "map"
    assert [row["class"] for row in evaluation["per_class"]] == ["square", "circle", "triangle"]
    assert len(evaluation["pr"]["circle"]["recall"]) == 101 == len(evaluation["pr"]["circle"]["precision"])
    first = evaluation["images"][0]
    assert {"true", "pred", "missed", "false_positives", "width", "height"} <= set(first)
    assert set(evaluation["worst_missed"]) <= set(range(len(evaluation["images"])))

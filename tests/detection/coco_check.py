"""The detection tests' independent check: pycocotools' own COCOeval on the two COCO files a run saved."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path


def pycocotools_map(folder: Path) -> float:
    """mAP@[.5:.95] by pycocotools from folder's ground_truth_test.json and predictions_test.json."""
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

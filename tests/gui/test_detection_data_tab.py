"""The Data tab on a COCO detection set, with the real worker: its summary and objects per class, thumbnails
with the boxes drawn in, and one image large with its boxes and their class names."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.specs import DataSpec
from workbench.worker.data.detection.synthetic import write_shapes_coco


@pytest.mark.slow
def test_the_data_tab_shows_a_coco_set_with_its_boxes(qtbot, real_window, tmp_path):
    images, annotations = write_shapes_coco(tmp_path / "coco", 12, seed=3)
    window = real_window
    window.show_tab(window.dataset_panel)
    panel = window.dataset_panel
    qtbot.waitUntil(lambda: panel.info is not None, timeout=60_000)
    panel.state.set_spec(
        DataSpec.from_dict({"name": "coco", "root": str(images), "annotations": str(annotations)})
    )
    qtbot.waitUntil(lambda: panel.info is not None and panel.info.get("dataset") == "coco", timeout=60_000)
    info = panel.info
    assert info["classes"] == ["square", "circle", "triangle"] and info["tasks"]["auto"] == "detection"
    assert sum(info["detection"]["objects_per_class"].values()) == info["detection"]["boxes"] > 0
    qtbot.waitUntil(lambda: 0 in panel.model.cached_pages, timeout=60_000)
    thumbnail = panel.model.image_at(0)
    assert thumbnail.width() == thumbnail.height() > 0
    panel.request_sample("train", 0)
    qtbot.waitUntil(
        lambda: panel.sample_view.result is not None and "boxes" in panel.sample_view.result, timeout=30_000
    )
    result = panel.sample_view.result
    assert result["boxes"]["boxes"] and "box(es)" in result["class_name"]
    drawn = np.asarray(result["image"])
    assert drawn.shape[0] >= 128 and drawn.shape[2] == 3
    if __import__("os").environ.get("WB_SHOT"):
        window.grab().save(__import__("os").environ["WB_SHOT"])

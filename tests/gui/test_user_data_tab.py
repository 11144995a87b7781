"""The Data tab on a user's own Dataset (issue #20), against the fake worker over the real protocol:
thumbnails with masks overlaid or a table of tensor summaries, the target histogram, and the dialog's "Python
file…" choice.

The fake worker's data tasks answer a file: dataset with data.info/data.page/data.sample in the shapes the
real worker gives (tests/data/test_user_views.py checks the real ones); built-in names go to the usual fakes.
"""

from __future__ import annotations

import numpy as np
import pytest
from fake_worker import FakeWorker, _fake_info, _fake_page, _fake_sample
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox

from workbench.client import WorkerManager
from workbench.gui.main_window import MainWindow
from workbench.gui.panels.data.dataset_dialog import USER_FILE, DatasetDialog
from workbench.gui.panels.data.thumbnails import INDEX_ROLE
from workbench.specs import DataSpec
from workbench.worker.registry import TaskInfo

SQUARE = (200, 40, 40)  # the colour the fake "worker" blends class 1 in


def _tasks(auto, why, unavailable):
    return {"auto": auto, "why": why, "unavailable": unavailable}


def _is_table(spec) -> bool:
    return spec["dataset"]["name"].endswith(":Rows")


def fake_info(spec, ctx):
    name = spec["dataset"].get("name", "digits")
    if not name.startswith("file:"):
        return _fake_info(spec, ctx)
    table = _is_table(spec)
    return {
        "dataset": name,
        "classes": [],
        "num_samples": {"train": 30, "val": 5, "test": 5},
        "class_counts": {"train": [30], "val": [5], "test": [5]},
        "sample_shape": [5] if table else [1, 16, 16],
        "input_dtype": "float32",
        "inputs": None,
        "target": "float32 tensor of shape []" if table else "int64 tensor of shape [16, 16]",
        "target_shape": [] if table else [16, 16],
        "target_dtype": "float32" if table else "int64",
        "mean": None,
        "std": None,
        "skipped_files": [],
        "in_memory": False,
        "root": "/x/data.py",
        "workers": "",
        "view": "table" if table else "images",
        "tasks": (
            _tasks(
                "regression",
                "the target is a float scalar (values to predict)",
                {"classification": "no", "multilabel": "no", "segmentation": "no"},
            )
            if table
            else _tasks(
                "segmentation",
                "the target is an int64 map of 16×16, the input's spatial size",
                {"classification": "no", "multilabel": "no", "regression": "no"},
            )
        ),
        "target_histogram": (
            {
                "kind": "values",
                "names": [],
                "counts": [3, 10, 17],
                "edges": [0.0, 1.0, 2.0, 3.0],
                "sampled": 30,
                "total": 30,
            }
            if table
            else {
                "kind": "pixels",
                "names": ["background", "square", "bar"],
                "counts": [5000, 1080, 600],
                "sampled": 30,
                "total": 30,
            }
        ),
    }


def fake_page(spec, ctx):
    name = spec["dataset"].get("name", "digits")
    if not name.startswith("file:"):
        return _fake_page(spec, ctx)
    total = 30
    indices = list(range(spec["offset"], min(total, spec["offset"] + spec["count"])))
    result = {
        "request_id": spec.get("request_id", 0),
        "split": spec["split"],
        "offset": spec["offset"],
        "total": total,
        "indices": indices,
        "labels": [-1] * len(indices),
        "captions": [f"value {i / 10:.1f}" for i in indices],
    }
    if _is_table(spec):
        result["view"] = "table"
        result["rows"] = [
            {
                "index": i,
                "inputs": [
                    {
                        "shape": [5],
                        "dtype": "float32",
                        "min": float(i),
                        "max": float(i + 4),
                        "mean": float(i + 2),
                    }
                ],
                "target": {
                    "shape": [],
                    "dtype": "float32",
                    "min": i / 10,
                    "max": i / 10,
                    "mean": i / 10,
                    "text": f"{i / 10:.4g}",
                },
            }
            for i in indices
        ]
        return result
    images = np.full((len(indices), 16, 16, 3), 128, dtype=np.uint8)
    images[:, 2:8, 2:8] = SQUARE
    result.update(view="images", images=images, captions=["square"] * len(indices))
    return result


def fake_sample(spec, ctx):
    name = spec["dataset"].get("name", "digits")
    if not name.startswith("file:"):
        return _fake_sample(spec, ctx)
    index = spec["index"]
    base = {"index": index, "split": spec["split"], "user": True, "label": -1, "path": "/x/data.py"}
    if _is_table(spec):
        return {
            **base,
            "view": "table",
            "shape": [5],
            "class_name": f"{index / 10:.4g}",
            "inputs": [
                {
                    "shape": [5],
                    "dtype": "float32",
                    "min": float(index),
                    "max": float(index + 4),
                    "mean": float(index + 2),
                }
            ],
            "target": {"shape": [], "dtype": "float32", "min": 0.5, "max": 0.5, "mean": 0.5, "text": "0.5"},
        }
    image = np.full((16, 16, 3), 128, dtype=np.uint8)
    image[2:8, 2:8] = SQUARE
    counts = np.zeros((3, 32), dtype=np.int64)
    counts[:, 16] = 256
    return {
        **base,
        "view": "images",
        "shape": [1, 16, 16],
        "class_name": "map",
        "image": image,
        "raw_image": np.full((16, 16, 1), 128, np.uint8),
        "mask": np.zeros((16, 16), np.uint8),
        "mask_classes": [{"id": 1, "name": "square", "colour": list(SQUARE)}],
        "histogram": {"edges": np.linspace(0, 256, 33, dtype=np.float32), "counts": counts},
        "inputs": [{"shape": [1, 16, 16], "dtype": "float32", "min": 0.0, "max": 1.0, "mean": 0.5}],
        "target": {
            "shape": [16, 16],
            "dtype": "int64",
            "min": 0.0,
            "max": 1.0,
            "mean": 0.1,
            "text": "square",
        },
    }


@pytest.fixture
def window(qtbot, tmp_path, settings):
    worker = FakeWorker(tmp_path)
    for name, fn in (("data.info", fake_info), ("data.page", fake_page), ("data.sample", fake_sample)):
        worker.kernel._task_overrides[name] = TaskInfo(name, fn, "query", None, False, "fake user data")
    manager = WorkerManager(connection_file=worker.connection_file, heartbeat_interval=0.2)
    window = MainWindow(manager, tmp_path / "workspace", settings)
    qtbot.addWidget(window)
    window.resize(1300, 850)
    window.show()
    manager.start(wait=False)
    qtbot.waitUntil(lambda: window.status_light.state == "ready", timeout=60_000)  # a loaded 2-core box
    window.show_tab(window.dataset_panel)
    yield window
    window.close_stopping_jobs()
    worker.stop()


def _open(panel, qtbot, attr: str) -> None:
    panel.state.set_spec(DataSpec.from_dict({"name": f"file:/x/data.py:{attr}"}))
    qtbot.waitUntil(lambda: panel.info is not None and panel.info["dataset"].endswith(attr), timeout=10_000)


def test_image_dataset_shows_thumbnails_with_masks_and_the_pixel_histogram(window, qtbot):
    panel = window.dataset_panel
    _open(panel, qtbot, "Shapes")
    assert panel.views.currentWidget() is panel.grid
    qtbot.waitUntil(lambda: 0 in panel.model.cached_pages, timeout=10_000)
    assert panel.model.total == 30
    image = panel.model.image_at(0)
    colour = image.pixelColor(4, 4)
    assert (colour.red(), colour.green(), colour.blue()) == SQUARE  # the overlay as the worker blended it
    assert panel.model.index(3).data(Qt.DisplayRole) == "square"  # the caption, not class "-1"
    assert "task=auto: <b>segmentation</b>" in panel.summary.text()
    assert not panel.class_combo.isEnabled()
    chart = panel.target_chart
    assert panel.side_tabs.isTabVisible(panel.side_tabs.indexOf(chart))
    assert not panel.side_tabs.isTabVisible(panel.side_tabs.indexOf(panel.class_chart))
    assert chart.bars is not None and list(chart.bars.opts["height"]) == [5000, 1080, 600]
    ticks = panel.target_chart.plot.getAxis("bottom")._tickLevels[0]
    assert [name for _, name in ticks] == ["background", "square", "bar"]
    assert "Pixels per class" in chart.summary.text() and "all 30 train samples" in chart.summary.text()
    assert chart.tooltip_at(1.1) == "1: square: 1,080 pixels" and chart.tooltip_at(1.5) == ""
    # The first thumbnail opens in the sample view: the overlaid image and which colour is which class.
    qtbot.waitUntil(lambda: (panel.sample_view.result or {}).get("index") == 0, timeout=10_000)
    view = panel.sample_view
    assert "target square" in view.title.text() and "square" in view.details.text()
    assert view.image.pixmap() is not None and not view.image.pixmap().isNull()
    assert view.transforms.isHidden()


def test_tabular_dataset_shows_a_table_and_a_value_histogram(window, qtbot):
    panel = window.dataset_panel
    _open(panel, qtbot, "Rows")
    assert panel.views.currentWidget() is panel.table
    model = panel.table_model
    qtbot.waitUntil(lambda: model.rowCount() == 30, timeout=10_000)
    row = {model.headerData(c, Qt.Horizontal): model.index(7, c).data() for c in range(model.columnCount())}
    assert row["#"] == "7" and row["shape"] == "5" and row["dtype"] == "float32"
    assert (row["min"], row["max"], row["mean"]) == ("7", "11", "9")
    assert row["target"] == "0.7" and row["target shape"] == "scalar float32"
    chart = panel.target_chart
    assert chart.histogram["kind"] == "values" and "Target values" in chart.summary.text()
    assert chart.tooltip_at(1.5) == "1 to 2: 10 values"
    panel.table.setCurrentIndex(model.index(4, 1))
    qtbot.waitUntil(lambda: (panel.sample_view.result or {}).get("index") == 4, timeout=10_000)
    assert model.index(4, 0).data(INDEX_ROLE) == 4
    assert "5 float32, 4 … 8" in panel.sample_view.details.text()
    assert panel.sample_view.image.isHidden()


def test_back_to_a_builtin_set_restores_its_view(window, qtbot):
    panel = window.dataset_panel
    _open(panel, qtbot, "Rows")
    panel.state.set_spec(DataSpec())
    qtbot.waitUntil(lambda: panel.info is not None and panel.info["dataset"] == "digits", timeout=10_000)
    assert panel.views.currentWidget() is panel.grid and panel.class_combo.isEnabled()
    assert panel.side_tabs.isTabVisible(panel.side_tabs.indexOf(panel.class_chart))
    assert not panel.side_tabs.isTabVisible(panel.side_tabs.indexOf(panel.target_chart))
    qtbot.waitUntil(lambda: panel.model.total == 1500, timeout=10_000)


def test_dialog_python_file_choice(qtbot, tmp_path):
    dialog = DatasetDialog(DataSpec(), str(tmp_path))
    qtbot.addWidget(dialog)
    ok = dialog.buttons.button(QDialogButtonBox.Ok)
    assert dialog.user_path.isHidden()
    dialog.name.setCurrentIndex(dialog.name.findData(USER_FILE))
    assert not dialog.user_path.isHidden() and "runs with your permissions" in dialog.note.text()
    assert not ok.isEnabled() and dialog.error.text().startswith("file: choose")
    source = tmp_path / "mydata.py"
    dialog.user_path.setText(str(source))
    assert not ok.isEnabled() and "does not exist" in dialog.error.text()
    source.write_text("class Mine: pass\n")
    dialog.user_attr.setText("Mine")
    dialog.user_args.setText("size=500, kind=small")
    assert ok.isEnabled(), dialog.error.text()
    assert dialog.spec().name == f"file:{source}:Mine" and dialog.spec().args == {
        "size": 500,
        "kind": "small",
    }
    assert (
        not dialog.root.isEnabled() and not dialog.augment.isEnabled() and not dialog.image_size.isEnabled()
    )
    assert "own transforms" in dialog.augment.toolTip()
    dialog.user_args.setText('{"sizes": [1, 2]}')
    assert ok.isEnabled() and dialog.spec().args == {"sizes": [1, 2]}
    dialog.user_args.setText("{not json")
    assert not ok.isEnabled() and dialog.error.text().startswith("args:")
    dialog.user_args.setText('{"sizes": [1, 2]}')
    again = DatasetDialog(dialog.spec(), str(tmp_path))  # reopening shows the same choice
    qtbot.addWidget(again)
    assert again.name.currentData() == USER_FILE and again.user_attr.text() == "Mine"
    assert again.user_path.text() == str(source) and again.spec() == dialog.spec()

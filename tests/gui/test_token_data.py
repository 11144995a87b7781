"""A user's Dataset of token sequences through the window: the Data tab (the real data.info / data.page /
data.sample tasks, run by the fake worker over the real protocol) shows rows of ids with decoded text and a
histogram of sequence lengths; a classification run's evaluation (made by the real test evaluator on the real
Dataset) lists its confidently wrong samples as rows without asking the worker; Try it on such a run offers a
sample, not an image file, and shows the sample's text beside the prediction.
"""

from __future__ import annotations

import json

import pytest
import torch
from fake_worker import FakeWorker
from PySide6.QtCore import Qt

from workbench.client import WorkerManager
from workbench.gui.main_window import MainWindow
from workbench.gui.panels.training.evaluation import EvaluationView
from workbench.runs import RunStore
from workbench.specs import DataSpec
from workbench.worker.registry import TaskInfo
from workbench.worker.tasks import data as data_tasks

PROJECT = """
import torch
from torch import nn
from torch.utils.data import Dataset
class Tokens(Dataset):
    vocab = ["<pad>"] + [f"w{i}" for i in range(1, 50)]
    def __init__(self, n=400, length=24, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(1, 50, (n, length), generator=g)
        self.x[::2, length // 2:] = 0  # every other sequence padded to half its length
        self.y = ((self.x == 7).sum(1) > (self.x == 3).sum(1)).long()
        self.classes = ["no", "yes"]
    def __len__(self): return len(self.x)
    def __getitem__(self, i): return self.x[i], int(self.y[i])
    def decode(self, ids): return " ".join(self.vocab[int(i)] for i in ids if int(i))
"""


@pytest.fixture
def project(tmp_path):
    path = tmp_path / "data.py"
    path.write_text(PROJECT)
    return f"file:{path}:Tokens"


@pytest.fixture
def window(qtbot, tmp_path, settings):
    worker = FakeWorker(tmp_path)
    for name, fn in (
        ("data.info", data_tasks.info),
        ("data.page", data_tasks.page),
        ("data.sample", data_tasks.sample),
    ):
        spec = data_tasks.DataInfoSpec if name == "data.info" else None
        worker.kernel._task_overrides[name] = TaskInfo(name, fn, "query", spec, False, "the real data task")
    manager = WorkerManager(connection_file=worker.connection_file, heartbeat_interval=0.2)
    window = MainWindow(manager, tmp_path / "workspace", settings)
    qtbot.addWidget(window)
    window.resize(1300, 850)
    window.show()
    manager.start(wait=False)
    qtbot.waitUntil(lambda: window.status_light.state == "ready", timeout=60_000)
    window.show_tab(window.dataset_panel)
    yield window
    window.close_stopping_jobs()
    worker.stop()


def test_the_data_tab_shows_token_rows_with_text_and_a_length_histogram(window, qtbot, project):
    panel = window.dataset_panel
    panel.state.set_spec(DataSpec.from_dict({"name": project, "num_workers": 0}))
    qtbot.waitUntil(lambda: panel.info is not None and panel.info["dataset"] == project, timeout=30_000)
    assert panel.info["input_kind"] == "tokens" and "token ids" in panel.summary.text()
    model = panel.table_model
    qtbot.waitUntil(lambda: model.rowCount() > 10, timeout=30_000)
    headers = [model.headerData(c, Qt.Horizontal) for c in range(model.columnCount())]
    assert headers == ["#", "text", "ids", "length", "min id", "max id", "target"]
    row = {h: model.index(0, c).data() for c, h in enumerate(headers)}
    assert row["text"].startswith("w") and "<pad>" not in row["text"]  # the Dataset's own decode(ids)
    assert len(row["ids"].split()) == 24 and row["target"] in ("no", "yes")
    assert row["length"] in ("12", "24")  # the padded half counts only its tokens
    chart = panel.input_chart
    assert panel.side_tabs.isTabVisible(panel.side_tabs.indexOf(chart))
    assert chart.histogram["kind"] == "tokens"
    lengths = dict(zip(chart.histogram["edges"], chart.histogram["counts"], strict=False))
    assert lengths[12.0] > 0 and lengths[24.0] > 0  # two lengths: padded and full
    assert "Token ids 0 … 49" in chart.summary.text() and "vocabulary of 50" in chart.summary.text()
    # The first row opens in the sample view: its text and ids, a plot of ids by position, no pixel histogram.
    qtbot.waitUntil(lambda: (panel.sample_view.result or {}).get("index") == 0, timeout=30_000)
    view = panel.sample_view
    assert "<b>text</b>" in view.details.text() and "<b>ids</b>" in view.details.text()
    assert view.histogram.isVisibleTo(view) and "Token ids" in view.histogram.plotItem.titleLabel.text
    assert "Pixel" not in view.histogram.plotItem.titleLabel.text and view.image.isHidden()


def test_the_evaluation_of_a_token_run_lists_its_mistakes_as_rows(qtbot, tmp_path, project):
    from workbench.worker.data import load_dataset
    from workbench.worker.objectives import build_objective
    from workbench.worker.training.evaluate import evaluate_split

    dataset = load_dataset(DataSpec.from_dict({"name": project, "num_workers": 0}))
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Embedding(50, 4), torch.nn.Flatten(), torch.nn.Linear(96, 2))
        evaluation = evaluate_split(
            model,
            dataset.splits["test"],
            build_objective("classification", num_outputs=2),
            ["no", "yes"],
            device=torch.device("cpu"),
        )
    finally:
        dataset.release()
    evaluation = json.loads(json.dumps(evaluation))  # as evaluation.json holds it
    assert evaluation["worst"] and evaluation["input_kind"] == "tokens"

    asked = []

    class Queries:  # the view must not ask the worker (nor load the Dataset) for rows it already has
        def query(self, *args, **kwargs):
            asked.append(args)

        def forget(self, job_id):
            pass

    view = EvaluationView(Queries())
    qtbot.addWidget(view)
    view.show()
    view.show_evaluation(evaluation, {"name": project}, "run-1")
    assert asked == []
    table = view.worst_rows
    assert view.worst_pages.currentWidget() is table
    assert table.rowCount() == len(evaluation["worst"])
    headers = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())]
    assert headers == ["#", "true", "predicted", "confidence", "input"]
    first = evaluation["worst"][0]
    assert table.item(0, 0).text() == str(first["index"])
    assert table.item(0, 4).text() == first["sample"]["text"] and table.item(0, 4).text().startswith("w")
    assert table.item(0, 1).text() in ("no", "yes") and table.item(0, 3).text().endswith("%")
    opened = []
    view.sample_requested.connect(lambda *a: opened.append(a))
    table.cellDoubleClicked.emit(0, 4)
    assert opened and opened[0][1:3] == ("test", first["index"])


def test_try_it_on_a_token_run_predicts_a_sample_and_offers_no_image(qtbot, tmp_path, project):
    from workbench.gui.panels.try_it import TryItDialog
    from workbench.gui.queries import QueryRunner
    from workbench.gui.worker_bridge import QtWorkerBridge
    from workbench.worker.data import load_dataset
    from workbench.worker.predict import _user_sample

    dataset = load_dataset(DataSpec.from_dict({"name": project, "num_workers": 0}))
    seen: list[dict] = []

    def predict(spec, ctx):
        # The real reading of the sample (workbench.worker.predict) with a canned answer: no model to train
        # here.
        from workbench.worker.predict import Loaded

        loaded = Loaded("train", tmp_path, None, None, "classification", dataset)
        _, info, truth, preview = _user_sample(spec, loaded)
        seen.append(spec.to_dict())
        return {
            "run": "r",
            "run_kind": "train",
            "model": "m",
            "dataset": project,
            "task": "classification",
            "top_k": 5,
            "device": "cpu",
            "input": info,
            "notes": [],
            "truth": truth,
            "predictions": [
                {"class": 1, "label": "yes", "probability": 0.8, "logit": 1.0},
                {"class": 0, "label": "no", "probability": 0.2, "logit": -0.4},
            ],
        }

    worker = FakeWorker(tmp_path)
    worker.replace_task("predict.model", predict)
    manager = WorkerManager(connection_file=worker.connection_file, heartbeat_interval=0.2)
    workspace = tmp_path / "workspace"
    queries = QueryRunner(QtWorkerBridge(manager), workspace)
    manager.start(wait=False)
    try:
        qtbot.waitUntil(lambda: manager.state == "ready", timeout=30_000)
        with RunStore(workspace).create_run(
            "train", {"epochs": 1, "dataset": {"name": project}}, task="train.classifier"
        ) as run:
            run.set_status("done")
            run_id = run.id
        dialog = TryItDialog(queries, workspace, run_id)
        qtbot.addWidget(dialog)
        dialog.show()
        view = dialog.view
        assert not view.open_button.isVisibleTo(view) and not view.open_button.isEnabled()
        assert "your own Dataset" in view.open_button.toolTip()
        view.split_combo.setCurrentIndex(view.split_combo.findData("test"))
        view.index_spin.setValue(3)
        view.sample_button.click()
        qtbot.waitUntil(lambda: view.result is not None, timeout=30_000)
        assert seen[-1]["sample"] == {"split": "test", "index": 3}
        sample = view.result["input"]["sample"]
        assert sample["kind"] == "tokens" and len(sample["ids"]) == 24
        assert sample["text"] in view.image.text() and "<b>ids</b>" in view.image.text()
        assert "<b>yes</b>" in view.verdict.text() and "true label" in view.verdict.text()
        assert view.table.item(0, 1).text() == "yes"
    finally:
        dataset.release()
        manager.detach()
        worker.stop()

"""What walking the bundled examples through the window (packaging/walk_examples.py, issue #20) found wrong in
it, on the real window with a fake worker: each test shows the window reading a run as the examples leave
it."""

from __future__ import annotations

from pathlib import Path

from workbench.runs import RunStore
from workbench.specs import ExportSpec


def _run(workspace: Path, kind: str, spec: dict, task: str, report: dict, metrics=()) -> str:
    with RunStore(workspace).create_run(kind, spec, task=task) as run:
        run.log_metrics(metrics)
        run.write_report({"status": "done", **report})
        run.set_status("done")
        return run.id


def _export_shown(qtbot, window, record) -> None:
    panel = window.export_panel

    def shown() -> bool:
        now = window.manager.jobs.get(record.job_id)
        return (
            not now.active
            and not panel.live
            and panel.current is not None
            and panel.current.run_id == Path(now.run_dir or "").name
        )

    qtbot.waitUntil(shown, timeout=60_000)


def test_a_qdq_export_of_a_regression_run_reads_its_mae_not_a_percentage(fake_window, qtbot):
    # diabetes_regression's quantize run measures val MAE; its onnx_qdq export measures the same in
    # onnxruntime and names it. The Export tab showed "onnxruntime 57.63% · simulated (the quantize run)
    # 57.63% (+0.00 pt)".
    window = fake_window
    workspace = window.workspace
    trained = _run(
        workspace,
        "train",
        {
            "task": "regression",
            "model": {"name": "file:/ex/model.py:mlp"},
            "dataset": {"name": "file:/ex/data.py:diabetes"},
        },
        "train.classifier",
        {},
    )
    mae = {"name": "mae", "label": "val MAE", "higher_is_better": False}
    quant = _run(
        workspace,
        "quant",
        {"source": {"run": trained}},
        "quant.analyze",
        {"metric": mae, "fp32": {"accuracy": 0.5751}, "quantized": {"accuracy": 0.5763}, "layers": []},
    )
    panel = window.export_panel
    window.show_tab(panel)
    record = panel.start_export(ExportSpec.from_dict({"source": {"run": quant}, "format": "onnx_qdq"}))
    _export_shown(qtbot, window, record)
    text = panel.artifact_labels["Accuracy"].text()
    assert "%" not in text and " pt" not in text
    assert text.startswith("test MAE ↓: onnxruntime 0.5763 · simulated (the quantize run) 0.5763 (+0)")
    assert text.endswith("on 66 samples of the test split")


def test_a_qdq_export_of_a_classifier_still_reads_its_accuracy(fake_window, qtbot):
    window = fake_window
    trained = _run(
        window.workspace,
        "train",
        {"model": {"name": "cnn"}, "dataset": {"name": "digits"}},
        "train.classifier",
        {},
    )
    quant = _run(
        window.workspace,
        "quant",
        {"source": {"run": trained}},
        "quant.analyze",
        {"fp32": {"accuracy": 0.99}, "quantized": {"accuracy": 0.9878}, "layers": []},
    )
    panel = window.export_panel
    window.show_tab(panel)
    _export_shown(
        qtbot,
        window,
        panel.start_export(ExportSpec.from_dict({"source": {"run": quant}, "format": "onnx_qdq"})),
    )
    assert panel.artifact_labels["Accuracy"].text() == (
        "onnxruntime 98.78% · simulated (the quantize run) 98.78% (+0.00 pt)"
    )


LIGHTNING_MODEL = "lightning:/ex/digits_lightning/model.py:DigitsClassifier"
LIGHTNING_DATA = "lightning:/ex/digits_lightning/model.py:DigitsData"


def _lightning_run(workspace: Path, test_metrics: dict | None) -> str:
    """A finished LightningModule run as its route leaves it: the module's test metrics in the report, no
    evaluation.json (Lightning's own trainer.test measured them)."""
    return _run(
        workspace,
        "train",
        {
            "epochs": 5,
            "model": {"name": LIGHTNING_MODEL},
            "dataset": {"name": LIGHTNING_DATA, "args": {"batch_size": 64}},
        },
        "train.classifier",
        {
            "epochs_completed": 5,
            "task": "custom",
            "evaluation": None,
            "final": {"val_acc": 0.9407, "test_accuracy": 0.9442, "test_metrics": test_metrics},
            "monitor": {
                "name": "val_acc",
                "label": "val_acc",
                "higher_is_better": True,
                "best_val": 0.9407,
                "test": 0.9442,
            },
            "lightning": {"checkpoint": "last.ckpt", "datamodule": LIGHTNING_DATA},
        },
        metrics=[
            (20, "train/loss", 2.0, 1.0),
            (40, "train/loss", 1.1, 2.0),
            (40, "val/loss", 1.0, 2.0),
            (40, "val/acc", 0.81, 2.0),
            (40, "epoch", 1.0, 2.0),
        ],
    )


def test_a_lightning_run_s_evaluation_lists_its_test_metrics(fake_window):
    # digits_lightning's finished run read "No evaluation yet: it is written when the run finishes." over an
    # empty confusion matrix: Lightning's trainer.test writes its metrics into the report, not an
    # evaluation.json.
    window = fake_window
    run_id = _lightning_run(window.workspace, {"test_loss": 0.1937, "test_acc": 0.9442})
    panel = window.training_panel
    window.show_tab(panel)
    panel.refresh()
    assert panel.select_run(run_id)
    view = panel.evaluation
    title = view.title.text()
    assert "No evaluation" not in title
    assert "test acc ↑ <b>0.9442</b>" in title and "0.1937" in title
    metrics = view.task_views["metrics"]
    assert view.pages.currentWidget() is metrics
    rows = {
        metrics.table.item(r, 0).text(): metrics.table.item(r, 1).text()
        for r in range(metrics.table.rowCount())
    }
    assert rows == {"test_loss": "0.1937", "test_acc": "0.9442"}
    assert "Curves tab" in metrics.note.text()


def test_a_finished_run_without_test_metrics_does_not_say_its_evaluation_is_coming(fake_window):
    window = fake_window
    run_id = _lightning_run(window.workspace, None)  # a module with no test_step
    panel = window.training_panel
    window.show_tab(panel)
    panel.refresh()
    assert panel.select_run(run_id)
    title = panel.evaluation.title.text()
    assert "yet" not in title and "finished without a test evaluation" in title


def test_a_lightning_run_is_named_by_its_classes_not_their_paths(fake_window):
    # The curves' legend named the run "lightning:/…/model.py:DigitsClassifier ·
    # lightning:/…/model.py:DigitsData":
    # one line wider than the window, which squeezed the run list to a sliver.
    window = fake_window
    run_id = _lightning_run(window.workspace, {"test_acc": 0.9442})
    panel = window.training_panel
    window.show_tab(panel)
    panel.refresh()
    assert panel.select_run(run_id)
    assert panel.curves.legend.texts()[0] == f"DigitsClassifier · DigitsData · {run_id[-6:]}"
    row = next(r for r in range(panel.table.rowCount()) if panel.table.item(r, 0).data(0x0100) == run_id)
    cell = panel.table.item(row, 3)
    assert cell.text() == "DigitsClassifier · DigitsData"
    assert LIGHTNING_MODEL in cell.toolTip() and LIGHTNING_DATA in cell.toolTip()


def test_runs_made_from_an_example_s_run_name_its_model_data_and_metric(fake_window):
    # A quantize run's spec holds QuantSpec's defaults beside its source (model cnn, dataset digits): every
    # run made from diabetes_regression's run read "cnn · digits", and its quantize run's MAE read "W8A8 57.6
    # %".
    from workbench.specs import BenchSpec, QuantSpec

    window = fake_window
    workspace = window.workspace
    trained = _run(
        workspace,
        "train",
        {
            "task": "regression",
            "model": {"name": "file:/ex/model.py:mlp"},
            "dataset": {"name": "file:/ex/data.py:diabetes"},
        },
        "train.classifier",
        {
            "task": "regression",
            "monitor": {"name": "mae", "label": "MAE", "higher_is_better": False, "test": 0.586},
        },
    )
    quant_spec = QuantSpec.from_dict({"source": {"run": trained}}).to_dict()  # as the worker writes it
    assert quant_spec["model"]["name"] == "cnn" and quant_spec["dataset"]["name"] == "digits"
    quant = _run(
        workspace,
        "quant",
        quant_spec,
        "quant.analyze",
        {
            "metric": {"name": "mae", "label": "val MAE", "higher_is_better": False},
            "quantized": {"accuracy": 0.5763},
            "layers": [],
        },
    )
    bench = _run(
        workspace,
        "bench",
        BenchSpec.from_dict({"source": {"run": quant}}).to_dict(),
        "bench.latency",
        {"results": []},
    )
    wizard = window.export_panel.export_wizard()
    texts = {
        wizard.source_page.run.itemData(i): wizard.source_page.run.itemText(i)
        for i in range(wizard.source_page.run.count())
    }
    wizard.deleteLater()
    assert texts[trained].startswith("mlp · diabetes · mae 0.586 · ")
    assert texts[quant].startswith("mlp · diabetes · W8A8 mae 0.5763 · ") and texts[quant].endswith(
        "quantize run"
    )
    runs = window.runs_panel
    window.show_tab(runs)
    runs.refresh()
    shown = {run["id"]: (run["model"], run["dataset"], run["metric"]) for run in runs.model.runs}
    assert shown[quant] == ("mlp", "diabetes", "W8A8 mae 0.5763")
    # a benchmark of the quantize run: the training run's model
    assert shown[bench][:2] == ("mlp", "diabetes")


def test_the_training_list_gives_each_example_run_its_monitor(fake_window):
    # The run list's only result column was "Val acc": empty for the regression, segmentation and multi-label
    # examples, whose runs log val/mae, val/miou and val/map.
    window = fake_window
    monitors = {
        "regression": ("mae", "MAE", False, 0.5237),
        "segmentation": ("miou", "mIoU", True, 0.9241),
        "multilabel": ("map", "mean AP", True, 0.9961),
    }
    ids = {}
    for task, (name, label, higher, value) in monitors.items():
        ids[task] = _run(
            window.workspace,
            "train",
            {
                "task": task,
                "epochs": 2,
                "model": {"name": "file:/ex/m.py:Net"},
                "dataset": {"name": "file:/ex/d.py:Data"},
            },
            "train.classifier",
            {
                "task": task,
                "epochs_completed": 2,
                "monitor": {"name": name, "label": label, "higher_is_better": higher, "best_val": value},
            },
            metrics=[
                (10, "epoch", 1.0, 1.0),
                (10, f"val/{name}", 0.5, 1.0),
                (20, "epoch", 2.0, 2.0),
                (20, f"val/{name}", value, 2.0),
            ],
        )
    panel = window.training_panel
    window.show_tab(panel)
    panel.refresh()
    assert panel.table.horizontalHeaderItem(5).text() == "Val metric"
    cells = {
        panel.table.item(r, 0).data(0x0100): panel.table.item(r, 5).text()
        for r in range(panel.table.rowCount())
    }
    assert cells == {
        ids["regression"]: "MAE 0.5237",
        ids["segmentation"]: "mIoU 92.4 %",
        ids["multilabel"]: "mean AP 99.6 %",
    }


def test_a_regression_run_s_curves_keep_the_window_on_the_screen(fake_window, qtbot):
    # diabetes_regression logs MAE, MSE, RMSE and R²: a plot each, whose minimum heights grew the 820-pixel
    # window to 1078, taller than the 900-pixel screen it was walked on. The plots now scroll within the
    # Curves tab.
    window = fake_window
    window.resize(1400, 820)
    names = ("mae", "mse", "rmse", "r2")
    rows = [(step, name, 1.0 / step, float(step)) for step in range(1, 31) for name in ("train/loss", "lr")]
    rows += [
        (step, f"val/{name}", 0.5 + 1.0 / step, float(step))
        for step in range(10, 31, 10)
        for name in ("loss", *names)
    ]
    run_id = _run(
        window.workspace,
        "train",
        {
            "task": "regression",
            "model": {"name": "file:/ex/model.py:mlp"},
            "dataset": {"name": "file:/ex/data.py:diabetes"},
        },
        "train.classifier",
        {"task": "regression"},
        metrics=rows,
    )
    panel = window.training_panel
    window.show_tab(panel)
    panel.refresh()
    assert panel.select_run(run_id)
    panel.tabs.setCurrentWidget(panel.curves)
    panel.curves.redraw()
    assert {f"metric:{name}" for name in names} <= set(panel.curves.plots)
    qtbot.wait(50)
    assert window.minimumSizeHint().height() <= 820 and window.height() == 820
    assert panel.curves.plots_area.verticalScrollBar().maximum() > 0  # the plots are all there, a scroll away


def test_the_lightning_example_s_wizard_greys_out_the_splits_its_datamodule_makes(fake_window, qtbot):
    # File ▸ Open spec ▸ Example: digits_lightning offered Val fraction 0.1, Test fraction 0.1 and a split
    # seed to edit, which its LightningDataModule never reads (it makes its own dataloaders).
    from workbench.app_resources import example_specs
    from workbench.gui.panels.training.wizard import TrainingWizard
    from workbench.specs import TrainSpec

    window = fake_window
    spec = next(p for p in example_specs() if p.parent.name == "digits_lightning")
    wizard = TrainingWizard(
        window.dataset_state,
        window.device_picker.devices,
        "cpu",
        start=TrainSpec.load(spec).to_dict(),
        parent=window,
        settings=window.settings,
    )
    qtbot.addWidget(wizard)
    page = wizard.dataset_page
    assert page.source_kind() == "lightning"
    fields = ("dataset.val_fraction", "dataset.test_fraction", "dataset.seed")
    for field in fields:
        widget = page.splits.widgets[field]
        assert not widget.isEnabled() and widget.toolTip().startswith("Not used: a LightningDataModule")
    assert wizard.spec is not None and wizard.spec.dataset.name.startswith("lightning:")
    # a Dataset in a Python file: the fractions apply
    page.source.setCurrentIndex(page.source.findData("file"))
    assert all(page.splits.widgets[field].isEnabled() for field in fields)
    wizard.reject()

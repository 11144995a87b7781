"""What walking the bundled examples through the window (packaging/walk_examples.py, issue #20) found wrong in it, on
the real window with a fake worker: each test shows the window reading a run as the examples leave it."""

from __future__ import annotations

from pathlib import Path

from workbench.runs import RunStore
from workbench.specs import ExportSpec


def _run(workspace: Path, kind: str, spec: dict, task: str, report: dict) -> str:
    with RunStore(workspace).create_run(kind, spec, task=task) as run:
        run.write_report({"status": "done", **report})
        run.set_status("done")
        return run.id


def _export_shown(qtbot, window, record) -> None:
    panel = window.export_panel

    def shown() -> bool:
        now = window.manager.jobs.get(record.job_id)
        return (not now.active and not panel.live and panel.current is not None
                and panel.current.run_id == Path(now.run_dir or "").name)

    qtbot.waitUntil(shown, timeout=60_000)


def test_a_qdq_export_of_a_regression_run_reads_its_mae_not_a_percentage(fake_window, qtbot):
    # diabetes_regression's quantize run measures val MAE; its onnx_qdq export measures the same in onnxruntime and
    # names it. The Export tab showed "onnxruntime 57.63% · simulated (the quantize run) 57.63% (+0.00 pt)".
    window = fake_window
    workspace = window.workspace
    trained = _run(workspace, "train", {"task": "regression", "model": {"name": "file:/ex/model.py:mlp"},
                                        "dataset": {"name": "file:/ex/data.py:diabetes"}}, "train.classifier", {})
    mae = {"name": "mae", "label": "val MAE", "higher_is_better": False}
    quant = _run(workspace, "quant", {"source": {"run": trained}}, "quant.analyze",
                 {"metric": mae, "fp32": {"accuracy": 0.5751}, "quantized": {"accuracy": 0.5763}, "layers": []})
    panel = window.export_panel
    window.show_tab(panel)
    record = panel.start_export(ExportSpec.from_dict({"source": {"run": quant}, "format": "onnx_qdq"}))
    _export_shown(qtbot, window, record)
    text = panel.artifact_labels["Accuracy"].text()
    assert "%" not in text and " pt" not in text
    assert text.startswith("val MAE ↓: onnxruntime 0.5763 · simulated (the quantize run) 0.5763 (+0)")
    assert text.endswith("on 66 samples of the test split")


def test_a_qdq_export_of_a_classifier_still_reads_its_accuracy(fake_window, qtbot):
    window = fake_window
    trained = _run(window.workspace, "train", {"model": {"name": "cnn"}, "dataset": {"name": "digits"}},
                   "train.classifier", {})
    quant = _run(window.workspace, "quant", {"source": {"run": trained}}, "quant.analyze",
                 {"fp32": {"accuracy": 0.99}, "quantized": {"accuracy": 0.9878}, "layers": []})
    panel = window.export_panel
    window.show_tab(panel)
    _export_shown(qtbot, window, panel.start_export(ExportSpec.from_dict({"source": {"run": quant},
                                                                          "format": "onnx_qdq"})))
    assert panel.artifact_labels["Accuracy"].text() == ("onnxruntime 98.78% · simulated (the quantize run) 98.78% "
                                                        "(+0.00 pt)")

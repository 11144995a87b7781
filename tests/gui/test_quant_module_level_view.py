"""The Quantization tab on a module-level run (torch.fx could not trace the model): the summary names the ops
left float and the ladder's title says every rung is module-level, from the finished report and from the live
array."""

from __future__ import annotations

import numpy as np

from workbench.gui.panels.quant.results import QuantResults

REPORT = {
    "fp32": {"accuracy": 0.95, "loss": 0.2},
    "quantized": {"accuracy": 0.94, "loss": 0.21, "logit_sqnr_db": 30.0},
    "steps": [
        {"step": "fp32", "accuracy": 0.95, "loss": 0.2},
        {"step": "activation_ranges", "accuracy": 0.94, "loss": 0.21},
    ],
    "coverage": {"parameters": 0.97, "float": [{"type": "BatchNorm2d", "modules": 1, "parameters": 32}]},
    "module_level": {
        "reason": "quantize needs a model that torch.fx can trace",
        "float_ops": [{"op": "relu", "calls": 2}, {"op": "add", "calls": 1}],
    },
}


def _results(run_id: str, report: dict) -> QuantResults:
    results = QuantResults(run_id=run_id)
    results.set_report(report)
    return results


def test_a_module_level_report_names_its_float_ops_in_the_summary_and_the_ladder(fake_window):
    panel = fake_window.quant_panel
    panel.show_results(_results("r1", REPORT))
    summary = panel.summary.text()
    assert "module-level quantization" in summary and "relu ×2, add ×1" in summary
    assert "module-level" in panel.ladder.title_label.text()
    # A run traced as usual says neither.
    plain = {key: value for key, value in REPORT.items() if key != "module_level"}
    panel.show_results(_results("r2", plain))
    assert (
        "module-level" not in panel.summary.text() and "module-level" not in panel.ladder.title_label.text()
    )


def test_the_live_ladder_carries_the_note_before_the_report_arrives():
    results = QuantResults(run_id="r3")
    meta = {
        "steps": ["fp32"],
        "planned": ["fp32", "weight_ranges"],
        "notes": ["module-level: ops stay float"],
    }
    assert results.add_array("quant/ladder", np.array([[0.9, 0.3]]), meta)
    assert results.notes == ["module-level: ops stay float"] and results.ladder[0]["accuracy"] == 0.9

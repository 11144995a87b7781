"""A detection run's quantize report (mAP on the ladder, module-level coverage naming what stays float, no
per-layer table) opens in the Quantization tab without error and says mAP."""

from __future__ import annotations

from workbench.runs import RunStore

REPORT = {
    "fp32": {
        "accuracy": 0.41,
        "loss": None,
        "metrics": {"map": 0.41, "map_50": 0.7, "map_75": 0.4, "mar_100": 0.5},
    },
    "quantized": {
        "accuracy": 0.39,
        "loss": None,
        "logit_sqnr_db": None,
        "metrics": {"map": 0.39, "map_50": 0.68, "map_75": 0.37, "mar_100": 0.49},
    },
    "steps": [
        {"step": "fp32", "accuracy": 0.41, "loss": None},
        {"step": "weight_ranges", "accuracy": 0.405, "loss": None},
        {"step": "activation_ranges", "accuracy": 0.39, "loss": None},
    ],
    "layers": [],
    "coverage": {
        "parameters": 0.998,
        "layers": 73,
        "float": [
            {
                "type": "anchor generation",
                "modules": "rpn.anchor_generator",
                "parameters": 0,
                "reason": "float",
            },
            {"type": "NMS", "modules": "torchvision.ops.batched_nms", "parameters": 0, "reason": "float"},
        ],
        "float_ops": [{"op": "nms", "calls": 2}],
    },
    "module_level": {"reason": "a detector: its post-processing stays float", "float_ops": []},
    "metric": {"name": "map", "label": "test mAP", "split": "test", "higher_is_better": True},
    "task": "detection",
    "source": {"run": "train-x", "model": "torchvision:fasterrcnn_mobilenet_v3_large_320_fpn"},
    "device": "cpu",
    "calibration": {"samples": 32, "seed": 0},
    "held_out": {"samples": 10, "split": "test split"},
    "artifacts": {},
}


def test_a_detection_quantize_run_opens_in_the_quantization_tab(fake_window, qtbot):
    with RunStore(fake_window.workspace).create_run(
        "quant", {"source": {"run": "train-x"}}, task="quant.analyze"
    ) as run:
        run.write_report({"status": "done", **REPORT})
        run.set_status("done")
        run_id = run.id
    fake_window.show_tab(fake_window.quant_panel)
    panel = fake_window.quant_panel
    panel.refresh()
    assert panel.open_run(run_id)
    qtbot.waitUntil(lambda: panel.results is not None and panel.results.run_id == run_id, timeout=10_000)
    assert panel.results.metric["label"] == "test mAP"

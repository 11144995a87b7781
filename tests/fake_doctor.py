"""A torch-free quantize `doctor` block for panel tests, as the result contract gives it: three findings
(outlier channels, a mixed-range concat, clipping) on the fake quantize layers, and what applying fixes
did."""

from __future__ import annotations

import numpy as np

OUTLIER_RANGES = [0.4, 0.5, 0.45, 6.0, 0.5, 0.42, 0.48, 0.52]  # channel 3 is the outlier


def _findings() -> list[dict]:
    edges = np.linspace(0.0, 8.0, 33)
    counts = (1000 * np.exp(-edges[:-1])).astype(int)
    return [
        {
            "id": "features.2:activation:clipping",
            "layer": "features.2",
            "tensor": "activation",
            "cause": "clipping",
            "summary": (
                "features.2's range clips 4% of its outputs: most of its error is clipping, not rounding."
            ),
            "evidence": {
                "clip_share": 0.72,
                "round_share": 0.28,
                "lo": 0.0,
                "hi": 3.5,
                "histogram": {"edges": edges.tolist(), "counts": counts.tolist()},
            },
            "fix": "mse_range",
            "fix_text": "Pick the range that minimises the MSE instead of the percentile",
            "tried": [
                {"fix": "mse_range", "sqnr_db": 27.0, "monitor": 0.985},
                {"fix": "minmax_range", "sqnr_db": 25.1, "monitor": 0.983},
            ],
            "gain": {"sqnr_db": 2.5, "monitor": 0.002},
            "severity": 3.1,
        },
        {
            "id": "features.0:weight:outlier_channels",
            "layer": "features.0",
            "tensor": "weight",
            "cause": "outlier_channels",
            "summary": "One output channel of features.0 is 12x wider than the median: per-tensor weights "
            "give the others a few codes.",
            "evidence": {"ratio": 12.0, "channels": [3], "ranges": OUTLIER_RANGES, "axis": 0},
            "fix": "cle",
            "fix_text": "Cross-layer equalisation rescales the channels to even out their ranges",
            "tried": [
                {"fix": "cle", "sqnr_db": 28.4, "monitor": 0.987},
                {"fix": "per_channel", "sqnr_db": 28.0, "monitor": 0.986},
            ],
            "gain": {"sqnr_db": 6.2, "monitor": 0.004},
            "severity": 7.5,
        },
        {
            "id": "classifier:activation:mixed_range_concat",
            "layer": "classifier",
            "tensor": "activation",
            "cause": "mixed_range_concat",
            "summary": (
                "classifier concatenates inputs whose ranges differ 20x: the narrow one loses most codes."
            ),
            "evidence": {
                "op": "cat",
                "inputs": [
                    {"name": "features.2", "lo": 0.0, "hi": 10.0},
                    {"name": "skip", "lo": -0.25, "hi": 0.25},
                ],
                "range_ratio": 20.0,
                "lost_share": 0.95,
            },
            "fix": "concat_requant",
            "fix_text": "Quantize each input of the concat on its own grid",
            "tried": [{"fix": "concat_requant", "sqnr_db": 26.0, "monitor": 0.984}],
            "gain": {"sqnr_db": 1.2, "monitor": 0.0},
            "severity": 1.4,
        },
    ]


def fake_doctor(spec) -> dict:
    """The `doctor` block the fake quant.analyze returns when the spec turns the doctor on."""
    block = {
        "findings": _findings(),
        "baseline": {"sqnr_db": 22.0, "monitor": 0.983, "monitor_name": "accuracy"},
    }
    if spec.doctor.apply:
        chosen = {f["layer"]: f for f in block["findings"]}
        wanted = [item.rpartition(":") for item in spec.doctor.fixes]
        pairs = [(layer, fix) for layer, _, fix in wanted] or [
            (f["layer"], f["fix"]) for f in block["findings"]
        ]
        block["applied"] = [
            {
                "id": chosen[layer]["id"] if layer in chosen else f"{layer}:{fix}",
                "layer": layer,
                "fix": fix,
                "changed": f"{fix} on {layer}",
                "sqnr_db_before": 21.5,
                "sqnr_db_after": 27.7,
            }
            for layer, fix in pairs
        ]
        block["after"] = {"sqnr_db": 28.2, "monitor": 0.988}
    return block

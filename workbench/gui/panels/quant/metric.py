"""What a quantize run's ladder, sensitivity sweep and mixed-precision proposal measure: accuracy
(classification, and every result without a metric block), or the run's task monitor that the result's
`metric` block names ("val MSE ↓"). The charts and the summary take their axis names, titles and number
formats from here. No Qt, no torch."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Measure:
    """`label` as the result gives it ("val MAE"); `accuracy` is True for plain accuracy, shown as
    percentages."""

    label: str = "accuracy"
    higher_is_better: bool = True
    accuracy: bool = True

    @classmethod
    def of(cls, metric, split: str | None = None) -> Measure:
        """The measure a result's `metric` block names; accuracy where there is none (or it is not a dict).
        With `split` ("test", "test split"), the label names that split: results written before the label said
        which split was measured called every split "val"."""
        if not isinstance(metric, dict) or not metric.get("label"):
            return cls()
        label = str(metric["label"])
        split = (split or "").split()[0] if (split or "").strip() else ""
        if split and label.split(" ", 1)[0] in ("val", "test") and " " in label:
            label = f"{split} {label.split(' ', 1)[1]}"
        return cls(label=label, higher_is_better=bool(metric.get("higher_is_better", True)), accuracy=False)

    @property
    def arrow(self) -> str:
        return "↑" if self.higher_is_better else "↓"

    @property
    def axis(self) -> str:
        """The axis name: "accuracy", or the metric with its direction, "val MSE ↓"."""
        return "accuracy" if self.accuracy else f"{self.label} {self.arrow}"

    @property
    def title(self) -> str:
        """The start of a chart title: "Accuracy", or "val MSE ↓" as the metric spells it."""
        return "Accuracy" if self.accuracy else self.axis

    @property
    def fmt(self) -> str:
        """The axis format of workbench.gui.plots: a 0–1 accuracy as percent, any other metric as plain
        numbers."""
        return "percent" if self.accuracy else "plain"

    def text(self, value, decimals: int = 1) -> str:
        """A value as the charts and the summary show it: "93.1%" for accuracy, "0.1234" (4 significant)
        else."""
        try:
            value = float(value)
        except (TypeError, ValueError):
            return "–"
        if not math.isfinite(value):
            return "–"
        return f"{value * 100:.{decimals}f}%" if self.accuracy else f"{value:.4g}"

    def target(self, fp32: float, allowed: float) -> float:
        """The mixed-precision goal: at most `allowed` worse than FP32, which for a lower-is-better metric is
        a rise."""
        return fp32 - allowed if self.higher_is_better else fp32 + allowed

    def allowed_text(self, allowed: float) -> str:
        """The target line's legend: "at most 1% below FP32", "at most 0.05 above FP32" (lower is better)."""
        if self.accuracy:
            return f"at most {allowed * 100:.2g}% below FP32"
        return f"at most {allowed:.4g} {'below' if self.higher_is_better else 'above'} FP32"

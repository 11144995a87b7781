"""The most confidently wrong test samples of a classification run whose inputs are not images, as table rows:
the decoded text (or the ids) of a token sequence, a signal's line and first values, or a row of features,
with the true and predicted class and the confidence. The inputs come from evaluation.json (the worker wrote
them there), so showing them asks nothing of the worker or the user's Dataset.

GUI side: Qt only, never torch.
"""

from __future__ import annotations

from PySide6.QtCore import QSize
from PySide6.QtGui import QIcon

from workbench.gui.panels.data.sparkline import HEIGHT as SPARK_HEIGHT
from workbench.gui.panels.data.sparkline import WIDTH as SPARK_WIDTH
from workbench.gui.panels.data.sparkline import sparkline
from workbench.gui.panels.training.evaluation_common import WorstTable
from workbench.gui.plots import SERIES_COLOURS
from workbench.results import dig

HEADERS = ("#", "true", "predicted", "confidence", "input")
MAX_CELL = 160  # characters of an input shown in its cell; the tooltip has the rest
TOOLTIP = "The most confidently wrong test samples; double-click one to open it in the Data tab"


def has_rows(worst: list[dict]) -> bool:
    """Whether every worst sample carries its input as a row (tokens, a signal, a row of features)."""
    return bool(worst) and all(dig(w, "sample", "kind") in ("tokens", "signal", "tabular") for w in worst)


def input_text(sample: dict) -> str:
    """One line for an input: a token sequence's text (else its ids), a signal's or a row's first values."""
    kind = sample.get("kind")
    if kind == "tokens":
        if sample.get("text"):
            return str(sample["text"])
        return "ids " + " ".join(str(i) for i in sample.get("ids") or [])
    values = sample.get("values") or []
    if kind == "signal":
        first = values[0] if values else []
        return f"signal of {sample.get('length', len(first))} steps: " + ", ".join(
            f"{v:.3g}" for v in first[:12]
        )
    names = sample.get("names") or []
    return ", ".join(f"{n}={v:.3g}" for n, v in zip(names, values, strict=False))


def _short(text: str) -> str:
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


class WorstRows(WorstTable):
    """The worst samples as rows; double-clicking one asks to open it (split, index, what the model said)."""

    def __init__(self, parent=None):
        super().__init__(HEADERS, TOOLTIP, parent)
        self.setWordWrap(False)

    def show_worst(self, worst: list[dict], classes: list[str]) -> None:
        def name(label: int) -> str:
            return str(classes[label]) if 0 <= label < len(classes) else str(label)

        rows, samples, tooltips = [], [], []
        for w in worst:
            true, predicted = name(int(w["label"])), name(int(w["predicted"]))
            sample = w.get("sample") or {}
            text = input_text(sample)
            rows.append([int(w["index"]), true, predicted, f"{w['confidence']:.0%}", _short(text)])
            note = f"predicted {predicted} with {w['confidence']:.0%} confidence (true class {true})"
            samples.append((w["split"], int(w["index"]), note))
            ids = " ".join(str(i) for i in sample.get("ids") or [])
            tooltips.append(
                f"{w['split']} #{w['index']}: true {true}, predicted {predicted} with confidence "
                f"{w['confidence']:.3f}\n{text}" + (f"\nids: {ids}" if ids and "text" in sample else "")
            )
        self.set_rows(rows, samples, tooltips)
        self._draw_signals(worst)
        # The input column takes what is left: it is the one people read.
        self.horizontalHeader().setStretchLastSection(True)

    def _draw_signals(self, worst: list[dict]) -> None:
        """A signal's line in its input cell, before its first values: its shape says more than the
        numbers."""
        drawn = False
        for r, w in enumerate(worst):
            sample = w.get("sample") or {}
            item = self.item(r, len(HEADERS) - 1)
            if sample.get("kind") != "signal" or item is None:
                continue
            picture = sparkline((sample.get("values") or [[]])[0], SERIES_COLOURS[0])
            if picture is not None:
                item.setIcon(QIcon(picture))
                drawn = True
        if drawn:
            self.setIconSize(QSize(SPARK_WIDTH, SPARK_HEIGHT))
            self.resizeRowsToContents()

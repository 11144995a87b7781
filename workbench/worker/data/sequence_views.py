"""Samples that are not images: token sequences (integer ids, shown as ids and as text where the user's
Dataset decodes them), 1-D float signals (drawn as lines) and tabular rows (a few dozen float features, a
table).

What kind an input is, a JSON-safe description of one input for the Data tab, the evaluation's worst samples
and Try it, and the input histograms data.info shows (sequence lengths, per-column values). The user's
`decode(ids)` or `vocab` runs here, in the worker, which already runs the Dataset's own code. Worker side:
torch, never Qt.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch.utils.data import Subset

from workbench.worker.data.user_views import is_image

TABULAR_MAX = 64  # a 1-D float input of at most this many values is a row of features; a longer one a signal
MAX_IDS = 512  # ids of one sequence sent to the window
MAX_TEXT = 600  # characters of decoded text sent to the window
MAX_POINTS = 1024  # points of a signal sent to the window (a longer one is strided down)
BINS = 30
PAD_ID = 0
PAD_NAMES = ("<pad>", "[pad]", "pad", "<blank>", "")


def input_kind(x) -> str:
    """ "image", "tokens" (a 1-D integer tensor), "tabular" (1-D float, at most TABULAR_MAX values), "signal"
    (a longer 1-D float, or a few channels × length) or "tensor" (anything else: shapes and ranges only)."""
    if is_image(x):
        return "image"
    if not isinstance(x, torch.Tensor) or x.is_complex() or x.numel() == 0 or x.dtype == torch.bool:
        return "tensor"
    if x.dim() == 1 and not x.is_floating_point():
        return "tokens"
    if x.dim() == 1:
        return "tabular" if x.shape[0] <= TABULAR_MAX else "signal"
    if x.dim() == 2 and x.is_floating_point() and x.shape[0] <= 8 and x.shape[1] > TABULAR_MAX:
        return "signal"
    return "tensor"


def user_object(source):
    """The object the user's code returned, beneath the Subsets a carved split wraps it in."""
    while isinstance(source, Subset):
        source = source.dataset
    return source


def vocab_of(source) -> list | None:
    vocab = getattr(user_object(source), "vocab", None)
    if isinstance(vocab, dict):  # token -> id: turned around
        try:
            inverse = {int(i): str(t) for t, i in vocab.items()}
        except (TypeError, ValueError):
            return None
        return [inverse.get(i, "?") for i in range(max(inverse) + 1)] if inverse else None
    return list(vocab) if isinstance(vocab, list | tuple) and vocab else None


def decoder(source) -> Callable[[list[int]], str] | None:
    """The Dataset's `decode(ids)`, else one made of its `vocab` list, else None."""
    obj = user_object(source)
    decode = getattr(obj, "decode", None)
    if callable(decode):
        return decode
    vocab = vocab_of(source)
    if vocab is None:
        return None
    return lambda ids: " ".join(str(vocab[i]) if 0 <= i < len(vocab) else f"<{i}>" for i in ids)


def pad_evident(ids: torch.Tensor, vocab: list | None) -> bool:
    """Id 0 is padding when the vocab names it so, or when the sequence ends in a run of zeros."""
    if vocab and str(vocab[0]).strip().lower() in PAD_NAMES:
        return True
    return bool(ids.numel() > 1 and int(ids[-1]) == PAD_ID and int(ids[0]) != PAD_ID)


def token_length(ids: torch.Tensor, vocab: list | None) -> int:
    """Non-padding tokens when padding is evident, else the length."""
    if pad_evident(ids, vocab):
        return int((ids != PAD_ID).sum())
    return int(ids.numel())


def _text(decode, ids: list[int]) -> tuple[str | None, str | None]:
    """(the decoded text, or None; the error, if the user's decode failed)."""
    if decode is None:
        return None, None
    try:
        text = decode(ids)
    except Exception as exc:  # the user's code: a failure is shown, not fatal to the page
        return None, f"decode failed: {type(exc).__name__}: {exc}"
    text = str(text)
    return (text[:MAX_TEXT] + "…" if len(text) > MAX_TEXT else text), None


def _floats(t: torch.Tensor) -> list[float]:
    values = torch.nan_to_num(t.detach().to(torch.float64), nan=0.0, posinf=0.0, neginf=0.0)
    return [round(float(v), 6) for v in values]


def feature_names(source, count: int) -> list[str]:
    """The Dataset's `feature_names` / `columns` when they name every feature, else f0, f1, ..."""
    obj = user_object(source)
    for attr in ("feature_names", "columns", "features"):
        names = getattr(obj, attr, None)
        if isinstance(names, list | tuple) and len(names) == count and all(isinstance(n, str) for n in names):
            return list(names)
    return [f"f{i}" for i in range(count)]


class Describer:
    """Describes inputs of one split's Dataset: its decoder and vocab found once, used for every sample."""

    def __init__(self, source):
        self.source = source
        self.decode = decoder(source)
        self.vocab = vocab_of(source)
        self._names: list[str] | None = None

    def names(self, count: int) -> list[str]:
        if self._names is None or len(self._names) != count:
            self._names = feature_names(self.source, count)
        return self._names

    def describe(self, x) -> dict:
        """{"kind", ...}: tokens get "ids", "length", "text"; signals "values" (strided) and "stride"; tabular
        rows "values" and "names"; images and other tensors only their kind."""
        kind = input_kind(x)
        out: dict = {"kind": kind}
        if kind == "tokens":
            ids = x.detach().cpu().to(torch.int64)
            listed = [int(i) for i in ids[:MAX_IDS]]
            text, error = _text(self.decode, [int(i) for i in ids])
            out.update(
                ids=listed,
                total=int(ids.numel()),
                length=token_length(ids, self.vocab),
                min=int(ids.min()),
                max=int(ids.max()),
                pad=pad_evident(ids, self.vocab),
            )
            if text is not None:
                out["text"] = text
            if error:
                out["decode_error"] = error
        elif kind == "signal":
            rows = x.detach().cpu().reshape(-1, x.shape[-1])
            stride = max(1, -(-rows.shape[1] // MAX_POINTS))
            out.update(values=[_floats(r[::stride]) for r in rows], stride=stride, length=int(rows.shape[1]))
        elif kind == "tabular":
            out.update(values=_floats(x.detach().cpu()), names=self.names(int(x.shape[0])))
        return out


class InputStats:
    """Collects the inputs of the first train samples (fed one by one) into data.info's "input_histogram":
    token sequences' lengths and id range, each tabular column's values, a signal's values."""

    def __init__(self, source):
        self.describer = Describer(source)
        self.kind: str | None = None
        self.lengths: list[int] = []
        self.low: float | None = None
        self.high: float | None = None
        self.rows: list[np.ndarray] = []

    def add(self, x) -> None:
        kind = input_kind(x)
        if self.kind is None:
            self.kind = kind
        if kind != self.kind or kind in ("image", "tensor"):
            return
        t = x.detach().cpu()
        if kind == "tokens":
            self.lengths.append(token_length(t, self.describer.vocab))
        values = t.to(torch.float64)
        low, high = float(values.min()), float(values.max())
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)
        if kind == "tabular":
            self.rows.append(values.numpy())
        elif kind == "signal" and len(self.rows) < 64:  # enough values for a histogram of them
            self.rows.append(values.reshape(-1).numpy())

    def result(self, sampled: int, total: int) -> dict | None:
        head = {
            "kind": self.kind,
            "sampled": int(sampled),
            "total": int(total),
            "min": self.low,
            "max": self.high,
        }
        if self.kind == "tokens" and self.lengths:
            lengths = np.asarray(self.lengths)
            low, high = int(lengths.min()), int(lengths.max())
            # One bin per length when few, else BINS bins (integer edges either way).
            edges = np.arange(low, high + 2) if high - low < BINS else np.linspace(low, high + 1, BINS + 1)
            counts, edges = np.histogram(lengths, bins=edges)
            return {
                **head,
                "counts": counts.tolist(),
                "edges": [float(e) for e in edges],
                "vocab_size": len(self.describer.vocab) if self.describer.vocab else None,
                "decodes": self.describer.decode is not None,
            }
        if self.kind == "tabular" and self.rows and len({r.shape for r in self.rows}) == 1:
            table = np.stack(self.rows)
            names = self.describer.names(table.shape[1])
            return {**head, "columns": [_column(name, table[:, i]) for i, name in enumerate(names)]}
        if self.kind == "signal" and self.rows:
            return {**head, **_histogram(np.concatenate(self.rows))}
        return None


def _histogram(values: np.ndarray) -> dict:
    values = values[np.isfinite(values)]
    if not values.size:
        return {"counts": [], "edges": []}
    low, high = float(values.min()), float(values.max())
    if low == high:
        low, high = low - 0.5, high + 0.5
    counts, edges = np.histogram(values, bins=BINS, range=(low, high))
    return {"counts": counts.tolist(), "edges": [float(e) for e in edges]}


def _column(name: str, values: np.ndarray) -> dict:
    finite = values[np.isfinite(values)]
    return {
        "name": name,
        "min": float(finite.min()) if finite.size else None,
        "max": float(finite.max()) if finite.size else None,
        "mean": float(finite.mean()) if finite.size else None,
        **_histogram(values),
    }


def attach_inputs(split, evaluation: dict) -> None:
    """Give each of an evaluation's worst samples its input as its kind reads ("sample": ids and text, a
    signal, a row), read from the split already loaded, so the evaluation view shows them without loading the
    dataset again; images and other tensors are left to the view's thumbnails."""
    worst = evaluation.get("worst")
    if not worst or not hasattr(split, "sample"):
        return
    describer = Describer(getattr(split, "source", None))
    described = []
    for row in worst:
        x, _ = split.sample(int(row["index"]))
        sample = describer.describe(x)
        if sample["kind"] in ("image", "tensor"):
            return
        described.append(sample)
    for row, sample in zip(worst, described, strict=True):
        row["sample"] = sample
    evaluation["input_kind"] = described[0]["kind"]

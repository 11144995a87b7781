"""A finding of the doctor: one layer's cause of error, its evidence, the fixes tried with their measured
results and the best one's gain; `to_dict` is its entry in the result JSON."""

from __future__ import annotations

from dataclasses import dataclass, field

FIX_TEXT = {
    "cle": "rescale this layer's output channels and the next layer's inputs so their ranges match "
    "(cross-layer equalisation; the float function is unchanged)",
    "cle_fanout": "rescale this layer's output channels and the inputs of every layer it feeds (equalisation "
    "across the fan-out; the float function is unchanged)",
    "smoothquant": "move the activation's per-channel scale into the next layer's weights (SmoothQuant, "
    "alpha searched; the float function is unchanged)",
    "concat_rescale": "scale the wider inputs of the concatenation down at their producers and up in its "
    "consumer (equalisation through the concat; the float function is unchanged)",
    "per_channel": "quantize this layer's weights with one scale per output channel",
    "mse_range": "choose the range with the least squared error",
    "percentile_range": "clip the range at a percentile of the values",
    "minmax_range": "use the tensor's own extremes as its range: nothing is clipped",
    "bias_correction": "correct the shift quantization causes in each layer's mean output (empirical)",
    "bits_16": "keep this layer (its weights and output) at 16 bits",
    "keep_float": "leave this layer in float",
    "relu6_to_relu": "replace the ReLU6 by a ReLU so cross-layer equalisation can rescale across it (the "
    "float model no longer clips at 6)",
}


@dataclass
class Finding:
    """Why one layer (or a concatenation, or an activation point) hurts, and what was tried for it."""

    layer: str
    tensor: str  # "weight" or "activation"
    cause: str
    summary: str
    evidence: dict
    groups: list[str] = field(default_factory=list)  # the simulation's groups that carry the error (severity)
    candidates: list = field(default_factory=list)  # trial.Change objects, tried in this order
    severity: float = 0.0
    fix: str = ""
    fix_text: str = ""
    tried: list[dict] = field(default_factory=list)
    gain: dict = field(default_factory=dict)
    best: object = None  # the best candidate Change (not serialised)
    verified: bool = False  # the best fix measurably helped: more logit SQNR, a monitor no worse

    @property
    def id(self) -> str:
        return f"{self.layer}:{self.tensor}:{self.cause}"

    @classmethod
    def from_dict(cls, item: dict) -> Finding:
        """A finding another check wrote in the result's shape (workbench.quant_findings' backend_findings),
        for diagnose.BACKEND_CHECKS to hand in; nothing is tried for it here."""
        return cls(
            item["layer"],
            item.get("tensor", "activation"),
            item["cause"],
            item.get("summary", ""),
            dict(item.get("evidence", {})),
            severity=float(item.get("severity", 0.0)),
            fix=item.get("fix", ""),
            fix_text=item.get("fix_text", ""),
        )

    def to_dict(self) -> dict:
        fix = self.fix or (self.candidates[0].fix if self.candidates else "")
        return {
            "id": self.id,
            "layer": self.layer,
            "tensor": self.tensor,
            "cause": self.cause,
            "summary": self.summary,
            "evidence": self.evidence,
            "fix": fix,
            "fix_text": self.fix_text or FIX_TEXT.get(fix, ""),
            "tried": self.tried,
            "gain": self.gain,
            "severity": round(float(self.severity), 4),
        }

"""`predict.model`: Try it, a training or quantize run's model on one image or dataset sample (the engine is
workbench.worker.predict). torch loads inside the task, not at import, so listing tasks stays cheap. Never
imports Qt.
"""

from __future__ import annotations

from workbench.specs import PredictSpec
from workbench.worker.registry import register_task


# A query, not a job: one forward pass (two for a quantize run) that the window asks for while a training job
# may be running, so it runs beside jobs instead of waiting behind them; it writes no run.
@register_task("predict.model", kind="query", spec=PredictSpec, creates_run=False)
def predict_model(spec: PredictSpec, ctx):
    """Try a run's model on one image or sample: top-k classes with probabilities (FP32 beside quantized)."""
    from workbench.worker.predict import run_predict

    return run_predict(spec, ctx)

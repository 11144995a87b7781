"""`quant.analyze`: post-training quantization and its analysis from a QuantSpec (the engine is
workbench.worker.quant). torch loads inside the task, not at import, so listing tasks stays cheap. Never
imports Qt.
"""

from __future__ import annotations

from workbench.specs import QuantSpec
from workbench.worker.registry import register_task


@register_task("quant.analyze", kind="job", spec=QuantSpec)
def quant_analyze(spec: QuantSpec, ctx):
    """Quantize a trained model (PTQ pipeline), with the accuracy ladder, per-layer errors and histograms."""
    from workbench.worker.job_threads import sized_threads
    from workbench.worker.quant import run_quantization

    with sized_threads(ctx.log):  # a training beside it must not make every op wait on a busy core
        return run_quantization(spec, ctx)

"""`export.model`: a model written as TorchScript, torch.export, ONNX, ONNX QDQ or TensorRT, checked against
eager PyTorch (the engine is workbench.worker.export). torch loads inside the task, not at import, so listing
tasks stays cheap. Never imports Qt.
"""

from __future__ import annotations

from workbench.specs import ExportSpec
from workbench.worker.registry import register_task


@register_task("export.model", kind="job", spec=ExportSpec)
def export_model(spec: ExportSpec, ctx):
    """Export a model to one deployment format and check its outputs against eager PyTorch (parity)."""
    from workbench.worker.export.engine import run_export
    from workbench.worker.job_threads import sized_threads

    with sized_threads(ctx.log):  # parity runs the model on the CPU: one thread per free core
        return run_export(spec, ctx)

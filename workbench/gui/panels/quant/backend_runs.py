"""Which QDQ export compared a quantize run with onnxruntime: the newest finished `onnx_qdq` export run whose
`quant_run` is that run, read from the run store (no torch), for the Doctor view's backend findings and
table."""

from __future__ import annotations

from workbench.errors import WorkbenchError
from workbench.task_ids import EXPORT_TASK


def newest_qdq_export(store, quant_run_id: str) -> dict | None:
    """{"run": export run id, "report": its report} of the newest finished ONNX QDQ export of `quant_run_id`
    whose report has a per-module comparison; None when there is none (or the store cannot be read)."""
    if store is None or not quant_run_id:
        return None
    try:
        entries = store.list_runs()  # newest first
    except (WorkbenchError, OSError):
        return None
    for entry in entries:
        if entry.get("task") != EXPORT_TASK or entry.get("status") != "done":
            continue
        try:
            with store.open_run(entry["id"]) as run:
                report = run.read_report() or {}
        except (WorkbenchError, OSError):
            continue
        if (
            isinstance(report, dict)
            and report.get("format") == "onnx_qdq"
            and report.get("quant_run") == quant_run_id
            and isinstance(report.get("by_module"), list)
        ):
            return {"run": entry["id"], "report": report}
    return None

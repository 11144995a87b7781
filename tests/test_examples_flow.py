"""Each bundled example (resources/examples) through the whole flow of issue #20: train, quantize W8A8, export
to ONNX with parity on its own samples, write the quantize run's QDQ model, and bench the float model, its
ONNX and the int8 model. Minutes of five trainings on two cores, so in the heavy tier (`pytest -m heavy`); the
default run keeps the short training of each example (test_examples.py) and the downstream flow on projects
the tests write."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from workbench.specs import TrainSpec
from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

EXAMPLES = Path(__file__).resolve().parents[1] / "workbench" / "resources" / "examples"
QUICK_DATA = {"shapes_segmentation": {"size": 96}, "names_transformer": {"size": 800}}  # the rest are small

pytestmark = pytest.mark.heavy


def run(task: str, spec: dict, workspace: Path) -> dict:
    result = run_task(get_task(task), spec, emit=lambda *a: None, workspace=workspace)
    assert result["status"] == "done", (task, result.get("error"))
    return result


@pytest.mark.parametrize(
    "name",
    [
        "shapes_segmentation",
        "diabetes_regression",
        "digit_attributes",
        "digits_lightning",
        "names_transformer",
    ],
)
def test_an_example_goes_through_quantize_export_and_bench(name, tmp_path, monkeypatch):
    if name == "digits_lightning":
        pytest.importorskip("lightning")
    monkeypatch.chdir(tmp_path)
    workspace = tmp_path / "ws"
    spec = TrainSpec.load(EXAMPLES / name / "train.toml")
    data = spec.dataset
    if not spec.dataset.name.startswith("lightning:"):
        data = dataclasses.replace(data, num_workers=0, args={**data.args, **QUICK_DATA.get(name, {})})
    trained = run("train.classifier", dataclasses.replace(spec, epochs=2, dataset=data).to_dict(), workspace)
    source = {"run": trained["run_dir"]}

    quantized = run(
        "quant.analyze", {"source": source, "calibration": {"samples": 64}, "eval_samples": 64}, workspace
    )
    # The ladder is in the task's monitor, not accuracy; a LightningModule's run says task=custom (its module
    # decides what it computes), while quantize classifies its digits and measures them in accuracy.
    if trained["task"] not in ("classification", "auto") and not trained.get("lightning"):
        assert quantized["metric"]["name"] == trained["monitor"]["name"], quantized.get("metric")

    exported = run("export.model", {"source": source, "format": "onnx"}, workspace)
    assert exported["parity"]["passed"], exported["parity"]
    qdq = run("export.model", {"source": {"run": quantized["run_dir"]}, "format": "onnx_qdq"}, workspace)
    assert Path(qdq["artifact"]).is_file()

    common = {"iters": 3, "warmup": 1, "min_time_s": 0, "batch_sizes": [1, 8]}
    bench = run(
        "bench.latency",
        {"source": source, "artifact": exported["artifact"], "backends": ["eager", "onnxruntime"], **common},
        workspace,
    )
    int8 = run(
        "bench.latency",
        {"source": {"run": quantized["run_dir"]}, "backends": ["onnxruntime_int8"], **common},
        workspace,
    )
    rows = bench["results"] + int8["results"]
    assert [r["status"] for r in rows] == ["ok"] * 6, [(r["backend"], r["reason"]) for r in rows]

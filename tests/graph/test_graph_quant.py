"""`graph.build` with `quant_run`: a real (small) quantize run's per-layer SQNR painted on its training run's
graph as two overlays, the index entries naming the run, and the clear refusals of runs that cannot be
painted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from graph_helpers import build, done, load_json, quantize, stored_training_run

from workbench.runs import RunStore
from workbench.specs import GraphSpec

WEIGHT, ACTIVATION = "quant_weight_sqnr", "quant_activation_sqnr"


@pytest.fixture(scope="module")
def quant_run(tmp_path_factory):
    """(workspace, training run id, the quantize run's result) of the digits cnn quantized at W4A8."""
    workspace = tmp_path_factory.mktemp("quant-graph")
    train_id = stored_training_run(workspace)
    result = quantize(workspace, {"source": {"run": train_id}, "weights": {"bits": 4}})
    assert result["status"] == "done", result.get("error")
    return workspace, train_id, result


@pytest.fixture(scope="module")
def painted(quant_run):
    workspace, _, quant = quant_run
    logs: list[str] = []
    return done(build(workspace, {"quant_run": Path(quant["run_dir"]).name}, logs)), logs


def _sqnr(quant: dict, tensor: str) -> dict[str, float]:
    return {e["name"]: e["sqnr_db"] for e in quant["layers"] if e["tensor"] == tensor}


def test_spec_takes_quant_run():
    assert GraphSpec.from_dict({"quant_run": " 2026-quant-abc "}).quant_run == "2026-quant-abc"
    assert GraphSpec().quant_run == ""


def test_weight_and_activation_sqnr_overlays_hold_the_reports_values(quant_run, painted):
    _, train_id, quant = quant_run
    result, logs = painted
    quant_id = Path(quant["run_dir"]).name
    # source.run defaulted to the run the quantize run quantized.
    assert result["quant_run"] == quant_id and train_id in result["model"]
    assert any(f"Weight SQNR (dB) of run {quant_id}" in line for line in logs)
    index = load_json(result["overlays_json"])["overlays"]
    assert {"params", "flops", WEIGHT, ACTIVATION} <= set(index)
    for metric, tensor, label in (
        (WEIGHT, "weight", "Weight SQNR (dB)"),
        (ACTIVATION, "activation", "Activation SQNR (dB)"),
    ):
        entry = index[metric]
        assert (entry["label"], entry["quant_run"], entry["tensor"]) == (label, quant_id, tensor)
        assert entry["higher_is_better"] is True and entry["additive"] is False
        assert result["overlays"][metric]["quant_run"] == quant_id
        expected = {name: value for name, value in _sqnr(quant, tensor).items() if name != "input"}
        assert expected and entry["values"] == pytest.approx(expected)
        # Model Explorer's node data: each layer's value on one node of its module, darkest where SQNR is
        # lowest.
        data = load_json(Path(result["overlays_json"]).parent / entry["path"])
        assert data["name"] == label
        assert sorted(r["value"] for r in data["results"].values()) == pytest.approx(
            sorted(expected.values())
        )
        worst = min(data["results"].values(), key=lambda r: r["value"])
        assert worst["bgColor"] == entry["legend"]["colors"][0] == "#8c2d04"
    # the model's input: in the report, on no module of the graph
    assert "input" in _sqnr(quant, "activation")
    assert "input" not in index[ACTIVATION]["values"]
    json.dumps(result, allow_nan=False)


def test_quant_run_by_folder_with_its_source_run_given(quant_run):
    workspace, train_id, quant = quant_run
    logs: list[str] = []
    result = done(build(workspace, {"quant_run": quant["run_dir"], "source": {"run": train_id}}, logs))
    assert result["quant_run"] == Path(quant["run_dir"]).name
    assert result["overlays"][WEIGHT]["nodes"] == len(_sqnr(quant, "weight"))
    assert not any("is not the run" in line for line in logs)


def test_another_training_run_as_source_is_painted_with_a_warning(quant_run):
    workspace, _, quant = quant_run
    other = stored_training_run(workspace, seed=8)
    logs: list[str] = []
    result = done(build(workspace, {"quant_run": quant["run_dir"], "source": {"run": other}}, logs))
    assert other in result["model"] and WEIGHT in result["overlays"]
    assert any("is not the run" in line for line in logs)


def test_a_training_run_is_not_a_quantize_run(quant_run):
    workspace, train_id, _ = quant_run
    result = build(workspace, {"quant_run": train_id})
    assert result["status"] == "failed"
    assert result["error"]["message"].startswith(f"quant_run: run {train_id} is not a quantize run")


@pytest.mark.parametrize("status", ["running", "failed"])
def test_an_unfinished_quantize_run_is_refused(tmp_path, status):
    train_id = stored_training_run(tmp_path)
    run = RunStore(tmp_path).create_run("quant", {"source": {"run": train_id}}, task="quant.analyze")
    run.set_status(status, "calibration diverged" if status == "failed" else "")
    try:  # a running one is still owned, as by a live job
        result = build(tmp_path, {"quant_run": run.id})
    finally:
        run.close()
    assert result["status"] == "failed"
    message = result["error"]["message"]
    assert message.startswith(f"quant_run: run {run.id} has not finished ({status}")
    assert status == "running" or "calibration diverged" in message


def test_a_missing_quant_run_is_named(tmp_path):
    result = build(tmp_path, {"quant_run": "20990101-000000-quant-000000"})
    assert result["status"] == "failed" and result["error"]["message"].startswith("quant_run: No run matches")


def test_a_model_without_the_quantized_layers_is_refused(quant_run):
    workspace, _, quant = quant_run
    result = build(
        workspace, {"quant_run": quant["run_dir"], "model": {"name": "mlp", "input_shape": [1, 8, 8]}}
    )
    assert result["status"] == "failed"
    assert "is a module of this graph" in result["error"]["message"]

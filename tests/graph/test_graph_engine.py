"""`graph.build` through the real runner: the result contract, hand-counted parameters and FLOPs of `cnn`, the
module-hierarchy fallback, the three sources (model, run, file) and overlays Model Explorer's own format
accepts."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import torch
from graph_helpers import BRANCHY, CONTRACT_KEYS, build, done, graph_nodes, load_json, modules

from workbench.runs import RunStore
from workbench.specs import TrainSpec
from workbench.worker.checkpoints import save_state_dict
from workbench.worker.graph import write_overlay
from workbench.worker.graph.overlays import node_modules
from workbench.worker.models import build_model

# cnn at 1x28x28: three conv stages (32, 64, 128 channels, 3x3, no bias), pooling after the first two.
CNN_28 = {"model": {"name": "cnn", "input_shape": [1, 28, 28]}}
CNN_PARAMS = {
    "features.0": 1 * 32 * 9,
    "features.1": 2 * 32,
    "features.4": 32 * 64 * 9,
    "features.5": 2 * 64,
    "features.8": 64 * 128 * 9,
    "features.9": 2 * 128,
    "classifier": 128 * 10 + 10,
}
# 2 FLOPs per multiply-add, as torch.utils.flop_counter counts; BatchNorm, ReLU and pooling count nothing.
CNN_FLOPS = {
    "features.0": 2 * 32 * 28 * 28 * (1 * 9),
    "features.4": 2 * 64 * 14 * 14 * (32 * 9),
    "features.8": 2 * 128 * 7 * 7 * (64 * 9),
    "classifier": 2 * 128 * 10,
}


@pytest.fixture(scope="module")
def cnn_graph(tmp_path_factory):
    workspace = tmp_path_factory.mktemp("ws")
    return done(build(workspace, CNN_28)), workspace


def test_result_has_every_contract_key(cnn_graph):
    result, _ = cnn_graph
    assert CONTRACT_KEYS <= set(result)
    assert (
        result["capture"] == "non_strict"
        and result["capture_reason"] == "torch.export (non-strict) captured the whole model"
    )
    assert result["graph_json"].startswith(result["run_dir"])
    assert result["nodes"] == len(graph_nodes(result)) > 0
    assert {"name", "type", "output_shape", "params", "flops"} <= set(result["modules"][0])
    json.dumps(result, allow_nan=False)


def test_cnn_params_and_flops_match_hand_counts(cnn_graph):
    result, _ = cnn_graph
    rows = modules(result)
    assert result["params_total"] == result["params_trainable"] == sum(CNN_PARAMS.values()) == 94_186
    assert result["flops"] == sum(CNN_FLOPS.values()) == 14_904_832
    for name, count in CNN_PARAMS.items():
        assert rows[name]["params"] == count, name
    for name, row in rows.items():
        assert row["flops"] == CNN_FLOPS.get(name, row["flops"] if not row["leaf"] else 0), name
    assert (
        rows[""]["flops"] == result["flops"]
        and rows["features"]["flops"] == result["flops"] - CNN_FLOPS["classifier"]
    )
    assert rows["features.0"]["output_shape"] == [32, 28, 28]
    assert rows["features.3"]["output_shape"] == [32, 14, 14]  # after the first pooling
    assert rows["features.8"]["output_shape"] == [128, 7, 7]
    assert rows[""]["output_shape"] == [10] and rows["features.0"]["type"] == "Conv2d"


def test_every_op_node_names_its_module(cnn_graph):
    result, _ = cnn_graph
    named = dict(node_modules(load_json(result["graph_json"])))
    assert named["conv2d"] == "features.0" and named["linear"] == "classifier"


def test_the_graph_is_laid_out_denser_than_model_explorers_default(cnn_graph):
    result, _ = cnn_graph
    (graph,) = load_json(result["graph_json"])["graphs"]
    assert graph["layoutConfigs"]["rankSep"] < 50  # Model Explorer's own gap: a tall chain too small to read


def test_overlays_are_model_explorer_node_data(cnn_graph):
    """Each overlay file is a GraphNodeData: it rebuilds from Model Explorer's own dataclasses and serialises
    back to the same JSON, passes the check its web app applies when it loads a node-data file, and keys real
    nodes."""
    from model_explorer.node_data_builder import GraphNodeData, NodeDataResult

    result, _ = cnn_graph
    ids = {node["id"] for node in graph_nodes(result)}
    folder = json.loads(json.dumps(result["overlays"]))
    assert set(folder) == {"params", "flops"}  # no profile in a model.* graph, so no self-time
    for metric, summary in result["overlays"].items():
        path = f"{result['run_dir']}/artifacts/graph/{summary['path']}"
        data = load_json(path)
        rebuilt = GraphNodeData(
            name=data["name"], results={k: NodeDataResult(**v) for k, v in data["results"].items()}
        )
        assert json.loads(rebuilt.to_json_string()) == {
            **data,
            "thresholds": [],
            "gradient": [],
            "hideInAggregatedStatsTable": False,
            "hideInChildrenStatsTable": False,
            "showExpandedSummaryOnGroupNode": False,
            "showLabelCountColumnsInChildrenStatsTable": False,
        }
        # main-*.js getNodeDataProviderData: `r.results != null && r.results.results == null` -> one graph's
        # data.
        assert data["results"] and "results" not in data["results"]
        assert set(data["results"]) <= ids, metric
        assert all(re.fullmatch(r"#[0-9a-f]{6}", r["bgColor"]) for r in data["results"].values())
    flops = load_json(f"{result['run_dir']}/artifacts/graph/overlays/flops.json")["results"]
    # Additive overlays hold each module's own part, so Model Explorer's layer sums are the modules' totals.
    assert sum(r["value"] for r in flops.values()) == pytest.approx(result["flops"] / 1e6)
    assert max(flops, key=lambda n: flops[n]["value"]) in ("conv2d_1", "conv2d_2")


def test_write_overlay_paints_any_per_layer_result(cnn_graph, tmp_path):
    """A later per-layer result (quantization SQNR, say) is keyed by module name and painted on the same
    graph."""
    result, _ = cnn_graph
    sqnr = {"features.0": 40.0, "features.4": 31.5, "features.8": 22.0, "classifier": 35.0}
    overlay = write_overlay(
        tmp_path,
        "sqnr_db",
        sqnr,
        graph=result["graph_json"],
        label="SQNR (dB)",
        additive=False,
        higher_is_better=True,
    )
    data = load_json(overlay.path)["results"]
    assert {k: v["value"] for k, v in data.items()} == {
        "conv2d": 40.0,
        "conv2d_1": 31.5,
        "conv2d_2": 22.0,
        "linear": 35.0,
    }
    assert data["conv2d_2"]["bgColor"] == "#8c2d04"  # the worst layer is the darkest
    index = load_json(tmp_path / "overlays.json")["overlays"]["sqnr_db"]
    assert index["values"] == sqnr and index["legend"]["min"] == 22.0 and index["higher_is_better"]


def test_fallback_to_the_module_hierarchy_for_data_dependent_control_flow(tmp_path):
    source = tmp_path / "branchy.py"
    source.write_text(BRANCHY)
    result = done(
        build(tmp_path / "ws", {"model": {"name": f"file:{source}:Branchy", "input_shape": [1, 8, 8]}})
    )
    assert result["capture"] == "modules"
    reason = result["capture_reason"]
    assert "strict export failed" in reason and "non-strict export failed" in reason
    assert reason.index("non-strict export failed") < reason.index("; strict export failed")  # tried first
    assert f"{source}, line 15" in reason  # the user's `if h.sum() > 0:`
    rows = modules(result)
    assert rows["conv"]["output_shape"] == [4, 8, 8]
    taken = "a" if rows["a"]["output_shape"] else "b"
    other = "b" if taken == "a" else "a"
    assert rows[taken]["output_shape"] == [10] and rows[other]["output_shape"] is None  # never called
    assert result["params_total"] == 4 * 9 + 4 + 2 * (256 * 10 + 10)
    assert result["flops"] == 2 * 4 * 64 * 9 + 2 * 256 * 10
    nodes = {node["id"]: node for node in graph_nodes(result)}
    assert list(nodes) == ["input", "conv", taken, "output"] and result["nodes"] == 4
    assert nodes[taken]["incomingEdges"][0]["sourceNodeId"] == "conv"
    assert nodes["output"]["incomingEdges"][0]["sourceNodeId"] == taken
    flops = load_json(f"{result['run_dir']}/artifacts/graph/overlays/flops.json")["results"]
    assert set(flops) == {"conv", taken}


def _fake_training_run(workspace, *, profile: bool) -> tuple[str, dict]:
    """A training run as the store keeps one: its spec, a best.pt of known weights and (maybe) a profile."""
    spec = TrainSpec.from_dict({"model": {"name": "cnn", "input_shape": [1, 12, 12]}, "epochs": 1})
    run = RunStore(workspace).create_run("train", spec.to_dict(), task="train.classifier")
    torch.manual_seed(7)
    state = build_model(spec.model).state_dict()
    save_state_dict(state, run.checkpoints_dir / "best.pt")
    save_state_dict(
        {"model": {k: torch.zeros_like(v) for k, v in state.items()}}, run.checkpoints_dir / "last.pt"
    )
    if profile:
        (run.artifacts_dir / "profile_top_ops.json").write_text("[]")
    run.set_status("done")
    run.close()
    return str(run.dir), state


def test_source_run_uses_the_runs_model_and_best_checkpoint(tmp_path):
    run_dir, state = _fake_training_run(tmp_path, profile=True)
    logs: list[str] = []
    result = done(build(tmp_path, {"source": {"run": run_dir.rsplit("/", 1)[-1]}}, logs))
    assert result["input_shape"] == [1, 12, 12] and modules(result)["features.0"]["output_shape"] == [
        32,
        12,
        12,
    ]
    assert any("checkpoints/best.pt" in line for line in logs)
    weight = next(n for n in graph_nodes(result) if n["id"] == "p_features_0_weight")
    shown = json.loads(next(a["value"] for a in weight["attrs"] if a["key"] == "__value"))
    assert shown == pytest.approx(state["features.0.weight"].flatten()[:16].tolist())  # best.pt, not last.pt
    assert "self_time_ms" in result["overlays"]  # the run has a profile
    times = load_json(f"{result['run_dir']}/artifacts/graph/overlays.json")["overlays"]["self_time_ms"][
        "values"
    ]
    assert times[""] > 0 and set(times) == set(modules(result))


def test_source_run_must_be_a_training_run(tmp_path):
    other = done(build(tmp_path, CNN_28))
    result = build(tmp_path, {"source": {"run": other["run_dir"]}})
    assert result["status"] == "failed" and "needs a training run" in result["error"]["message"]


def test_source_file_exported_program(tmp_path):
    model = build_model(dataclasses.replace(TrainSpec().model, input_shape=[1, 28, 28])).eval()
    path = tmp_path / "cnn.pt2"
    torch.export.save(torch.export.export(model, (torch.zeros(1, 1, 28, 28),)), path)
    result = done(build(tmp_path / "ws", {"source": {"file": str(path)}}))
    assert result["capture"] == "export" and "saved ExportedProgram" in result["capture_reason"]
    assert result["params_total"] == 94_186 and result["flops"] == 14_904_832
    rows = modules(result)
    assert rows["features.0"]["type"] == "Conv2d" and rows["features.8"]["output_shape"] == [128, 7, 7]


def test_source_file_that_is_not_an_exported_program(tmp_path):
    path = tmp_path / "broken.pt2"
    path.write_bytes(b"not a zip at all")
    result = build(tmp_path / "ws", {"source": {"file": str(path)}})
    assert result["status"] == "failed" and str(path) in result["error"]["message"]
    assert "Traceback" not in result["error"]["message"]
    result = build(tmp_path / "ws", {"source": {"file": str(tmp_path / "model.h5")}})
    assert result["status"] == "failed" and "(.pt2) or an ONNX file" in result["error"]["message"]


def test_source_file_onnx(tmp_path):
    model = build_model(dataclasses.replace(TrainSpec().model, input_shape=[1, 28, 28])).eval()
    path = tmp_path / "cnn.onnx"
    torch.onnx.export(model, (torch.zeros(1, 1, 28, 28),), str(path), dynamo=False, do_constant_folding=False)
    result = done(build(tmp_path / "ws", {"source": {"file": str(path)}}))
    assert "model-explorer-onnx" in result["capture_reason"]
    assert result["params_total"] == 94_186  # this file's initializers are exactly the model's parameters
    assert result["flops"] == 14_904_832  # Conv and Gemm, counted as torch's flop counter counts them
    ids = {node["id"] for node in graph_nodes(result)}
    flops = load_json(f"{result['run_dir']}/artifacts/graph/overlays/flops.json")["results"]
    assert len(flops) == 4 and set(flops) <= ids


class _Point:  # a plain Python object: weights_only unpickling refuses it
    def __init__(self, x):
        self.x = x


def test_the_pt2_guard_restricts_only_the_thread_that_loads(tmp_path):
    import threading

    from workbench.worker.graph.sources import _weights_only_unpickling

    path = tmp_path / "object.pt"
    torch.save({"point": _Point(3)}, path)
    other: dict = {}
    with _weights_only_unpickling():
        # Another job of the worker, loading its own file meanwhile, unpickles as it always does ...
        thread = threading.Thread(target=lambda: other.update(torch.load(path, weights_only=False)))
        thread.start()
        thread.join()
        # ... while the loading thread itself cannot unpickle an object.
        with pytest.raises(Exception, match="(?i)weights.only|unsupported|global"):
            torch.load(path, weights_only=False)
    assert other["point"].x == 3
    assert torch.load(path, weights_only=False)["point"].x == 3  # and the guard is gone afterwards

"""The quantization doctor on a digits CNN with two planted, function-preserving pathologies: one output
channel of conv1 scaled x100 (conv2's inputs divided by 100) and one branch scaled x50 before a torch.cat (the
consumer's inputs divided by 50). W8A8 collapses the logit SQNR; the doctor names both causes, applies
verified fixes and brings the SQNR back to the unplanted model's. Real training, real pipeline, real torch."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from event_recorder import Events

from workbench.errors import SpecError
from workbench.specs import apply_overrides
from workbench.specs.jobs import QuantSpec
from workbench.worker.checkpoints import load_state_dict
from workbench.worker.quant.doctor.findings import FIX_TEXT
from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

MODEL = """
import torch
from torch import nn


class Branchy(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.branch_a = nn.Conv2d(16, 8, 1)
        self.branch_b = nn.Conv2d(16, 8, 3, padding=1)
        self.conv3 = nn.Conv2d(16, 16, 3, padding=1)
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        x = torch.cat([torch.relu(self.branch_a(x)), torch.relu(self.branch_b(x))], dim=1)
        x = torch.relu(self.conv3(x))
        return self.fc(x.mean((2, 3)))
"""
DATA = {"name": "digits", "test_fraction": 0.25}
CAUSES = {
    "outlier_channels",
    "mixed_range_concat",
    "weight_outliers",
    "clipping",
    "bias_shift",
    "low_bits_sensitive",
    "relu6_blocks_cle",
    "backend_mismatch",
}


def _run(task: str, spec: dict, workspace: Path, events: Events | None = None) -> dict:
    result = run_task(get_task(task), spec, emit=events or Events(), workspace=workspace)
    assert result["status"] == "done", (result.get("error"), result.get("traceback"))
    return result


def plant(state: dict) -> dict:
    """The two pathologies, each exactly undone by the next layer: the float model computes the same
    function."""
    state = {k: v.clone() for k, v in state.items()}
    k = int(state["conv1.weight"].reshape(16, -1).abs().amax(1).argmax())
    state["conv1.weight"][k] *= 100
    state["conv1.bias"][k] *= 100
    state["conv2.weight"][:, k] /= 100
    state["branch_b.weight"] *= 50
    state["branch_b.bias"] *= 50
    state["conv3.weight"][:, 8:] /= 50
    return state


@pytest.fixture(scope="module")
def doctored(tmp_path_factory):
    """(clean quantize result, planted one with the doctor applying, its events, quantize(spec parts))."""
    root = tmp_path_factory.mktemp("doctor")
    (root / "branchy.py").write_text(textwrap.dedent(MODEL))
    workspace = root / "ws"
    model = {"name": f"file:{root / 'branchy.py'}:Branchy"}
    trained = _run(
        "train.classifier",
        {
            "dataset": DATA,
            "model": model,
            "epochs": 8,
            "batch_size": 32,
            "lr": 2e-2,
            "scheduler": "onecycle",
            "keep_best": False,
        },
        workspace,
    )
    state = load_state_dict(Path(trained["run_dir"]) / "checkpoints" / "model.pt")
    torch.save(state, root / "clean.pt")
    torch.save(plant(state), root / "planted.pt")

    def quantize(checkpoint: str, events: Events | None = None, **parts) -> dict:
        spec = {
            "model": {**model, "checkpoint": str(root / checkpoint)},
            "dataset": DATA,
            "calibration": {"samples": 256, "seed": 0},
            **parts,
        }
        return _run("quant.analyze", spec, workspace, events)

    events = Events()
    planted = quantize("planted.pt", events, doctor={"enabled": True, "apply": True})
    return quantize("clean.pt"), planted, events, quantize


def test_the_doctor_names_both_pathologies_and_recovers_the_clean_sqnr(doctored):
    clean, planted, events, _ = doctored
    clean_db = clean["quantized"]["logit_sqnr_db"]
    assert "doctor" not in clean  # off by default
    assert planted["quantized"]["logit_sqnr_db"] < clean_db - 15  # W8A8 collapses on the planted model
    block = planted["doctor"]
    by_cause = {}
    for finding in block["findings"]:
        assert set(finding) >= {
            "id",
            "layer",
            "tensor",
            "cause",
            "summary",
            "evidence",
            "fix",
            "fix_text",
            "tried",
            "gain",
            "severity",
        }
        assert finding["cause"] in CAUSES and finding["tensor"] in ("weight", "activation")
        assert finding["id"] == f"{finding['layer']}:{finding['tensor']}:{finding['cause']}"
        by_cause.setdefault(finding["cause"], []).append(finding)
    severities = [f["severity"] for f in block["findings"]]
    assert severities == sorted(severities, reverse=True)  # worst first
    outlier = next(f for f in by_cause["outlier_channels"] if f["layer"] == "conv1")
    assert outlier["evidence"]["ratio"] > 20 and outlier["evidence"]["axis"] == 1
    assert len(outlier["evidence"]["ranges"]) == 16 and outlier["evidence"]["channels"]
    concat = by_cause["mixed_range_concat"][0]
    assert concat["evidence"]["op"] == "cat" and concat["evidence"]["range_ratio"] > 10
    assert 0.5 < concat["evidence"]["lost_share"] < 1
    assert [i["name"] for i in concat["evidence"]["inputs"]] == ["branch_a", "branch_b"]
    assert concat["fix"] == "concat_rescale" and concat["fix_text"] == FIX_TEXT["concat_rescale"]
    assert {t["fix"] for t in concat["tried"]} >= {"concat_rescale", "keep_float"}
    # Applied: function-preserving fixes for both, each raising the SQNR it was measured on top of.
    applied = {a["fix"]: a for a in block["applied"]}
    assert "concat_rescale" in applied and applied.keys() & {"cle", "smoothquant", "cle_fanout"}
    for item in block["applied"]:
        assert item["sqnr_db_after"] > item["sqnr_db_before"] and item["changed"]
    assert block["baseline"]["monitor_name"] == "accuracy"
    assert abs(block["baseline"]["sqnr_db"] - planted["quantized"]["logit_sqnr_db"]) < 0.5
    assert block["after"]["sqnr_db"] > clean_db - 1.5, (block["after"], clean_db)
    assert block["after"]["monitor"] >= clean["quantized"]["accuracy"] - 0.01
    # The doctor's rung closes the ladder, and the log says what was found and applied.
    assert [s["step"] for s in planted["steps"]][-1] == "doctor"
    assert planted["steps"][-1]["accuracy"] == block["after"]["monitor"]
    logs = [e["text"] for e in events.of("log")]
    assert any("doctor: cat" in t and "mixed_range_concat" in t for t in logs)
    assert any(t.startswith("doctor applied concat_rescale to cat") for t in logs)


def test_a_fix_with_no_gain_is_not_applied(doctored):
    _, planted, _, _ = doctored
    block = planted["doctor"]
    applied = {a["id"] for a in block["applied"]}
    kept = {f"{a['layer']}:{a['fix']}" for a in block["applied"]}
    # The doctor stopped because nothing left helped: every fix not applied was measured on top of all those
    # applied, and gained nothing there.
    last = [
        (f, row)
        for f in block["findings"]
        if f["id"] not in applied
        for row in f["tried"]
        if set(row.get("with", [])) == kept
    ]
    assert last, block["findings"]
    for finding, row in last:
        assert (
            row["sqnr_db"] < block["after"]["sqnr_db"] + 0.1
            or row["monitor"] < block["after"]["monitor"] - 0.01
        ), (finding["id"], row, block["after"])


def test_only_the_fixes_named_are_tried_and_only_a_gain_is_applied(doctored):
    _, planted, _, quantize = doctored
    events = Events()
    result = quantize("planted.pt", events, doctor={"apply": True, "fixes": ["conv1:cle", "nowhere:cle"]})
    warned = [e["text"] for e in events.of("log") if e["level"] == "warning" and "doctor.fixes" in e["text"]]
    assert warned and warned[0].startswith("doctor.fixes: nowhere:cle match(es) no finding's fix"), warned
    block = result["doctor"]
    finding = next(f for f in block["findings"] if f["layer"] == "conv1" and f["cause"] == "outlier_channels")
    assert [t["fix"] for t in finding["tried"]] == ["cle"]
    assert all(not f["tried"] for f in block["findings"] if f["layer"] != "conv1")
    gained = finding["gain"]["sqnr_db"] > 0.1 and finding["gain"]["monitor"] > -0.01
    assert [a["id"] for a in block["applied"]] == ([finding["id"]] if gained else [])
    if not gained:
        assert block["after"]["sqnr_db"] == block["baseline"]["sqnr_db"]


def test_doctor_spec_fields_and_their_checks():
    spec = QuantSpec.from_dict(
        apply_overrides({}, ["doctor.enabled=true", "doctor.max_findings=3"], QuantSpec)
    )
    assert spec.doctor.enabled and not spec.doctor.apply and spec.doctor.max_findings == 3
    assert QuantSpec().doctor.enabled is False and QuantSpec().doctor.fixes == []
    assert QuantSpec.from_dict({"doctor": {"apply": True}}).doctor.enabled  # applying implies diagnosing
    assert QuantSpec.from_dict({"doctor": {"fixes": ["layer1.0.conv1:cle"]}}).doctor.fixes == [
        "layer1.0.conv1:cle"
    ]
    with pytest.raises(SpecError, match=r"doctor\.fixes\[0\].*not a fix"):
        QuantSpec.from_dict({"doctor": {"fixes": ["conv1:magic"]}})
    with pytest.raises(SpecError, match=r"doctor\.fixes\[0\].*<layer>:<fix>"):
        QuantSpec.from_dict({"doctor": {"fixes": ["cle"]}})
    with pytest.raises(SpecError, match="max_findings"):
        QuantSpec.from_dict({"doctor": {"max_findings": 0}})


SQUARES = '''
import torch
from torch import nn
from torch.utils.data import Dataset


class Squares(Dataset):
    """A bright 6x6 square on a dark 12x12 image; the mask is 1 inside it."""

    def __len__(self):
        return 96

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        top, left = (int(v) for v in torch.randint(0, 6, (2,), generator=g))
        mask = torch.zeros(12, 12, dtype=torch.int64)
        mask[top:top + 6, left:left + 6] = 1
        return 0.1 * torch.randn(1, 12, 12, generator=g) + mask.float()[None], mask


def segmenter(num_classes=2):
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(8, num_classes, 1))
'''


def test_the_doctor_measures_a_segmentation_runs_own_monitor(tmp_path):
    (tmp_path / "squares.py").write_text(textwrap.dedent(SQUARES))
    path, workspace = tmp_path / "squares.py", tmp_path / "ws"
    trained = _run(
        "train.classifier",
        {
            "dataset": {"name": f"file:{path}:Squares", "num_workers": 0},
            "model": {"name": f"file:{path}:segmenter", "num_classes": 2},
            "epochs": 1,
            "batch_size": 16,
            "lr": 0.05,
            "keep_best": False,
        },
        workspace,
    )
    assert trained["task"] == "segmentation"
    result = _run(
        "quant.analyze",
        {
            "source": {"run": trained["run_dir"]},
            "calibration": {"samples": 32},
            "weights": {"bits": 4},
            "doctor": {"apply": True},
        },
        workspace,
    )
    block = result["doctor"]
    assert block["baseline"]["monitor_name"] == "test mIoU"
    assert 0.0 <= block["baseline"]["monitor"] <= 1.0 and block["baseline"]["sqnr_db"] is not None
    assert 0.0 <= block["after"]["monitor"] <= 1.0
    assert block["after"]["sqnr_db"] >= block["baseline"]["sqnr_db"]  # only verified fixes are kept
    assert result["steps"][-1]["step"] == "doctor" and result["metric"]["name"] == "miou"
    for finding in block["findings"]:
        for row in finding["tried"]:
            assert 0.0 <= row["monitor"] <= 1.0  # every trial measured with the run's mIoU


def test_the_doctor_runs_from_the_cli_on_a_lightning_run_with_its_own_monitor(tmp_path):
    pytest.importorskip("lightning")
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lightning"))
    from cli_helpers import TRACEBACK, one_json, wb
    from lightning_helpers import write_project

    project = write_project(tmp_path)
    trained = one_json(
        wb(
            tmp_path,
            "train",
            "--set",
            f"model.name=lightning:{project}:Classifier",
            "--set",
            f"dataset.name=lightning:{project}:Features",
            "--set",
            "epochs=1",
            "--json",
            timeout=600,
        )
    )
    assert trained["status"] == "done", trained.get("error")
    proc = wb(
        tmp_path,
        "quantize",
        "--set",
        f"source.run={trained['run_dir']}",
        "--set",
        "calibration.samples=32",
        "--set",
        "weights.bits=3",
        "--set",
        "doctor.enabled=true",
        "--set",
        "doctor.apply=true",
        "--json",
        timeout=600,
    )
    assert TRACEBACK not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    result = one_json(proc)
    assert result["status"] == "done", result.get("error")
    block = result["doctor"]
    assert block["baseline"]["monitor_name"] == result["metric"]["label"] == "val_acc"
    assert result["steps"][-1]["step"] == "doctor"
    assert result["steps"][-1]["accuracy"] == block["after"]["monitor"]


class Fan(torch.nn.Module):
    """conv1 -> ReLU6 -> conv2, whose output fans out to two convs joined by torch.cat into conv5."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.act = torch.nn.ReLU6()
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.conv3 = torch.nn.Conv2d(8, 4, 1)
        self.conv4 = torch.nn.Conv2d(8, 4, 3, padding=1)
        self.conv5 = torch.nn.Conv2d(8, 6, 1)

    def forward(self, x):
        x = torch.relu(self.conv2(self.act(self.conv1(x))))
        return self.conv5(torch.cat([torch.relu(self.conv3(x)), torch.relu(self.conv4(x))], dim=1))


def _traced(seed: int = 0):
    from workbench.worker.quant.graph import trace

    torch.manual_seed(seed)
    model = Fan().eval()
    with torch.no_grad():
        model.conv2.weight[3] *= 30  # a wide channel of conv2, undone in both layers it feeds
        model.conv2.bias[3] *= 30
        model.conv3.weight[:, 3] /= 30
        model.conv4.weight[:, 3] /= 30
    return model, trace(model)


def test_function_preserving_remedies_keep_the_float_outputs_and_narrow_the_ranges():
    from workbench.worker.quant.doctor import remedies

    model, gm = _traced()
    x = torch.randn(16, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    expected = model(x)
    said = remedies.cle_fanout(gm, {}, "conv2")
    assert "2 layers" in said
    assert torch.allclose(gm(x), expected, atol=1e-4)
    widths = gm.conv2.weight.detach().reshape(8, -1).abs().amax(1)
    assert float(widths.max() / widths.median()) < 5  # the x30 channel is back among the others
    with pytest.raises(remedies.NotApplicable):
        remedies.cle_pair(gm, {}, "conv2")  # a fan-out is no pair
    said = remedies.concat_rescale(gm, {}, "cat", [1.0, 40.0])
    assert "conv4 by 1/40" in said
    assert torch.allclose(gm(x), expected, atol=1e-4)


def test_relu6_to_relu_changes_only_what_clipped_and_lets_cle_pair_the_layers():
    from workbench.worker.quant.doctor import remedies

    model, gm = _traced()
    x = 4 * torch.randn(16, 3, 8, 8, generator=torch.Generator().manual_seed(2))
    with pytest.raises(remedies.NotApplicable):
        remedies.cle_pair(gm, {}, "conv1")  # the ReLU6 keeps CLE out
    said = remedies.relu6_to_relu(gm, {}, "conv1", "conv2")
    assert "ReLU6" in said and "equalised conv1 with conv2" in said
    clipped = (model.conv1(x) > 6).any()
    assert clipped and not torch.allclose(gm(x), model(x), atol=1e-4)  # the float model no longer clips at 6
    model.act = torch.nn.ReLU()
    assert torch.allclose(gm(x), model(x), atol=1e-3)  # and is otherwise the same function


def test_an_evidence_histogram_has_one_edge_more_than_its_bins():
    """Merged for the window, a histogram keeps its last edge once: edges and counts still pair up as bins."""
    from workbench.worker.quant.doctor import diagnose

    for bins in (10, 255, 512, 2048):
        job = type(
            "Job",
            (),
            {"arrays": {"t:counts": [np.ones(bins)], "t:edges": [np.linspace(-1.0, 1.0, bins + 1)]}},
        )
        hist = diagnose._histogram(job, "t")
        assert len(hist["edges"]) == len(hist["counts"]) + 1
        assert hist["edges"][0] == -1.0 and hist["edges"][-1] == 1.0 and sum(hist["counts"]) == bins


def test_with_cle_on_the_doctor_still_names_the_outlier_cle_fixed(doctored):
    """CLE in the ladder equalises conv1 with conv2 before the doctor looks: the outlier is found on the
    ranges kept from before CLE, its fix is the ladder's own CLE and its gain is measured by quantizing the
    graph as it was before CLE; the concat is still found and fixed, and the SQNR comes back."""
    clean, _, _, quantize = doctored
    planted = quantize("planted.pt", cle=True, doctor={"enabled": True, "apply": True})
    block = planted["doctor"]
    outlier = next(f for f in block["findings"] if f["layer"] == "conv1" and f["cause"] == "outlier_channels")
    assert outlier["fix"] == "cle" and outlier["evidence"]["fixed_by"] == "cle"
    assert outlier["evidence"]["ratio"] > 20 and len(outlier["evidence"]["ranges"]) == 16
    assert "already equalised it with conv2" in outlier["summary"]
    before, after = outlier["tried"]
    assert before["fix"] == "none (before CLE)" and after["sqnr_db"] == block["after"]["sqnr_db"]
    assert before["with"] == [f"{a['layer']}:{a['fix']}" for a in block["applied"]]
    assert outlier["gain"]["sqnr_db"] == pytest.approx(after["sqnr_db"] - before["sqnr_db"])
    assert outlier["gain"]["sqnr_db"] > 3  # measured: CLE is what keeps conv1's channels apart from harm
    assert outlier["severity"] == pytest.approx(outlier["gain"]["sqnr_db"], abs=1e-3)
    assert any(f["cause"] == "mixed_range_concat" for f in block["findings"])
    assert block["applied"] and all(a["fix"] != "cle" for a in block["applied"])
    assert block["after"]["sqnr_db"] > clean["quantized"]["logit_sqnr_db"] - 1.5


def _saved_sqnr(result: dict, root: Path) -> float:
    """Logit SQNR of the quantized model a run saved, loaded back as the QDQ export loads it (a fresh model,
    load_quantized), against the float planted model, on digits images."""
    from sklearn.datasets import load_digits

    from workbench.specs import ModelSpec
    from workbench.worker.models import build_model
    from workbench.worker.quant.artifacts import load_quantized

    spec = ModelSpec.from_dict({"name": f"file:{root / 'branchy.py'}:Branchy", "num_classes": 10})
    fresh = build_model(spec, input_shape=(1, 8, 8), pretrained=False, checkpoint=False).eval()
    planted = build_model(spec, input_shape=(1, 8, 8), pretrained=False, checkpoint=False).eval()
    planted.load_state_dict(torch.load(root / "planted.pt", weights_only=True))
    sim = load_quantized(fresh, Path(result["artifacts"]["weights"]).parent)
    images = torch.tensor(load_digits().images[:256], dtype=torch.float32).unsqueeze(1)
    mean, std = images.mean(), images.std()
    x = (images - mean) / std
    with torch.no_grad():
        reference, quantized = planted(x), sim(x)
    return float(10 * torch.log10(reference.pow(2).sum() / (quantized - reference).pow(2).sum()))


def test_the_saved_quantized_model_is_the_doctored_one(doctored):
    """With doctor.apply, later jobs (the QDQ export, bench) load the model the doctor rung measured, not the
    ladder's collapsed one."""
    _, planted, _, quantize = doctored
    root = Path(planted["artifacts"]["weights"]).parents[4]
    assert planted["doctor"]["saved_model"] == "doctor"
    plain = quantize("planted.pt")
    doctored_db, plain_db = _saved_sqnr(planted, root), _saved_sqnr(plain, root)
    assert doctored_db > plain_db + 15

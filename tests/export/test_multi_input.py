"""A user's model with several inputs (issue #20) exports with its input names kept and parity on every input:
a dict input {"image", "meta"} and a tuple input named by forward()'s parameters."""

from __future__ import annotations

import numpy as np
import pytest
from export_helpers import run, train_project

PROJECT = """
import torch
from torch import nn
from torch.utils.data import Dataset


class Pairs(Dataset):
    def __init__(self, size=40, keyed=True):
        g = torch.Generator().manual_seed(0)
        self.image = torch.randn(size, 1, 8, 8, generator=g)
        self.meta = torch.randn(size, 3, generator=g)
        self.y = self.image.mean(dim=(1, 2, 3)).unsqueeze(1) + self.meta.sum(dim=1, keepdim=True)
        self.keyed = keyed

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        x = {"image": self.image[i], "meta": self.meta[i]} if self.keyed else (self.image[i], self.meta[i])
        return x, self.y[i]


def Tuples(size=40):
    return Pairs(size, keyed=False)


class Net(nn.Module):
    def __init__(self, num_classes=1):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, padding=1)
        self.head = nn.Linear(2 * 64 + 3, num_classes)

    def forward(self, image, meta):
        return self.head(torch.cat([self.conv(image).flatten(1), meta], dim=1))


def net(num_classes=1):
    return Net(num_classes)
"""


@pytest.fixture(scope="module")
def dict_run(tmp_path_factory):
    return train_project(tmp_path_factory.mktemp("dict"), PROJECT, "Pairs", batch_size=8)


@pytest.mark.parametrize("fmt", ["onnx", "exported_program", "torchscript"])
def test_a_dict_input_exports_with_its_names_and_parity_on_every_input(dict_run, fmt):
    result, workspace = dict_run
    exported = run("export.model", {"source": {"run": result["run_dir"]}, "format": fmt}, workspace)
    assert exported["status"] == "done", exported.get("error")
    assert exported["input_names"] == ["image", "meta"]
    assert exported["input_shapes"] == {"image": [1, 8, 8], "meta": [3]}
    parity = exported["parity"]
    assert parity["passed"], parity
    assert any(check["input"].startswith("samples ") for check in parity["checks"])
    if fmt == "onnx":
        import onnxruntime as ort

        session = ort.InferenceSession(exported["artifact"], providers=["CPUExecutionProvider"])
        assert [i.name for i in session.get_inputs()] == ["image", "meta"]
        image, meta = np.random.randn(3, 1, 8, 8).astype("float32"), np.random.randn(3, 3).astype("float32")
        got = session.run(None, {"meta": meta, "image": image})[0]  # fed by name, not by position
        assert got.shape == (3, 1)
        assert not np.allclose(got, session.run(None, {"meta": meta * 0, "image": image})[0])


def test_a_tuple_input_takes_forwards_parameter_names(tmp_path):
    result, workspace = train_project(tmp_path, PROJECT, "Tuples", batch_size=8)
    exported = run("export.model", {"source": {"run": result["run_dir"]}, "format": "onnx"}, workspace)
    assert exported["status"] == "done", exported.get("error")
    assert exported["input_names"] == ["image", "meta"]
    assert exported["parity"]["passed"]


BENCH = {"iters": 3, "warmup": 1, "min_time_s": 0, "batch_sizes": [1, 4]}


def test_bench_of_a_multi_input_run_feeds_every_input_on_every_backend(dict_run):
    result, workspace = dict_run
    bench = run(
        "bench.latency",
        {
            "source": {"run": result["run_dir"]},
            **BENCH,
            "backends": ["eager", "torchscript", "exported_program", "onnxruntime"],
        },
        workspace,
    )
    assert bench["status"] == "done", bench.get("error")
    assert bench["input_names"] == ["image", "meta"]
    assert bench["input_shapes"] == {"image": [1, 8, 8], "meta": [3]}
    rows = {(r["backend"], r["batch_size"]): r for r in bench["results"]}
    assert len(rows) == 8
    for key, row in rows.items():
        assert row["status"] == "ok", (key, row["reason"])
        assert row["latency_ms"]["p50"] > 0 and row["iters"] >= 3


def test_bench_of_a_multi_input_onnx_file_feeds_it_by_its_input_names(dict_run):
    result, workspace = dict_run
    exported = run(
        "export.model", {"source": {"run": result["run_dir"]}, "format": "onnx", "verify": False}, workspace
    )
    assert exported["status"] == "done", exported.get("error")
    alone = run(
        "bench.latency",
        {"source": {"file": exported["artifact"]}, "backends": ["onnxruntime", "eager"], **BENCH},
        workspace,
    )
    assert alone["status"] == "done", alone.get("error")
    assert alone["input_names"] == ["image", "meta"]
    rows = {(r["backend"], r["batch_size"]): r for r in alone["results"]}
    assert rows[("onnxruntime", 4)]["status"] == "ok", rows[("onnxruntime", 4)]["reason"]
    assert rows[("eager", 1)]["status"] == "unavailable"  # a file alone has no PyTorch model beside it
    beside = run(
        "bench.latency",
        {
            "source": {"run": result["run_dir"]},
            "artifact": exported["artifact"],
            "backends": ["onnxruntime"],
            **BENCH,
        },
        workspace,
    )
    assert beside["status"] == "done", beside.get("error")
    assert all(
        r["status"] == "ok" and r["source"] == f"file {exported['artifact'].rsplit('/', 1)[-1]}"
        for r in beside["results"]
    ), beside["results"]


TOKENS = '''
import torch
from torch import nn
from torch.utils.data import Dataset


class Tokens(Dataset):
    """Token ids (integers an embedding looks up) and a float feature: an out-of-range id would crash the model."""

    def __init__(self, size=40):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 50, (size, 6), generator=g)
        self.extra = torch.randn(size, 2, generator=g)
        self.y = (self.ids.float().mean(1, keepdim=True) / 50) + self.extra[:, :1]

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return (self.ids[i], self.extra[i]), self.y[i]


class Net(nn.Module):
    def __init__(self, num_classes=1):
        super().__init__()
        self.embed = nn.Embedding(50, 4)
        self.head = nn.Linear(6 * 4 + 2, num_classes)

    def forward(self, ids, extra):
        return self.head(torch.cat([self.embed(ids).flatten(1), extra], dim=1))


def net(num_classes=1):
    return Net(num_classes)
'''  # noqa: E501


def test_integer_inputs_stay_integers_within_their_range_on_every_backend(tmp_path):
    result, workspace = train_project(tmp_path, TOKENS, "Tokens", batch_size=8)
    bench = run(
        "bench.latency",
        {
            "source": {"run": result["run_dir"]},
            **BENCH,
            "backends": ["eager", "exported_program", "onnxruntime"],
        },
        workspace,
    )
    assert bench["status"] == "done", bench.get("error")
    assert bench["input_names"] == ["ids", "extra"]
    assert all(r["status"] == "ok" for r in bench["results"]), [
        (r["backend"], r["reason"]) for r in bench["results"]
    ]


BRANCHY = PROJECT.replace(
    """    def forward(self, image, meta):
        return self.head(torch.cat([self.conv(image).flatten(1), meta], dim=1))""",
    """    def forward(self, image, meta):
        out = self.head(torch.cat([self.conv(image).flatten(1), meta], dim=1))
        if image.mean() > 1:  # a branch on a value: torch.export refuses it, tracing freezes it
            out = out * 2
        return out""",
)


def test_a_multi_input_onnx_export_falls_back_and_its_frozen_branch_shows_on_shifted_inputs(tmp_path):
    result, workspace = train_project(tmp_path, BRANCHY, "Pairs", batch_size=8)
    exported = run("export.model", {"source": {"run": result["run_dir"]}, "format": "onnx"}, workspace)
    assert exported["status"] == "done", exported.get("error")
    assert exported["exporter"] == "torchscript" and exported["fallback_reason"]
    assert exported["input_names"] == ["image", "meta"] and "frozen" in exported["frozen_control_flow"]
    checks = {c["input"]: c for c in exported["parity"]["checks"]}
    # Inputs like the example take its branch and agree; the shifted images take the other one, which the file
    # lost.
    assert checks["random batch of 7"]["passed"] and checks["random batch of 7 scaled x5"]["passed"]
    assert not checks["random batch of 7 shifted by +3"]["passed"]
    assert exported["parity"]["passed"] is False

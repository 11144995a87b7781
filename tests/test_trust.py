"""User code runs only when the user chooses to: the real `workbench` command refuses a spec whose Python
files come from a folder not trusted in the workspace (exit 2, no run folder, nothing imported), `--trust` and
`workbench trust` record the folder, and a later job of a run refuses a file changed since the run trained."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from cli_helpers import expect, no_traceback, one_json, wb

from workbench import trust

DATA = """
import torch
from torch.utils.data import Dataset

class Data(Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(48, 4, generator=g)
        self.y = (self.x[:, 0] > 0).long()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]
"""
# The payload: the same Dataset, and a marker file written the moment the module is imported.
PAYLOAD = "from pathlib import Path\nPath(__file__).with_name('MARKER').write_text('ran')\n" + DATA


def project(tmp_path: Path, code: str = PAYLOAD) -> tuple[Path, Path]:
    """A project folder beside the workspace: payload.py and train.toml naming it relatively."""
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "payload.py").write_text(code)
    spec = folder / "train.toml"
    spec.write_text(
        textwrap.dedent("""
        epochs = 1
        batch_size = 16
        device = "cpu"
        [dataset]
        name = "file:payload.py:Data"
        num_workers = 0
        [model]
        name = "mlp"
    """)
    )
    return folder, spec


def runs_of(ws: Path) -> list[Path]:
    return sorted((ws / "runs").iterdir()) if (ws / "runs").is_dir() else []


def test_an_untrusted_spec_is_refused_before_anything_runs(tmp_path):
    folder, spec = project(tmp_path)
    ws = tmp_path / "ws"
    proc = wb(tmp_path, "train", str(spec), "--json", trusted=False)
    expect(proc, 2)
    no_traceback(proc)
    message = one_json(proc)["error"]["message"]
    assert str(folder / "payload.py") in message and "dataset.name" in message
    assert "--trust" in message and "workbench trust" in message
    assert not (folder / "MARKER").exists()
    assert runs_of(ws) == []
    # Inspecting the data is running it too.
    info = wb(tmp_path, "data", "info", "--set", "dataset.name=file:proj/payload.py:Data", trusted=False)
    expect(info, 2)
    assert "--trust" in info.stderr and not (folder / "MARKER").exists()


def test_trust_flag_runs_it_and_records_the_folder(tmp_path):
    folder, spec = project(tmp_path)
    ws = tmp_path / "ws"
    proc = wb(tmp_path, "train", str(spec), "--trust", "--json", trusted=False, timeout=180)
    expect(proc, 0)
    result = one_json(proc)
    assert (folder / "MARKER").exists()
    assert f"trusting {folder.resolve()}" in proc.stderr
    assert trust.trusted_folders(ws) == [folder.resolve()]
    record = json.loads((Path(result["run_dir"]) / "user_code.json").read_text())
    assert record["files"] == [
        {
            "field": "dataset.name",
            "ref": f"file:{folder / 'payload.py'}:Data",
            "path": str(folder / "payload.py"),
            "sha256": trust.sha256(folder / "payload.py"),
        }
    ]
    # Trusted now: the next job needs no flag.
    (folder / "MARKER").unlink()
    again = wb(
        tmp_path, "data", "info", "--set", "dataset.name=file:proj/payload.py:Data", "--json", trusted=False
    )
    expect(again, 0)
    assert (folder / "MARKER").exists()


def test_trust_verb_adds_lists_and_removes(tmp_path):
    folder = tmp_path / "code"
    folder.mkdir()
    ws = tmp_path / "ws"
    expect(wb(tmp_path, "trust", str(folder), trusted=False), 0)
    listed = wb(tmp_path, "trust", "--list", "--json", trusted=False)
    expect(listed, 0)
    assert json.loads(listed.stdout)["trusted"] == [str(folder.resolve())]
    assert json.loads((ws / "settings.json").read_text())["trusted_folders"] == [str(folder.resolve())]
    assert trust.is_trusted(folder / "sub" / "x.py", ws)  # a trusted folder's subfolders are trusted
    assert not trust.is_trusted(tmp_path / "x.py", ws)
    expect(wb(tmp_path, "trust", "--remove", str(folder), trusted=False), 0)
    assert trust.trusted_folders(ws) == []
    gone = wb(tmp_path, "trust", "--remove", str(folder), trusted=False)
    expect(gone, 2)
    assert str(folder.resolve()) in gone.stderr
    expect(wb(tmp_path, "trust", str(tmp_path / "missing"), trusted=False), 2)


def test_the_bundled_examples_are_trusted(tmp_path):
    example = trust.examples_folder() / "shapes_segmentation" / "data.py"
    assert example.is_file() and trust.is_trusted(example, tmp_path / "ws")
    spec_data = {"dataset": {"name": "file:data.py:Shapes"}}
    files = trust.user_files(spec_data, base=example.parent)
    assert [f.path for f in files] == [example] and trust.untrusted(files, tmp_path / "ws") == []


@pytest.mark.slow
def test_a_changed_file_is_refused_by_later_jobs_of_the_run(tmp_path):
    folder, spec = project(tmp_path, code=DATA)
    trained = wb(tmp_path, "train", str(spec), "--json", timeout=180)  # tmp_path trusted: started knowingly
    expect(trained, 0)
    run = Path(one_json(trained)["run_dir"])
    (folder / "payload.py").write_text(PAYLOAD)  # replaced after training
    for verb in ("graph", "export"):
        proc = wb(tmp_path, verb, "--set", f"source.run={run.name}", "--json", timeout=180)
        expect(proc, 1)
        message = one_json(proc)["error"]["message"]
        assert f"{folder / 'payload.py'} changed since the run trained" in message, message
        assert "--allow-changed-code" in message
        assert not (folder / "MARKER").exists(), verb
    board = wb(tmp_path, "runs", "export-tensorboard", run.name, timeout=180)
    expect(board, 1)
    assert "changed since the run trained" in board.stderr and not (folder / "MARKER").exists()
    # Reading a run never imports its code.
    for args in (("runs", "list"), ("runs", "show", run.name), ("report", run.name)):
        expect(wb(tmp_path, *args), 0)
    assert not (folder / "MARKER").exists()
    allowed = wb(
        tmp_path, "graph", "--set", f"source.run={run.name}", "--allow-changed-code", "--json", timeout=180
    )
    expect(allowed, 0)
    assert (folder / "MARKER").exists()


@pytest.mark.slow
def test_export_tensorboard_asks_for_trust_before_building_the_graph(tmp_path):
    folder, spec = project(tmp_path, code=DATA)
    trained = wb(tmp_path, "train", str(spec), "--json", timeout=180)
    expect(trained, 0)
    run = Path(one_json(trained)["run_dir"])
    (folder / "payload.py").write_text(PAYLOAD)
    expect(wb(tmp_path, "trust", "--remove", str(tmp_path), trusted=False), 0)
    refused = wb(tmp_path, "runs", "export-tensorboard", run.name, trusted=False, timeout=180)
    expect(refused, 2)
    assert "--trust" in refused.stderr and str(folder / "payload.py") in refused.stderr
    assert not (run / "tensorboard").exists() and not (folder / "MARKER").exists()
    # Without the graph nothing is imported: the metrics alone need no trust.
    expect(wb(tmp_path, "runs", "export-tensorboard", run.name, "--no-graph", trusted=False, timeout=180), 0)
    assert not (folder / "MARKER").exists()

"""The hostile probe's small command-line slips (issue #19, item 5), each through the real `workbench`
command:
a clear one-line message naming the field or file, the right exit code, and no traceback."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cli_helpers import _argv, _env, count_args, expect, no_traceback, one_json, run_dirs, wb
from cli_runner import run_cli

pytestmark = pytest.mark.slow

DEEP = 100_000  # far past Python's recursion limit: the parsers recurse once per level


@pytest.mark.parametrize(
    "suffix, text",
    [
        (".toml", "epochs = " + "[" * DEEP + "]" * DEEP + "\n"),
        (".json", '{"epochs": ' + "[" * DEEP + "]" * DEEP + "}"),
        # deep enough to mean harm, not to recurse
        (".json", '{"dataset": ' + '{"a": ' * 40 + "1" + "}" * 40 + "}"),
    ],
    ids=["toml", "json", "json-40-tables"],
)
def test_a_deeply_nested_spec_exits_2_with_one_line(tmp_path: Path, suffix: str, text: str):
    spec = tmp_path / f"deep{suffix}"
    spec.write_text(text)
    proc = wb(tmp_path, "train", str(spec), "--json")
    expect(proc, 2)
    no_traceback(proc)
    assert "RecursionError" not in proc.stderr + proc.stdout
    message = one_json(proc)["error"]["message"]
    assert str(spec) in message and "nested" in message
    assert len(proc.stderr.strip().splitlines()) == 1
    assert run_dirs(tmp_path / "ws") == []


@pytest.mark.parametrize("field", ["seed", "dataset.seed"])
def test_a_seed_past_64_bits_is_refused_by_the_spec(tmp_path: Path, field: str):
    proc = wb(tmp_path, "train", "--set", f"{field}=99999999999999999999999", "--json")
    expect(proc, 2)
    no_traceback(proc)
    message = one_json(proc)["error"]["message"]
    assert f"{field}: 99999999999999999999999 is out of range" in message and str(2**63 - 1) in message
    assert run_dirs(tmp_path / "ws") == []


def test_the_largest_seed_is_accepted(tmp_path: Path):
    from workbench.specs import TrainSpec

    assert TrainSpec.from_dict({"seed": 2**63 - 1}).seed == 2**63 - 1


@pytest.mark.parametrize("args", [count_args(steps=1), ["runs", "list"]], ids=["job", "runs"])
def test_an_empty_workspace_is_refused_not_taken_as_the_current_folder(tmp_path: Path, args: list[str]):
    proc = run_cli([*args, "--workspace", "", "--json"], cwd=tmp_path, env=_env(tmp_path))
    expect(proc, 2)
    no_traceback(proc)
    assert "--workspace is empty" in one_json(proc)["error"]["message"]
    assert list(tmp_path.iterdir()) == []  # no runs/, data/ or cache/ made in the current folder


def test_diag_names_the_field_of_a_bad_number(tmp_path: Path):
    proc = wb(tmp_path, *count_args(steps="abc"), "--json")
    expect(proc, 2)  # a bad spec, refused before a run exists
    no_traceback(proc)
    message = one_json(proc)["error"]["message"]
    assert message == "steps: 'abc' is not an integer"
    assert "invalid literal" not in proc.stderr
    assert run_dirs(tmp_path / "ws") == []


def test_a_garbage_pt2_is_one_clean_error_without_torchs_traceback(tmp_path: Path):
    garbage = tmp_path / "garbage.pt2"
    garbage.write_bytes(b"this is not a zip archive at all\n" * 8)
    proc = wb(
        tmp_path,
        "bench",
        "--set",
        f"source.file={garbage}",
        "--set",
        "backends=exported_program",
        "--json",
        timeout=180,
    )
    no_traceback(proc)
    assert "Traceback" not in proc.stderr
    result = one_json(proc)
    text = json.dumps(result)
    assert "garbage.pt2" in text


def test_runs_show_into_a_closed_pipe_exits_quietly(tmp_path: Path):
    assert wb(tmp_path, *count_args(steps=2, delay=0)).returncode == 0
    run = run_dirs(tmp_path / "ws")[0]
    # `| true`: the reader is gone before the command writes (as `| head` is after its lines).
    shell = subprocess.run(
        " ".join(_argv("runs", "show", str(run), "--workspace", str(tmp_path / "ws"))) + " | true",
        shell=True,
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=120,
    )
    assert shell.stderr == ""


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda path: None, "does not exist"),
        (lambda path: path.mkdir(), "is a folder, not a Python file"),
        (lambda path: path.symlink_to(path), "is a symbolic link that loops back on itself"),
    ],
    ids=["missing", "folder", "symlink-loop"],
)
def test_a_bad_file_path_is_a_spec_error_before_any_run(tmp_path: Path, make, words: str):
    path = tmp_path / "x.py"
    make(path)
    proc = wb(tmp_path, "train", "--set", f"dataset.name=file:{path}:Data", "--json", "--trust")
    expect(proc, 2)
    no_traceback(proc)
    assert one_json(proc)["error"]["message"] == f"dataset.name: {path} {words}"
    assert run_dirs(tmp_path / "ws") == []


PATCHING_MODEL = """
import torch
from torch import nn

torch.save = lambda *args, **kwargs: None  # the module replaces torch.save, as the probe's did

class Net(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        return self.fc(x.flatten(1))
"""


def test_a_replaced_torch_save_fails_the_run_instead_of_leaving_empty_checkpoints(tmp_path: Path):
    (tmp_path / "patching.py").write_text(PATCHING_MODEL)
    proc = wb(
        tmp_path,
        "train",
        "--set",
        f"model.name=file:{tmp_path / 'patching.py'}:Net",
        "--set",
        "epochs=1",
        "--json",
        timeout=180,
    )
    expect(proc, 1)
    no_traceback(proc)
    result = one_json(proc)
    assert result["status"] == "failed" and "torch.save wrote 0 bytes" in result["error"]["message"], result


LABELLED_DATA = '''
import torch
from torch.utils.data import Dataset


class Data(Dataset):
    """40 samples of 8 features in each split, whose sample 17 has a label outside its 10 classes."""

    classes = [f"class {i}" for i in range(10)]

    def __init__(self, split="train", bad=99):
        self.bad = bad

    def __len__(self):
        return 40

    def __getitem__(self, index):
        return torch.full((8,), float(index % 10)), (self.bad if index == 17 else index % 10)


class Unnamed(Data):
    """The same samples without a `classes` list: the class count is one past the largest label."""

    classes = None
'''


def _train_on(tmp_path: Path, name: str, *settings: str) -> subprocess.CompletedProcess:
    (tmp_path / "data.py").write_text(LABELLED_DATA)
    args = [arg for setting in settings for arg in ("--set", setting)]
    return wb(
        tmp_path,
        "train",
        "--set",
        f"dataset.name=file:{tmp_path / 'data.py'}:{name}",
        "--set",
        "model.name=mlp",
        "--set",
        "epochs=1",
        "--set",
        "dataset.num_workers=0",
        *args,
        "--json",
        timeout=180,
    )


def _run_status(tmp_path: Path) -> str:
    from workbench.runs import RunStore

    (run,) = RunStore(tmp_path / "ws").list_runs()
    return run["status"]


@pytest.mark.parametrize(
    "name, settings, why, fix",
    [
        ("Data", [], "its `classes` lists 10 names", "fix the label or the class list"),
        ("Data", ["model.num_classes=10"], "its `classes` lists 10 names", "fix the label or the class list"),
        ("Unnamed", ["model.num_classes=10"], "model.num_classes=10", "fix the label or model.num_classes"),
    ],
    ids=["classes", "classes-and-num-classes", "num-classes"],
)
def test_a_label_outside_the_classes_names_the_dataset_the_sample_and_the_label(
    tmp_path: Path, name: str, settings: list[str], why: str, fix: str
):
    proc = _train_on(tmp_path, name, *settings)
    expect(proc, 1)
    no_traceback(proc)
    result = one_json(proc)
    message = result["error"]["message"]
    assert message == (
        f"dataset file:{tmp_path / 'data.py'}:{name}: sample 17 of the train split has label "
        f"99, outside the 10 classes 0..9 ({why}); {fix}"
    ), message
    assert "out of bounds" not in message and "has 100 classes" not in message
    assert result["status"] == "failed" and _run_status(tmp_path) == "failed"


def test_a_negative_label_names_its_sample(tmp_path: Path):
    proc = _train_on(tmp_path, "Data", "dataset.args.bad=-1")
    expect(proc, 1)
    no_traceback(proc)
    message = one_json(proc)["error"]["message"]
    assert message.endswith(
        "sample 17 of the train split has label -1, outside the 10 classes 0..9 (its "
        "`classes` lists 10 names); fix the label or the class list"
    ), message
    assert _run_status(tmp_path) == "failed"


def test_a_negative_label_of_a_dataset_without_classes_names_its_sample_before_training(tmp_path: Path):
    proc = _train_on(tmp_path, "Unnamed", "dataset.args.bad=-3")
    expect(proc, 1)
    no_traceback(proc)
    message = one_json(proc)["error"]["message"]
    assert message.endswith(
        "sample 17 of the train split has label -3; class labels count from 0 (0..K-1 "
        "for K classes); fix the label"
    ), message
    assert "training mlp" not in proc.stderr  # refused while the labels were counted, before any step


def test_without_classes_the_largest_label_still_sets_the_class_count_and_the_log_says_so(tmp_path: Path):
    proc = _train_on(tmp_path, "Unnamed")
    expect(proc, 0)
    assert one_json(proc)["status"] == "done"
    assert (
        "model.num_classes: auto, 100 (one past the largest label, 99 in sample 17 of the train split; "
        "the dataset has no `classes`)"
    ) in proc.stderr, proc.stderr


GARBLING_MODEL = """
import torch
from torch import nn

_real_save = torch.save


def _garbage(obj, f, *args, **kwargs):
    f.write(b"these bytes are not a checkpoint")


def _not_the_weights(obj, f, *args, **kwargs):
    _real_save({"weights": torch.zeros(3)}, f)


torch.save = HOW  # the module replaces torch.save, as the probe's did


class Net(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        return self.fc(x.flatten(1))
"""


@pytest.mark.parametrize(
    "how, keep_best, words",
    [
        # keep_best=false: no best.pt, so model.pt is what later jobs load, and the test evaluation never
        # reads it
        (
            "_garbage",
            "false",
            "checkpoints/model.pt was saved but does not load back (torch.save is replaced by _garbage from ",
        ),
        (
            "_garbage",
            "true",
            "checkpoints/best.pt was saved but does not load back (torch.save is replaced by _garbage from ",
        ),
        (
            "_not_the_weights",
            "true",
            "checkpoints/best.pt was saved but does not hold the model's weights (torch.save is "
            "replaced by _not_the_weights from ",
        ),
    ],
    ids=["garbage-model.pt", "garbage-best.pt", "not-the-weights"],
)
def test_a_replaced_torch_save_that_writes_an_unloadable_checkpoint_fails_the_run(
    tmp_path: Path, how: str, keep_best: str, words: str
):
    (tmp_path / "garbling.py").write_text(GARBLING_MODEL.replace("HOW", how))
    proc = wb(
        tmp_path,
        "train",
        "--set",
        f"model.name=file:{tmp_path / 'garbling.py'}:Net",
        "--set",
        "epochs=1",
        "--set",
        f"keep_best={keep_best}",
        "--json",
        timeout=180,
    )
    expect(proc, 1)
    no_traceback(proc)
    result = one_json(proc)
    message = result["error"]["message"]
    assert result["status"] == "failed" and words in message and "The run is not done" in message, message
    assert str(tmp_path / "garbling.py") in message
    assert _run_status(tmp_path) == "failed"

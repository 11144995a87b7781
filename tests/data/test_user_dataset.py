"""dataset.name = file:<path.py>:<Name>: a user's own torch Dataset, read through torch's DataLoader (issue
#20).

Every test writes its own dataset file; the DataLoaders and their worker processes are real.
"""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from data_helpers import Recorder

from workbench.errors import JobError
from workbench.specs import DataSpec
from workbench.worker.data import load_dataset
from workbench.worker.data.loaded import LoadedDataset
from workbench.worker.data.user import UserDataset, load_user_dataset
from workbench.worker.data.user_samples import convert_input
from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

HEADER = """\
import os
import signal

import numpy as np
import torch
from torch.utils.data import Dataset
"""


def write(tmp_path, *bodies: str, name: str = "userdata.py"):
    path = tmp_path / name
    path.write_text(HEADER + "".join(textwrap.dedent(body) for body in bodies))
    return path


def load(path, attr: str, workspace, **fields) -> UserDataset:
    spec = DataSpec.from_dict({"name": f"file:{path}:{attr}", "num_workers": 0, **fields}, path="dataset")
    return load_user_dataset(spec, workspace)


def collect(split, batch_size=4, **kwargs):
    xs, ys = [], []
    for x, y in split.batches(batch_size, **kwargs):
        xs.append(x)
        ys.append(y)
    return xs, ys


def error_line(path, line_text: str) -> int:
    lines = path.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line_text in line)


SIMPLE = """
class Numbers(Dataset):
    def __init__(self, size=20, classes=None):
        self.size = size
        if classes is not None:
            self.classes = classes

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        return torch.full((1, 2, 2), float(i)), i % 5
"""


# -- splits --------------------------------------------------------------------------------------------------
def test_class_with_split_argument_val_given_test_carved(tmp_path):
    path = write(
        tmp_path,
        """
    class Parts(Dataset):
        def __init__(self, split, scale=1):
            if split == "test":
                raise ValueError("no test split here")
            self.base = 0 if split == "train" else 1000
            self.n = 12 if split == "train" else 4
            self.scale = scale

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            return torch.tensor([float(self.base + i) * self.scale]), (self.base + i) % 7
    """,
    )
    ds = load(path, "Parts", tmp_path, args={"scale": 2}, test_fraction=0.25, seed=3)
    assert isinstance(ds, UserDataset)
    assert {k: len(v) for k, v in ds.splits.items()} == {"train": 9, "val": 4, "test": 3}
    val_x = torch.cat(collect(ds.splits["val"], shuffle=False)[0])
    assert val_x.flatten().tolist() == [2000.0, 2002.0, 2004.0, 2006.0]  # the user's own val, args passed
    train = [int(v) // 2 for x in collect(ds.splits["train"], shuffle=False)[0] for v in x.flatten()]
    test = [int(v) // 2 for x in collect(ds.splits["test"], shuffle=False)[0] for v in x.flatten()]
    assert sorted(train + test) == list(range(12)) and not set(train) & set(test)
    assert ds.sample_shape == (1,)
    # max label 6 of the train split (test holds some of 0..11)
    assert ds.classes == [str(i) for i in range(7)]


def test_function_returning_only_train_is_carved_deterministically(tmp_path):
    path = write(
        tmp_path,
        SIMPLE,
        """
    def make(size):
        return {"train": Numbers(size)}
    """,
    )

    def members(seed):
        ds = load(path, "make", tmp_path, args={"size": 20}, val_fraction=0.2, test_fraction=0.1, seed=seed)
        assert {k: len(v) for k, v in ds.splits.items()} == {"train": 14, "val": 4, "test": 2}
        out = {}
        for name, split in ds.splits.items():
            out[name] = [int(i) for idx, x, _ in split.indexed_batches(8) for i in x[:, 0, 0, 0]]
        assert sorted(sum(out.values(), [])) == list(range(20))
        return out

    assert members(5) == members(5)
    assert members(5) != members(6)


def test_class_without_split_and_function_returning_a_dataset(tmp_path):
    path = write(
        tmp_path,
        SIMPLE,
        """
    def build(size=10):
        return Numbers(size)
    """,
    )
    ds = load(path, "build", tmp_path, val_fraction=0.3, test_fraction=0.0)
    assert {k: len(v) for k, v in ds.splits.items()} == {"train": 7, "val": 3, "test": 0}
    assert list(ds.splits["test"].indexed_batches(4)) == []
    ds = load(path, "Numbers", tmp_path, args={"size": 40})
    assert sum(len(s) for s in ds.splits.values()) == 40
    assert ds.splits["train"].class_counts() == [len(ds.splits["train"])]


def test_load_dataset_dispatches_file_names(tmp_path):
    path = write(tmp_path, SIMPLE)
    ds = load_dataset({"name": f"file:{path}:Numbers", "num_workers": 0}, workspace=tmp_path)
    assert isinstance(ds, UserDataset) and ds.name == f"file:{path}:Numbers"
    assert ds.core.workspace == tmp_path and ds.in_memory is False and ds.skipped_files == []
    assert ds.normalization() is None
    with pytest.raises(JobError, match="not computed for file: datasets"):
        ds.statistics()
    assert ds.prepare("cpu") == (
        "dataloader",
        f"torch DataLoader from {path}:Numbers, loaded in the job's own process (dataset.num_workers=0)",
    )
    builtin = load_dataset({"name": "fake", "size": 20, "num_workers": 0}, workspace=tmp_path)
    assert isinstance(builtin, LoadedDataset)


# -- inputs and targets --------------------------------------------------------------------------------------
def test_tuple_and_dict_inputs_survive_collation_with_workers(tmp_path):
    path = write(
        tmp_path,
        """
    class Pairs(Dataset):
        def __len__(self):
            return 10

        def __getitem__(self, i):
            return (torch.full((3,), float(i)), torch.full((2, 2), -float(i))), float(i) / 2

    class Named(Dataset):
        def __len__(self):
            return 10

        def __getitem__(self, i):
            return {"input": {"image": np.full((1, 3, 3), i, dtype=np.float64), "meta": torch.tensor([i])},
                    "target": [float(i), 1.0]}
    """,
    )
    ds = load(path, "Pairs", tmp_path, num_workers=2, val_fraction=0.0, test_fraction=0.0)
    assert ds.sample_shape == (3,)
    batches = list(ds.splits["train"].indexed_batches(4))
    assert [len(b[0]) for b in batches] == [4, 4, 2]
    _, x, y = batches[0]
    assert isinstance(x, tuple) and x[0].shape == (4, 3) and x[1].shape == (4, 2, 2)
    assert x[1][:, 0, 0].tolist() == [0.0, -1.0, -2.0, -3.0] and y.dtype == torch.float32
    assert ds.classes == []  # a float target is not a class label
    ds.release()

    ds = load(path, "Named", tmp_path, num_workers=2, val_fraction=0.0, test_fraction=0.0)
    assert ds.sample_shape == (1, 3, 3)
    x, y = next(iter(ds.splits["train"].batches(5, shuffle=False)))
    assert (
        set(x) == {"image", "meta"} and x["image"].shape == (5, 1, 3, 3) and x["image"].dtype == torch.float32
    )
    assert x["meta"].flatten().tolist() == [0, 1, 2, 3, 4] and y.shape == (5, 2)
    ds.release()


def test_pil_and_numpy_inputs(tmp_path):
    path = write(
        tmp_path,
        """
    from PIL import Image

    class Pictures(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            array = np.full((5, 6, 3), 51 * i, dtype=np.uint8)
            return Image.fromarray(array), np.int64(i)

    class Arrays(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return np.full((2, 3), i, dtype=np.float64), np.array([i, i], dtype=np.float32)
    """,
    )
    ds = load(path, "Pictures", tmp_path, val_fraction=0.0, test_fraction=0.0)
    assert ds.sample_shape == (3, 5, 6)
    from PIL import Image  # torchvision's to_tensor, value for value (without importing torchvision: seconds)

    gray = np.arange(12, dtype=np.uint8).reshape(3, 4)
    assert torch.equal(convert_input(Image.fromarray(gray), "s"), torch.from_numpy(gray)[None].float() / 255)
    floats = np.linspace(0, 9, 6, dtype=np.float32).reshape(2, 3)
    assert torch.equal(convert_input(Image.fromarray(floats), "s"), torch.from_numpy(floats)[None])
    rgba = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    assert torch.equal(
        convert_input(Image.fromarray(rgba), "s"), torch.from_numpy(rgba).permute(2, 0, 1) / 255
    )
    assert convert_input(Image.fromarray(np.eye(3, dtype=bool)), "s").tolist() == [np.eye(3).tolist()]
    x, y = next(iter(ds.splits["train"].batches(4, shuffle=False)))
    assert x.dtype == torch.float32 and x.shape == (4, 3, 5, 6)
    assert torch.allclose(x[:, 0, 0, 0], torch.tensor([0.0, 0.2, 0.4, 0.6]))
    assert y.tolist() == [0, 1, 2, 3] and y.dtype == torch.int64
    ds = load(path, "Arrays", tmp_path, val_fraction=0.0, test_fraction=0.0)
    sample_x, sample_y = ds.first_sample()
    assert sample_x.shape == (2, 3) and sample_x.dtype == torch.float32 and sample_y.tolist() == [0.0, 0.0]


# -- order ---------------------------------------------------------------------------------------------------
def test_shuffle_is_a_function_of_seed_and_epoch(tmp_path):
    path = write(tmp_path, SIMPLE)

    def order(workers, seed, epoch, drop_last=False):
        ds = load(
            path,
            "Numbers",
            tmp_path,
            args={"size": 30},
            num_workers=workers,
            val_fraction=0.0,
            test_fraction=0.0,
        )
        xs, _ = collect(
            ds.splits["train"], batch_size=7, shuffle=True, seed=seed, epoch=epoch, drop_last=drop_last
        )
        ds.release()
        return [[int(v) for v in x[:, 0, 0, 0]] for x in xs]

    first = order(0, 4, 0)
    assert sorted(sum(first, [])) == list(range(30)) and sum(first, []) != list(range(30))
    assert order(2, 4, 0) == first  # worker processes deliver the same batches
    assert order(0, 4, 1) != first and order(0, 5, 0) != first
    assert order(0, 4, 0, drop_last=True) == first[:4]


def test_epochs_reuse_one_loader_and_stay_reproducible(tmp_path):
    path = write(tmp_path, SIMPLE)
    ds = load(
        path, "Numbers", tmp_path, args={"size": 16}, num_workers=2, val_fraction=0.0, test_fraction=0.0
    )
    train = ds.splits["train"]
    epochs = [
        [int(v) for x in collect(train, shuffle=True, seed=1, epoch=e)[0] for v in x[:, 0, 0, 0]]
        for e in (0, 1, 0)
    ]
    assert epochs[0] == epochs[2] != epochs[1]
    # A pass abandoned half-way (a resumed epoch, a stop) leaves the next one whole.
    stream = train.batches(4, shuffle=True, seed=1, epoch=1)
    next(stream)
    stream.close()
    assert [
        int(v) for x in collect(train, shuffle=True, seed=1, epoch=1)[0] for v in x[:, 0, 0, 0]
    ] == epochs[1]
    ds.release()


def test_indexed_batches_in_split_order_and_sharded(tmp_path):
    path = write(tmp_path, SIMPLE)
    ds = load(path, "Numbers", tmp_path, args={"size": 10}, val_fraction=0.0, test_fraction=0.0)
    split = ds.splits["train"]
    whole = [(i.tolist(), x[:, 0, 0, 0].tolist(), y.tolist()) for i, x, y in split.indexed_batches(3)]
    assert [w[0] for w in whole] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert whole[1][1] == [3.0, 4.0, 5.0] and whole[1][2] == [3, 4, 0]
    assert all(i.dtype == torch.int64 for i, _, _ in split.indexed_batches(3))
    rank0 = [i.tolist() for i, _, _ in split.indexed_batches(3, rank=0, world=2)]
    rank1 = [i.tolist() for i, _, _ in split.indexed_batches(3, rank=1, world=2)]
    assert rank0 == [[0, 1, 2], [6, 7, 8]] and rank1 == [[3, 4, 5], [9]]


# -- classes -------------------------------------------------------------------------------------------------
def test_classes_from_labels_attribute_or_none(tmp_path):
    path = write(
        tmp_path,
        SIMPLE,
        """
    calls = []

    class Regression(Dataset):
        def __len__(self):
            return 50

        def __getitem__(self, i):
            calls.append(i)
            return torch.zeros(2), torch.tensor([0.5 * i])
    """,
    )
    scanned = []
    spec = DataSpec.from_dict(
        {"name": f"file:{path}:Numbers", "num_workers": 2, "args": {"size": 12}}, path="dataset"
    )

    class Ctx:
        workspace = tmp_path

        def log(self, text, level="info"):
            pass

        def progress(self, done, total, text):
            scanned.append((done, total))

    ds = load_dataset(spec, ctx=Ctx())
    assert ds.classes == ["0", "1", "2", "3", "4"]
    assert scanned and scanned[-1][0] == scanned[-1][1] == len(ds.splits["train"])
    ds.release()
    named = load(path, "Numbers", tmp_path, args={"size": 12, "classes": ["a", "b", "c", "d", "e", "f"]})
    assert named.classes == ["a", "b", "c", "d", "e", "f"]
    regression = load(path, "Regression", tmp_path)
    module = next(m for m in sys.modules.values() if getattr(m, "__file__", None) == str(path))
    assert regression.classes == [] and module.calls == [0]  # no scan for a float target


# -- bad input -----------------------------------------------------------------------------------------------
FAILING = """
class Rows(Dataset):
    def __init__(self, size=24):
        self.size = size

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        if i == 17:
            raise ValueError("bad row")
        return torch.zeros(1, 28, 28), 0
"""


@pytest.mark.parametrize("workers", [0, 2])
def test_failing_sample_names_index_file_and_line(tmp_path, workers):
    path = write(tmp_path, FAILING)
    ds = load(path, "Rows", tmp_path, num_workers=workers, val_fraction=0.0, test_fraction=0.0)
    line = error_line(path, 'raise ValueError("bad row")')
    expected = (
        f"dataset file:{path}:Rows: sample 17 of the train split failed: ValueError: bad row "
        f"({path}, line {line})"
    )
    with pytest.raises(JobError) as caught:
        collect(ds.splits["train"], batch_size=5, shuffle=False)
    assert str(caught.value) == expected
    with pytest.raises(JobError) as caught:  # the loader still works after the error: same error again
        list(ds.splits["train"].indexed_batches(6))
    assert str(caught.value) == expected
    ds.release()


def test_failing_sample_of_a_carved_split_names_the_users_index(tmp_path):
    path = write(tmp_path, FAILING)
    ds = load(path, "Rows", tmp_path, val_fraction=0.5, test_fraction=0.0, seed=0)
    name = "val" if 17 in ds.splits["val"].source.indices else "train"
    with pytest.raises(
        JobError,
        match=r"sample 17 of the train split"
        + (r" \(read for the val split\)" if name == "val" else " failed"),
    ):
        list(ds.splits[name].indexed_batches(4))


@pytest.mark.parametrize("workers", [0, 2])
def test_inconsistent_shapes(tmp_path, workers):
    path = write(
        tmp_path,
        """
    class Sizes(Dataset):
        def __len__(self):
            return 10

        def __getitem__(self, i):
            side = 30 if i == 8 else 28
            return torch.zeros(1, side, side), torch.zeros(3 if i == 3 else 2)
    """,
    )
    ds = load(path, "Sizes", tmp_path, num_workers=workers, val_fraction=0.0, test_fraction=0.0)
    with pytest.raises(JobError) as caught:
        list(ds.splits["train"].indexed_batches(5))
    assert str(caught.value) == (
        f"dataset file:{path}:Sizes: samples 0 and 3 of the train split have targets of different shapes (2 "
        "and 3): a batch needs equal shapes; resize in the dataset or set batch_size=1"
    )
    with pytest.raises(JobError) as caught:
        list(ds.splits["train"].indexed_batches(5, rank=1, world=2))
    assert str(caught.value) == (
        f"dataset file:{path}:Sizes: samples 5 and 8 of the train split have inputs of different shapes "
        "(1×28×28 and 1×30×30): a batch needs equal shapes; resize in the dataset or set batch_size=1"
    )
    assert len(list(ds.splits["train"].indexed_batches(1))) == 10  # batch_size=1 reads them all
    ds.release()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "return torch.zeros(3)",
            "sample 0 of the train split is a tensor of shape 3; a sample must be (input, target) "
            "or a dict with 'input' and 'target'",
        ),
        ("return (torch.zeros(3), 1, 2)", "sample 0 of the train split is a tuple of 3 items"),
        (
            "return {'image': torch.zeros(3), 'label': 1}",
            "sample 0 of the train split is a dict without 'input' and 'target' (its keys: 'image', 'label')",
        ),
        ("return 'text', 1", "sample 0 of the train split: its input is a str; an input must be a tensor"),
        ("return torch.zeros(3), 'cat'", "sample 0 of the train split: its target is a str"),
    ],
)
def test_sample_that_is_not_input_and_target(tmp_path, body, message):
    path = write(
        tmp_path,
        f"""
    class Odd(Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            {body}
    """,
    )
    with pytest.raises(JobError) as caught:
        load(path, "Odd", tmp_path)
    assert str(caught.value).startswith(f"dataset file:{path}:Odd: {message}")


def test_missing_name_not_a_dataset_and_wrong_args(tmp_path):
    path = write(
        tmp_path,
        SIMPLE,
        """
    class Plain:
        pass

    def listing():
        return [1, 2, 3]

    def broken(size=3):
        return Numbers(size) / 2
    """,
    )
    with pytest.raises(
        JobError,
        match=rf"'Missing' in {re.escape(str(path))} is not defined there; it defines: "
        "Numbers, Plain, broken, listing",
    ):
        load(path, "Missing", tmp_path)
    with pytest.raises(
        JobError,
        match=rf"Plain in {re.escape(str(path))} is a class but not a "
        r"torch.utils.data.Dataset subclass",
    ):
        load(path, "Plain", tmp_path)
    with pytest.raises(
        JobError,
        match=rf"listing from {re.escape(str(path))} gave a list for the train split, not "
        r"a torch.utils.data.Dataset",
    ):
        load(path, "listing", tmp_path)
    with pytest.raises(JobError) as caught:
        load(path, "Numbers", tmp_path, args={"count": 3})
    assert str(caught.value).startswith(f"dataset file:{path}:Numbers: Numbers(count=3) from {path}: ")
    assert "unexpected keyword argument 'count'" in str(caught.value) and "check dataset.args" in str(
        caught.value
    )
    with pytest.raises(
        JobError,
        match=rf"TypeError: .*\({re.escape(str(path))}, line "
        rf"{error_line(path, 'Numbers(size) / 2')}, while calling broken\(\)\)",
    ):
        load(path, "broken", tmp_path)
    missing = tmp_path / "nowhere.py"
    with pytest.raises(JobError, match="the dataset file .*nowhere.py does not exist"):
        load(missing, "X", tmp_path)
    syntax = write(tmp_path, "def oops(:\n", name="syntax.py")
    with pytest.raises(JobError, match=r"syntax error.*while importing the dataset file"):
        load(syntax, "oops", tmp_path)


@pytest.mark.parametrize("returned", [-5, 2**62, "7"])
def test_a_len_that_is_no_count_names_the_users_class_and_what_it_returned(tmp_path, returned):
    path = write(
        tmp_path,
        SIMPLE,
        f"""
    class Odd(Numbers):
        def __len__(self):
            return {returned!r}
    """,
    )
    with pytest.raises(JobError) as caught:
        load(path, "Odd", tmp_path)
    message = str(caught.value)
    assert f"Odd.__len__ returned {returned!r} for the train split ({path})" in message, message
    assert "user.py" not in message and "OverflowError" not in message


def test_empty_train_split(tmp_path):
    path = write(
        tmp_path,
        SIMPLE,
        """
    def nothing(split):
        return Numbers(0 if split == "train" else 5)
    """,
    )
    with pytest.raises(JobError, match=r"the train split is empty \(0 samples\)"):
        load(path, "nothing", tmp_path)
    with pytest.raises(JobError, match=r"the train split is empty"):
        load(path, "Numbers", tmp_path, args={"size": 0})


def test_a_worker_that_segfaults_stops_the_job_not_the_process(tmp_path):
    path = write(
        tmp_path,
        """
    class Crash(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            if i == 5 and torch.utils.data.get_worker_info() is not None:
                os.kill(os.getpid(), signal.SIGSEGV)
            return torch.zeros(2), 0
    """,
    )
    ds = load(path, "Crash", tmp_path, num_workers=1, val_fraction=0.0, test_fraction=0.0)
    with pytest.raises(JobError) as caught:
        list(ds.splits["train"].indexed_batches(2))
    assert re.fullmatch(
        rf"a DataLoader worker of dataset file:{re.escape(str(path))}:Crash died \(pid \d+, killed by "
        r"signal: Segmentation fault\); the job stopped — try dataset.num_workers=0 to see the error in the "
        r"job itself",
        str(caught.value),
    ), str(caught.value)
    ds.release()
    assert torch.zeros(1).item() == 0  # still here


def test_describe_workers(tmp_path):
    path = write(tmp_path, SIMPLE)
    assert (
        load(path, "Numbers", tmp_path, num_workers=2).describe_workers() == "2 DataLoader worker processes"
    )
    assert load(path, "Numbers", tmp_path, num_workers=1).describe_workers() == "1 DataLoader worker process"
    auto = load(path, "Numbers", tmp_path, num_workers="auto")
    assert auto.loader_workers() >= 1 and "dataset.num_workers auto" in auto.describe_workers()


def test_data_info_describes_a_file_dataset(tmp_path):
    path = write(tmp_path, SIMPLE)
    result = run_task(
        get_task("data.info"),
        {"dataset": {"name": f"file:{path}:Numbers", "args": {"size": 20}, "num_workers": 0}},
        emit=Recorder(),
        workspace=tmp_path,
    )
    assert result["status"] == "done", result.get("error")
    assert result["num_samples"] == {"train": 16, "val": 2, "test": 2}
    assert result["sample_shape"] == [1, 2, 2] and result["input_dtype"] == "float32"
    assert (
        result["classes"] == ["0", "1", "2", "3", "4"]
        and result["target"] == "integer class label (5 classes)"
    )
    assert result["mean"] is None and result["in_memory"] is False and result["root"] == str(path)
    bad = run_task(
        get_task("data.info"),
        {"dataset": {"name": f"file:{path}:Nothing"}},
        emit=Recorder(),
        workspace=tmp_path,
    )
    assert bad["status"] == "failed" and "'Nothing'" in bad["error"]["message"] and "traceback" not in bad


def test_samples_unpickle_in_a_fresh_process(tmp_path):
    """What a spawn or forkserver DataLoader worker does first: the user's file is imported before its
    objects."""
    path = write(tmp_path, SIMPLE)
    ds = load(path, "Numbers", tmp_path, args={"size": 10}, val_fraction=0.2)
    samples = ds.splits["val"].samples
    code = (
        "import pickle, sys\nsamples = pickle.loads(sys.stdin.buffer.read())\n"
        "print(len(samples), samples[1][0], float(samples[1][1][0, 0, 0]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=pickle.dumps(samples),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    index = ds.splits["val"].source.indices[1]
    assert done.stdout.decode().split() == ["2", "1", f"{float(index)}"]

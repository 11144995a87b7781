"""TensorBoard interop: `tensorboard = true` writes the run's metrics (as its database has them), spec and
graph while it trains; `workbench runs export-tensorboard` writes the same for a run made without it; a
missing package is a clear error before training."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from training_helpers import QUICK, Recorder, done, failed, merge, metrics, train

from workbench.cli import main as cli_main
from workbench.layer_records import KINDS, SCALARS, read_records
from workbench.runs import Run
from workbench.worker.training import tensorboard as tb

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing import event_accumulator  # noqa: E402

# 23 steps of the small cnn on digits, validated once; layer statistics at steps 1, 10 and 20
SPEC = merge(QUICK, epochs=1, layer_stats_every=10)


def read_board(log_dir) -> event_accumulator.EventAccumulator:
    # 0: keep every value (the default keeps a sample of 10,000 scalars, and 10 texts)
    acc = event_accumulator.EventAccumulator(
        str(log_dir),
        size_guidance={
            event_accumulator.SCALARS: 0,
            event_accumulator.TENSORS: 0,
            event_accumulator.HISTOGRAMS: 0,
        },
    )
    acc.Reload()
    return acc


def assert_same_scalars(acc, database: dict) -> None:
    """Every metric of the database, at the same steps, with the same values (TensorBoard keeps float32); the
    other scalars are the layer statistics' (grad_norm/<layer>, ...)."""
    tags = set(acc.Tags()["scalars"])
    assert set(database) <= tags
    assert {tag.split("/")[0] for tag in tags - set(database)} <= set(SCALARS)
    for name, (steps, values) in database.items():
        events = acc.Scalars(name)
        assert [e.step for e in events] == steps, name
        np.testing.assert_array_equal(np.float32([e.value for e in events]), np.float32(values), err_msg=name)


def assert_layer_stats(acc, run_dir) -> None:
    """Each recorded step of layer statistics is on the board: its histograms bin for bin, its statistics."""
    records = read_records(run_dir)
    assert [record["step"] for record in records] == [1, 10, 20]
    layer = records[0]["layers"][0]
    for which, kind in enumerate(KINDS):
        events = acc.Histograms(f"{kind}/{layer}")
        assert [e.step for e in events] == [1, 10, 20], kind
        for event, record in zip(events, records):
            assert list(event.histogram_value.bucket) == list(record["counts"][0, which]), kind
            assert event.histogram_value.min >= record["ranges"][0, which, 0] - 1e-6
    grad_norms = [e.value for e in acc.Scalars(f"grad_norm/{layer}")]
    np.testing.assert_allclose(
        grad_norms, [record["scalars"][0, SCALARS.index("grad_norm")] for record in records], rtol=1e-6
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One run with tensorboard = true and its twin without (same spec otherwise), trained once for this
    module."""
    workspace = tmp_path_factory.mktemp("tb")
    recorder = Recorder()
    live = done(train(workspace, merge(SPEC, tensorboard=True), recorder=recorder))
    plain = done(train(workspace, SPEC))
    return workspace, live, plain, recorder


def test_live_board_has_every_step_the_spec_and_the_graph(runs):
    workspace, live, _, recorder = runs
    log_dir = tb.Path(live["run_dir"]) / "tensorboard"
    acc = read_board(log_dir)
    database = metrics(live["run_dir"])
    assert_same_scalars(acc, database)
    loss_steps = [e.step for e in acc.Scalars("train/loss")]
    assert loss_steps == list(range(1, live["global_steps"] + 1))  # one scalar per optimiser step
    for name in ("lr", "val/acc", "epoch/train_loss"):
        assert name in acc.Tags()["scalars"]
    with Run(live["run_dir"]) as run:
        spec_text = run.spec_path.read_text()
    texts = acc.Tensors("spec/text_summary")
    assert spec_text.strip() in texts[0].tensor_proto.string_val[0].decode()
    assert "tensorboard = true" in spec_text
    graph = acc.Graph()
    assert any("Conv2d" in node.op or "conv" in node.op.lower() for node in graph.node), [
        n.op for n in graph.node
    ][:20]
    assert_layer_stats(acc, live["run_dir"])
    logs = " ".join(content["text"] for content in recorder.of("log"))
    assert "tensorboard --logdir" in logs
    assert "warning" not in {
        content["level"] for content in recorder.of("log") if "tensorboard" in content["text"]
    }


def test_tensorboard_does_not_change_training(runs):
    _, live, plain, _ = runs
    a, b = metrics(live["run_dir"])["train/loss"], metrics(plain["run_dir"])["train/loss"]
    assert a[0] == b[0]
    # the graph is traced in eval mode: no batch-norm update
    np.testing.assert_allclose(a[1], b[1], rtol=1e-6)


def test_export_of_a_run_trained_without_it_gives_the_same_scalars(runs, capsys):
    workspace, _, plain, _ = runs
    run_dir = tb.Path(plain["run_dir"])
    assert not (run_dir / "tensorboard").exists()
    code = cli_main(["--workspace", str(workspace), "runs", "export-tensorboard", run_dir.name, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    assert out["log_dir"] == str(run_dir / "tensorboard") and out["graph"] and out["spec"]
    assert out["command"] == f"tensorboard --logdir {run_dir / 'tensorboard'}"
    acc = read_board(run_dir / "tensorboard")
    assert_same_scalars(acc, metrics(run_dir))
    assert "spec/text_summary" in acc.Tags()["tensors"]
    assert acc.Tags()["graph"]
    assert out["layer_stats_steps"] == 3
    assert_layer_stats(acc, run_dir)
    # Again, in words: the earlier event files are replaced, not doubled.
    assert (
        cli_main(["--workspace", str(workspace), "runs", "export-tensorboard", str(run_dir), "--no-graph"])
        == 0
    )
    text = capsys.readouterr().out
    assert f"to {run_dir / 'tensorboard'}" in text and "replacing 1 earlier event file" in text
    assert f"tensorboard --logdir {run_dir / 'tensorboard'}" in text
    assert len(list((run_dir / "tensorboard").glob("events.out.tfevents.*"))) == 1
    assert_same_scalars(read_board(run_dir / "tensorboard"), metrics(run_dir))


def test_export_to_a_folder_of_its_own(runs, tmp_path, capsys):
    workspace, live, _, _ = runs
    out = tmp_path / "board"
    assert (
        cli_main(
            [
                "--workspace",
                str(workspace),
                "runs",
                "export-tensorboard",
                live["run_dir"],
                "--out",
                str(out),
                "--no-graph",
                "--json",
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["log_dir"] == str(out) and not result["graph"]
    assert_same_scalars(read_board(out), metrics(live["run_dir"]))
    # A folder that already holds event files is refused: TensorBoard would draw both.
    assert (
        cli_main(
            ["--workspace", str(workspace), "runs", "export-tensorboard", live["run_dir"], "--out", str(out)]
        )
        == 1
    )
    assert "already holds TensorBoard event files" in capsys.readouterr().err


def test_missing_tensorboard_fails_before_training_and_says_what_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tb, "tensorboard_available", lambda: False)
    result = train(tmp_path, merge(SPEC, tensorboard=True))
    message = failed(result)
    assert "pip install 'torch-workbench[tensorboard]'" in message and "tensorboard = false" in message
    assert metrics(result["run_dir"]) == {}  # refused before the first step
    assert not (tb.Path(result["run_dir"]) / "tensorboard").exists()
    code = cli_main(["--workspace", str(tmp_path), "runs", "export-tensorboard", result["run_dir"]])
    assert code == 1 and "torch-workbench[tensorboard]" in capsys.readouterr().err


def test_histograms_binned_elsewhere_are_written_as_they_are(tmp_path):
    board = tb.Board(tmp_path)
    counts, edges = np.array([1, 0, 3, 6]), np.linspace(-1.0, 1.0, 5)
    board.histogram("layers/conv1.weight", 7, counts, edges)
    board.histogram("layers/bad", 7, [1, 2], [0.0, 1.0])  # mismatched: skipped with a warning, nothing raised
    board.close()
    acc = read_board(tmp_path)
    (event,) = acc.Histograms("layers/conv1.weight")
    value = event.histogram_value
    assert event.step == 7 and value.num == 10 and value.min == -1.0 and value.max == 1.0
    assert list(value.bucket_limit) == [-0.5, 0.0, 0.5, 1.0] and list(value.bucket) == [1, 0, 3, 6]
    assert acc.Tags()["histograms"] == ["layers/conv1.weight"]


def test_histograms_sent_with_a_step_reach_the_board(tmp_path):
    from workbench.worker.context import TaskContext

    ctx = TaskContext(lambda *args: None)
    board = tb.Board(tmp_path)
    ctx.add_sink(board)
    ctx.histogram("act/fc", np.array([2, 2]), np.array([0.0, 0.5, 1.0]), step=3)
    ctx.metrics(3, {"train/loss": torch.tensor(0.25)})  # a 0-d tensor, read back at the flush
    ctx.remove_sink(board)
    ctx.metrics(4, {"train/loss": 0.5})  # after remove_sink: not on the board
    ctx.close()
    board.close()
    acc = read_board(tmp_path)
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [(3, 0.25)]
    assert [e.step for e in acc.Histograms("act/fc")] == [3]


def test_a_graph_that_cannot_be_traced_is_a_warning(tmp_path):
    class Branchy(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError("no tracing here")

    warnings: list[str] = []
    board = tb.Board(tmp_path, warn=warnings.append)
    assert not board.graph(Branchy(), torch.zeros(1, 3))
    board.scalars({"train/loss": ([1], [0.5], [1.0])})
    board.close()
    assert len(warnings) == 1 and "no model graph" in warnings[0] and "no tracing here" in warnings[0]
    assert [e.value for e in read_board(tmp_path).Scalars("train/loss")] == [0.5]


def test_export_drops_the_steps_a_resumed_run_redid():
    # killed after step 3, last.pt at 2
    rows = [
        (1, "a", 1.0, 10.0),
        (2, "a", 2.0, 11.0),
        (3, "a", 3.0, 12.0),
        (3, "a", 3.5, 20.0),
        (4, "a", 4.0, 21.0),
    ]
    resumes = [{"time": 19.0, "type": "resume", "content": {"epoch": 1, "global_step": 2}}]
    assert [(step, value) for step, _, value, _ in tb._current_rows(rows, resumes)] == [
        (1, 1.0),
        (2, 2.0),
        (3, 3.5),
        (4, 4.0),
    ]


def test_a_lightning_run_writes_the_same_board(tmp_path):
    pytest.importorskip("lightning")
    import sys

    sys.path.insert(0, str(tb.Path(__file__).resolve().parents[1] / "lightning"))
    from lightning_helpers import lightning_spec, write_project

    project = write_project(tmp_path)
    result = done(train(tmp_path / "ws", lightning_spec(project, epochs=1, tensorboard=True)))
    acc = read_board(tb.Path(result["run_dir"]) / "tensorboard")
    database = metrics(result["run_dir"])
    assert {"train_loss", "train/loss", "val_acc", "lr", "epoch"} <= set(database)
    assert_same_scalars(acc, database)
    assert "spec/text_summary" in acc.Tags()["tensors"]
    assert "aten::linear" in {node.op for node in acc.Graph().node}


def test_a_board_that_cannot_be_written_is_a_warning_and_training_goes_on(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tb, "TENSORBOARD_DIR", "spec.toml/tensorboard")  # under a file: every write fails
    recorder = Recorder()
    result = done(train(tmp_path, merge(SPEC, tensorboard=True, layer_stats_every=0), recorder=recorder))
    warnings = [
        c["text"] for c in recorder.of("log") if c["level"] == "warning" and "tensorboard" in c["text"]
    ]
    assert len(warnings) == 1 and "nothing more is written there" in warnings[0], warnings
    assert len(metrics(result["run_dir"])["train/loss"][0]) == result["global_steps"]
    # An export, whose files are the whole point, fails instead.
    code = cli_main(
        [
            "--workspace",
            str(tmp_path),
            "runs",
            "export-tensorboard",
            result["run_dir"],
            "--out",
            str(tb.Path(result["run_dir"]) / "spec.toml" / "board"),
        ]
    )
    assert code == 1 and "nothing more is written there" in capsys.readouterr().err


def test_out_is_refused_in_another_run_its_checkpoints_or_the_root(runs, capsys):
    workspace, live, plain, _ = runs
    for out in (tb.Path(plain["run_dir"]) / "board", tb.Path(live["run_dir"]) / "checkpoints", tb.Path("/")):
        code = cli_main(
            [
                "--workspace",
                str(workspace),
                "runs",
                "export-tensorboard",
                live["run_dir"],
                "--out",
                str(out),
                "--no-graph",
                "--json",
            ]
        )
        result = json.loads(capsys.readouterr().out)
        assert code == 2 and result["error"]["message"].startswith(f"--out {out}"), result
        assert not list(out.glob("events.out.tfevents.*"))

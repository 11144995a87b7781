"""workbench.results read the results real jobs return (train, quantize, export, bench on the bundled digits),
old and partial ones without raising; and a run recorded under the training id's old name, train.classifier,
is listed, filtered, resumable and a source.run as before (real runner, real SQLite, real files)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from workbench.results import (
    BenchResult,
    Evaluation,
    ExportResult,
    QuantResult,
    TrainResult,
    dig,
    result_of,
)
from workbench.runs import RunStore
from workbench.task_ids import (
    QUANT_TASK,
    TRAIN_ALIAS,
    TRAIN_TASK,
    TRAIN_TASKS,
    TaskId,
    canonical,
    is_training,
    same_task,
    with_aliases,
)
from workbench.worker.registry import get_task, list_tasks
from workbench.worker.runner import run_task

TRAIN = {
    "dataset": {"name": "digits", "test_fraction": 0.25},
    "model": {"name": "cnn"},
    "epochs": 1,
    "batch_size": 64,
    "keep_best": False,
}


def _run(task: str, spec: dict, workspace: Path, **kwargs) -> dict:
    return run_task(get_task(task), spec, emit=lambda *a: None, workspace=workspace, **kwargs)


def _done(result: dict) -> dict:
    assert result["status"] == "done", (result.get("error"), result.get("traceback"))
    return result


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> dict:
    """One real run of each job on digits, the training one called by its old id: {task: result}."""
    workspace = tmp_path_factory.mktemp("results-ws")
    train = _done(_run(TRAIN_ALIAS, TRAIN, workspace))
    source = {"run": Path(train["run_dir"]).name}
    quant = _done(
        _run(QUANT_TASK, {"source": source, "calibration": {"samples": 64}, "eval_samples": 128}, workspace)
    )
    export = _done(_run("export.model", {"source": source, "format": "onnx", "parity_samples": 8}, workspace))
    bench = _done(
        _run(
            "bench.latency",
            {"source": source, "backends": ["eager"], "batch_sizes": [1], "warmup": 1, "iters": 3},
            workspace,
        )
    )
    return {"workspace": workspace, "train": train, "quant": quant, "export": export, "bench": bench}


# -- the task ids --------------------------------------------------------------------------------------------


def test_task_ids_equal_their_strings_and_the_old_training_id_reads_as_the_new():
    assert TaskId.TRAIN == "train.model" == TRAIN_TASK and TaskId.QUANT == "quant.analyze"
    assert json.dumps({"task": TaskId.TRAIN}) == '{"task": "train.model"}'
    assert canonical(TRAIN_ALIAS) is TaskId.TRAIN and canonical("train.model") is TaskId.TRAIN
    assert canonical("debug.count") is None and canonical(None) is None
    assert is_training(TRAIN_ALIAS) and is_training(TRAIN_TASK) and not is_training(QUANT_TASK)
    assert same_task(TRAIN_ALIAS, TRAIN_TASK) and not same_task(TRAIN_ALIAS, QUANT_TASK)
    assert same_task("debug.count", "debug.count")
    assert set(TRAIN_TASKS) == {"train.model", "train.classifier"}
    assert with_aliases([TRAIN_TASK]) == set(TRAIN_TASKS) and with_aliases([QUANT_TASK]) == {QUANT_TASK}


def test_the_worker_answers_to_both_training_ids_and_lists_the_new_one():
    assert get_task(TRAIN_ALIAS) is get_task(TRAIN_TASK)
    assert get_task(TRAIN_ALIAS).name == "train.model"
    names = {task.name for task in list_tasks()}
    assert "train.model" in names and "train.classifier" not in names


# -- typed results of real jobs ------------------------------------------------------------------------------


def test_a_training_result_called_by_its_old_id_records_the_new_one(jobs):
    raw = jobs["train"]
    result = TrainResult.from_dict(raw)
    assert result.raw is raw and result.task == "classification"
    assert result.epochs_completed == 1
    assert result.final.test_accuracy == raw["final"]["test_accuracy"]
    assert 0 <= result.final.test_accuracy <= 1
    assert result.final.train_loss == raw["final"]["train_loss"] and result.final.test_metrics is None
    assert result.monitor.name == raw["monitor"]["name"] and result.monitor.higher_is_better is True
    assert result.monitor.test == raw["monitor"]["test"]
    assert Path(result.checkpoint).is_file() and result.best_checkpoint == ""
    with RunStore(jobs["workspace"]).open_run(raw["run_dir"]) as run:
        assert run.task == "train.model"  # a new run records the truthful id, whichever id the call used
    evaluation = Evaluation.from_dict(json.loads(Path(result.evaluation).read_text(encoding="utf-8")))
    assert evaluation.classes == list(range(10)) or len(evaluation.classes) == 10
    assert evaluation.monitor.value == raw["monitor"]["test"]
    assert isinstance(result_of(TRAIN_ALIAS, raw), TrainResult)


def test_a_quantize_result_reads_its_ends_rungs_and_layers(jobs):
    raw = jobs["quant"]
    result = QuantResult.from_dict(raw)
    assert result.fp32.accuracy == raw["fp32"]["accuracy"]
    assert result.quantized.accuracy == raw["quantized"]["accuracy"]
    assert result.quantized.logit_sqnr_db == raw["quantized"]["logit_sqnr_db"]
    assert [r.step for r in result.steps] == [s["step"] for s in raw["steps"]]
    assert result.steps[0].step == "fp32"
    assert result.steps[0].accuracy == raw["steps"][0]["accuracy"]
    assert result.layers == raw["layers"] and result.layers
    assert result.metric is None and result.metric_name == ""  # classification: "accuracy" is accuracy
    assert result.held_out_split in ("test", "validation") and result.source.get("run")
    assert isinstance(result_of(QUANT_TASK, raw), QuantResult)


def test_an_export_result_reads_its_parity(jobs):
    raw = jobs["export"]
    result = ExportResult.from_dict(raw)
    assert result.format == "onnx" and Path(result.artifact).is_file()
    assert result.size_bytes == raw["size_bytes"]
    assert result.parity is not None and result.parity.passed is True and result.parity.checked
    assert result.parity.max_abs_diff == raw["parity"]["max_abs_diff"]
    assert result.accuracy is None  # a float export is not measured in onnxruntime


def test_a_bench_result_reads_its_rows(jobs):
    raw = jobs["bench"]
    result = BenchResult.from_dict(raw)
    assert [(r.backend, r.batch_size) for r in result.rows] == [("eager", 1)]
    row = result.rows[0]
    assert row.measured and row.p50 == raw["results"][0]["latency_ms"]["p50"] and row.p50 > 0
    assert row.latency("mean") == raw["results"][0]["latency_ms"]["mean"] and row.latency("nope") is None
    assert result.device and result.raw is raw


# -- old, partial and failed results -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [TrainResult, QuantResult, ExportResult, BenchResult, Evaluation])
@pytest.mark.parametrize("raw", [None, {}, {"status": "failed", "error": {"message": "boom"}}, "not a dict"])
def test_a_missing_or_failed_result_reads_as_empty(kind, raw):
    result = kind.from_dict(raw)
    assert result.raw == (raw if isinstance(raw, dict) else {})


def test_old_and_partial_blocks_read_as_none_not_errors():
    old_train = {
        "final": {"val_accuracy": 0.9, "test_accuracy": None},
        "monitor": None,
        "best_epoch": "3",
        "best_val_accuracy": True,
    }
    train = TrainResult.from_dict(old_train)
    assert train.final.val_accuracy == 0.9
    assert train.final.test_accuracy is None and train.final.train_loss is None
    assert train.monitor.name == "" and train.monitor.test is None
    assert train.best_epoch is None and train.best_val_accuracy is None  # wrong types are not numbers
    quant = QuantResult.from_dict(
        {
            "fp32": None,
            "quantized": {"accuracy": float("nan")},
            "steps": [{"step": "fp32", "accuracy": 0.5}, "junk"],
            "layers": None,
            "metric": "accuracy",
            "held_out": {"split": "validation (256 samples)"},
        }
    )
    assert quant.fp32.accuracy is None and math.isnan(quant.quantized.accuracy)
    assert [r.step for r in quant.steps] == ["fp32"] and quant.layers == [] and quant.metric is None
    assert quant.held_out_split == "validation"
    export = ExportResult.from_dict(
        {"format": "onnx", "parity": {"skipped": True, "passed": None, "reason": "verify=false"}}
    )
    assert export.parity.skipped and not export.parity.checked and export.parity.reason == "verify=false"
    assert ExportResult.from_dict({"parity": None}).parity is None
    bench = BenchResult.from_dict(
        {"results": [{"backend": "tensorrt", "status": "unavailable", "latency_ms": None}, None]}
    )
    assert len(bench.rows) == 1 and not bench.rows[0].measured and bench.rows[0].p50 is None
    assert result_of("debug.count", {}) is None


def test_dig_reads_nested_dicts_and_defaults_where_a_step_is_missing():
    spec = {"source": {"run": "abc"}, "model": None, "dataset": "digits"}
    assert dig(spec, "source", "run") == "abc"
    assert dig(spec, "model", "name", default="") == "" and dig(spec, "dataset", "name", default="x") == "x"
    assert dig(None, "a", default=1) == 1 and dig({"a": None}, "a", default=2) == 2


# -- a run recorded as train.classifier ----------------------------------------------------------------------


def _old_training_run(jobs) -> str:
    """A copy of the trained run whose folder says train.classifier, as every run from before the rename
    does."""
    store = RunStore(jobs["workspace"])
    with store.open_run(jobs["train"]["run_dir"]) as trained:
        spec = trained.read_spec()
    with store.create_run("train", spec, task=TRAIN_ALIAS) as run:
        for sub in ("checkpoints", "artifacts"):
            for path in (Path(jobs["train"]["run_dir"]) / sub).iterdir():
                if path.is_file():
                    (run.dir / sub / path.name).write_bytes(path.read_bytes())
        run.write_report({k: v for k, v in jobs["train"].items() if k != "run_dir"})
        run.set_status("done")
        return run.id


def test_an_old_training_run_is_listed_filtered_and_a_source(jobs):
    from workbench.gui.widgets.run_table import task_runs

    old = _old_training_run(jobs)
    listed = RunStore(jobs["workspace"]).list_runs()
    entry = next(e for e in listed if e["id"] == old)
    assert entry["task"] == "train.classifier"  # what the folder says is kept, not rewritten
    shown = {e["id"] for e in task_runs([dict(e) for e in listed], (TRAIN_TASK,), (), lambda e: {})}
    assert old in shown and Path(jobs["train"]["run_dir"]).name in shown
    quant = _done(
        _run(
            QUANT_TASK,
            {"source": {"run": old}, "calibration": {"samples": 32}, "eval_samples": 64},
            jobs["workspace"],
        )
    )
    assert Path(QuantResult.from_dict(quant).source["run"]).name == old


def test_an_old_training_run_resumes_under_the_new_id(jobs):
    old = _old_training_run(jobs)
    run_dir = RunStore(jobs["workspace"]).resolve(old)
    resumed = _run(TRAIN_TASK, {**TRAIN, "epochs": 2}, jobs["workspace"], resume=run_dir)
    assert _done(resumed)["run_dir"] == str(run_dir)
    assert TrainResult.from_dict(resumed).epochs_completed == 2
    with RunStore(jobs["workspace"]).open_run(old) as run:
        assert run.task == "train.classifier"  # the run keeps the id it was recorded under


def test_the_cli_lists_shows_and_reports_an_old_training_run(jobs, tmp_path):
    from cli_helpers import expect, wb

    old = _old_training_run(jobs)
    quant = _done(
        _run(
            QUANT_TASK,
            {"source": {"run": old}, "calibration": {"samples": 32}, "eval_samples": 64},
            jobs["workspace"],
        )
    )
    ws = jobs["workspace"]
    listed = wb(tmp_path, "runs", "list", "--json", workspace=ws, trusted=False)
    expect(listed, 0)
    assert {r["id"]: r["task"] for r in json.loads(listed.stdout)["runs"]}[old] == "train.classifier"
    shown = wb(tmp_path, "runs", "show", old, "--json", workspace=ws, trusted=False)
    expect(shown, 0)
    assert json.loads(shown.stdout)["task"] == "train.classifier"
    # A report of the quantize run stands for the training run behind it: the old-id run.
    reported = wb(tmp_path, "report", Path(quant["run_dir"]).name, "--json", workspace=ws, trusted=False)
    expect(reported, 0)
    runs = json.loads(reported.stdout)["runs"]
    assert runs["train"] == old and Path(quant["run_dir"]).name in runs["quantize"]

"""The model report (issue #10): one self-contained HTML page strings a model's training, quantize, export and
benchmark runs together. The runs are made with RunStore in the shapes the real tasks write (report_story)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import run_cli
from report_story import SCRIPT, bench_run, export_run, full_story, make_run, quantize_run, training_run

from workbench.errors import UsageError
from workbench.report import build_report, collect, write_report
from workbench.runs import RunStore

ROOT = Path(__file__).resolve().parents[2]
TRACEBACK = "Traceback (most recent call last)"


@pytest.fixture
def story(tmp_path):
    ws = tmp_path / "ws"
    return ws, full_story(ws)


def _snapshot(ws: Path) -> dict:
    return {
        str(p.relative_to(ws)): (p.stat().st_size, p.stat().st_mtime_ns) for p in ws.rglob("*") if p.is_file()
    }


# -- what the page says --------------------------------------------------------------------------------------


def test_report_strings_the_model_together(story):
    ws, ids = story
    page = build_report(ws, ids["train"])
    for heading in ("Summary", "Training", "Quantization", "Export and parity", "Latency and throughput"):
        assert f">{heading}</h2>" in page, heading
    # header: model, dataset, run id, date
    assert "<h1>cnn" in page and "digits</h1>" in page
    assert ids["train"] in page and re.search(r"trained <b>\d{4}-\d\d-\d\d \d\d:\d\d</b>", page)
    # summary: FP32, best quantized (with its drop), parity verdicts in colour, best latency and throughput
    assert "<b>98.11 %</b>" in page and "(test split)" in page
    assert "<b>97.33 %</b>" in page and "−0.78 pp" in page
    assert '<span class="chip ok">parity passed</span>' in page
    assert '<span class="chip bad">parity FAILED</span>' in page
    assert '<span class="chip bad">failed</span>' in page  # the export that did not finish
    assert "<b>0.350 ms</b> p50" in page and "eager, batch 1, cpu, float32" in page
    # every run of the story appears, each with its spec folded away
    for run_id in [ids["train"], *ids["quantize"], *ids["export"], *ids["bench"]]:
        assert f"{run_id}</span>/spec.toml" in page, run_id
    assert page.count('<details class="spec">') == 1 + 1 + 3 + 2


def test_training_curves_ladder_layers_parity_and_latency(story):
    ws, ids = story
    page = build_report(ws, ids["train"])
    assert ">Loss</text>" in page and ">Accuracy</text>" in page and ">Learning rate</text>" in page
    assert ">train/loss<" in page and ">val/acc<" in page
    # the ladder, step by step, with the FP32 reference
    assert ">Accuracy ladder</text>" in page
    for step in (
        "FP32",
        "fold BatchNorm",
        "cross-layer equalisation",
        "weights quantized",
        "bias correction",
        "activations quantized",
    ):
        assert f">{step}<" in page, step
    assert "96.44 %" in page and "97.00 %" in page
    # worst layers by SQNR, the worst first
    worst = page.index("Worst layers by SQNR")
    assert page.index("features.4", worst) < page.index("features.0", worst)
    assert "<b>12.2</b>" in page
    assert "most sensitive" in page and "target met" in page and "11.8 KiB" in page
    # parity table: numbers and the first divergent layer of the failed export
    assert "3.10e-06" in page and "0.41" in page and '<span class="mono bad">features.4</span>' in page
    assert "torch_tensorrt is not installed" in page
    assert "quantize W4A8" in page  # the QDQ export names the quantize run it came from
    # latency: a log-log plot per benchmark, throughput bars, the table with the unavailable backend's reason
    assert page.count(">Latency (p50) against batch size</text>") == 2
    assert page.count(">Throughput</text>") == 2
    assert '<span class="chip na">unavailable</span>' in page
    assert "12.54 ± 0.597" in page or "0.682 ± 0.032" in page
    assert "of the export onnx" in page  # the second benchmark measured the ONNX export
    assert "cnn · input 1×8×8 · cpu (x86_64) · 4 threads" in page
    assert "Peak memory: peak resident memory of this process while measuring" in page


def test_user_text_is_escaped(tmp_path):
    ws = tmp_path / "ws"
    train = training_run(ws, model="cnn<script>", note=SCRIPT)
    with RunStore(ws).open_run(train, readonly=False) as run:
        run.claim()
        run.log_metrics(
            [
                (1, "<img src=x onerror=alert(1)>/loss", 1.0, 0.0),
                (2, "<img src=x onerror=alert(1)>/loss", 0.5, 0.0),
            ]
        )
    make_run(
        ws,
        "bench",
        "bench.latency",
        {"source": {"run": train}},
        {
            "results": [
                {
                    "backend": "<b>evil</b>",
                    "batch_size": 1,
                    "device": "cpu",
                    "dtype": "float32",
                    "status": "ok",
                    "latency_ms": {"p50": 1.0},
                    "throughput_per_s": 1000.0,
                },
                {"backend": "x", "batch_size": 1, "status": "unavailable", "reason": "</td><script>"},
            ]
        },
    )
    page = build_report(ws, train)
    assert (
        "<script" not in page and "<img" not in page and "<b>evil" not in page and "</td><script>" not in page
    )
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page  # the spec, shown as text
    assert "cnn&lt;script&gt;" in page
    assert "&lt;img src=x onerror=alert(1)&gt;/loss" in page
    assert "&lt;b&gt;evil&lt;/b&gt;" in page


def test_self_contained_no_network(story):
    ws, ids = story
    page = build_report(ws, ids["train"])
    assert not re.search(r"""(src|href|xlink:href|action)\s*=\s*["']?\s*(https?:|//|ftp:)""", page, re.I)
    assert "<script" not in page.lower() and "@import" not in page and "url(" not in page
    assert "<link" not in page.lower() and "<img" not in page.lower() and "<iframe" not in page.lower()
    assert "default-src 'none'" in page  # and the browser is told not to load anything either
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")


def test_only_a_training_run_says_what_to_do_next(tmp_path):
    ws = tmp_path / "ws"
    train = training_run(ws)
    page = build_report(ws, train)
    assert (
        f"No quantize runs of this model yet: <code>workbench quantize --set source.run={train}</code>"
        in page
    )
    assert f"No export runs of this model yet: <code>workbench export --set source.run={train}</code>" in page
    assert (
        f"No benchmark runs of this model yet: <code>workbench bench --set source.run={train}</code>" in page
    )
    assert "no quantize runs yet" in page and "not benchmarked yet" in page
    assert ">Loss</text>" in page


def test_a_training_run_without_metrics_or_report(tmp_path):
    ws = tmp_path / "ws"
    with RunStore(ws).create_run("train", {"model": {"name": "mlp"}}, task="train.classifier") as run:
        run.set_status("failed", "loss is NaN at step 3")
        train = run.id
    page = build_report(ws, train)
    assert "This run logged no metrics" in page
    assert "This run is failed: loss is NaN at step 3" in page
    assert "not measured" in page


# -- which runs belong to the model --------------------------------------------------------------------------


def test_only_this_models_descendants_are_gathered(tmp_path):
    ws = tmp_path / "ws"
    train = training_run(ws)
    other = training_run(ws, model="resnet18")
    quant = quantize_run(ws, train[:-3])  # named by a unique prefix
    other_quant = quantize_run(ws, other)
    export_of_quant = export_run(ws, quant, fmt="onnx_qdq")
    export_run(ws, other_quant, fmt="onnx_qdq")
    bench_of_export = bench_run(ws, export_of_quant)
    bench_run(ws, other)
    # a benchmark of the exported file itself (source.file), not of a run
    artifact = str(ws / "runs" / export_of_quant / "artifacts" / "model.onnx_qdq")
    bench_of_file = make_run(
        ws, "bench", "bench.latency", {"source": {"run": "", "file": artifact}}, {"results": []}
    )
    make_run(ws, "diag", "debug.count", {"steps": 3}, {})  # other tasks are never read as steps
    story = collect(ws, train)
    assert story.summary() == {
        "train": train,
        "quantize": [quant],
        "export": [export_of_quant],
        "bench": [bench_of_export, bench_of_file],
    }  # oldest first
    assert {r.id: r.source_id for r in story.bench} == {
        bench_of_export: export_of_quant,
        bench_of_file: export_of_quant,
    }


def test_a_copied_workspace_still_links_runs_by_id(tmp_path):
    # Specs that name their source by folder keep working after the workspace is copied or moved.
    ws = tmp_path / "ws"
    train = training_run(ws)
    quant = quantize_run(ws, str(ws / "runs" / train))
    copy = tmp_path / "copy"
    shutil.copytree(ws, copy)
    shutil.rmtree(ws)
    story = collect(copy, train)
    assert [r.id for r in story.quantize] == [quant]
    assert story.train.dir == copy / "runs" / train


def test_naming_a_later_step_reports_its_model(story):
    ws, ids = story
    story_from_bench = collect(ws, ids["bench"][1])  # a benchmark of an export of the training run
    assert story_from_bench.train.id == ids["train"] and story_from_bench.requested == ids["bench"][1]
    assert "this is the report of the model it came from" in build_report(ws, ids["quantize"][0])


def test_unknown_run_or_no_model_behind_it_is_a_usage_error(tmp_path):
    ws = tmp_path / "ws"
    training_run(ws)
    with pytest.raises(UsageError, match="No run matches 'nope'"):
        build_report(ws, "nope")
    diag = make_run(ws, "diag", "debug.count", {"steps": 1}, {})
    with pytest.raises(UsageError, match="is a debug.count run, and no training run is behind it"):
        build_report(ws, diag)
    orphan = make_run(
        ws, "bench", "bench.latency", {"source": {"run": "", "file": "/nowhere/model.onnx"}}, {"results": []}
    )
    with pytest.raises(UsageError, match="no training run is behind it"):
        build_report(ws, orphan)


def test_a_damaged_step_is_named_not_fatal(story):
    ws, ids = story
    (ws / "runs" / ids["bench"][0] / "report.json").write_text("{not json")
    (ws / "runs" / ids["export"][0] / "report.json").write_text(
        '{"parity": "yes", "size_bytes": "big", "results": [1, 2]}'
    )
    page = build_report(ws, ids["train"])
    assert "is not valid JSON" in page
    assert ids["bench"][0] in page and ">Export and parity</h2>" in page


def test_reading_changes_no_run(story):
    ws, ids = story
    before = _snapshot(ws)
    build_report(ws, ids["train"])
    assert _snapshot(ws) == before  # not a -wal, not an mtime


# -- writing it ----------------------------------------------------------------------------------------------


def test_write_report_default_place_folder_and_file(story, tmp_path):
    ws, ids = story
    path = write_report(ws, ids["train"])
    assert path == ws.absolute() / "runs" / ids["train"] / "artifacts" / "report.html"
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temp file left behind
    folder = tmp_path / "out"
    folder.mkdir()
    assert write_report(ws, ids["train"], folder) == folder / f"{ids['train']}-report.html"
    nested = write_report(ws, ids["train"], tmp_path / "a" / "b" / "model.html")
    assert nested.is_file()
    with pytest.raises(UsageError, match="ending in .html"):
        write_report(ws, ids["train"], tmp_path / "model.pdf")


# -- the walls -----------------------------------------------------------------------------------------------


def test_report_imports_neither_torch_nor_qt(story):
    ws, ids = story
    code = f"""
import sys
from workbench.report import build_report
import workbench.cli
page = build_report({str(ws)!r}, {ids["train"]!r})
assert "Quantization" in page
heavy = ("torch", "torchvision", "onnx", "onnxruntime", "model_explorer", "PySide6", "shiboken6", "pyqtgraph", "numpy")
print("LOADED", [m for m in heavy if m in sys.modules])
"""  # noqa: E501
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    assert "LOADED []" in result.stdout


# -- the command line ----------------------------------------------------------------------------------------


def _wb(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["WORKBENCH_WORKSPACE"] = str(tmp_path / "env-workspace")
    return run_cli(args, cwd=tmp_path, env=env, timeout=120)


@pytest.mark.slow
def test_cli_writes_the_report(story, tmp_path):
    ws, ids = story
    out = tmp_path / "model.html"
    proc = _wb(tmp_path, "report", ids["train"][:-2], "--workspace", str(ws), "--output", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "done" and result["output"] == str(out)
    assert result["run_dir"] == str(ws / "runs" / ids["train"])
    assert result["runs"] == ids  # each step oldest first
    assert "parity FAILED" in out.read_text(encoding="utf-8")
    # plain: the path on stdout (for `xdg-open $(workbench report RUN)`), what it covers on stderr
    proc = _wb(tmp_path, "--workspace", str(ws), "report", ids["train"])
    assert proc.returncode == 0, proc.stderr
    default = ws / "runs" / ids["train"] / "artifacts" / "report.html"
    assert proc.stdout.strip() == str(default) and default.is_file()
    assert "1 training, 1 quantize, 3 export and 2 benchmark runs" in proc.stderr


@pytest.mark.slow
def test_cli_unknown_run_is_exit_2_with_one_line(tmp_path):
    ws = tmp_path / "ws"
    training_run(ws)
    proc = _wb(tmp_path, "report", "nope", "--workspace", str(ws))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"workbench: error: No run matches 'nope' in {ws / 'runs'}."
    assert TRACEBACK not in proc.stderr and proc.stdout == ""
    proc = _wb(tmp_path, "report", "nope", "--workspace", str(ws), "--json")
    assert proc.returncode == 2
    result = json.loads(proc.stdout)
    assert result["status"] == "failed" and result["error"]["type"] == "UsageError"
    proc = _wb(tmp_path, "report", "--workspace", str(ws))  # no run at all: argparse's own usage error
    assert proc.returncode == 2 and "the following arguments are required: run" in proc.stderr


@pytest.mark.slow
def test_cli_unwritable_output_is_exit_1(story, tmp_path):
    ws, ids = story
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = _wb(tmp_path, "report", ids["train"], "--workspace", str(ws), "--output", str(blocker / "r.html"))
    assert proc.returncode == 1
    assert "Cannot write the report to" in proc.stderr and TRACEBACK not in proc.stderr


def test_a_run_folder_brings_its_own_workspace(story, tmp_path):
    ws, ids = story
    elsewhere = tmp_path / "another-workspace"
    story_by_folder = collect(elsewhere, str(ws / "runs" / ids["train"]))
    assert story_by_folder.summary() == ids
    assert not elsewhere.exists()  # nothing made in the workspace that was named


def test_one_benchmark_on_several_devices_draws_a_line_each(tmp_path):
    ws = tmp_path / "ws"
    train = training_run(ws)
    results = [
        {
            "backend": "eager",
            "batch_size": b,
            "device": device,
            "dtype": "float32",
            "status": "ok",
            "latency_ms": {"p50": 0.5 * b if device == "cpu" else 0.1 * b},
            "throughput_per_s": 100.0 * b,
        }
        for device in ("cpu", "cuda:0")
        for b in (1, 4)
    ]
    make_run(ws, "bench", "bench.latency", {"source": {"run": train}}, {"results": results})
    page = build_report(ws, train)
    assert ">eager cpu<" in page and ">eager cuda:0<" in page
    assert "<b>0.100 ms</b> p50" in page and "cuda:0" in page

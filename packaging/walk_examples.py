"""Walk the bundled examples through the real window, as a person would, and say what each stage gave.

For each example in resources/examples (or those named on the command line) this drives the real app with the
real worker, through the window's own menus, buttons and wizards:

1. File ▸ Open spec ▸ "Example: <name>" (the menu's own action), which opens the training wizard on the
   example's train.toml; the wizard is walked page by page (Next, then "Start training") and the run is waited
   for;
2. the Quantization tab's "New quantization…": the run picked as the source, the W8A8 preset, "Quantize";
3. the Export & Benchmark tab's "New export…": ONNX of the training run with its parity check, then onnx_qdq
   of the quantize run (the wizard switches the format itself);
4. its "New benchmark…": the quantize run with the ONNX export as its file, backends eager, onnxruntime and
   onnxruntime_int8.

Each stage's job status is read from the worker's record, each export's parity verdict from the tab that shows
it (and checked against the run's report), and PNGs are saved of the training wizard's first page (the Task
choice the worker filled), of the window after the training (the Training tab's evaluation view; for a custom
task, such as the Lightning example, its curves too), the quantization, each export and the benchmark. It ends
with a table of example × stage and exits non-zero if any stage failed.

Run under a virtual screen, one example at a time on a small machine:

    xvfb-run -a -s "-screen 0 1600x900x24" .venv/bin/python packaging/walk_examples.py [--out DIR] [--epochs N] \
        [shapes_segmentation diabetes_regression digit_attributes digits_lightning names_transformer shapes_detection]

`--epochs N` types N into the wizard's Epochs field where the example asks for more (the output says so);
without it the example's own epochs are kept. The workspace is a new temporary folder, kept for inspection
(its path is printed).
"""  # noqa: E501

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QSettings, QTimer
from PySide6.QtWidgets import QApplication, QLabel, QMessageBox, QWizard

from workbench.app_resources import example_specs
from workbench.client import WorkerManager
from workbench.gui.main_window import MainWindow
from workbench.gui.settings import Settings
from workbench.task_ids import TRAIN_TASK
from workbench.workspace import resolve_workspace

STAGES = ("train", "quantize", "export onnx", "export qdq", "bench")
BENCH_BACKENDS = ("eager", "onnxruntime", "onnxruntime_int8")
BENCH_FIELDS = {"batch_sizes": [1, 8, 32], "iters": 30, "warmup": 5}  # typed into the wizard: a short measure
JOB_TIMEOUT_S = 45 * 60  # one job on two busy cores; a stuck one fails its stage rather than hanging the walk
# a wizard page waiting on the worker (data.info imports torch and reads the first sample)
PAGE_TIMEOUT_S = 180
POLL_MS = 200


class StageFailed(Exception):
    """A stage that cannot go on; the message says what the window showed."""


@dataclass
class Wait:
    """What a walk waits for: `ready()` true, within `timeout` seconds, else StageFailed(`what`)."""

    ready: object
    timeout: float
    what: str


@dataclass
class Stage:
    status: str = "not run"
    figure: str = ""
    notes: list[str] = field(default_factory=list)  # what was seen on the way
    # where the window disagrees with the run: the stage fails
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "done" and not self.problems


class Driver:
    """Runs a generator that yields Wait (or None: wait one poll) from the event loop's timers; a Wait that
    times out is raised into the generator as StageFailed. A call that opens a modal dialog blocks the
    generator, so a modal is walked by a Driver of its own, whose timers run inside the dialog's loop."""

    def __init__(self, gen, done=None):
        self.gen, self.done = gen, done
        self.wait: Wait | None = None
        self.since = 0.0
        QTimer.singleShot(0, self._step)

    def _step(self, value=None, error: Exception | None = None) -> None:
        try:
            self.wait = self.gen.throw(error) if error is not None else self.gen.send(value)
        except StopIteration:
            if self.done:
                self.done()
            return
        except Exception:  # the walk itself broke: say where, and end it
            traceback.print_exc()
            if self.done:
                self.done()
            return
        self.since = time.monotonic()
        QTimer.singleShot(POLL_MS, self._poll)

    def _poll(self) -> None:
        wait = self.wait
        if wait is None:
            self._step()
            return
        try:
            ready = wait.ready()
        except Exception as exc:  # noqa: BLE001 (a check that broke fails the stage with its reason)
            self._step(error=StageFailed(f"{wait.what}: {exc!r}"))
            return
        if ready:
            self._step()
        elif time.monotonic() - self.since > wait.timeout:
            self._step(error=StageFailed(f"timed out after {wait.timeout:.0f} s: {wait.what}"))
        else:
            QTimer.singleShot(POLL_MS, self._poll)


def _text(widget) -> str:
    return " ".join(widget.text().split()) if widget is not None else ""


def _plain(html_text: str) -> str:
    from PySide6.QtGui import QTextDocument

    doc = QTextDocument()
    doc.setHtml(html_text)
    return " ".join(doc.toPlainText().split())


def _visible_errors(widget) -> list[str]:
    """The red messages a person would read on a page: its visible, non-empty labels in an error colour."""
    reds = ("#c0392b", "#d0342c")
    return [
        _plain(label.text())
        for label in widget.findChildren(QLabel)
        if label.isVisible()
        and label.text().strip()
        and any(red in label.styleSheet().lower() for red in reds)
    ]


class Walk:
    def __init__(self, window: MainWindow, examples: list[Path], out: Path, epochs: int | None):
        self.window, self.examples, self.out, self.epochs = window, examples, out, epochs
        self.results: dict[str, dict[str, Stage]] = {}
        self.pngs: list[Path] = []
        self.current = ""  # the example being walked

    # -- helpers ------------------------------------------------------------------------------------
    def grab(self, name: str, widget=None) -> Path:
        path = self.out / f"{name}.png"
        (widget or self.window).grab().save(str(path))
        self.pngs.append(path)
        print(f"    saved {path}", flush=True)
        return path

    def pause(self, seconds: float):
        until = time.monotonic() + seconds
        yield Wait(lambda: time.monotonic() >= until, seconds + 5, "a pause")

    def user_jobs(self) -> set[str]:
        return {r.job_id for r in self.window.manager.jobs.all() if not r.internal}

    def new_job(self, before: set[str], task: str):
        """The job (its record) the last click started, or None when it started none."""
        new = [
            r
            for r in self.window.manager.jobs.all()
            if not r.internal and r.job_id not in before and r.task == task
        ]
        return max(new, key=lambda r: r.submitted) if new else None

    def wait_job(self, job_id: str, what: str):
        manager = self.window.manager
        yield Wait(lambda: not manager.jobs.get(job_id).active, JOB_TIMEOUT_S, f"{what} to finish")
        record = manager.jobs.get(job_id)
        # The panels hear of the end through the same signal; let them paint it before they are read.
        yield from self.pause(1.5)
        return record

    def run_modal(self, wizard_type, walker, trigger, what: str):
        """Click `trigger` (a button's click or a menu action's trigger), which opens a `wizard_type` modally,
        and walk it with `walker(wizard)` (a generator of Wait) in the dialog's own loop. Returns what went
        wrong, or ""."""
        problem: list[str] = []
        finished: list[bool] = []

        def find():
            dialog = QApplication.activeModalWidget()
            if isinstance(dialog, QMessageBox):  # a refusal or a warning instead of the wizard
                problem.append(f"{dialog.windowTitle()}: {_plain(dialog.text())}")
                dialog.reject()
                return True
            return isinstance(dialog, wizard_type)

        def walk_it():
            try:
                yield Wait(find, 60, f"the {what} wizard to open")
            except StageFailed as exc:
                problem.append(str(exc))
                return
            dialog = QApplication.activeModalWidget()
            if not isinstance(dialog, wizard_type):
                return
            try:
                yield from walker(dialog)
            except StageFailed as exc:
                page = dialog.currentPage()
                errors = _visible_errors(page) if page is not None else []
                problem.append(f"{exc}" + (f" (the page says: {'; '.join(errors)})" if errors else ""))
                dialog.reject()

        self.modal_driver = Driver(walk_it(), done=lambda: finished.append(True))  # kept while it runs
        trigger()  # blocks in the dialog's exec() until the walker accepts or rejects it
        if not finished and not problem:
            problem.append(f"the {what} wizard closed before it was walked")
        return "; ".join(problem)

    def through_pages(self, wizard, edits: dict, finish_text: str):
        """Next through `wizard`'s pages as a person would, running `edits[page]` (a generator) on each page
        it reaches, then its Finish button (named `finish_text`)."""
        seen = set()
        while True:
            page = wizard.currentPage()
            if id(page) not in seen and page in edits:
                seen.add(id(page))
                yield from edits[page]()
            if wizard.nextId() == -1:
                finish = wizard.button(QWizard.FinishButton)
                if finish.text().replace("&", "") != finish_text:
                    raise StageFailed(f"the last page's button reads {finish.text()!r}, not {finish_text!r}")
                yield Wait(
                    finish.isEnabled, PAGE_TIMEOUT_S, f"“{finish_text}” to be enabled on {page.title()!r}"
                )
                finish.click()
                return
            button = wizard.button(QWizard.NextButton)
            yield Wait(button.isEnabled, PAGE_TIMEOUT_S, f"Next to be enabled on {page.title()!r}")
            button.click()
            yield None

    @staticmethod
    def pick(combo, value, what: str) -> None:
        index = combo.findData(value)
        if index < 0:
            offered = [combo.itemData(i) for i in range(combo.count())]
            raise StageFailed(f"{what} {value!r} is not offered (the list holds {offered})")
        combo.setCurrentIndex(index)

    # -- the walk ---------------------------------------------------------------------------------
    def run(self):
        window = self.window
        yield Wait(lambda: window.manager.state == "ready", 180, "the worker to be ready")
        for spec in self.examples:
            name = self.current = spec.parent.name
            print(f"\n== {name} ==", flush=True)
            stages = self.results[name] = {stage: Stage() for stage in STAGES}
            try:
                yield from self.example(name, spec, stages)
            except StageFailed as exc:
                failed = next((s for s in stages.values() if s.status == "running"), None)
                if failed is not None:
                    failed.status, failed.figure = "failed", str(exc)
                print(f"    FAILED: {exc}", flush=True)

    def start_job(
        self, stage: Stage, wizard_type, walker, trigger, what: str, task: str, button: str, waiting: str
    ):
        """Open a wizard with the window's own button (`trigger`), walk it, and wait for the job it starts:
        the job's record, the stage marked with its state."""
        stage.status = "running"
        before = self.user_jobs()
        problem = self.run_modal(wizard_type, walker, trigger, what)
        if problem:
            raise StageFailed(problem)
        record = self.new_job(before, task)
        if record is None:
            raise StageFailed(f"“{button}” started no job")
        record = yield from self.wait_job(record.job_id, waiting)
        stage.status = record.state
        return record

    @staticmethod
    def ended(stage: Stage, record, what: str) -> None:
        """StageFailed unless the job is done, its error as the stage's figure."""
        if record.state != "done":
            stage.figure = record.error_message or record.state
            raise StageFailed(f"{what} {record.state}: {stage.figure}")

    def example(self, name: str, spec: Path, stages: dict[str, Stage]):
        window = self.window
        # 1. Train: the File menu's own action for this example, then the wizard it opens.
        stage = stages["train"]
        stage.status = "running"
        action = self._spec_action(spec)
        record = yield from self.start_job(
            stage,
            _training_wizard(),
            lambda w: self._walk_training(w, stage),
            action.trigger,
            "training",
            TRAIN_TASK,
            "Start training",
            "the training run",
        )
        train_id = Path(record.run_dir).name if record.run_dir else ""
        result = record.result or {}
        monitor = result.get("monitor") or {}
        task = result.get("task") or "?"
        self.ended(stage, record, "training")
        value = monitor.get("test") if monitor.get("test") is not None else monitor.get("best_val")
        stage.figure = (
            f"{task}: {'test' if monitor.get('test') is not None else 'best val'} "
            f"{monitor.get('label') or monitor.get('name')} {_num(value)}, "
            f"{result.get('epochs_completed')} epochs"
        )
        print(f"    train {train_id}: {stage.figure}", flush=True)
        panel = window.training_panel
        window.show_tab(panel)
        panel.refresh()
        panel.select_run(train_id)
        panel.show_details(train_id)
        panel.tabs.setCurrentWidget(panel.evaluation)
        yield from self.pause(2.5)
        stage.notes.append(f"evaluation view: {_plain(panel.evaluation.title.text())[:160]}")
        self.grab(f"{name}-evaluation")
        if task == "custom":  # its evaluation lists its metrics; their curves are the view of such a run
            panel.tabs.setCurrentWidget(panel.curves)
            yield from self.pause(2.0)
            self.grab(f"{name}-curves")

        # 2. Quantize W8A8 from the Quantization tab's own button.
        stage = stages["quantize"]
        quant = window.quant_panel
        window.show_tab(quant)
        record = yield from self.start_job(
            stage,
            _quant_wizard(),
            lambda w: self._walk_quant(w, train_id),
            quant.new_button.click,
            "quantization",
            "quant.analyze",
            "Quantize",
            "the quantize run",
        )
        quant_id = Path(record.run_dir).name if record.run_dir else ""
        self.ended(stage, record, "quantize")
        result = record.result or {}
        metric = result.get("metric") or {}
        label = metric.get("label") or metric.get("name") or "accuracy"
        stage.figure = (
            f"{label} FP32 {_num(result['fp32']['accuracy'])} → W8A8 {_num(result['quantized']['accuracy'])}"
        )
        if result.get("task") != "detection":  # a detector's boxes have no one logit tensor
            stage.figure += f", logit SQNR {_num(result['quantized'].get('logit_sqnr_db'))} dB"
        print(f"    quantize {quant_id}: {stage.figure}", flush=True)
        window.show_tab(quant)
        quant.refresh()
        quant.open_run(quant_id)
        yield from self.pause(2.0)
        self.grab(f"{name}-quantize")

        # 3. Export ONNX (parity on) and onnx_qdq from the Export & Benchmark tab's own button.
        export = window.export_panel
        artifacts = {}
        for key, source, fmt in (("export onnx", train_id, "onnx"), ("export qdq", quant_id, "onnx_qdq")):
            stage = stages[key]
            window.show_tab(export)
            record = yield from self.start_job(
                stage,
                _export_wizard(),
                lambda w, s=source, f=fmt: self._walk_export(w, s, f),
                export.export_button.click,
                "export",
                "export.model",
                "Export",
                f"the {fmt} export",
            )
            run_id = Path(record.run_dir).name if record.run_dir else ""
            result = record.result or {}
            shown = export.current
            verdict = _text(export.verdict)
            detail = _plain(export.verdict_detail.text())
            accuracy = _text(export.artifact_labels["Accuracy"])
            print(f"    {key} {run_id}: {record.state}; the tab shows {verdict!r}: {detail}", flush=True)
            self.grab(f"{name}-{fmt.replace('_', '-')}")
            if shown is None or shown.run_id != run_id:
                stage.problems.append(
                    f"the tab shows {getattr(shown, 'run_id', None)!r}, not the export {run_id!r}"
                )
            self.ended(stage, record, f"{fmt} export")
            parity = result.get("parity") or {}
            passed = parity.get("passed")
            expected = {True: "Parity passed ✓", False: "Parity failed ✗"}.get(
                passed, "Exported, not verified"
            )
            if verdict != expected:
                stage.problems.append(
                    f"the tab's verdict {verdict!r} disagrees with the report ({expected!r})"
                )
            if parity.get("method") == "boxes":  # a detector: matched box by box
                stage.figure = (
                    f"{verdict or '(no verdict)'}, boxes matched with worst IoU "
                    f"{_num(parity.get('worst_iou'))}, scores within {_num(parity.get('max_score_diff'))}, "
                    f"{parity.get('ties', 0)} tie(s) named"
                )
            else:
                stage.figure = (
                    f"{verdict or '(no verdict)'}, max abs diff {_num(parity.get('max_abs_diff'))} "
                    f"(tol {_num(parity.get('tolerance'))})"
                )
            if fmt == "onnx_qdq" and parity.get("method") != "boxes":
                stage.figure += f"; the tab's Accuracy: {accuracy}"
                measured = result.get("accuracy") or {}
                if measured.get("equal") is False:
                    stage.notes.append(
                        f"onnxruntime measured {_num(measured.get('onnxruntime'))}, the quantize run "
                        f"simulated {_num(measured.get('simulated'))} on {measured.get('samples')} "
                        f"samples of the {measured.get('split')}"
                    )
            if passed is not True:
                stage.status = "failed"
                raise StageFailed(f"{fmt} parity: {verdict} {detail}")
            artifacts[fmt] = result.get("artifact") or ""

        # 4. Benchmark eager, onnxruntime (the ONNX file just written) and onnxruntime_int8 (the quantize
        #    run).
        stage = stages["bench"]
        window.show_tab(export)
        record = yield from self.start_job(
            stage,
            _bench_wizard(),
            lambda w: self._walk_bench(w, quant_id, artifacts.get("onnx", "")),
            export.bench_button.click,
            "benchmark",
            "bench.latency",
            "Run",
            "the benchmark",
        )
        yield from self.pause(1.0)
        self.grab(f"{name}-bench")
        self.ended(stage, record, "benchmark")
        rows = (record.result or {}).get("results") or []
        shown_rows = (
            export.current.rows() if export.current is not None and hasattr(export.current, "rows") else []
        )
        if len(shown_rows) != len(rows):
            stage.problems.append(f"the tab's table holds {len(shown_rows)} rows, the report {len(rows)}")
        bad = [
            f"{r.get('backend')}@{r.get('batch_size')}: {r.get('status')} ({r.get('reason')})"
            for r in rows
            if r.get("status") != "ok"
        ]
        at_one = {
            r["backend"]: (r.get("latency_ms") or {}).get("p50")
            for r in rows
            if r.get("batch_size") == 1 and r.get("status") == "ok"
        }
        stage.figure = "p50 @1: " + ", ".join(f"{b} {_num(at_one.get(b))} ms" for b in BENCH_BACKENDS)
        # A detector's onnxruntime rows are one image a call (as exported), and it adds its network alone.
        expected = (
            set(BENCH_BACKENDS) <= {r.get("backend") for r in rows}
            if (record.result or {}).get("task") == "detection"
            else len(rows) == len(BENCH_BACKENDS) * len(BENCH_FIELDS["batch_sizes"])
        )
        if bad or not expected:
            stage.status = "failed"
            raise StageFailed(f"benchmark rows not ok: {'; '.join(bad) or f'{len(rows)} rows'}")
        print(f"    bench: {stage.figure}", flush=True)

    def _spec_action(self, spec: Path):
        """File ▸ Open spec ▸ "Example: <name>": the menu's own action."""
        for top in self.window.menuBar().actions():
            if top.menu() is None or top.text().replace("&", "") != "File":
                continue
            for item in top.menu().actions():
                if item.menu() is None or item.text().replace("&", "") != "Open spec":
                    continue
                for action in item.menu().actions():
                    if action.text() in (f"Example: {spec.parent.name}", f"Sample: {spec.parent.name}"):
                        return action
        raise StageFailed(f"File ▸ Open spec has no entry for {spec.parent.name}")

    # -- the wizards, page by page ---------------------------------------------------------------
    def _walk_training(self, wizard, stage: Stage):
        page = wizard.dataset_page

        def dataset():
            # The Task choice is filled from the worker's data.info about the example's own data: wait for it.
            yield Wait(
                lambda: page._info_job is None and bool(page.info_line.text()),
                PAGE_TIMEOUT_S,
                "the wizard to read the example's data (data.info)",
            )
            stage.notes.append(
                f"wizard: task {page.task_choice.task()}, {_plain(page.info_line.text())[:120]}"
            )
            self.grab(f"{self.current}-wizard", wizard)

        def hyper():
            if self.epochs is None:
                return
            form = wizard.hyper_page.form
            epochs = form.value("epochs")
            if epochs > self.epochs:
                form.set_value("epochs", self.epochs)
                stage.notes.append(f"epochs changed in the wizard: {epochs} → {self.epochs}")
                print(f"    epochs changed in the wizard: {epochs} → {self.epochs}", flush=True)
            yield None

        yield from self.through_pages(wizard, {page: dataset, wizard.hyper_page: hyper}, "Start training")

    def _walk_quant(self, wizard, train_id: str):
        def source():
            self.pick(wizard.source_page.run, train_id, "the training run")
            self.pick(wizard.source_page.preset, "W8A8 (safe)", "the preset")
            yield None
            scheme = wizard.spec_data()
            if (scheme["weights"]["bits"], scheme["activations"]["bits"]) != (8, 8):
                raise StageFailed(
                    f"the W8A8 preset set W{scheme['weights']['bits']}A{scheme['activations']['bits']}"
                )

        yield from self.through_pages(wizard, {wizard.source_page: source}, "Quantize")

    def _walk_export(self, wizard, source_run: str, fmt: str):
        def source():
            self.pick(wizard.source_page.run, source_run, "the source run")
            yield None

        def options():
            form = wizard.form
            # the wizard matches the format to the source; onnx is the default
            if form.value("format") != fmt:
                raise StageFailed(
                    f"the wizard chose format {form.value('format')!r} for this source, not {fmt!r}"
                )
            if not form.value("verify"):
                form.set_value("verify", True)
            yield None

        yield from self.through_pages(
            wizard, {wizard.source_page: source, wizard.options_page: options}, "Export"
        )

    def _walk_bench(self, wizard, quant_id: str, onnx_file: str):
        def source():
            page = wizard.source_page
            page.from_run.setChecked(True)
            self.pick(page.run, quant_id, "the quantize run")
            page.artifact.setText(onnx_file)  # as Browse… would: the ONNX export, measured as onnxruntime
            yield None

        def backends():
            page = wizard.backends_page
            page.set_chosen(BENCH_BACKENDS)
            page.form.set_value("batch_sizes", BENCH_FIELDS["batch_sizes"])
            page.form.set_value("iters", BENCH_FIELDS["iters"])
            page.form.set_value("warmup", BENCH_FIELDS["warmup"])
            yield None

        yield from self.through_pages(
            wizard, {wizard.source_page: source, wizard.backends_page: backends}, "Run"
        )

    # -- the report ---------------------------------------------------------------------------------
    def table(self) -> str:
        names = list(self.results)
        lines = [f"| example | {' | '.join(STAGES)} |", "|---" * (len(STAGES) + 1) + "|"]
        for name in names:
            cells = []
            for stage_name in STAGES:
                stage = self.results[name][stage_name]
                mark = {"done": "done", "not run": "not run"}.get(stage.status, stage.status)
                if stage.status == "done" and stage.problems:
                    mark = "done, but the window disagrees"
                cells.append(f"{mark}: {stage.figure}" if stage.figure else mark)
            lines.append(f"| {name} | {' | '.join(cells)} |")
        notes = [
            f"- {name} / {stage_name}: {note}"
            for name in names
            for stage_name, stage in self.results[name].items()
            for note in [*stage.notes, *(f"PROBLEM: {p}" for p in stage.problems)]
        ]
        return "\n".join(lines + ([""] + notes if notes else []))

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(s.ok for stages in self.results.values() for s in stages.values())


def _training_wizard():
    from workbench.gui.panels.training.wizard import TrainingWizard

    return TrainingWizard


def _quant_wizard():
    from workbench.gui.panels.quant.wizard import QuantWizard

    return QuantWizard


def _export_wizard():
    from workbench.gui.panels.export.export_wizard import ExportWizard

    return ExportWizard


def _bench_wizard():
    from workbench.gui.panels.export.bench_wizard import BenchWizard

    return BenchWizard


def _num(value) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "—" if value is None else str(value)
    if value == 0:
        return "0"
    return f"{value:.4g}" if abs(value) >= 1e-3 else f"{value:.2e}"


def main() -> int:
    names = {spec.parent.name: spec for spec in example_specs()}
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("examples", nargs="*", help=f"which examples (default: all of {', '.join(names)})")
    parser.add_argument(
        "--out", default="walk-examples", help="folder for the PNGs (default: ./walk-examples)"
    )
    parser.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="type at most this many epochs into the wizard (default: the example's own)",
    )
    parser.add_argument("--theme", default="light", choices=("light", "dark"))
    args = parser.parse_args()
    unknown = [n for n in args.examples if n not in names]
    if unknown:
        parser.error(f"no example {', '.join(unknown)}: choose from {', '.join(names)}")
    examples = [names[n] for n in (args.examples or names)]
    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)

    from workbench.gui.app import prepare_qt_environment
    from workbench.gui.gui_thread_gc import GuiThreadGarbageCollector

    prepare_qt_environment()
    app = QApplication(sys.argv[:1])
    GuiThreadGarbageCollector(parent=app)  # as the app does
    scratch = Path(tempfile.mkdtemp(prefix="wb-walk-"))
    settings = Settings(QSettings(str(scratch / "settings.ini"), QSettings.IniFormat))
    settings.set("theme", args.theme)
    workspace = resolve_workspace(scratch / "workspace")
    print(f"workspace: {workspace}", flush=True)
    manager = WorkerManager()
    window = MainWindow(manager, workspace, settings)
    window.resize(1400, 820)
    window.show()
    manager.start(wait=False)
    walk = Walk(window, examples, out, args.epochs)

    def finish() -> None:
        print("\n" + walk.table(), flush=True)
        window.close_stopping_jobs()
        app.exit(0 if walk.ok else 1)

    driver = Driver(walk.run(), done=finish)
    code = app.exec()
    del driver
    return code


if __name__ == "__main__":
    sys.exit(main())

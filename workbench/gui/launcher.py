"""Starting jobs from the window: a spec file or a wizard (training, quantization, export, benchmark) becomes
a job on the worker, once the trust gate allows its code, and its tab comes to the front."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QObject, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QFileDialog, QMessageBox

from workbench.app_resources import sample_specs
from workbench.client import JobRecord
from workbench.errors import SpecError, WorkbenchError
from workbench.results import dig
from workbench.specs import QuantSpec, TrainSpec
from workbench.task_ids import TRAIN_TASK


class JobLauncher(QObject):
    """Opens the wizards and spec files of `main` (a MainWindow) and submits what they produce."""

    def __init__(self, main):
        super().__init__(main)
        self.main = main

    def _say(self, text: str, ms: int = 0) -> None:
        self.main.statusBar().showMessage(text, ms)

    def submit_job(self, task: str, spec: dict | None = None, *, with_run: bool = True) -> JobRecord | None:
        """Start a job on the worker; returns None (and says why) when the worker cannot take it, or the user
        did not trust the code it would run."""
        main = self.main
        if not main.trust_gate.allow(spec or {}, main):
            message = main.trust_gate.refusal(spec or {})["message"]
            main.log_panel.append(f"Did not start {task}: {message}", "warning")
            self._say(message, 8000)
            return None
        try:
            return main.manager.submit(task, spec or {}, main.workspace if with_run else None)
        except RuntimeError as exc:
            main.log_panel.append(f"Could not start {task}: {exc}", "error")
            self._say(str(exc), 8000)
            return None

    # -- spec files ------------------------------------------------------------------------------
    def open_spec(self, path) -> None:
        """Open a spec file in its job's wizard: a sample, a run's spec.toml or the user's own file."""
        from workbench.app_resources import spec_verb
        from workbench.specs import spec_for

        try:
            verb = spec_verb(path)
            data = spec_for(verb).load(path).to_dict()
        except SpecError as exc:
            QMessageBox.warning(self.main, "Open spec", str(exc))
            return
        # Asked before the wizard opens: its pages ask the worker about the data, which imports the spec's
        # code. Cancel still opens the wizard; its queries are then not sent, and it says why.
        self.main.trust_gate.allow(data, self.main)
        if verb == "train":
            self.new_training_run(start=data)
        elif verb == "quantize":
            self.new_quantization(dig(data, "source", "run", default=""), start=data)
        else:  # export or bench: the whole spec fills the wizard, its source run included
            self.open_export_wizard(verb if verb == "bench" else "export", start=data)

    def choose_spec_file(self) -> None:
        settings = self.main.settings
        start = settings.get("spec_folder") or str(sample_specs()[0].parent)
        path, _ = QFileDialog.getOpenFileName(
            self.main, "Open spec", start, "Specs (*.toml *.json);;All files (*)"
        )
        if path:
            settings.set("spec_folder", str(Path(path).parent))
            self.open_spec(path)

    # -- training --------------------------------------------------------------------------------
    def new_training_run(self, start: dict | None = None) -> TrainSpec | None:
        """Open the training wizard (on `start`, a run's spec, for "Train again"; else on the last spec used);
        on Start, submit the run. Returns the spec it started, if any."""
        # The dialog's module loads when it is first opened, not at start-up.
        from workbench.gui.panels.training import wizard as wizards

        main, picker = self.main, self.main.device_picker
        info = main.dataset_panel.info if main.navigation.data_tab.is_built else None
        wizard = wizards.TrainingWizard(
            main.dataset_state,
            picker.devices,
            picker.current_device(),
            start=start,
            num_classes=len(info["classes"]) if info else None,
            data_dir=str(main.workspace / "data"),
            parent=main,
            settings=main.settings,
        )
        if not wizard.exec() or wizard.spec is None:
            return None
        return self.start_training(wizard.spec)

    def quick_start_training(self) -> TrainSpec | None:
        """The first-run button: a small CNN on the bundled digits, on the device picked in the toolbar."""
        from workbench.gui.panels.training.training_panel import QUICK_START_SPEC

        spec = TrainSpec.from_dict(
            {**QUICK_START_SPEC, "device": self.main.device_picker.current_device() or "auto"}
        )
        return self.start_training(spec)

    def start_training(self, spec: TrainSpec) -> TrainSpec | None:
        record = self.submit_job(TRAIN_TASK, spec.to_dict())
        if record is None:
            return None
        self.main.show_tab(self.main.training_panel)
        self.main.log_panel.append(
            f"Training {spec.model.name} on {spec.dataset.name} for {spec.epochs} epochs"
        )
        return spec

    def resume_training(self, run_dir: str, spec: dict) -> None:
        main = self.main
        if not main.trust_gate.allow(spec, main):
            main.log_panel.append(f"Did not resume: {main.trust_gate.refusal(spec)['message']}", "warning")
            return
        try:
            main.manager.submit(TRAIN_TASK, spec, main.workspace, resume=run_dir)
        except RuntimeError as exc:
            main.log_panel.append(f"Could not resume: {exc}", "error")
            return
        main.log_panel.append(f"Resuming {Path(run_dir).name}")

    # -- quantization ----------------------------------------------------------------------------
    def new_quantization(self, source_run: str = "", start: dict | None = None) -> QuantSpec | None:
        """Open the quantization wizard (on a training run, or on a quantize run's spec for "Quantize again");
        on Quantize, start the job. Returns the spec it started, if any."""
        from workbench.gui.panels.quant.wizard import QuantWizard

        main, state = self.main, self.main.dataset_state
        wizard = QuantWizard(
            main.quant_panel.training_runs(),
            source_run=source_run,
            start=start,
            calibration=(state.calibration_count, state.calibration_seed),
            device=main.device_picker.current_device() or "",
            settings=main.settings,
            parent=main,
        )
        if not wizard.exec() or wizard.spec is None:
            return None
        return self.start_quantization(wizard.spec)

    def start_quantization(self, spec: QuantSpec) -> QuantSpec | None:
        record = self.submit_job("quant.analyze", spec.to_dict())
        if record is None:
            return None
        self.main.show_tab(self.main.quant_panel)
        self.main.quant_panel.on_job_changed(record)
        self.main.log_panel.append(
            f"Quantizing {spec.source.run or spec.model.name}: W{spec.weights.bits}A{spec.activations.bits}"
        )
        return spec

    def start_quantization_data(self, data: dict) -> None:
        try:
            spec = QuantSpec.from_dict(data)
        except SpecError as exc:
            self._say(f"Cannot start that quantization: {exc}", 8000)
            return
        self.start_quantization(spec)

    # -- export, benchmark and the report --------------------------------------------------------
    def open_export_wizard(self, which: str, source_run: str = "", start: dict | None = None) -> None:
        panel = self.main.export_panel
        self.main.show_tab(panel)
        (panel.new_export if which == "export" else panel.new_benchmark)(source_run, start)

    def write_model_report(self, run_id: str) -> Path | None:
        """Write the model's one-page HTML report (train → quantize → export → benchmark) and open it."""
        from workbench.report import write_report

        try:
            path = write_report(self.main.workspace, run_id)
        except WorkbenchError as exc:
            self._say(f"Cannot write the report: {exc}", 8000)
            return None
        self.main.log_panel.append(f"Report of {run_id}: {path}")
        self._say(f"Report written: {path}", 8000)
        if not os.environ.get("WORKBENCH_NO_OPEN"):  # tests and headless runs do not open a browser
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(path)))
        return path

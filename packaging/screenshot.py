"""Drive the real app (real worker) through a short scene and save a PNG of the window, for README and
reviews.

Run under a virtual screen: `xvfb-run -a -s "-screen 0 1600x900x24" python packaging/screenshot.py OUT.png`.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from workbench.client import WorkerManager
from workbench.gui.main_window import MainWindow
from workbench.gui.settings import Settings
from workbench.workspace import resolve_workspace

# A user's own project of token sequences (the data-tokens, evaluation-tokens and try-it-tokens scenes): short
# reviews padded with id 0, a vocab to decode them, a tiny transformer to classify them.
TOKENS_PROJECT = """
import torch
from torch import nn
from torch.utils.data import Dataset

GOOD = ["good", "great", "fine", "lovely", "fun"]
BAD = ["bad", "dull", "awful", "poor", "slow"]
OTHER = ["the", "a", "film", "plot", "was", "cast", "and", "very", "not", "music", "story", "it", "quite", "ending"]


class Reviews(Dataset):
    vocab = ["<pad>"] + GOOD + BAD + OTHER
    def __init__(self, n=600, length=24, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.zeros(n, length, dtype=torch.long)
        lengths = torch.randint(6, length + 1, (n,), generator=g)
        for i, size in enumerate(lengths.tolist()):
            self.x[i, :size] = torch.randint(1, len(self.vocab), (size,), generator=g)
        good = ((self.x >= 1) & (self.x <= 5)).sum(1)
        bad = ((self.x >= 6) & (self.x <= 10)).sum(1)
        self.y = (good > bad).long()
        self.classes = ["negative", "positive"]
    def __len__(self): return len(self.x)
    def __getitem__(self, i): return self.x[i], int(self.y[i])
    def decode(self, ids): return " ".join(self.vocab[int(i)] for i in ids if int(i))


class TinyTransformer(nn.Module):
    def __init__(self, vocab=25, dim=32, num_classes=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(dim, 4, 64, dropout=0.0, batch_first=True), 2)
        self.head = nn.Linear(dim, num_classes)
    def forward(self, ids):
        return self.head(self.enc(self.emb(ids)).mean(1))
"""  # noqa: E501

# A 1-D signal project of one's own (the data-signal, evaluation-signal and try-it-signal scenes): noisy sine,
# square and sawtooth waves of 128 samples at a random frequency and phase, and a small Conv1d network to tell
# them apart.
SIGNAL_PROJECT = """
import math

import torch
from torch import nn
from torch.utils.data import Dataset


class Waves(Dataset):
    classes = ["sine", "square", "sawtooth"]
    def __init__(self, n=600, length=128, noise=0.6, seed=0):
        g = torch.Generator().manual_seed(seed)
        t = torch.arange(length, dtype=torch.float32) / length
        self.y = torch.randint(0, 3, (n,), generator=g)
        cycles = 2 + 4 * torch.rand(n, 1, generator=g)
        phase = torch.rand(n, 1, generator=g)
        turns = cycles * t + phase
        sine = torch.sin(2 * math.pi * turns)
        square = torch.sign(sine)
        saw = 2 * (turns - torch.floor(turns)) - 1
        waves = torch.stack([sine, square, saw], 1)[torch.arange(n), self.y]
        self.x = (waves + noise * torch.randn(n, length, generator=g))[:, None]
    def __len__(self): return len(self.x)
    def __getitem__(self, i): return self.x[i], int(self.y[i])


class WaveNet(nn.Module):
    def __init__(self, num_classes=3):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(1, 16, 7, padding=3), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(16, 32, 5, padding=2), nn.ReLU(), nn.AdaptiveAvgPool1d(1))
        self.head = nn.Linear(32, num_classes)
    def forward(self, x):
        return self.head(self.features(x).flatten(1))
"""


def save_when_predicted(dialog, out: Path, window) -> None:
    """Save the Try it dialog once its prediction (or its refusal) is shown, then close the window."""
    view = dialog.view
    if view.result is None and not view.status.text().startswith("Could not"):
        QTimer.singleShot(300, lambda: save_when_predicted(dialog, out, window))
        return
    QTimer.singleShot(800, lambda: (dialog.grab().save(str(out)), print(out), window.close_stopping_jobs()))


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "screenshot.png").absolute()
    theme = sys.argv[2] if len(sys.argv) > 2 else "light"
    scene = sys.argv[3] if len(sys.argv) > 3 else "runs"
    from workbench.gui.app import prepare_qt_environment
    from workbench.gui.gui_thread_gc import GuiThreadGarbageCollector

    prepare_qt_environment()
    app = QApplication(sys.argv[:1])
    GuiThreadGarbageCollector(parent=app)  # as the app does
    from PySide6.QtCore import QSettings

    settings = Settings(QSettings(str(Path(tempfile.mkdtemp()) / "settings.ini"), QSettings.IniFormat))
    settings.set("theme", theme)
    # An evaluation-<task> scene may show a run already trained (argv[4]: its workspace) rather than train
    # one.
    given = sys.argv[4] if scene.startswith("evaluation-") and len(sys.argv) > 4 else None
    workspace = resolve_workspace(Path(given) if given else Path(tempfile.mkdtemp(prefix="wb-shot-")))
    manager = WorkerManager()
    window = MainWindow(manager, workspace, settings)
    window.resize(1400, 820)
    window.show()
    manager.start(wait=False)

    def scene_start() -> None:
        window.submit_job("debug.count", {"steps": 60, "delay": 0.005})
        window.submit_job("debug.count", {"steps": 40, "crash_at": 25, "crash_mode": "raise"})

    def scene_running() -> None:
        window.submit_job("debug.count", {"steps": 3000, "delay": 0.01})
        window.runs_panel.refresh()
        window.runs_panel.view.selectRow(1)

    def capture() -> None:
        window.grab().save(str(out))
        print(out)
        window.close_stopping_jobs()  # a scene may leave a job running: end it without the close question

    def capture_x_screen() -> None:
        # QWidget.grab() leaves a QWebEngineView blank: the X screen has what a person sees.
        import subprocess

        g = window.frameGeometry()
        crop = f"{g.width()}x{g.height()}+{g.x()}+{g.y()}"
        subprocess.run(["import", "-window", "root", "-crop", crop, str(out)], check=False)
        print(out)
        window.close_stopping_jobs()  # a scene may leave a job running: end it without the close question

    def train_in_turn(specs: list[dict], then) -> None:
        """Train each spec (TrainSpec plain data) once the one before has ended, then call `then`."""
        from workbench.specs import TrainSpec

        def step() -> None:
            if window.training_panel.job_of_run:
                QTimer.singleShot(500, step)
                return
            if specs:
                window.start_training(TrainSpec.from_dict(specs.pop(0)))
                QTimer.singleShot(1500, step)
                return
            then()

        step()

    def data_scene() -> None:
        panel = window.dataset_panel
        window.show_tab(panel)
        panel.zoom.setValue(56)
        panel.state.set_spec(panel.state.spec.from_dict({"augment": ["rotation", "random_erasing"]}))

    def data_pick() -> None:
        panel = window.dataset_panel
        panel.grid.setCurrentIndex(panel.model.index(12))

    def user_project() -> tuple[dict, dict]:
        """(train spec without its dataset, dataset) of the scene's project: token reviews, the bundled
        diabetes rows (tabular) or the waves (signal)."""
        kind = scene.rsplit("-", 1)[-1]
        if kind == "tabular":
            import workbench

            folder = Path(workbench.__file__).parent / "resources" / "examples" / "diabetes_regression"
            return (
                {
                    "task": "regression",
                    "loss": "mse",
                    "epochs": 30,
                    "lr": 0.003,
                    "weight_decay": 0.0001,
                    "model": {"name": f"file:{folder / 'model.py'}:mlp", "num_classes": 1},
                },
                {
                    "name": f"file:{folder / 'data.py'}:diabetes",
                    "num_workers": 0,
                    "val_fraction": 0.15,
                    "test_fraction": 0.15,
                },
            )
        from workbench.trust import trust_folder

        folder = Path(tempfile.mkdtemp(prefix=f"wb-{kind}-"))
        trust_folder(workspace, folder)  # the scene wrote this code: the window need not ask about it
        if kind == "signal":
            (folder / "data.py").write_text(SIGNAL_PROJECT)
            return (
                {
                    "task": "auto",
                    "epochs": 6,
                    "lr": 0.003,
                    "model": {"name": f"file:{folder / 'data.py'}:WaveNet", "num_classes": 3},
                },
                {"name": f"file:{folder / 'data.py'}:Waves", "num_workers": 0},
            )
        (folder / "data.py").write_text(TOKENS_PROJECT)
        return (
            {
                "task": "auto",
                "epochs": 6,
                "lr": 0.003,
                "model": {"name": f"file:{folder / 'data.py'}:TinyTransformer", "num_classes": 2},
            },
            {"name": f"file:{folder / 'data.py'}:Reviews", "num_workers": 0},
        )

    def tokens_scene() -> None:
        """A project of one's own that is not images (token sequences, tabular rows, signals: user_project):
        its Data tab, its evaluation, Try it."""
        from workbench.specs import DataSpec, TrainSpec

        training, data = user_project()
        if scene.startswith("data-"):
            panel = window.dataset_panel
            window.show_tab(panel)
            panel.state.set_spec(DataSpec.from_dict(data))

            def tokens_ready() -> None:
                if panel.info is None or panel.table_model.rowCount() == 0:
                    QTimer.singleShot(300, tokens_ready)
                    return
                panel.table.setCurrentIndex(panel.table_model.index(2, 1))
                # a signal's own plot (the Sample tab) says more than its values' histogram
                if scene != "data-signal":
                    QTimer.singleShot(2500, lambda: panel.side_tabs.setCurrentWidget(panel.input_chart))
                QTimer.singleShot(3500, capture)

            tokens_ready()
            return
        panel = window.training_panel
        window.show_tab(panel)
        window.start_training(TrainSpec.from_dict({**training, "dataset": data}))

        def finished() -> None:
            if panel.job_of_run or not panel.runs:
                QTimer.singleShot(500, finished)
                return
            run_id = next(iter(panel.runs))
            panel.refresh()
            panel.select_run(run_id)
            if scene.startswith("evaluation-"):
                panel.show_details(run_id)
                panel.tabs.setCurrentIndex(1)
                QTimer.singleShot(2500, capture)
                return
            dialog = window.open_try_it(run_id)
            dialog.resize(1040, 620)
            dialog.view.split_combo.setCurrentIndex(dialog.view.split_combo.findData("test"))
            dialog.view.index_spin.setValue(4)
            dialog.view.sample_button.click()

            save_when_predicted(dialog, out, window)

        QTimer.singleShot(3000, finished)

    def when_ready() -> None:
        if manager.state != "ready":
            QTimer.singleShot(100, when_ready)
            return
        if scene == "data":
            data_scene()
            QTimer.singleShot(6000, data_pick)
            QTimer.singleShot(8000, capture)
            return
        # the shapes_segmentation example's own Dataset: masks overlaid, target histogram
        if scene == "data-user":
            import workbench
            from workbench.specs import DataSpec

            example = (
                Path(workbench.__file__).parent / "resources" / "examples" / "shapes_segmentation" / "data.py"
            )
            panel = window.dataset_panel
            window.show_tab(panel)
            panel.zoom.setValue(96)  # wide enough for the captions ("square, disc") under the thumbnails
            panel.state.set_spec(DataSpec.from_dict({"name": f"file:{example}:Shapes", "num_workers": 0}))

            def user_ready() -> None:  # the worker imports torch first: poll rather than guess a delay
                if panel.info is None or 0 not in panel.model.cached_pages:
                    QTimer.singleShot(300, user_ready)
                    return
                panel.grid.setCurrentIndex(panel.model.index(5))
                QTimer.singleShot(2500, lambda: panel.side_tabs.setCurrentWidget(panel.target_chart))
                QTimer.singleShot(3500, capture)

            user_ready()
            return
        if scene.rsplit("-", 1)[-1] in ("tokens", "tabular", "signal") and scene != "try-it":
            tokens_scene()
            return
        if scene == "classes":
            data_scene()
            QTimer.singleShot(6000, lambda: window.dataset_panel.side_tabs.setCurrentIndex(1))
            QTimer.singleShot(7000, capture)
            return
        if scene == "wizard-user":  # the training wizard on the shapes_segmentation example: its Task choice
            import workbench
            from workbench.gui.panels.training.wizard import TrainingWizard
            from workbench.specs import TrainSpec

            folder = Path(workbench.__file__).parent / "resources" / "examples" / "shapes_segmentation"
            start = {**TrainSpec.load(folder / "train.toml").to_dict(), "task": "auto"}
            wizard = TrainingWizard(
                window.dataset_state, window.chrome.device_picker.devices, "cpu", start=start, parent=window
            )
            wizard.resize(900, 780)
            wizard.show()

            def wizard_ready() -> None:  # the worker imports torch and reads the first sample: poll
                if not wizard.dataset_page.info_line.text() or wizard.dataset_page._info_job:
                    QTimer.singleShot(300, wizard_ready)
                    return
                wizard.grab().save(str(out))
                print(out)
                window.close_stopping_jobs()

            QTimer.singleShot(1000, wizard_ready)
            return
        if scene == "lr-finder":  # the wizard's learning-rate finder on digits: the curve and its suggestion
            from workbench.gui.panels.training.wizard import TrainingWizard

            wizard = TrainingWizard(
                window.dataset_state,
                window.chrome.device_picker.devices,
                "cpu",
                start={"device": "cpu"},
                parent=window,
            )
            wizard.show()
            wizard.next()
            wizard.next()
            finder = wizard.find_learning_rate()
            finder.resize(760, 540)

            def finder_ready() -> None:  # the worker imports torch, then sweeps: poll
                if finder.pages.currentIndex() != 1:
                    QTimer.singleShot(300, finder_ready)
                    return
                QTimer.singleShot(
                    800, lambda: (finder.grab().save(str(out)), print(out), window.close_stopping_jobs())
                )

            QTimer.singleShot(1000, finder_ready)
            return
        # Try it (#21 part 5): a PNG of a digit on a W8A8 quantize run, FP32 beside quantized
        if scene == "try-it":
            import numpy as np
            from PIL import Image
            from sklearn.datasets import load_digits

            from workbench.specs import QuantSpec, TrainSpec

            digits = load_digits()  # a digit saved as a user would: RGB, larger than the model's 8x8
            pixels = (digits.images[-33] * 255 / 16).round().clip(0, 255).astype(np.uint8)
            png = Path(tempfile.mkdtemp()) / f"my-digit-{digits.target[-33]}.png"
            Image.fromarray(pixels, "L").convert("RGB").resize((32, 32), Image.Resampling.NEAREST).save(png)
            window.start_training(
                TrainSpec.from_dict({"epochs": 8, "lr": 0.02, "scheduler": "onecycle", "batch_size": 32})
            )
            quantized: list[bool] = []

            def try_it_step() -> None:
                if any(r.active for r in window.manager.jobs.all() if not r.internal):
                    QTimer.singleShot(500, try_it_step)
                    return
                if not quantized:
                    quantized.append(True)
                    train_id = next(iter(window.training_panel.runs))
                    window.start_quantization(QuantSpec.from_dict({"source": {"run": train_id}}))
                    QTimer.singleShot(1500, try_it_step)
                    return
                panel = window.quant_panel
                window.show_tab(panel)
                panel.refresh()
                dialog = window.open_try_it(panel.selected_run_id())
                dialog.resize(1040, 620)
                dialog.view.predict_file(str(png))

                save_when_predicted(dialog, out, window)

            QTimer.singleShot(2000, try_it_step)
            return
        # the shapes example's U-Net and its W8A8 run: masks on a test sample
        if scene == "try-it-segmentation":
            import workbench
            from workbench.specs import QuantSpec, TrainSpec

            folder = Path(workbench.__file__).parent / "resources" / "examples" / "shapes_segmentation"
            start = TrainSpec.load(folder / "train.toml").to_dict()
            start["dataset"] = {
                **start["dataset"],
                "name": f"file:{folder / 'data.py'}:Shapes",
                "num_workers": 0,
            }
            start["model"] = {**start["model"], "name": f"file:{folder / 'model.py'}:UNet"}
            window.start_training(TrainSpec.from_dict({**start, "epochs": 3}))
            stages: list[str] = []

            def segmentation_step() -> None:
                if any(r.active for r in window.manager.jobs.all() if not r.internal):
                    QTimer.singleShot(500, segmentation_step)
                    return
                if not stages:
                    stages.append("quantize")
                    train_id = next(iter(window.training_panel.runs))
                    window.start_quantization(
                        QuantSpec.from_dict({"source": {"run": train_id}, "calibration": {"samples": 64}})
                    )
                    QTimer.singleShot(1500, segmentation_step)
                    return
                panel = window.quant_panel
                window.show_tab(panel)
                panel.refresh()
                dialog = window.open_try_it(panel.selected_run_id())
                dialog.resize(1180, 680)
                view = dialog.view
                view.split_combo.setCurrentIndex(view.split_combo.findData("test"))
                view.index_spin.setValue(3)
                view.sample_button.click()

                save_when_predicted(dialog, out, window)

            QTimer.singleShot(2000, segmentation_step)
            return
        if scene == "graph":  # a trained CNN's graph in Model Explorer, coloured by FLOPs
            from workbench.specs import TrainSpec

            window.start_training(TrainSpec.from_dict({"epochs": 1, "log_every_steps": 5}))

            def show_graph() -> None:
                panel = window.training_panel
                if panel.job_of_run or not panel.runs:
                    QTimer.singleShot(500, show_graph)
                    return
                window.show_graph_of_run(next(iter(panel.runs)))
                QTimer.singleShot(int(sys.argv[4]) if len(sys.argv) > 4 else 20000, capture_screen)

            def capture_screen() -> None:
                panel = window.graph_panel
                index = panel.overlay_combo.findText("FLOPs (millions)")
                if index >= 0:
                    panel.overlay_combo.setCurrentIndex(index)
                QTimer.singleShot(3000, capture_x_screen)

            window.move(0, 0)
            QTimer.singleShot(3000, show_graph)
            return
        if scene == "graph-split":  # two graphs side by side in Model Explorer's split pane
            from workbench.specs import TrainSpec

            window.start_training(TrainSpec.from_dict({"epochs": 1}))
            first: list[str] = []

            def graph_busy() -> bool:
                return any(r.active and r.task == "graph.build" for r in window.manager.jobs.all())

            def next_graph() -> None:
                training = window.training_panel
                if training.job_of_run or not training.runs or graph_busy():
                    QTimer.singleShot(500, next_graph)
                    return
                if not window.navigation.graph_tab.is_built or window.graph_panel.graph is None:
                    if not window.navigation.graph_tab.is_built:
                        window.show_graph_of_run(next(iter(training.runs)))
                    QTimer.singleShot(500, next_graph)
                    return
                panel = window.graph_panel
                if not first:
                    first.append(panel.graph["run_dir"])
                    panel.build_graph({"model": {"name": "mlp", "input_shape": [1, 8, 8]}})
                    QTimer.singleShot(1000, next_graph)
                elif panel.graph["run_dir"] == first[0]:
                    QTimer.singleShot(500, next_graph)
                else:
                    panel.show_beside(first[0])
                    QTimer.singleShot(20000, capture_x_screen)

            window.move(0, 0)
            QTimer.singleShot(3000, next_graph)
            return
        if scene == "overlay":  # two finished runs overlaid: one hue per run, the same line style per role
            from workbench.specs import TrainSpec

            specs = [
                {"epochs": 6, "lr": 0.003, "log_every_steps": 2, "scheduler": "cosine"},
                {"epochs": 6, "lr": 0.02, "log_every_steps": 2, "model": {"name": "mlp"}},
            ]

            def overlaid() -> None:
                panel = window.training_panel
                for run_id in panel.runs:
                    panel.set_shown(run_id, True)
                QTimer.singleShot(2000, capture)

            window.show_tab(window.training_panel)
            train_in_turn(specs, overlaid)
            return
        # a CNN's layer statistics on digits (#21 part 2): the gradient heatmap, one cell's histograms
        if scene == "layers":
            from workbench.specs import TrainSpec

            def layers_done() -> None:
                panel = window.training_panel
                if panel.job_of_run:
                    QTimer.singleShot(500, layers_done)
                    return
                panel.tabs.setCurrentWidget(panel.layers)
                layers = panel.layers
                if layers.records:
                    layers.show_cell(len(layers.records[-1]["layers"]) - 1, len(layers.records) - 1)
                QTimer.singleShot(1500, capture)

            window.show_tab(window.training_panel)
            window.start_training(
                TrainSpec.from_dict({"epochs": 8, "lr": 0.02, "layer_stats_every": 8, "scheduler": "cosine"})
            )
            QTimer.singleShot(3000, layers_done)
            return
        # two finished runs and a failed one ticked, a fourth running unticked (#21 6.1)
        if scene == "overlay-live":
            from workbench.specs import TrainSpec

            broken = Path(tempfile.mkdtemp()) / "broken_net.py"
            broken.write_text(
                "import torch\nclass Net(torch.nn.Module):\n    def __init__(self:\n        pass\n"
            )
            specs = [
                {"epochs": 4, "lr": 0.003, "log_every_steps": 2},
                {"epochs": 4, "lr": 0.02, "log_every_steps": 2, "model": {"name": "mlp"}},
                {"epochs": 4, "model": {"name": f"file:{broken}:Net"}},
            ]

            def one_more_live() -> None:
                panel = window.training_panel
                for run_id in panel.runs:
                    panel.set_shown(run_id, True)
                window.start_training(TrainSpec.from_dict({"epochs": 60, "lr": 0.01, "log_every_steps": 2}))
                QTimer.singleShot(int(sys.argv[4]) if len(sys.argv) > 4 else 6000, capture)

            window.show_tab(window.training_panel)
            train_in_turn(specs, one_more_live)
            return
        # a trained CNN quantized W8A8, then W4A8 (paper's flow), compared
        if scene in ("quant", "quant-graph"):
            from workbench.gui.panels.quant.wizard import preset_data
            from workbench.specs import QuantSpec, TrainSpec

            tab = int(sys.argv[4]) if len(sys.argv) > 4 else 0  # which plot: 0 histogram … 4 mixed precision
            window.start_training(TrainSpec.from_dict({"epochs": 5}))
            pending = ["W8A8 (safe)", "W4A8 (paper's flow)"]

            def next_job() -> None:
                training, quant = window.training_panel, window.navigation.quant_tab
                busy = training.job_of_run or (quant.is_built and window.quant_panel.job_of_run)
                if busy or not training.runs:
                    QTimer.singleShot(500, next_job)
                    return
                if pending:
                    data = preset_data(pending.pop(0))
                    data["source"] = {"run": next(iter(training.runs))}
                    data.update(sensitivity=True, mixed_precision={"target_drop": 0.003})
                    window.start_quantization(QuantSpec.from_dict(data))
                    QTimer.singleShot(1500, next_job)
                    return
                panel = window.quant_panel
                panel.compare_with(list(panel.runs)[1])
                panel.plots.setCurrentIndex(tab)
                if scene == "quant":
                    QTimer.singleShot(2000, capture)
                    return
                panel._on_graph_clicked()
                QTimer.singleShot(20000, capture_x_screen)

            window.move(0, 0)
            QTimer.singleShot(2000, next_job)
            return
        # the Doctor view: per-tensor W4A8 minmax, diagnosed and its fixes applied
        if scene == "quant-doctor":
            from workbench.specs import QuantSpec, TrainSpec

            window.start_training(TrainSpec.from_dict({"epochs": 5}))
            started: list[bool] = []

            def doctor_step() -> None:
                training, quant = window.training_panel, window.navigation.quant_tab
                if (
                    training.job_of_run
                    or not training.runs
                    or (quant.is_built and window.quant_panel.job_of_run)
                ):
                    QTimer.singleShot(500, doctor_step)
                    return
                if not started:
                    started.append(True)
                    window.start_quantization(
                        QuantSpec.from_dict(
                            {
                                "source": {"run": next(iter(training.runs))},
                                "weights": {"bits": 4, "granularity": "per_tensor", "range": "minmax"},
                                "activations": {"bits": 8, "range": "minmax"},
                                "doctor": {"enabled": True, "apply": True},
                            }
                        )
                    )
                    QTimer.singleShot(1500, doctor_step)
                    return
                from PySide6.QtWidgets import QDockWidget

                for dock in window.findChildren(QDockWidget):  # the Jobs and Log docks closed (View menu)
                    dock.hide()
                panel = window.quant_panel
                panel.plots.setCurrentWidget(panel.doctor)
                # the layer table short: the findings take the room
                panel.splitters["right"].setSizes([120, 620])
                QTimer.singleShot(2000, capture)

            QTimer.singleShot(2000, doctor_step)
            return
        # the New quantization wizard on a trained run: one PNG per page (OUT-<page>.png)
        if scene == "quant-wizard":
            from PySide6.QtWidgets import QApplication as App

            from workbench.gui.panels.quant.wizard import QuantWizard
            from workbench.specs import TrainSpec

            preset = sys.argv[4] if len(sys.argv) > 4 else "W4A8 (paper's flow)"
            # as the quant scene: a credible accuracy
            window.start_training(TrainSpec.from_dict({"epochs": 5}))
            pages = ["source", "scheme", "calibration", "pipeline"]

            def open_wizard() -> None:
                training = window.training_panel
                if training.job_of_run or not training.runs:
                    QTimer.singleShot(500, open_wizard)
                    return
                panel = window.quant_panel
                window.show_tab(panel)
                # The tab's own button: the window opens the wizard modally (exec), so the pages are read from
                # the timers that run inside its loop.
                QTimer.singleShot(300, shoot_page)
                panel.new_button.click()
                window.close_stopping_jobs()

            def shoot_page() -> None:
                wizard = App.activeModalWidget()
                if not isinstance(wizard, QuantWizard):
                    QTimer.singleShot(200, shoot_page)
                    return
                if wizard.currentPage() is wizard.source_page:
                    combo = wizard.source_page.preset
                    if combo.currentData() != preset and combo.findData(preset) >= 0:
                        combo.setCurrentIndex(combo.findData(preset))
                page = pages.pop(0)
                path = out.with_name(f"{out.stem}-{page}.png")

                def grab() -> None:
                    wizard.grab().save(str(path))
                    print(path)
                    if pages:
                        wizard.next()
                        QTimer.singleShot(300, shoot_page)
                    else:
                        wizard.reject()

                QTimer.singleShot(500, grab)

            window.show_tab(window.training_panel)
            QTimer.singleShot(2000, open_wizard)
            return
        # real engines: export ONNX, quantize, benchmark three backends
        if scene in ("export", "bench", "bench-dist"):
            from workbench.specs import BenchSpec, ExportSpec, QuantSpec, TrainSpec

            window.start_training(TrainSpec.from_dict({"epochs": 5}))
            made: dict = {}

            def busy() -> bool:
                return any(r.active for r in window.manager.jobs.all() if not r.internal)

            def latest(task: str) -> str:
                runs = [r for r in window.manager.jobs.all() if r.task == task and r.run_dir]
                return Path(max(runs, key=lambda r: r.submitted).run_dir).name

            def step() -> None:
                if busy():
                    QTimer.singleShot(500, step)
                    return
                panel = window.export_panel
                if "train" not in made:
                    made["train"] = latest("train.classifier")
                    window.show_tab(panel)
                    panel.start_export(
                        ExportSpec.from_dict({"source": {"run": made["train"]}, "format": "onnx"})
                    )
                elif "quant" not in made:
                    made["quant"] = True
                    window.start_quantization(QuantSpec.from_dict({"source": {"run": made["train"]}}))
                elif "bench" not in made and scene != "export":
                    made["bench"] = True
                    window.show_tab(panel)
                    panel.start_benchmark(
                        BenchSpec.from_dict(
                            {
                                "source": {"run": latest("quant.analyze")},
                                "batch_sizes": [1, 8, 32],
                                "iters": 200,
                                "backends": [
                                    "eager",
                                    "torchscript",
                                    "onnxruntime",
                                    "onnxruntime_int8",
                                    "tensorrt",
                                ],
                                "threads": 1,
                            }
                        )
                    )
                else:
                    window.show_tab(panel)
                    if scene == "export":
                        panel.open_run(latest("export.model"))
                    elif scene == "bench-dist":
                        panel.plots.setCurrentIndex(1)
                    QTimer.singleShot(2500, capture)
                    return
                QTimer.singleShot(1500, step)

            QTimer.singleShot(2000, step)
            return
        if scene in ("runs-columns", "build-from"):  # runs named by model, dataset and key metric (#21 6.2)
            from workbench.specs import TrainSpec

            broken = Path(tempfile.mkdtemp()) / "broken_net.py"
            broken.write_text("class Net(:\n    pass\n")
            pending = [
                {"epochs": 3},
                {"epochs": 3, "model": {"name": "mlp"}},
                {"epochs": 3, "model": {"name": f"file:{broken}:Net"}},
            ]

            def identities() -> None:
                if scene == "build-from":
                    window.show_tab(window.graph_panel)
                    window.graph_panel.refresh()
                    window.graph_panel.source_combo.showPopup()
                    QTimer.singleShot(1500, capture_x_screen)  # the open list is a popup: grab() misses it
                    return
                window.show_tab(window.runs_panel)
                window.runs_panel.refresh()
                window.runs_panel.view.selectRow(0)
                QTimer.singleShot(1500, capture)

            train_in_turn(pending, identities)
            return
        # a model file with a syntax error: the reason above the panes, Edit and retry
        if scene == "failed-run":
            from workbench.specs import TrainSpec

            broken = Path(tempfile.mkdtemp()) / "broken_net.py"
            broken.write_text(
                "import torch\nclass Net(torch.nn.Module):\n    def __init__(self:\n        pass\n"
            )
            window.show_tab(window.training_panel)
            window.start_training(TrainSpec.from_dict({"epochs": 3, "model": {"name": f"file:{broken}:Net"}}))

            def select_failed() -> None:
                panel = window.training_panel
                if panel.job_of_run or not panel.runs:
                    QTimer.singleShot(500, select_failed)
                    return
                panel.select_run(next(iter(panel.runs)))
                QTimer.singleShot(1000, capture)

            QTimer.singleShot(1500, select_failed)
            return
        if scene == "first-run":  # a new workspace: the Training tab's empty state
            window.show_tab(window.training_panel)
            QTimer.singleShot(1500, capture)
            return
        if scene == "runs-details":  # a finished run's readable details in the Runs tab
            from workbench.specs import TrainSpec

            window.start_training(TrainSpec.from_dict({"epochs": 3, "log_every_steps": 5}))

            def show_runs() -> None:
                if window.training_panel.job_of_run:
                    QTimer.singleShot(500, show_runs)
                    return
                window.show_tab(window.runs_panel)
                window.runs_panel.refresh()
                window.runs_panel.view.selectRow(0)
                QTimer.singleShot(1500, capture)

            QTimer.singleShot(3000, show_runs)
            return
        if scene == "close-question":  # closing the window mid-run asks first, naming the job
            from workbench.specs import TrainSpec

            window.show_tab(window.training_panel)
            window.start_training(TrainSpec.from_dict({"epochs": 40, "lr": 0.003, "log_every_steps": 2}))
            QTimer.singleShot(9000, window.close)
            # the question is a window of its own: grab() misses it
            QTimer.singleShot(11000, capture_x_screen)
            return
        # a bundled example's evaluation view: regression, multilabel, segmentation
        if scene.startswith("evaluation-"):
            import workbench
            from workbench.specs import TrainSpec

            task = scene.removeprefix("evaluation-")
            # classification: names_transformer's five languages, names long enough to crowd the confusion
            # matrix
            example = {
                "regression": "diabetes_regression",
                "multilabel": "digit_attributes",
                "segmentation": "shapes_segmentation",
                "classification": "names_transformer",
            }[task]
            panel = window.training_panel
            window.show_tab(panel)

            def run_of_task() -> str | None:
                panel.refresh()
                done = [
                    i
                    for i, e in panel.runs.items()
                    if (e.get("spec") or {}).get("task") == task and e.get("status") == "done"
                ]
                return max(done) if done else None

            def show_run() -> None:
                run_id = run_of_task()
                if run_id is None:
                    QTimer.singleShot(500, show_run)
                    return
                panel.select_run(run_id)
                panel.show_details(run_id)
                panel.tabs.setCurrentIndex(1)
                QTimer.singleShot(2500, capture)

            if run_of_task() is None:
                spec = Path(workbench.__file__).parent / "resources" / "examples" / example / "train.toml"
                window.start_training(TrainSpec.load(spec))
            QTimer.singleShot(1000, show_run)
            return
        if scene in ("training", "evaluation"):
            from workbench.specs import TrainSpec

            window.show_tab(window.training_panel)
            epochs = 40 if scene == "training" else 12  # a live scene is caught mid-run
            window.start_training(
                TrainSpec.from_dict(
                    {"epochs": epochs, "lr": 0.003, "log_every_steps": 2, "scheduler": "cosine"}
                )
            )
            if scene == "training":
                QTimer.singleShot(int(sys.argv[4]) if len(sys.argv) > 4 else 12000, capture)
            else:

                def finished() -> None:
                    if window.training_panel.job_of_run:
                        QTimer.singleShot(500, finished)
                        return
                    window.training_panel.tabs.setCurrentIndex(1)
                    QTimer.singleShot(3000, capture)

                QTimer.singleShot(3000, finished)
            return
        scene_start()
        QTimer.singleShot(2500, scene_running)
        QTimer.singleShot(4500, capture)

    when_ready()
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())

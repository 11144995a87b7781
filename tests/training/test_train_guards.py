"""The training guards of issue #7 through the real runner on digits: class scores of the wrong shape for some
batches, loss failures explained with the model's name, and a loss that explodes without ever becoming NaN."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from training_helpers import QUICK, failed, merge, train

from workbench.errors import JobError
from workbench.runs import Run
from workbench.worker.training import TrainStep, build_loss, load_last
from workbench.worker.training.evaluate import evaluate_sums
from workbench.worker.training.guards import OutputCheck, divergence_limit, model_title

# 1,437 training samples of digits in batches of 64: 22 full batches, then one of 29 (step 23 of each epoch).
WRONG_FOR_SMALL_BATCHES = '''
from torch import nn


class Net(nn.Module):
    """Right for full training batches only: a smaller one (the last of an epoch) gets 8 scores, not 10."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        out = self.fc(x.flatten(1))
        if self.training and x.shape[0] != 64:
            out = out[:, :8]
        return out
'''

WRONG_IN_TRAINING = '''
from torch import nn


class Net(nn.Module):
    """Passes the dry run (eval mode) but returns (classes, batch) while training: a transposed result."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        out = self.fc(x.flatten(1))
        return out.t() if self.training else out
'''

WRONG_IN_VALIDATION = '''
from torch import nn


class Net(nn.Module):
    """Right in training and for the dry run's two samples, wrong for evaluation batches of other sizes."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        out = self.fc(x.flatten(1))
        if not self.training and x.shape[0] != 2:
            out = out[:, :8]
        return out
'''

# Class 0 gets a logit 1e20 above the rest from the 31st training forward pass on (step 31, in epoch 2): the
# loss of every other sample is then about 1e20, yet the gradients stay those of softmax, so nothing becomes
# NaN.
EXPLODES = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.fc = nn.Linear(64, num_classes)
        self.calls = 0

    def forward(self, x):
        out = self.fc(x.flatten(1))
        if self.training:
            self.calls += 1
            if self.calls > 30:
                boost = torch.zeros_like(out)
                boost[:, 0] = 1e20
                out = out + boost
        return out
"""


def _model_file(tmp_path: Path, source: str) -> tuple[Path, str]:
    path = tmp_path / "user_model.py"
    path.write_text(source)
    return path, f"file:{path}:Net"


def test_scores_of_the_wrong_shape_for_the_smaller_last_batch_name_the_model_file_and_both_shapes(tmp_path):
    path, name = _model_file(tmp_path, WRONG_FOR_SMALL_BATCHES)
    result = train(tmp_path, merge(QUICK, epochs=2, model={"name": name}))
    # before: IndexError "Target 9 is out of bounds" at step 23, as an internal error
    message = failed(result)
    assert f"model Net from {path}" in message
    assert "shape (29, 8) for a training batch of 29 samples; expected (29, 10)" in message
    assert "(batch, model.num_classes)" in message
    with Run(result["run_dir"]) as run:
        assert run.status == "failed" and "(29, 8)" in run.message


def test_scores_of_the_wrong_shape_fail_at_the_first_training_batch(tmp_path):
    path, name = _model_file(tmp_path, WRONG_IN_TRAINING)
    result = train(tmp_path, merge(QUICK, epochs=1, model={"name": name}))
    message = failed(result)
    assert f"model Net from {path}" in message
    assert "shape (10, 64) for a training batch of 64 samples; expected (64, 10)" in message
    assert not (Path(result["run_dir"]) / "checkpoints" / "last.pt").exists()


def test_scores_of_the_wrong_shape_in_validation_are_caught_too(tmp_path):
    path, name = _model_file(tmp_path, WRONG_IN_VALIDATION)
    message = failed(train(tmp_path, merge(QUICK, epochs=1, model={"name": name})))
    assert f"model Net from {path}" in message and "for a validation batch of" in message
    assert ", 8) for a validation batch" in message


def test_a_loss_failure_is_explained_with_the_model_name_and_the_output_shape():
    torch.manual_seed(0)
    model = nn.Linear(64, 10)
    step = TrainStep(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        build_loss("cross_entropy"),
        output_check=OutputCheck("file:/models/net.py:Net", 10),
    )
    x, y = torch.randn(4, 64), torch.tensor([1, 2, 12, 3])  # label 12 with 10 classes: torch's IndexError
    with pytest.raises(JobError) as info:
        step.accumulate(x, y)
    message = str(info.value)
    assert "model Net from /models/net.py" in message and "Target 12 is out of bounds" in message
    assert "shape (4, 10) for a batch of 4 samples" in message and "model.num_classes=10" in message
    assert isinstance(info.value.__cause__, IndexError)


@pytest.mark.parametrize("label", [12, -1])
def test_a_label_the_loss_cannot_use_is_named_with_its_place_in_the_batch(label: int):
    torch.manual_seed(0)
    model = nn.Linear(64, 10)
    step = TrainStep(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        build_loss("cross_entropy"),
        output_check=OutputCheck("file:/models/net.py:Net", 10),
    )
    x, y = torch.randn(4, 64), torch.tensor([1, 2, label, 3])
    with pytest.raises(JobError) as info:
        step.accumulate(x, y)
    message = str(info.value)
    assert message.startswith(
        f"a training batch of 4 samples has label {label} (position 2 in the batch), "
        "outside the 10 classes 0..9 (model.num_classes=10), so the loss cannot use "
        "it ("
    ), message
    assert "fix the dataset's labels or model.num_classes" in message


def test_a_validation_batch_with_a_bad_label_says_validation():
    model = nn.Linear(8, 3)
    batches = [(torch.arange(2), torch.randn(2, 8), torch.tensor([0, 5]))]
    split = type("Split", (), {"indexed_batches": lambda self, *args, **kwargs: iter(batches)})()
    with pytest.raises(
        JobError, match=(r"^a validation batch of 2 samples has label 5 \(position 1 in the batch\)")
    ):
        evaluate_sums(
            model,
            split,
            build_loss("cross_entropy"),
            device=torch.device("cpu"),
            output_check=OutputCheck("mlp", 3),
        )


def test_model_titles():
    assert model_title("file:/a/b/net.py:Net") == "model Net from /a/b/net.py"
    assert model_title("file:C:/models/net.py:make") == "model make from C:/models/net.py"
    assert model_title("torchvision:resnet18") == "model torchvision:resnet18"


def test_a_loss_that_explodes_without_nan_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path):
    _, name = _model_file(tmp_path, EXPLODES)
    result = train(tmp_path, merge(QUICK, epochs=3, model={"name": name}))
    message = failed(result)  # before: the run ended "done" with a loss of 1e20
    assert message.startswith("the training loss diverged (")
    # steps 31-35 are the first read-back (log_every_steps=5) after it exploded
    assert "at step 35" in message
    assert "a million times the first loss read back" in message and "lower lr" in message
    last = Path(result["run_dir"]) / "checkpoints" / "last.pt"
    assert f"the last good checkpoint is kept: {last}" in message
    saved = load_last(last)
    assert saved["state"]["epoch"] == 1 and saved["state"]["global_step"] == 23
    assert all(bool(torch.isfinite(v).all()) for v in saved["model"].values())
    assert saved["state"]["last_epoch_metrics"]["train_loss"] < 10
    with Run(result["run_dir"]) as run:
        assert run.status == "failed" and "diverged" in run.message
        assert not (run.checkpoints_dir / "model.pt").exists()


def test_the_divergence_limit():
    assert divergence_limit(None) == 1e8  # the first read-back has no reference: only the ceiling
    assert divergence_limit(2.3) == pytest.approx(2.3e6)  # a million times a cross-entropy start
    assert divergence_limit(1e-4) == 1e6  # a fine-tune starting near 0 is not stopped by an ordinary bump
    assert divergence_limit(500.0) == 1e8

"""The test split is evaluated with the checkpoint every later job of the run loads (best.pt, else model.pt),
and the log, the result and evaluation.json say which: the Training tab's test number is the one quantize
starts from."""

from __future__ import annotations

import json

import torch
from training_helpers import QUICK, Recorder, done, merge, train

from workbench.specs import TrainSpec
from workbench.worker.checkpoints import load_state_dict
from workbench.worker.data import load_dataset
from workbench.worker.models import build_model
from workbench.worker.training.evaluate import evaluate_test


def _accuracy_of(checkpoint, spec: TrainSpec) -> float:
    dataset = load_dataset(spec.dataset)
    model = build_model(spec.model, input_shape=dataset.sample_shape, pretrained=False, checkpoint=False)
    model.load_state_dict(load_state_dict(checkpoint))
    return evaluate_test(model, dataset.splits["test"], dataset.classes, device=torch.device("cpu"))[
        "test_accuracy"
    ]


def test_the_test_accuracy_is_best_pts_and_says_so(tmp_path):
    recorder = Recorder()
    # A large sgd step makes the last epoch's weights differ from the best epoch's on most seeds; what matters
    # is that the number is best.pt's whatever the epochs did.
    result = done(
        train(tmp_path, merge(QUICK, epochs=3, model={"name": "mlp"}, device="cpu"), recorder=recorder)
    )
    best_epoch = result["best_epoch"]
    assert result["test_checkpoint"] == {"file": "best.pt", "epoch": best_epoch}
    with open(result["evaluation"]) as f:
        assert json.load(f)["checkpoint"] == {"file": "best.pt", "epoch": best_epoch}
    logs = [event["text"] for event in recorder.of("log")]
    assert any(f"with best.pt (epoch {best_epoch})" in line and "test accuracy" in line for line in logs), (
        logs
    )
    spec = TrainSpec.from_dict(json.loads(json.dumps(merge(QUICK, model={"name": "mlp", "num_classes": 10}))))
    expected = _accuracy_of(result["best_checkpoint"], spec)
    assert result["final"]["test_accuracy"] == expected


def test_without_a_best_checkpoint_the_final_model_is_named(tmp_path):
    result = done(
        train(tmp_path, merge(QUICK, epochs=1, keep_best=False, model={"name": "mlp"}, device="cpu"))
    )
    assert result["test_checkpoint"] == {"file": "model.pt", "epoch": 1}

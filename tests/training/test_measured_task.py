"""What a later job (quantize) measures a run by: the spec's task, or for a run that kept task=auto (a
LightningModule's) what its data's first sample says; classification for the built-in sets."""

from __future__ import annotations

import pytest
import torch

from workbench.errors import JobError
from workbench.specs import TrainSpec
from workbench.worker.lightning.data import LightningBatch
from workbench.worker.objectives.of_run import measured_task, objective_for


def _batch(targets) -> LightningBatch:
    return LightningBatch("lightning:dm.py:DM", [(torch.zeros(3), t) for t in targets])


def test_a_lightning_run_with_float_targets_is_measured_as_regression():
    data = _batch([torch.tensor([0.5]), torch.tensor([1.5])])
    spec = TrainSpec.from_dict({"model": {"name": "lightning:m.py:M"}, "task": "auto"})
    assert measured_task(spec, data) == "regression"
    objective = objective_for(spec, data)
    assert objective.task == "regression" and objective.higher_is_better is False


def test_integer_labels_stay_classification_and_a_set_task_wins():
    data = _batch([torch.tensor(3), torch.tensor(1)])
    assert measured_task(TrainSpec.from_dict({"task": "auto"}), data) == "classification"
    assert measured_task(TrainSpec.from_dict({"task": "auto"}), None) == "classification"  # a built-in set
    assert measured_task(TrainSpec.from_dict({"task": "custom", "loss": "file:l.py:f"}), data) == "custom"


def test_targets_no_task_fits_are_a_clear_error():
    # integer vectors: not multilabel, not a class
    data = _batch([torch.tensor([2, 5]), torch.tensor([1, 7])])
    with pytest.raises(JobError, match="task=auto cannot tell the task"):
        measured_task(TrainSpec.from_dict({"task": "auto"}), data)

"""The one generic registry that tasks, datasets and models share."""

from __future__ import annotations

import pytest

from workbench.errors import JobError, UsageError
from workbench.registry import Registry


def test_add_get_names_and_twice_refused():
    reg: Registry[int] = Registry("widget")
    reg.add("alpha", 1)
    reg.add("beta", 2)
    assert reg.get("beta") == 2 and reg.names() == ["alpha", "beta"] and reg.entries() == [1, 2]
    assert "alpha" in reg and "gamma" not in reg and reg.lookup("gamma") is None
    with pytest.raises(ValueError, match="widget 'alpha' is registered twice"):
        reg.add("alpha", 3)


def test_unknown_names_get_a_did_you_mean_or_the_list():
    reg: Registry[int] = Registry("widget", error=JobError, missing=lambda n, h: f"widget.name: {n!r}? {h}")
    reg.add("alpha", 1)
    reg.add("beta", 2)
    with pytest.raises(JobError, match=r"^widget.name: 'alpah'\? did you mean 'alpha'\?$"):
        reg.get("alpah")
    with pytest.raises(JobError, match="choose one of: alpha, beta$"):
        reg.get("zzz")
    with pytest.raises(UsageError, match="no widget named 'x'"):
        Registry("widget").get("x")


def test_the_three_registries_share_it():
    from workbench.worker.data.registry import DATASETS, get_dataset
    from workbench.worker.models.registry import MODELS, list_models
    from workbench.worker.registry import TASKS, get_task

    assert get_task("debug.count").name == "debug.count" and "debug.count" in TASKS.names()
    assert get_dataset("digits").name == "digits" and "digits" in DATASETS
    assert "cnn" in MODELS and "torchvision:<arch>" in list_models()
    with pytest.raises(JobError, match="dataset.name: no dataset named 'digit'; did you mean 'digits'"):
        get_dataset("digit")
    with pytest.raises(
        UsageError, match="no task named 'debug.cont' in this worker; did you mean 'debug.count'"
    ):
        get_task("debug.cont")

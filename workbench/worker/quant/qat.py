"""Quantization-aware training (the white paper's section 5): fine-tune the quantized network with the
training engine (its loop, curves, checkpoints and cancel), gradients passing straight through the fake
quantizers. The ranges stay as post-training quantization set them; the weights learn to sit well on their
grids. Worker side; never imports Qt.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn
from torch.nn.utils import parametrize

from workbench.specs import QuantSpec, TrainSpec
from workbench.worker.quant.quantizer import QParams, fake_quant, quantize
from workbench.worker.quant.sim import QuantSim


class FakeQuantWeight(nn.Module):
    """A weight parametrization: the layer computes with q(w) while the optimiser updates w (straight
    through)."""

    def __init__(self, qp: QParams):
        super().__init__()
        self.qp = qp

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return fake_quant(weight, self.qp)


def training_spec(spec: QuantSpec, base: TrainSpec | None, model, dataset) -> TrainSpec:
    """The run's own training recipe (optimiser, batch size, loss, augmentation) for qat.epochs at qat.lr, on
    one process, eagerly, in full precision and without a schedule: fine-tuning, not training from scratch."""
    base = base or TrainSpec()
    return dataclasses.replace(
        base,
        dataset=dataset,
        model=model,
        epochs=spec.qat.epochs,
        lr=spec.qat.lr,
        scheduler="none",
        amp="none",
        compile="off",
        channels_last=False,
        distributed="none",
        nproc=1,
        checkpoint_every=1,
        keep_best=False,
        early_stop_patience=0,
        profile_steps=0,
        grad_accum_steps=1,
        device=spec.device,
    )


def run_qat(sim: QuantSim, train_spec: TrainSpec, dataset, device: torch.device, ctx) -> dict:
    """Fine-tune `sim` (everything quantized) for train_spec.epochs; afterwards its FP32 weights are the
    trained shadow weights and its codes their nearest rounding on the unchanged grids. Returns the training
    summary."""
    from workbench.worker.training import Trainer, TrainSetup

    sim.all()
    with torch.no_grad():
        for wq in sim.weights.values():
            wq.module.weight.copy_(wq.w_fp)  # the shadow weights train; the forward pass sees them quantized
    for wq in sim.weights.values():
        parametrize.register_parametrization(wq.module, "weight", FakeQuantWeight(wq.qp))
    try:
        run = ctx.run
        trainer = Trainer(
            TrainSetup(
                spec=train_spec,
                dataset=dataset,
                model=sim.gm,
                device=device,
                checkpoints_dir=run.checkpoints_dir,
                artifacts_dir=run.artifacts_dir,
                report=ctx,
            )
        )
        summary = trainer.fit()
    finally:
        for wq in sim.weights.values():
            parametrize.remove_parametrizations(wq.module, "weight", leave_parametrized=False)
    sim.gm.eval()
    with torch.no_grad():
        for wq in sim.weights.values():
            wq.w_fp = wq.module.weight.detach().clone()
            if wq.module.bias is not None:
                wq.b_fp = wq.module.bias.detach().clone()
                wq.b_q = wq.b_fp.clone()
            wq.codes = quantize(wq.w_fp, wq.qp)
            wq.rounding = "qat"
            wq.ranges.clear()  # estimates of the old weights no longer describe them
    sim.all()
    return summary

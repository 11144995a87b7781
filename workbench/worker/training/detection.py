"""The detection route of `train.model`: a torchvision-API detector trained on (images, targets) batches with
the losses its train-mode forward returns, validated each epoch by COCO mAP (pycocotools), checkpointed as the
built-in loop does (best.pt by val mAP, model.pt), and evaluated on the test split into COCO-format files
anyone can recompute the figure from. Worker side; never imports Qt."""

from __future__ import annotations

import dataclasses
import math
import time

import torch

from workbench.errors import JobError
from workbench.runs.atomic import atomic_write_json
from workbench.worker.checkpoints import check_final_checkpoint, load_state_dict, save_state_dict
from workbench.worker.detection_source import build_detection_model
from workbench.worker.objectives import detection as coco
from workbench.worker.training.optim import (
    build_optimizer,
    build_scheduler,
    current_lr,
    fast_forward,
    load_optimizer_state,
)
from workbench.worker.training.reproducibility import seed_everything
from workbench.worker.training.state import BEST, FINAL, LAST, TrainState, load_last, save_last

WORST_IMAGES = 24  # the evaluation's worst images by missed objects and by false positives
SCORE = 0.5  # the score above which a prediction counts as a detection for missed / false positives
METRIC_EVERY = 5  # steps between the live loss metrics


def _to(targets: list[dict], device: torch.device) -> list[dict]:
    return [{k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in t.items()} for t in targets]


def _no_more_epochs(epochs: int, done: int) -> str:
    return (
        f"epochs: {epochs} is not above the {done} epoch(s) this run has done; resume with more, e.g. "
        f"--set epochs={done + max(1, epochs)}"
    )


def check_resume_epochs(spec, run_dir) -> None:
    """Before a resumed detection run is touched: a SpecError when `epochs` is not above the epochs its
    last.pt has done (the job would refuse only once the run was running again, and the run then failed)."""
    from pathlib import Path

    from workbench.errors import SpecError

    path = Path(run_dir) / "checkpoints" / LAST
    if spec.task != "detection" or not path.is_file():
        return  # the job itself says there is nothing to resume from
    try:
        done = TrainState.from_dict(load_last(path)["state"]).epoch
    except JobError:
        return  # the job itself says why it cannot be read
    if spec.epochs <= done:
        raise SpecError(_no_more_epochs(spec.epochs, done))


def resolve_detection(spec, dataset, ctx):
    """task=detection and num_classes (K + 1) written into the run's spec, so later jobs rebuild the same
    detector without reading the data."""
    from workbench.runs.atomic import atomic_write_text

    model = spec.model
    if not model.num_classes:
        model = dataclasses.replace(model, num_classes=len(dataset.classes) + 1)
        ctx.log(f"model.num_classes: {model.num_classes} ({len(dataset.classes)} classes and the background)")
    resolved = dataclasses.replace(spec, task="detection", model=model)
    if resolved != spec:
        atomic_write_text(ctx.run.spec_path, resolved.to_toml())
    ctx.log(
        "task: detection (the targets are boxes and labels); the detector's own losses, monitor val mAP ↑"
    )
    return resolved


class DetectionTraining:
    """One detection run: fit() trains and validates epoch by epoch, test() evaluates the kept checkpoint."""

    def __init__(self, spec, ctx, dataset, device: torch.device):
        self.spec, self.ctx, self.dataset, self.device = spec, ctx, dataset, device
        seed_everything(spec.seed)
        self.model = build_detection_model(spec, dataset, ctx.log).to(device)
        self.train_loader = dataset.loader("train", spec.batch_size, shuffle=True, seed=spec.seed)
        self.steps_per_epoch = len(self.train_loader)
        self.total_steps = self.steps_per_epoch * spec.epochs
        self.optimizer = build_optimizer(self.model, spec, device)
        self.scheduler = build_scheduler(self.optimizer, spec, self.steps_per_epoch, self.total_steps)
        self.step = 0
        self.best, self.best_epoch, self.last_epoch = -math.inf, 0, {}
        self.early_stopped = False
        self.samples, self.train_s = 0, 0.0
        folder = ctx.run.checkpoints_dir
        folder.mkdir(parents=True, exist_ok=True)
        ctx.run.artifacts_dir.mkdir(parents=True, exist_ok=True)
        self.ckpt_best, self.ckpt_final, self.ckpt_last = folder / BEST, folder / FINAL, folder / LAST
        self.start_epoch = self._resume() if ctx.resuming else 0

    def _resume(self) -> int:
        """Go on from last.pt (the end of the last finished epoch): the weights, optimizer, schedule, step and
        best so far; returns the epochs done. An epoch a cancel cut short is trained again from its start."""
        saved = load_last(self.ckpt_last)
        state = TrainState.from_dict(saved["state"])
        if state.epoch >= self.spec.epochs:
            raise JobError(_no_more_epochs(self.spec.epochs, state.epoch))
        self.model.load_state_dict(saved["model"])
        load_optimizer_state(self.optimizer, saved["optimizer"])
        self.step, self.best_epoch = state.global_step, state.best_epoch
        # the schedule over this spec's epochs (a resume may add some), at the step reached, as the loop does
        fast_forward(self.scheduler, self.step)
        self.best = state.best_metric if state.best_epoch else -math.inf
        self.last_epoch = dict(state.last_epoch_metrics)
        self.ctx.run.log_event("resume", {"epoch": state.epoch, "global_step": state.global_step})
        self.ctx.log(f"resuming after epoch {state.epoch} (step {state.global_step}) of {self.spec.epochs}")
        return state.epoch

    def _save_last(self, epochs_done: int) -> None:
        """last.pt at the end of an epoch: what a resume goes on from."""
        state = TrainState(
            epoch=epochs_done,
            global_step=self.step,
            best_metric=self.best if math.isfinite(self.best) else -1.0,
            best_epoch=self.best_epoch,
            last_epoch_metrics=dict(self.last_epoch),
        )
        save_last(
            self.ckpt_last,
            model=self.model,
            optimizer=self.optimizer,
            optimizer_name=self.spec.optimizer,
            scheduler=self.scheduler,
            scaler=None,
            state=state,
        )

    # -- training --------------------------------------------------------------------------------
    def fit(self) -> int:
        """Train every epoch; returns the epochs completed."""
        spec, ctx = self.spec, self.ctx
        params = sum(p.numel() for p in self.model.parameters())
        ctx.log(
            f"training {spec.model.name} ({params:,} parameters) on {self.device}: "
            f"{len(self.dataset.splits['train']):,} training images, {self.steps_per_epoch} steps an epoch"
        )
        done = self.start_epoch
        for epoch in range(self.start_epoch, spec.epochs):
            sums = self._train_epoch(epoch)
            self._end_epoch(epoch, sums)
            done = epoch + 1
            self._save_last(done)
            if self._patience_ran_out(done):
                break
        save_state_dict(self.model.state_dict(), self.ckpt_final, name=f"checkpoints/{FINAL}")
        return done

    def _patience_ran_out(self, done: int) -> bool:
        """early_stop_patience: stop when val mAP has not improved for that many epochs (0: never)."""
        patience = self.spec.early_stop_patience
        if (
            not patience
            or not self.best_epoch
            or done >= self.spec.epochs
            or done - self.best_epoch < patience
        ):
            return False
        self.early_stopped = True
        self.ctx.log(
            f"early stop after epoch {done}: val mAP has not improved for {done - self.best_epoch} epoch(s) "
            f"since epoch {self.best_epoch} ({self.best:.4f}; early_stop_patience = {patience})"
        )
        return True

    def _train_epoch(self, epoch: int) -> dict:
        self.model.train()
        sums: dict[str, float] = {}
        count = 0
        started = time.perf_counter()
        for images, targets in self.train_loader:
            self.ctx.check_stop()
            images = [image.to(self.device) for image in images]
            losses = self.model(images, _to(targets, self.device))
            if not isinstance(losses, dict) or not losses:
                raise JobError(
                    f"model: {self.spec.model.name} in train mode must return a dict of losses for (images, "
                    f"targets), as torchvision's detectors do; it returned {type(losses).__name__}"
                )
            loss = sum(losses.values())
            if not torch.isfinite(loss):
                raise JobError(
                    f"training diverged at step {self.step + 1}: the detector's loss is {float(loss)} "
                    f"({', '.join(f'{k} {float(v):.4g}' for k, v in losses.items())}); lower lr"
                )
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if self.spec.clip_grad_norm:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.spec.clip_grad_norm)
            self.optimizer.step()
            if self.scheduler is not None:
                self.scheduler.step()
            self.step += 1
            count += 1
            self.samples += len(images)
            values = {"loss": float(loss.detach()), **{k: float(v.detach()) for k, v in losses.items()}}
            for key, value in values.items():
                sums[key] = sums.get(key, 0.0) + value
            if self.step % METRIC_EVERY == 0 or count == self.steps_per_epoch:
                self.ctx.metrics(
                    self.step,
                    {f"train/{k}": v for k, v in values.items()} | {"lr": current_lr(self.optimizer)},
                )
            self.ctx.progress(
                self.step,
                self.total_steps,
                (f"epoch {epoch + 1}/{self.spec.epochs} · loss {values['loss']:.4f}"),
            )
        self.train_s += time.perf_counter() - started
        return {k: v / max(count, 1) for k, v in sums.items()}

    def _end_epoch(self, epoch: int, train: dict) -> None:
        spec, ctx = self.spec, self.ctx
        values = {"epoch": epoch + 1, "epoch/train_loss": train.get("loss", math.nan)}
        values.update({f"epoch/train_{k}": v for k, v in train.items() if k != "loss"})
        val = {}
        if len(self.dataset.splits["val"]):
            val = self.evaluate("val", f"validating epoch {epoch + 1}")["metrics"]
            values.update({f"val/{k}": v for k, v in val.items()})
            if val["map"] > self.best or self.best_epoch == 0:
                self.best, self.best_epoch = val["map"], epoch + 1
                if spec.keep_best:
                    save_state_dict(self.model.state_dict(), self.ckpt_best, name=f"checkpoints/{BEST}")
        self.last_epoch = {"train_loss": train.get("loss"), **{f"val_{k}": v for k, v in val.items()}}
        ctx.metrics(self.step, values)
        parts = " ".join(f"{k} {v:.4f}" for k, v in train.items())
        val_text = f" · val mAP {val['map']:.4f} mAP@.5 {val['map_50']:.4f}" if val else ""
        ctx.log(f"epoch {epoch + 1}/{spec.epochs}: {parts}{val_text}")

    # -- evaluation ------------------------------------------------------------------------------
    @torch.no_grad()
    def predict(self, split: str, text: str) -> tuple[list[int], list[dict]]:
        """(image ids, eval outputs on the CPU) of a split, in split order."""
        self.model.eval()
        loader = self.dataset.loader(split, max(1, self.spec.batch_size), shuffle=False)
        ids, outputs = [], []
        total = len(loader)
        for k, (images, targets) in enumerate(loader):
            self.ctx.check_stop()
            out = self.model([image.to(self.device) for image in images])
            outputs += [{key: value.detach().cpu() for key, value in o.items()} for o in out]
            ids += [int(t["image_id"]) for t in targets]
            self.ctx.progress(k + 1, total, f"{text}: {k + 1}/{total} batches")
        return ids, outputs

    def evaluate(self, split: str, text: str) -> dict:
        ids, outputs = self.predict(split, text)
        gt = coco.ground_truth(
            self.dataset.splits[split].items, self.dataset.classes, self.dataset.category_ids
        )
        return coco.evaluate(
            gt, coco.predictions(ids, outputs, self.dataset.category_ids), self.dataset.classes
        )

    def test(self) -> dict:
        """Evaluate the kept checkpoint (best.pt, else the final weights) on the test split: the COCO files
        and evaluation.json; returns {"metrics", "path", "checkpoint"}."""
        ctx, run = self.ctx, self.ctx.run
        checkpoint = self.ckpt_best if self.spec.keep_best and self.ckpt_best.is_file() else self.ckpt_final
        self.model.load_state_dict(load_state_dict(checkpoint))
        check_final_checkpoint(run.checkpoints_dir, self.model.state_dict())
        if not len(self.dataset.splits["test"]):
            ctx.log("no test split (dataset.test_fraction is 0): no test mAP", "warning")
            return {"metrics": {}, "path": None, "checkpoint": checkpoint.name}
        ids, outputs = self.predict("test", "evaluating the test split")
        split = self.dataset.splits["test"]
        saved = save_test_evaluation(
            ctx, split.items, ids, outputs, self.dataset.classes, self.dataset.category_ids, checkpoint.name
        )
        return {**saved, "checkpoint": checkpoint.name}


def save_test_evaluation(ctx, items, ids, outputs, classes, category_ids, what: str) -> dict:
    """COCO mAP (pycocotools) of a detector's test outputs, saved as the run's two COCO files and
    evaluation.json (the monitor, metrics, AP per class, PR curves and the worst images); `items`: the test
    images' records (records.Item), in the order of `outputs`. Returns {"metrics", "path"}."""
    run = ctx.run
    gt = coco.ground_truth(items, classes, category_ids)
    results = coco.predictions(ids, outputs, category_ids)
    found = coco.evaluate(gt, results, classes)
    folder = run.artifacts_dir
    folder.mkdir(parents=True, exist_ok=True)
    predictions_path, truth_path = folder / "predictions_test.json", folder / "ground_truth_test.json"
    atomic_write_json(predictions_path, results)
    atomic_write_json(truth_path, gt)
    ctx.artifact("test predictions (COCO)", predictions_path, kind="json")
    ctx.artifact("test ground truth (COCO)", truth_path, kind="json")
    metrics = found["metrics"]
    images = _image_rows(items, outputs)
    evaluation = {
        "task": "detection",
        "split": "test",
        "monitor": {
            "name": coco.MONITOR,
            "label": coco.MONITOR_LABEL,
            "higher_is_better": True,
            "value": metrics["map"],
        },
        "metrics": metrics,
        "classes": list(classes),
        "per_class": found["per_class"],
        "pr": found["pr"],
        "score_threshold": SCORE,
        "images": images,
        "worst_missed": [r["index"] for r in sorted(images, key=lambda r: -r["missed"])[:WORST_IMAGES]],
        "worst_fp": [r["index"] for r in sorted(images, key=lambda r: -r["false_positives"])[:WORST_IMAGES]],
        "predictions": "artifacts/predictions_test.json",
        "ground_truth": "artifacts/ground_truth_test.json",
    }
    path = folder / "evaluation.json"
    atomic_write_json(path, evaluation)
    ctx.log(
        f"test ({what}): mAP {metrics['map']:.4f}, mAP@.5 {metrics['map_50']:.4f}, "
        f"mAP@.75 {metrics['map_75']:.4f}, AR@100 {metrics['mar_100']:.4f} (pycocotools, "
        f"{len(results):,} predictions)"
    )
    return {"metrics": metrics, "path": str(path)}


def _image_rows(items, outputs: list[dict]) -> list[dict]:
    """Per test image: its true and predicted boxes, and how many objects it missed and how many false
    positives it has at SCORE (greedy IoU >= .5 matching of the same class)."""
    from torchvision.ops import box_iou

    rows = []
    for index, (item, out) in enumerate(zip(items, outputs)):
        keep = out["scores"] >= SCORE
        pred_boxes, pred_labels = out["boxes"][keep], out["labels"][keep]
        true_boxes = torch.tensor(item.boxes, dtype=torch.float32).reshape(-1, 4)
        true_labels = torch.tensor(item.labels, dtype=torch.int64)
        matched_true, matched = set(), 0
        if len(pred_boxes) and len(true_boxes):
            iou = box_iou(pred_boxes, true_boxes)
            for p in range(len(pred_boxes)):
                for t in torch.argsort(iou[p], descending=True).tolist():
                    if iou[p, t] < 0.5:
                        break
                    if t not in matched_true and int(true_labels[t]) == int(pred_labels[p]):
                        matched_true.add(t)
                        matched += 1
                        break
        rows.append(
            {
                "index": index,
                "image_id": int(item.image_id),
                "file": str(item.file) if item.file.name else "",
                "width": item.width,
                "height": item.height,
                "true": {"boxes": item.boxes, "labels": item.labels},
                "pred": {
                    "boxes": [[round(v, 2) for v in b] for b in out["boxes"].tolist()],
                    "labels": out["labels"].tolist(),
                    "scores": [round(s, 4) for s in out["scores"].tolist()],
                },
                "missed": len(true_boxes) - len(matched_true),
                "false_positives": int(keep.sum()) - matched,
            }
        )
    return rows


def run_detection_training(spec, ctx, dataset, device: torch.device) -> dict:
    """Train, evaluate on the test split, return the result (the same keys as the built-in loop's)."""
    spec = resolve_detection(spec, dataset, ctx)
    if spec.distributed != "none" or spec.compile != "off" or spec.amp != "none":
        ctx.log(
            "detection trains in one process, in float32, uncompiled: distributed, compile and amp are "
            "not used for it yet",
            "warning",
        )
    training = DetectionTraining(spec, ctx, dataset, device)
    epochs = training.fit()
    test = training.test()
    metrics = test["metrics"]
    run = ctx.run
    per_s = training.samples / training.train_s if training.train_s else None
    return {
        "epochs_completed": epochs,
        "final": {
            "train_loss": training.last_epoch.get("train_loss"),
            "val_loss": None,
            "val_accuracy": None,
            "test_accuracy": None,
            **{k: v for k, v in training.last_epoch.items() if k.startswith("val_")},
            "test_metrics": metrics,
        },
        "throughput": {"train_samples_per_s": per_s, "warmup_s": None, "warmup_steps": 0, "compile_s": None},
        "checkpoint": str(run.checkpoints_dir / FINAL),
        "best_checkpoint": str(training.ckpt_best) if training.ckpt_best.is_file() else None,
        "device": str(device),
        "amp": "none",
        "channels_last": False,
        "data_placement": "host",
        "parameters": {
            "total": sum(p.numel() for p in training.model.parameters()),
            "trainable": sum(p.numel() for p in training.model.parameters() if p.requires_grad),
        },
        "global_steps": training.step,
        "early_stopped": training.early_stopped,
        "best_val_accuracy": None,
        "best_epoch": training.best_epoch or None,
        "evaluation": test["path"],
        "test_checkpoint": test["checkpoint"],
        "task": "detection",
        "monitor": {
            "name": coco.MONITOR,
            "label": coco.MONITOR_LABEL,
            "higher_is_better": True,
            "best_val": training.best if math.isfinite(training.best) else None,
            "test": metrics.get("map"),
        },
        "metrics": {f"test_{k}": v for k, v in metrics.items()},
    }

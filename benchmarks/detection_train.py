"""Detection against the loops people write: training throughput of the workbench's detection route against
torchvision's references/detection loop written plainly (same model, data, optimiser and batches), and COCO
mAP evaluation time against pycocotools called directly on the same predictions. Ratios of interleaved
repeats in one process (these machines are shared and noisy: read the ratios, not the figures).

Goals: training >= 0.95x the plain loop's samples per second (CPU here; CUDA where a GPU is lent); evaluation
<= 1.1x pycocotools direct.

    .venv/bin/python benchmarks/detection_train.py [--images 32] [--repeats 2]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import tempfile
import time
from pathlib import Path

import torch

from workbench.specs import DataSpec, TrainSpec
from workbench.worker.data.loader import load_dataset
from workbench.worker.detection_source import build_detection_model
from workbench.worker.objectives import detection as coco
from workbench.worker.training.detection import DetectionTraining

MODEL = {
    "name": "torchvision:fasterrcnn_mobilenet_v3_large_320_fpn",
    "args": {"min_size": 128, "max_size": 128},
}


class Quiet:
    """The task context the route reports to, dropping everything (the run folder is a temporary one)."""

    def __init__(self, folder: Path):
        from types import SimpleNamespace

        self.run = SimpleNamespace(
            checkpoints_dir=folder / "checkpoints", artifacts_dir=folder / "artifacts", dir=folder
        )

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def plain_epoch(model, loader, optimizer) -> tuple[int, float]:
    """torchvision's references/detection train_one_epoch, without its logger and warm-up schedule."""
    model.train()
    seen, started = 0, time.perf_counter()
    for images, targets in loader:
        loss_dict = model(images, [{k: v for k, v in t.items() if k != "image_id"} for t in targets])
        losses = sum(loss for loss in loss_dict.values())
        optimizer.zero_grad()
        losses.backward()
        optimizer.step()
        seen += len(images)
    return seen, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        data = DataSpec.from_dict(
            {"name": "shapes_detection", "size": args.images, "root": str(folder / "data")}
        )
        spec = TrainSpec.from_dict(
            {
                "dataset": data.to_dict(),
                "model": MODEL,
                "epochs": 1,
                "batch_size": 4,
                "optimizer": "sgd",
                "lr": 0.01,
                "momentum": 0.9,
                "task": "detection",
            }
        )
        dataset = load_dataset(data, workspace=folder)
        spec.model.num_classes = len(dataset.classes) + 1
        ours, plain = [], []
        for _ in range(args.repeats):
            torch.manual_seed(0)
            training = DetectionTraining(spec, Quiet(folder / "run"), dataset, torch.device("cpu"))
            training._train_epoch(0)
            ours.append(training.samples / training.train_s)
            torch.manual_seed(0)
            model = build_detection_model(spec, dataset, lambda *a: None)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            seen, seconds = plain_epoch(model, dataset.loader("train", 4, shuffle=True), optimizer)
            plain.append(seen / seconds)
        ratio = statistics.median(ours) / statistics.median(plain)
        print(f"training, CPU, {len(dataset.splits['train'])} images of 128 px, batch 4, SGD")
        print(f"  plain loop   {statistics.median(plain):6.2f} samples/s")
        print(f"  workbench    {statistics.median(ours):6.2f} samples/s   {ratio:.2f}x  (goal >= 0.95x)")
        ids, outputs = training.predict("train", "predicting")
        gt = coco.ground_truth(dataset.splits["train"].items, dataset.classes, dataset.category_ids)
        results = coco.predictions(ids, outputs, dataset.category_ids)
        ours_s, direct_s = [], []
        for _ in range(max(3, args.repeats)):
            started = time.perf_counter()
            coco.evaluate(gt, results, dataset.classes)
            ours_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            _direct(gt, results)
            direct_s.append(time.perf_counter() - started)
        ratio = statistics.median(ours_s) / statistics.median(direct_s)
        print(f"mAP evaluation of {len(results):,} predictions on {len(gt['images'])} images")
        print(f"  pycocotools direct  {statistics.median(direct_s) * 1000:7.1f} ms")
        print(
            f"  workbench           {statistics.median(ours_s) * 1000:7.1f} ms   {ratio:.2f}x  (goal <= 1.1x)"
        )


def _direct(gt: dict, results: list[dict]) -> None:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        truth = COCO()
        truth.dataset = gt
        truth.createIndex()
        found = truth.loadRes(results)
        run = COCOeval(truth, found, "bbox")
        run.evaluate()
        run.accumulate()
        run.summarize()


if __name__ == "__main__":
    main()

"""The dotted ids of the worker's jobs, named once for the window, the CLI and the worker alike (a run's task id is
stored in its folder, so these strings are part of every run). No torch, no Qt.
"""

from __future__ import annotations

TRAIN_TASK = "train.classifier"  # trains every learning task (classification, segmentation, regression, ...)
QUANT_TASK = "quant.analyze"
EXPORT_TASK = "export.model"
BENCH_TASK = "bench.latency"
GRAPH_TASK = "graph.build"
PREDICT_TASK = "predict.model"
LR_FIND_TASK = "lr.find"

"""The dataset engine of the worker: a registry of datasets, loading into uint8 storage, deterministic splits,
normalisation, batched per-sample augmentation and batching. Imports torch; never Qt.

Training and the data tasks use `load_dataset(spec)` and the `LoadedDataset` / `Split` it returns.
"""

from workbench.worker.data.augment import Augment, augment_uint8, build_augment
from workbench.worker.data.imagefolder import IMAGE_EXTENSIONS, FolderScan, scan_image_folder
from workbench.worker.data.loaded import SPLITS, LoadedDataset, Split
from workbench.worker.data.loader import clear_cache, load_dataset, resolve_root, resolve_workspace
from workbench.worker.data.registry import (
    DatasetEntry,
    Source,
    SourceRequest,
    get_dataset,
    list_datasets,
    register_dataset,
)
from workbench.worker.data.stores import ImageStore, TensorStore, memory_budget

__all__ = [
    "IMAGE_EXTENSIONS",
    "SPLITS",
    "Augment",
    "DatasetEntry",
    "FolderScan",
    "ImageStore",
    "LoadedDataset",
    "Source",
    "SourceRequest",
    "Split",
    "TensorStore",
    "augment_uint8",
    "build_augment",
    "clear_cache",
    "get_dataset",
    "list_datasets",
    "load_dataset",
    "memory_budget",
    "register_dataset",
    "resolve_root",
    "resolve_workspace",
    "scan_image_folder",
]

"""The dataset engine with real loaders and real files: torchvision's MNIST family on IDX files written here,
CIFAR/SVHN's "put the files here" messages, digits splits, image folders with broken files, fake data,
normalisation and its cache, per-sample augmentation and batching."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
import torch
from data_helpers import (
    MNIST_FOLDERS,
    Recorder,
    add_bad_files,
    make_image_folder,
    save_image,
    write_mnist_like,
)
from PIL import Image

from workbench.errors import JobError
from workbench.specs import DataSpec
from workbench.worker.context import TaskContext
from workbench.worker.data import (
    build_augment,
    clear_cache,
    get_dataset,
    list_datasets,
    load_dataset,
    scan_image_folder,
)
from workbench.worker.data.idx import idx_problem


def spec(**fields) -> DataSpec:
    return DataSpec.from_dict(fields)


def all_images(split) -> torch.Tensor:
    return split.images(torch.arange(len(split)))


# -- registry ---------------------------------------------------------------------------------------


def test_registry_lists_every_dataset_the_spec_allows():
    from workbench.specs import DATASETS

    assert list_datasets() == sorted(DATASETS)
    assert get_dataset("mnist").has_test_split and not get_dataset("digits").has_test_split
    with pytest.raises(JobError, match="did you mean 'mnist'"):
        get_dataset("mnsit")


# -- torchvision's MNIST family on real IDX files ----------------------------------------------------


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist", "kmnist"])
def test_mnist_family_loads_idx_files_with_torchvision(tmp_path, name):
    from torchvision import datasets

    written = write_mnist_like(tmp_path / "data", name, n_train=60, n_test=20)
    ds = load_dataset(spec(name=name, root=str(tmp_path / "data"), val_fraction=0.1), workspace=tmp_path)
    assert ds.classes == list(getattr(datasets, MNIST_FOLDERS[name]).classes)
    assert {k: len(v) for k, v in ds.splits.items()} == {"train": 54, "val": 6, "test": 20}
    assert ds.sample_shape == (1, 28, 28) and ds.in_memory
    train_images, train_labels = written["train"]
    for split_name in ("train", "val"):
        split = ds.splits[split_name]
        rows = split.indices.numpy()  # the split's positions in the train file
        assert np.array_equal(split.labels.numpy(), train_labels[rows].astype(np.int64))
        assert np.array_equal(all_images(split)[:, 0].numpy(), train_images[rows])
    test_images, test_labels = written["t10k"]
    assert np.array_equal(ds.splits["test"].labels.numpy(), test_labels.astype(np.int64))
    assert np.array_equal(all_images(ds.splits["test"])[:, 0].numpy(), test_images)
    assert sorted(torch.cat([ds.splits["train"].indices, ds.splits["val"].indices]).tolist()) == list(
        range(60)
    )


def test_mnist_accepts_gzipped_files_and_resizes(tmp_path):
    written = write_mnist_like(tmp_path / "data", "mnist", n_train=30, n_test=10, gz=True)
    ds = load_dataset(spec(name="mnist", root=str(tmp_path / "data"), image_size=[14]), workspace=tmp_path)
    assert ds.sample_shape == (1, 14, 14)
    assert len(ds.splits["test"]) == 10
    assert np.array_equal(ds.splits["test"].labels.numpy(), written["t10k"][1].astype(np.int64))


def test_mnist_download_true_uses_files_already_there_without_a_network(tmp_path):
    written = write_mnist_like(tmp_path / "data", "fashion_mnist", n_train=20, n_test=5)
    ds = load_dataset(
        spec(name="fashion_mnist", root=str(tmp_path / "data"), download=True), workspace=tmp_path
    )
    assert np.array_equal(ds.splits["test"].labels.numpy(), written["t10k"][1].astype(np.int64))


def test_mnist_missing_files_say_which_files_go_where(tmp_path):
    root = tmp_path / "nothing-here"
    with pytest.raises(JobError) as err:
        load_dataset(spec(name="mnist", root=str(root)), workspace=tmp_path)
    message = str(err.value)
    assert f"{root / 'MNIST' / 'raw'}/" in message
    for name in (
        "train-images-idx3-ubyte(.gz)",
        "train-labels-idx1-ubyte(.gz)",
        "t10k-images-idx3-ubyte(.gz)",
        "t10k-labels-idx1-ubyte(.gz)",
    ):
        assert name in message
    assert "dataset.download=true" in message


def test_mnist_truncated_file_is_named(tmp_path):
    write_mnist_like(tmp_path / "data", "kmnist")
    bad = tmp_path / "data" / "KMNIST" / "raw" / "t10k-images-idx3-ubyte"
    bad.write_bytes(bad.read_bytes()[:1000])
    assert "truncated" in idx_problem(bad, 3)
    with pytest.raises(JobError) as err:
        load_dataset(spec(name="kmnist", root=str(tmp_path / "data")), workspace=tmp_path)
    assert str(bad) in str(err.value) and "truncated" in str(err.value)


# -- CIFAR and SVHN: checksummed files, so test the messages ----------------------------------------


CIFAR_FILES = {
    "cifar10": ("cifar-10-batches-py", ["data_batch_1", "data_batch_5", "test_batch", "batches.meta"]),
    "cifar100": ("cifar-100-python", ["train", "test", "meta"]),
}


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_missing_root_says_which_files_go_where(tmp_path, name):
    root = tmp_path / "no-such-root"
    folder, files = CIFAR_FILES[name]
    with pytest.raises(JobError) as err:
        load_dataset(spec(name=name, root=str(root)), workspace=tmp_path)
    message = str(err.value)
    assert f"{root / folder}/" in message and "missing: " in message
    assert all(f in message for f in files)
    assert "dataset.download=true" in message


def test_cifar10_corrupt_files_are_reported_as_corrupt(tmp_path):
    folder = tmp_path / "data" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch", "batches.meta"]
    for i, name in enumerate(names):
        (folder / name).write_bytes(np.random.default_rng(i).integers(0, 256, 300, dtype=np.uint8).tobytes())
    with pytest.raises(JobError) as err:
        load_dataset(spec(name="cifar10", root=str(tmp_path / "data")), workspace=tmp_path)
    message = str(err.value)
    assert f"{folder}/" in message
    assert "corrupt (checksum does not match): data_batch_1, data_batch_2" in message
    assert "batches.meta" in message and "missing:" not in message


def test_svhn_missing_says_which_files_go_where(tmp_path):
    root = tmp_path / "data"
    with pytest.raises(JobError) as err:
        load_dataset(spec(name="svhn", root=str(root)), workspace=tmp_path)
    message = str(err.value)
    assert f"{root / 'SVHN'}/" in message
    assert "train_32x32.mat" in message and "test_32x32.mat" in message and "dataset.download=true" in message


# -- digits: deterministic splits ---------------------------------------------------------------------


def test_digits_splits_are_deterministic_disjoint_and_sized_by_the_fractions(tmp_path):
    def splits(seed, val=0.1, test=0.2):
        ds = load_dataset(spec(seed=seed, val_fraction=val, test_fraction=test), workspace=tmp_path)
        return {name: split.indices.tolist() for name, split in ds.splits.items()}

    first = splits(3)
    assert {k: len(v) for k, v in first.items()} == {"train": 1258, "val": 180, "test": 359}
    everything = first["train"] + first["val"] + first["test"]
    assert sorted(everything) == list(range(1797))  # no overlap, nothing lost
    clear_cache()
    assert splits(3) == first
    other = splits(4)
    assert other["val"] != first["val"] and other["test"] != first["test"]
    ds = load_dataset(spec(seed=3, val_fraction=0.1, test_fraction=0.2), workspace=tmp_path)
    assert ds.sample_shape == (1, 8, 8) and ds.classes == [str(i) for i in range(10)]
    pixels = all_images(ds.splits["train"])
    assert pixels.dtype == torch.uint8 and int(pixels.max()) == 255  # 0..16 scaled to 0..255


# -- image folders ----------------------------------------------------------------------------------


def test_image_folder_with_broken_files_loads_batches_and_names_them(tmp_path):
    root = tmp_path / "pets"
    make_image_folder(root, per_class=4, size=(12, 10))
    corrupt, empty = add_bad_files(root, "cat")
    (root / "dog" / "notes.txt").write_text("not an image")  # ignored: not an image extension
    ds = load_dataset(
        spec(name="imagefolder", root=str(root), val_fraction=0.2, test_fraction=0.2, seed=1),
        workspace=tmp_path,
    )
    assert ds.classes == ["cat", "dog", "fish"] and ds.sample_shape == (3, 12, 10)
    assert sum(len(s) for s in ds.splits.values()) == 14  # 12 good + 2 bad, listed without decoding
    assert ds.skipped_files == []
    seen = 0
    for split in ds.splits.values():
        for x, y in split.batches(4, shuffle=True, seed=0, augment=False):
            assert x.dtype == torch.float32 and x.shape[1:] == (3, 12, 10) and len(x) == len(y)
            seen += len(y)
    assert seen == 12  # the two bad files are left out of their batches
    skipped = {item["path"]: item["reason"] for item in ds.skipped_files}
    assert set(skipped) == {str(corrupt), str(empty)}
    assert "empty file" in skipped[str(empty)]
    assert sum(sum(s.class_counts()) for s in ds.splits.values()) == 12
    assert len(ds.skipped_files) == 2  # reading them again does not report them twice
    ds.decode_all()
    assert len(ds.skipped_files) == 2


def test_image_folder_gray_images_give_one_channel_and_mixed_sizes_are_resized_with_a_note(tmp_path):
    root = tmp_path / "gray"
    make_image_folder(root, classes=("a", "b"), per_class=3, size=(9, 9), gray=True)
    save_image(root / "b" / "wide.png", np.full((9, 20), 200, dtype=np.uint8))
    recorder = Recorder()
    ctx = TaskContext(recorder, workspace=tmp_path)
    try:
        ds = load_dataset(spec(name="imagefolder", root=str(root), val_fraction=0, test_fraction=0), ctx=ctx)
    finally:
        ctx.close()
    assert ds.sample_shape == (1, 9, 9)
    notes = [log["text"] for log in recorder.of("log")]
    assert any("differ in size" in text and "dataset.image_size" in text for text in notes)
    images = all_images(ds.splits["train"])
    assert images.shape == (7, 1, 9, 9)
    assert ds.skipped_files == []


def test_image_folder_scales_16_bit_images_to_8_bits_rather_than_clipping_them(tmp_path):
    """PIL's own conversion of a 16-bit PNG clips at 255 (an almost white image); values are divided by
    257."""
    root = tmp_path / "sixteen"
    make_image_folder(root, classes=("a", "b"), per_class=2, size=(9, 9), gray=True)
    # mid-grey at 16 bits
    Image.fromarray(np.full((9, 9), 30000, dtype=np.uint16)).save(root / "a" / "deep.png")
    ds = load_dataset(
        spec(name="imagefolder", root=str(root), val_fraction=0, test_fraction=0), workspace=tmp_path
    )
    images = all_images(ds.splits["train"])
    flat = [image.unique().tolist() for image in images]
    assert [round(30000 / 257)] in flat and [255] not in flat  # the 16-bit one: 117 everywhere, not white


def test_image_folder_resizes_to_image_size(tmp_path):
    root = tmp_path / "folder"
    make_image_folder(root, classes=("x", "y"), per_class=2, size=(30, 40))
    ds = load_dataset(
        spec(name="imagefolder", root=str(root), image_size=[16, 8], val_fraction=0, test_fraction=0),
        workspace=tmp_path,
    )
    assert ds.sample_shape == (3, 16, 8)
    assert all_images(ds.splits["train"]).shape == (4, 3, 16, 8)


def test_image_folder_bad_layouts_name_the_folder(tmp_path):
    missing = tmp_path / "missing"
    with pytest.raises(JobError, match="does not exist") as err:
        load_dataset(spec(name="imagefolder", root=str(missing)), workspace=tmp_path)
    assert str(missing) in str(err.value)

    no_images = tmp_path / "no-images"
    (no_images / "a").mkdir(parents=True)
    (no_images / "b").mkdir()
    (no_images / "a" / "readme.txt").write_text("hello")
    with pytest.raises(JobError, match="no images under") as err:
        scan_image_folder(no_images)
    assert str(no_images) in str(err.value)

    flat = tmp_path / "flat"
    save_image(flat / "x.png", np.zeros((4, 4), dtype=np.uint8))
    with pytest.raises(JobError, match="no class folders") as err:
        load_dataset(spec(name="imagefolder", root=str(flat)), workspace=tmp_path)
    assert str(flat) in str(err.value)

    one_empty = tmp_path / "one-empty"
    make_image_folder(one_empty, classes=("a", "b"), per_class=2)
    (one_empty / "c").mkdir()
    with pytest.raises(JobError, match="has no images") as err:
        load_dataset(spec(name="imagefolder", root=str(one_empty)), workspace=tmp_path)
    assert str(one_empty / "c") in str(err.value)


def test_image_folder_scan_recurses_sorts_and_skips_hidden_and_other_files(tmp_path):
    root = tmp_path / "scan"
    make_image_folder(root, classes=("b", "a"), per_class=3)
    (root / "a" / ".hidden.png").write_bytes(b"x")
    (root / ".git").mkdir()
    (root / "a" / "deep" / "deeper").mkdir(parents=True)
    save_image(root / "a" / "deep" / "deeper" / "IMG.PNG", np.zeros((4, 4), dtype=np.uint8))
    scan = scan_image_folder(root)
    assert scan.classes == ["a", "b"] and scan.counts == [4, 3]
    assert scan.paths == sorted(scan.paths[:4]) + sorted(scan.paths[4:])
    assert str(root / "a" / "deep" / "deeper" / "IMG.PNG") in scan.paths
    assert not any(".hidden" in p for p in scan.paths)


# -- fake -------------------------------------------------------------------------------------------


def test_fake_honours_its_fields_is_deterministic_and_matches_torchvision(tmp_path):
    from torchvision.datasets import FakeData

    fields = dict(
        name="fake", size=50, num_classes=4, image_size=[6, 5], seed=2, val_fraction=0.2, test_fraction=0.2
    )
    ds = load_dataset(spec(**fields), workspace=tmp_path)
    assert ds.classes == ["0", "1", "2", "3"] and ds.sample_shape == (3, 6, 5)
    assert sum(len(s) for s in ds.splits.values()) == 50
    train = ds.splits["train"]
    first = all_images(train).clone()
    assert set(torch.cat([s.labels for s in ds.splits.values()]).tolist()) <= {0, 1, 2, 3}
    clear_cache()
    again = load_dataset(spec(**fields), workspace=tmp_path)
    assert torch.equal(all_images(again.splits["train"]), first)
    reference = FakeData(size=50, image_size=(3, 6, 5), num_classes=4, random_offset=2 * 50)
    for row, index in enumerate(train.indices[:5].tolist()):
        image, label = reference[index]
        assert np.array_equal(np.asarray(image), first[row].permute(1, 2, 0).numpy())
        assert label == int(train.labels[row])
    other = load_dataset(spec(**{**fields, "seed": 3}), workspace=tmp_path)
    assert not torch.equal(other.splits["test"].images([0]), ds.splits["test"].images([0]))


# -- normalisation ----------------------------------------------------------------------------------


def test_auto_normalization_is_computed_on_train_and_cached_in_the_workspace(tmp_path):
    ds = load_dataset(spec(seed=5), workspace=tmp_path)
    mean, std = ds.normalization()
    pixels = all_images(ds.splits["train"]).double() / 255
    assert mean == pytest.approx([pixels.mean().item()], abs=1e-9)
    assert std == pytest.approx([pixels.std(unbiased=False).item()], abs=1e-9)
    files = list((tmp_path / "cache").glob("data-stats-*.json"))
    assert len(files) == 1
    cached = json.loads(files[0].read_text())
    assert cached["mean"] == mean and cached["std"] == std and cached["key"]["seed"] == 5
    # Prove the second load reads the file: change it, forget the in-process copy, load again.
    cached["mean"], cached["std"] = [0.25], [0.5]
    files[0].write_text(json.dumps(cached))
    clear_cache()
    assert load_dataset(spec(seed=5), workspace=tmp_path).normalization() == ([0.25], [0.5])
    # Another seed is another split: its own file, not the edited one.
    clear_cache()
    assert load_dataset(spec(seed=6), workspace=tmp_path).normalization()[0] != [0.25]
    assert len(list((tmp_path / "cache").glob("data-stats-*.json"))) == 2


def test_none_and_explicit_normalization_are_honoured_in_batches(tmp_path):
    raw = load_dataset(spec(normalize="none"), workspace=tmp_path)
    assert raw.normalization() == ([0.0], [1.0])
    x, _ = next(raw.splits["val"].batches(16, shuffle=False))
    expected = raw.splits["val"].images(torch.arange(16)).float() / 255
    assert torch.allclose(x, expected, atol=1e-6)
    table = load_dataset(spec(normalize={"mean": [0.5], "std": [0.25]}), workspace=tmp_path)
    assert table.normalization() == ([0.5], [0.25])
    x, _ = next(table.splits["val"].batches(16, shuffle=False))
    assert torch.allclose(x, (expected - 0.5) / 0.25, atol=1e-6)  # scaling is folded into the normalisation
    assert not list((tmp_path / "cache").glob("data-stats-*.json"))  # neither needed the statistics
    with pytest.raises(JobError, match=r"normalize\.mean: .* 1 channel"):
        load_dataset(spec(normalize={"mean": [0.5, 0.5], "std": [0.2, 0.2]}), workspace=tmp_path)


# -- augmentation -----------------------------------------------------------------------------------


AUGMENTS = [
    {"name": "random_crop", "padding": 2},
    {"name": "hflip", "p": 0.5},
    {"name": "vflip", "p": 0.5},
    {"name": "rotation", "degrees": 40},
    {"name": "color_jitter", "brightness": 0.5, "contrast": 0.5, "saturation": 0.5, "hue": 0.2},
    {"name": "random_erasing", "p": 1.0, "scale": [0.1, 0.3]},
]


@pytest.mark.parametrize("step", AUGMENTS, ids=[s["name"] for s in AUGMENTS])
def test_each_augment_step_draws_per_sample_and_is_reproducible(step):
    image = torch.rand(1, 3, 12, 12, generator=torch.Generator().manual_seed(0))
    batch = image.expand(16, -1, -1, -1).contiguous()  # sixteen copies of one image
    augment = build_augment([step])

    def run(seed):
        return augment(batch.clone(), torch.Generator().manual_seed(seed))

    out = run(1)
    assert out.shape == batch.shape and out.dtype == torch.float32
    assert float(out.min()) >= 0 and float(out.max()) <= 1
    distinct = {tuple(row.flatten().tolist()) for row in out}
    assert len(distinct) > 1  # per sample, not one draw for the batch
    assert torch.equal(run(1), out)
    assert not torch.equal(run(2), out)


def test_augmented_batches_are_reproducible_and_off_for_validation(tmp_path):
    ds = load_dataset(
        spec(normalize="none", augment=[{"name": "rotation", "degrees": 90}, {"name": "hflip"}]),
        workspace=tmp_path,
    )
    train = ds.splits["train"]

    def first(**kw):
        return next(train.batches(32, shuffle=False, **kw))[0]

    plain = train.images(torch.arange(32)).float() / 255
    assert not torch.allclose(first(seed=1), plain)  # train batches are augmented by default
    assert torch.equal(first(seed=1), first(seed=1))
    assert not torch.equal(first(seed=1), first(seed=2))
    assert torch.allclose(first(seed=1, augment=False), plain)
    val_x, _ = next(ds.splits["val"].batches(8, shuffle=False))
    assert torch.allclose(val_x, ds.splits["val"].images(torch.arange(8)).float() / 255)


@pytest.mark.parametrize(
    ("items", "field"),
    [
        ([{"name": "rotation", "degres": 10}], "augment[0].degres"),
        ([{"name": "hflip"}, {"name": "vflip", "p": 2}], "augment[1].p"),
        ([{"name": "color_jitter", "hue": 0.9}], "augment[0].hue"),
        ([{"name": "random_crop", "size": "big"}], "augment[0].size"),
    ],
)
def test_bad_augment_parameters_name_the_parameter(tmp_path, items, field):
    with pytest.raises(JobError) as err:
        load_dataset(spec(augment=items), workspace=tmp_path)
    assert str(err.value).startswith(f"{field}:")


def test_random_crop_larger_than_the_image_is_a_clear_error():
    with pytest.raises(JobError, match=r"augment\[0\]\.size: 20x20 is larger"):
        build_augment([{"name": "random_crop", "size": 20}])(torch.rand(2, 1, 8, 8), torch.Generator())


# -- batching ---------------------------------------------------------------------------------------


def test_batches_cover_every_sample_once_per_epoch_and_shuffle_reproducibly(tmp_path):
    ds = load_dataset(spec(normalize="none"), workspace=tmp_path)
    train = ds.splits["train"]
    images = all_images(train)
    key = {bytes(img.numpy().tobytes()): int(label) for img, label in zip(images, train.labels)}

    def epoch(e, seed=7, **kw):
        return list(train.batches(100, shuffle=True, seed=seed, epoch=e, **kw))

    batches = epoch(0)
    assert [len(y) for _, y in batches] == [100] * 14 + [37]
    rows = [(x * 255).round().to(torch.uint8) for x, _ in batches]
    got = sorted(bytes(img.numpy().tobytes()) for batch in rows for img in batch)
    assert got == sorted(bytes(img.numpy().tobytes()) for img in images)  # each sample exactly once
    for x, y in zip(rows, (y for _, y in batches)):  # labels travel with their images
        assert all(key[bytes(img.numpy().tobytes())] == int(label) for img, label in zip(x, y))
    assert torch.equal(torch.cat([y for _, y in epoch(0)]), torch.cat([y for _, y in batches]))
    assert not torch.equal(torch.cat([y for _, y in epoch(1)]), torch.cat([y for _, y in batches]))
    assert [len(y) for _, y in epoch(0, drop_last=True)] == [100] * 14
    ordered = torch.cat([y for _, y in train.batches(100, shuffle=False)])
    assert torch.equal(ordered, train.labels)


def test_batches_with_prefetch_workers_match_batches_without(tmp_path):
    plain = load_dataset(spec(normalize="none"), workspace=tmp_path).splits["val"]
    workers = load_dataset(spec(normalize="none", num_workers=2), workspace=tmp_path).splits["val"]
    a = list(plain.batches(32, shuffle=True, seed=3))
    b = list(workers.batches(32, shuffle=True, seed=3))
    assert len(a) == len(b) and all(
        torch.equal(x1, x2) and torch.equal(y1, y2) for (x1, y1), (x2, y2) in zip(a, b)
    )
    iterator = workers.batches(8, shuffle=False)
    next(iterator)
    iterator.close()  # stopping early must not hang on the prefetch thread


def test_loaded_datasets_are_cached_and_shared_between_threads(tmp_path):
    clear_cache()
    results = []
    threads = [
        threading.Thread(
            target=lambda: results.append(load_dataset(spec(name="fake", size=300), workspace=tmp_path))
        )
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results[0].core is results[1].core  # loaded once, not twice
    # augment and normalize change the view only: the same decoded images are reused.
    view = load_dataset(spec(name="fake", size=300, normalize="none", augment=["hflip"]), workspace=tmp_path)
    assert view.core is results[0].core and view.normalization() == ([0.0] * 3, [1.0] * 3)
    load_dataset(spec(name="fake", size=301), workspace=tmp_path)
    load_dataset(spec(name="fake", size=302), workspace=tmp_path)  # an LRU of two: the first is gone
    assert load_dataset(spec(name="fake", size=300), workspace=tmp_path).core is not results[0].core


def test_digits_read_from_sklearns_file_are_sklearns_digits():
    # The loader reads the CSV scikit-learn ships rather than importing sklearn (seconds): the same pixels and
    # labels.
    from sklearn.datasets import load_digits

    from workbench.worker.data.builtin import _digits_arrays

    images, targets = _digits_arrays()
    reference = load_digits()
    assert images.shape == (1797, 8, 8) and targets.dtype == np.int64
    np.testing.assert_array_equal(images, reference.images)
    np.testing.assert_array_equal(targets, reference.target)

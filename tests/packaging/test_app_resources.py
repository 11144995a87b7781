"""The resources the package carries: icons, desktop entry and sample specs, found through
importlib.resources."""

from __future__ import annotations

import configparser
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from workbench import app_resources
from workbench.app_resources import (
    ICON_SIZES,
    SAMPLE_SPECS,
    desktop_entry_text,
    example_specs,
    icon_path,
    sample_spec,
    sample_specs,
    spec_summary,
)
from workbench.specs import apply_overrides, spec_for

REPO = Path(__file__).resolve().parents[2]
NEEDS_SOURCE_RUN = ("quantize", "export", "bench")


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def test_the_top_level_resources_folder_is_the_packaged_one():
    # One copy of each file: the repository's resources/ is a link to the package's, so they cannot drift
    # apart.
    assert (REPO / "resources").resolve() == (REPO / "workbench" / "resources").resolve()
    assert (REPO / "resources" / "torch-workbench.desktop").is_file()


def test_resources_come_from_the_package_not_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    package = Path(app_resources.__file__).resolve().parent
    for path in (icon_path(), icon_path(32), *sample_specs()):
        assert path.is_absolute() and package in path.resolve().parents


def test_icons_exist_at_every_size_and_the_svg_is_an_svg():
    for size in ICON_SIZES:
        assert png_size(icon_path(size)) == (size, size)
    root = ET.parse(icon_path()).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert root.get("viewBox") == "0 0 256 256"


def test_icon_path_refuses_a_size_it_does_not_have():
    with pytest.raises(ValueError, match="16, 24, 32"):
        icon_path(20)


def test_the_pngs_are_rendered_from_the_current_svg(qapp, tmp_path):
    """Editing the SVG without running packaging/render_icons.py fails here."""
    sys.path.insert(0, str(REPO / "packaging"))
    try:
        import render_icons
    finally:
        sys.path.remove(str(REPO / "packaging"))
    from PySide6.QtGui import QImage

    for size in (16, 64, 256):
        out = tmp_path / f"{size}.png"
        render_icons.render(icon_path(), size, out)
        fresh, shipped = QImage(str(out)), QImage(str(icon_path(size)))
        assert (fresh.width(), fresh.height()) == (shipped.width(), shipped.height()) == (size, size)
        fresh_bytes = fresh.convertToFormat(QImage.Format_RGBA8888).constBits().tobytes()
        shipped_bytes = shipped.convertToFormat(QImage.Format_RGBA8888).constBits().tobytes()
        # A different Qt may antialias an edge a shade differently; a changed drawing moves far more.
        mean_diff = sum(abs(a - b) for a, b in zip(fresh_bytes, shipped_bytes)) / len(fresh_bytes)
        assert mean_diff < 2.0, (
            f"{icon_path(size).name} differs from the SVG (mean {mean_diff:.2f}); re-render it"
        )


def test_the_shipped_desktop_entry_is_valid():
    text = desktop_entry_text()
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # keys are case-sensitive
    parser.read_string(text)
    entry = parser["Desktop Entry"]
    assert entry["Type"] == "Application"
    assert entry["Name"] == "Torch Workbench"
    assert entry["Icon"] == app_resources.APP_ID
    assert entry["Exec"] == "workbench gui"
    assert entry["Terminal"] == "false"
    assert entry["Categories"].endswith(";")
    if shutil.which("desktop-file-validate"):
        proc = subprocess.run(
            ["desktop-file-validate", str(app_resources.resource_path("torch-workbench.desktop"))],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def test_the_bundled_examples_are_offered_and_read_as_train_specs_with_their_files_beside_them():
    from workbench.specs import TrainSpec

    examples = example_specs()
    assert [p.parent.name for p in examples] == [
        "diabetes_regression",
        "digit_attributes",
        "digits_lightning",
        "names_transformer",
        "shapes_detection",
        "shapes_segmentation",
    ]
    for path in examples:
        spec = TrainSpec.load(path)  # relative file: and lightning: paths are anchored beside the spec
        for name in (spec.dataset.name, spec.model.name):
            scheme, _, rest = name.partition(":")
            if scheme in ("file", "lightning"):
                assert Path(rest.rpartition(":")[0]).is_file(), name
        assert spec_summary(path), path  # its opening comment is the menu's tooltip


def test_every_sample_spec_is_listed_in_menu_order():
    names = [path.name for path in sample_specs()]
    assert names == list(SAMPLE_SPECS)
    assert names[0] == "train-digits.toml"
    assert [p.name for p in sample_specs("quantize")] == ["quantize-w8a8.toml", "quantize-w4a8.toml"]
    assert sample_spec("train-digits") == sample_spec("train-digits.toml") == sample_specs()[0]
    with pytest.raises(FileNotFoundError, match="choose one of"):
        sample_spec("train-imagenet")


@pytest.mark.parametrize("name", list(SAMPLE_SPECS))
def test_each_sample_spec_parses_with_its_spec_class(name):
    verb = SAMPLE_SPECS[name]
    path = sample_spec(name)
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    # The opening comment says what it does, how long it takes on a CPU and how to run it.
    header = []
    for line in lines:
        if not line.startswith("#"):
            break
        header.append(line)
    assert len(header) >= 3, f"{name}: the opening comment is too short"
    # The first line stands alone: File ▸ Open spec shows it as the sample's tooltip.
    assert app_resources.spec_summary(path) == header[0].lstrip("# ") and header[0].endswith("."), header[0]
    assert any("CPU" in line for line in header), f"{name}: say how long it takes on a CPU"
    assert any(f"workbench {verb} {name}" in line for line in header), (
        f"{name}: show the command that runs it"
    )

    cls = spec_for(verb)
    spec = cls.load(path)  # as the command line reads it
    assert spec == cls.from_toml(text)
    if verb in NEEDS_SOURCE_RUN:
        assert spec.source.run == "", (
            f"{name}: leave source.run for --set, so the sample runs in any workspace"
        )
        assert "--set source.run=<run id>" in "\n".join(header)
        overridden = cls.from_dict(apply_overrides(spec.to_dict(), ["source.run=20261122-0000"], cls))
        assert overridden.source.run == "20261122-0000"
    else:
        assert spec.device == "auto"


def test_the_sample_specs_mean_what_their_names_say():
    train = spec_for("train").load(sample_spec("train-digits"))
    assert (train.dataset.name, train.model.name) == ("digits", "cnn")
    cifar = spec_for("train").load(sample_spec("train-cifar10-resnet18"))
    assert (cifar.dataset.name, cifar.model.name) == ("cifar10", "torchvision:resnet18")
    w8 = spec_for("quantize").load(sample_spec("quantize-w8a8"))
    assert (w8.weights.bits, w8.activations.bits, w8.adaround.enabled) == (8, 8, False)
    w4 = spec_for("quantize").load(sample_spec("quantize-w4a8"))
    assert (w4.weights.bits, w4.activations.bits, w4.cle, w4.adaround.enabled) == (4, 8, True, True)
    assert spec_for("export").load(sample_spec("export-onnx")).format == "onnx"
    bench = spec_for("bench").load(sample_spec("bench-cpu"))
    assert bench.device == "cpu" and "eager" in bench.backends


def test_resources_and_desktop_import_neither_torch_nor_qt():
    code = (
        "import sys, workbench.app_resources, workbench.desktop\n"
        "heavy = {'torch', 'PySide6', 'numpy'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_spec_verb_knows_the_samples_names_and_full_spec_files(tmp_path):
    from workbench.app_resources import spec_verb
    from workbench.errors import SpecError

    assert [spec_verb(path) for path in sample_specs()] == list(SAMPLE_SPECS.values())
    for verb in ("train", "quantize", "export", "bench"):
        run = tmp_path / verb
        run.mkdir()
        (run / "spec.toml").write_text(spec_for(verb)().to_toml())  # as a run folder holds it: every field
        assert spec_verb(run / "spec.toml") == verb
    loose = tmp_path / "mine.toml"
    loose.write_text('[source]\nrun = "20261122-0000"\n')  # quantize, export and bench all take this
    with pytest.raises(SpecError, match=r"fits several jobs \(quantize, export, bench\)"):
        spec_verb(loose)
    named = tmp_path / "quant-mine.toml"
    named.write_text(loose.read_text())
    assert spec_verb(named) == "quantize"
    broken = tmp_path / "broken.toml"
    broken.write_text("epochs = \n")
    with pytest.raises(SpecError, match="line 1: invalid TOML"):
        spec_verb(broken)

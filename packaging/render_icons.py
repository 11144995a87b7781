"""Render the app icon's PNGs from its SVG: workbench/resources/icons/torch-workbench-<N>.png for every size.

Run after editing the SVG and commit the PNGs with it:  .venv/bin/python packaging/render_icons.py
Uses Qt's own SVG renderer (PySide6 is already installed), so no Inkscape, rsvg or ImageMagick is needed; the
SVG keeps to SVG Tiny 1.2 (paths, circles, linear gradients) so every renderer draws it the same.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ICONS = Path(__file__).resolve().parent.parent / "workbench" / "resources" / "icons"
SVG = ICONS / "torch-workbench.svg"
SIZES = (16, 24, 32, 48, 64, 128, 256, 512)


def render(svg: Path, size: int, out: Path) -> None:
    from PySide6.QtCore import QRectF, Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"{svg}: Qt cannot read this SVG")
    # Straight (not premultiplied) ARGB, as a PNG stores it: converting from premultiplied afterwards turns
    # the colour of nearly transparent edge pixels into noise.
    image = QImage(size, size, QImage.Format_ARGB32)
    image.fill(Qt.transparent)
    painter = QPainter(image)
    painter.setRenderHints(QPainter.Antialiasing | QPainter.SmoothPixmapTransform)
    renderer.render(painter, QRectF(0, 0, size, size))
    painter.end()
    if not image.save(str(out), "PNG"):
        raise SystemExit(f"{out}: could not write the PNG")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--svg", type=Path, default=SVG, help="the SVG to render (default: the app icon)")
    parser.add_argument("--out", type=Path, default=ICONS, help="folder for torch-workbench-<N>.png")
    parser.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",")],
        default=list(SIZES),
        help="comma-separated sizes in pixels (default: %(default)s)",
    )
    args = parser.parse_args(argv)

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # no screen needed
    from PySide6.QtGui import QGuiApplication

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841 (Qt wants one for fonts/images)
    args.out.mkdir(parents=True, exist_ok=True)
    for size in args.sizes:
        out = args.out / f"torch-workbench-{size}.png"
        render(args.svg, size, out)
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

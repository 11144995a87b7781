#!/usr/bin/env bash
# Offline install check: build the wheel, install it with no network into a fresh virtual environment, then run
# `workbench --version`, find the sample specs through importlib.resources, write the desktop entry into a
# temporary XDG folder, and train the installed train-digits.toml for one epoch headless. Exits non-zero on any
# failure. About a minute on two CPU cores. Usage: bash packaging/offline_check.sh   (KEEP=1 keeps its folder)
#
# The wheel goes in with `pip install --no-index --no-deps`, so nothing is downloaded. Its dependencies (torch,
# PySide6, ...) are far too big to rebuild into a wheelhouse every run, so the fresh venv borrows them from .venv:
# a .pth file points at a folder of links to .venv's site-packages minus this project's own editable install, so
# `import workbench` can only find the wheel's copy (checked below), and `pip check` then proves the wheel's
# declared requirements are met by what is there.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-$ROOT/.venv/bin/python}
START=$SECONDS
WORK=$(mktemp -d "${TMPDIR:-/tmp}/wb-offline-check.XXXXXX")
if [ -z "${KEEP:-}" ]; then trap 'rm -rf "$WORK"' EXIT; fi
unset PYTHONPATH PYTHONHOME PIP_INDEX_URL PIP_EXTRA_INDEX_URL
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1  # any attempt to reach an index fails

step() { printf '[offline-check %3ds] %s\n' $((SECONDS - START)) "$*" >&2; }
fail() { printf 'offline-check: FAILED: %s\n' "$*" >&2; exit 1; }

[ -x "$PY" ] || fail "$PY not found; run bash packaging/setup.sh first"
"$PY" -c "import build" 2>/dev/null || fail "the 'build' package is missing from $PY; install the dev extras: $PY -m pip install -e '.[dev]'"
VERSION=$("$PY" -c "
try:
    import tomllib
except ImportError:
    import tomli as tomllib
print(tomllib.load(open('pyproject.toml', 'rb'))['project']['version'])")
step "torch-workbench $VERSION; working in $WORK"

# 1. Build from a copy of the sources a checkout has (tracked, plus new files git does not ignore): stale build/
#    or egg-info leftovers in the tree cannot leak into the wheel, and the tree is left untouched.
mkdir -p "$WORK/src" "$WORK/dist"
if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$ROOT" ls-files -z --cached --others --exclude-standard -- pyproject.toml README.md workbench \
        | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
        | tar -C "$ROOT" --null -T - -cf - | tar -C "$WORK/src" -xf -
else
    cp -r pyproject.toml README.md workbench "$WORK/src/"
fi
step "building the wheel (no isolation: .venv's setuptools, no download)"
"$PY" -m build --wheel --no-isolation --outdir "$WORK/dist" "$WORK/src" >"$WORK/build.log" 2>&1 \
    || { tail -30 "$WORK/build.log" >&2; fail "python -m build"; }
WHEEL=$(ls "$WORK"/dist/torch_workbench-"$VERSION"-*.whl 2>/dev/null | head -1)
[ -n "$WHEEL" ] || fail "no wheel for version $VERSION in $WORK/dist"
step "built $(basename "$WHEEL") ($(du -k "$WHEEL" | cut -f1) KiB)"

# 2. The wheel carries the desktop entry, every icon and every sample spec.
"$PY" - "$WHEEL" <<'EOF' || fail "the wheel is missing resources"
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
want = ["workbench/resources/torch-workbench.desktop", "workbench/resources/icons/torch-workbench.svg"]
want += [f"workbench/resources/icons/torch-workbench-{n}.png" for n in (16, 24, 32, 48, 64, 128, 256, 512)]
want += [f"workbench/resources/specs/{n}.toml" for n in ("train-digits", "train-cifar10-resnet18", "quantize-w8a8",
                                                          "quantize-w4a8", "export-onnx", "bench-cpu")]
missing = [n for n in want if n not in names]
for n in missing:
    print(f"  missing from the wheel: {n}", file=sys.stderr)
sys.exit(1 if missing else 0)
EOF
step "the wheel holds the desktop entry, 8 PNGs and the SVG, and 6 sample specs"

# 3. A fresh venv from the same Python, the wheel installed with no index, dependencies borrowed from .venv.
VENV=$WORK/venv
"$PY" -m venv --without-pip "$VENV"
SITE=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
NEW_SITE=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
mkdir -p "$WORK/deps"
for entry in "$SITE"/*; do
    case "$(basename "$entry")" in
        workbench | torch_workbench-* | __editable__* | *.pth | __pycache__) ;;  # this project, and path hooks
        *) ln -s "$entry" "$WORK/deps/" ;;
    esac
done
echo "$WORK/deps" >"$NEW_SITE/zz-borrowed-from-dot-venv.pth"
"$PY" -m pip --python "$VENV/bin/python" install -q --no-index --no-deps "$WHEEL" >"$WORK/pip.log" 2>&1 \
    || { cat "$WORK/pip.log" >&2; fail "pip install --no-index of the wheel"; }
if ! "$PY" -m pip --python "$VENV/bin/python" check >"$WORK/check.log" 2>&1; then
    # Only this wheel's own requirements decide; another package's quarrel in .venv is reported, not fatal.
    if grep -i '^torch-workbench ' "$WORK/check.log" >&2; then fail "pip check: the wheel's requirements are not met"; fi
    sed 's/^/  pip check (not ours): /' "$WORK/check.log" >&2
fi
step "installed into a fresh venv with pip --no-index; pip check: $(head -1 "$WORK/check.log")"

# 4. Run the installed app from a neutral folder, so nothing can come from the checkout.
mkdir -p "$WORK/run" && cd "$WORK/run"
GOT=$("$VENV/bin/workbench" --version) || fail "workbench --version"
[ "$GOT" = "workbench $VERSION" ] || fail "workbench --version said '$GOT', expected 'workbench $VERSION'"
step "workbench --version: $GOT"

SPEC=$("$VENV/bin/python" - "$VENV" <<'EOF'
import sys
from pathlib import Path
import workbench
from workbench.app_resources import desktop_entry_text, icon_path, sample_spec, sample_specs
venv = Path(sys.argv[1]).resolve()
for path in (Path(workbench.__file__), icon_path(), icon_path(16), *sample_specs()):
    if venv not in path.resolve().parents:
        sys.exit(f"{path} does not come from the installed wheel in {venv}")
assert desktop_entry_text().startswith("[Desktop Entry]")
print(sample_spec("train-digits"))
EOF
) || fail "the installed package does not find its own resources"
step "the installed package finds its resources: $SPEC"

export XDG_DATA_HOME=$WORK/xdg
"$VENV/bin/python" -c "from workbench.desktop import install; install()" || fail "desktop install"
ENTRY=$XDG_DATA_HOME/applications/torch-workbench.desktop
grep -qx "Exec=$VENV/bin/workbench gui" "$ENTRY" || { cat "$ENTRY" >&2; fail "the desktop entry's Exec is not this install's workbench"; }
if command -v desktop-file-validate >/dev/null; then
    desktop-file-validate "$ENTRY" || fail "desktop-file-validate $ENTRY"
fi
step "desktop install wrote a valid entry with Exec=$VENV/bin/workbench gui"

step "training the installed train-digits.toml for one epoch, headless"
"$VENV/bin/workbench" train "$SPEC" --set epochs=1 --json --workspace "$WORK/workspace" >"$WORK/train.json" 2>"$WORK/train.log" \
    || { tail -20 "$WORK/train.log" >&2; cat "$WORK/train.json" >&2; fail "workbench train $SPEC"; }
"$PY" - "$WORK/train.json" <<'EOF' || fail "the training result is not a finished run"
import json, sys
result = json.load(open(sys.argv[1]))
assert result["status"] == "done", result
print(f"  run {result['run_dir']}: status {result['status']}, best val accuracy {result.get('best_val_accuracy')}",
      file=sys.stderr)
EOF
step "offline check passed"

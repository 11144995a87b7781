"""Lightning's checkpoint files written the workbench's way: atomically (temp file, fsync, rename, with the
disk-full message of every other checkpoint) and read back with weights_only=True only, so a .ckpt that needs
code to unpickle is refused with an explanation. Imports lightning: load it only on the Lightning route.
"""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.plugins.io import TorchCheckpointIO

from workbench.errors import CheckpointError, JobError
from workbench.worker.checkpoints import load_state_dict, save_state_dict


class WorkbenchCheckpointIO(TorchCheckpointIO):
    def __init__(self, run_dir: Path):
        super().__init__()
        self.run_dir = Path(run_dir)  # messages name checkpoints relative to the run: checkpoints/last.ckpt

    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            name = path.relative_to(self.run_dir).as_posix()
        except ValueError:
            name = str(path)
        save_state_dict(checkpoint, path, name=name)

    def load_checkpoint(self, path, map_location=None, weights_only=None):
        try:
            return load_state_dict(path)
        except CheckpointError as exc:
            raise JobError(f"cannot resume: {exc}") from None

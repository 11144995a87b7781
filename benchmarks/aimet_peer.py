"""aimet-torch's W4A8 with AdaRound on a workbench training run, as a peer row for
benchmarks/busy_neighbour.py (issue #22, part 4): the same model and checkpoint, the same calibration images
(256 training samples, batch 32) and the same held-out split, quantized the way AIMET's own examples do it
(BatchNorm folding, AdaRound at W4 for the given iterations, then QuantizationSimModel W4A8 with the AdaRound
encodings frozen and activation encodings computed on the calibration set). Prints one JSON line: seconds (the
whole process, imports included, as the workbench row is timed) and the held-out accuracy.

aimet-torch is a benchmark-only peer, never a dependency: run this with a Python that has it, e.g. a venv that
sees the workbench's packages through a .pth file and `pip install aimet-torch`, and PYTHONPATH pointing at
this checkout.

    AIMET_PYTHON/bin/python benchmarks/aimet_peer.py --run RUN_DIR --workspace WS [--iterations 300]
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import argparse  # noqa: E402 (imports are timed, as the workbench process's are)
import json  # noqa: E402
import logging  # noqa: E402
import tempfile  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True)
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--iterations", type=int, default=300)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)

    from types import SimpleNamespace

    from aimet_common.defs import QuantScheme
    from aimet_torch.adaround.adaround_weight import Adaround, AdaroundParameters
    from aimet_torch.batch_norm_fold import fold_all_batch_norms
    from aimet_torch.quantsim import QuantizationSimModel

    from workbench.specs import DataSpec, ModelSpec, SourceSpec
    from workbench.worker.data import load_dataset
    from workbench.worker.models import build_model
    from workbench.worker.quant.data import calibration_batches, evaluate, held_out_batches
    from workbench.worker.source import resolve

    ctx = SimpleNamespace(workspace=Path(args.workspace), log=lambda *a: None)
    origin = resolve(SourceSpec(run=args.run), ModelSpec(), DataSpec(), ctx, job="a training run")
    origin.model = origin.with_weights()
    dataset = load_dataset(origin.dataset)
    dataset.normalization()
    model = build_model(origin.model, input_shape=dataset.sample_shape, pretrained=False).eval()
    calibration = calibration_batches(
        dataset, 256, 0, batch_size=32, device=torch.device("cpu"), log=lambda *a: None
    )
    held_out = held_out_batches(dataset, 0, batch_size=128, device=torch.device("cpu"))
    batches = [(x, y) for x, y in calibration]
    dummy = batches[0][0][:1]

    fold_all_batch_norms(model, input_shapes=tuple(dummy.shape))
    with tempfile.TemporaryDirectory() as folder:
        params = AdaroundParameters(
            data_loader=batches,
            num_batches=len(batches),
            default_num_iterations=args.iterations,
            forward_fn=lambda m, batch: m(batch[0]),
        )
        model = Adaround.apply_adaround(
            model,
            dummy,
            params,
            path=folder,
            filename_prefix="peer",
            default_param_bw=4,
            default_quant_scheme=QuantScheme.post_training_tf_enhanced,
        )
        sim = QuantizationSimModel(
            model,
            dummy_input=dummy,
            quant_scheme=QuantScheme.post_training_tf_enhanced,
            default_param_bw=4,
            default_output_bw=8,
        )
        sim.set_and_freeze_param_encodings(encoding_path=str(Path(folder) / "peer.encodings"))

        def calibrate(m, _):
            with torch.no_grad():
                for x, _y in batches:
                    m(x)

        sim.compute_encodings(calibrate, None)
        accuracy = evaluate(sim.model, held_out)["accuracy"]
    print(
        json.dumps(
            {
                "seconds": round(time.perf_counter() - STARTED, 3),
                "accuracy": accuracy,
                "threads": torch.get_num_threads(),
            }
        )
    )


if __name__ == "__main__":
    main()

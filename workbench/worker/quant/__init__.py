"""The post-training quantization engine (Nagel et al., "A White Paper on Neural Network Quantization",
arXiv 2106.08295) on plain torch ops: quantizers, range estimators, BN folding, CLE, AdaRound, bias
correction, the simulation model, the per-layer analysis and `run_quantization(QuantSpec, ctx)`. Imports
torch; never Qt.
"""

from workbench.worker.quant.pipeline import run_quantization
from workbench.worker.quant.quantizer import (
    Grid,
    QParams,
    dequantize,
    fake_quant,
    qparams_from_range,
    quantize,
)
from workbench.worker.quant.ranges import (
    RANGE_ESTIMATORS,
    Observed,
    estimate,
    get_range_estimator,
    list_range_estimators,
    register_range_estimator,
)

__all__ = [
    "RANGE_ESTIMATORS",
    "Grid",
    "Observed",
    "QParams",
    "dequantize",
    "estimate",
    "fake_quant",
    "get_range_estimator",
    "list_range_estimators",
    "qparams_from_range",
    "quantize",
    "register_range_estimator",
    "run_quantization",
]

"""`bench.latency`: latency, throughput and peak memory of a model on one or more backends and batch sizes
(the engine is workbench.worker.bench). torch loads inside the task, not at import. Never imports Qt.
"""

from __future__ import annotations

from workbench.specs import BenchSpec
from workbench.worker.registry import register_task


@register_task("bench.latency", kind="job", spec=BenchSpec)
def bench_latency(spec: BenchSpec, ctx):
    """Measure latency percentiles, throughput and peak memory per backend and batch size."""
    from workbench.worker.bench.engine import run_bench

    return run_bench(spec, ctx)

"""Speed and fidelity of the MSE range search against the search it replaced (coarse 1/100, then 1/1000 around
the three best coarse candidates), both run in this process on the same tensors: time ratio new / old, and
each one's error above a 1/20000 exhaustive search.

Tensors: the per-channel weights of torchvision resnet18 (random weights), and activations as the task sees
them (every calibration value in a 2^15-bin histogram): lumpy ones (49 % exact zeros, ~10k distinct values in
narrow clusters) and smooth ones (a ReLU'd and a signed Laplace).

    .venv/bin/python benchmarks/mse_search.py [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from backends import random_resnet18

from workbench.worker.quant.histogram import StreamingHistogram
from workbench.worker.quant.quantizer import Grid
from workbench.worker.quant.ranges import _chunk, binned_squared_error, grid_search, squared_error


def old_search(
    objective: Callable,
    lo: torch.Tensor,
    hi: torch.Tensor,
    chunk: int = 1,
    coarse: int = 100,
    fine: int = 20,
    top: int = 3,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The replaced search, verbatim but for its docstring: it steps over dips narrower than 1/1000."""

    def evaluate(alphas: torch.Tensor) -> torch.Tensor:
        return torch.cat([objective(a * lo, a * hi) for a in alphas.split(chunk)])

    rows = lo.numel()
    coarse_alphas = (torch.arange(1, coarse + 1, dtype=lo.dtype) / coarse).unsqueeze(1).expand(-1, rows)
    coarse_errors = evaluate(coarse_alphas)
    centres = coarse_alphas.gather(0, coarse_errors.argsort(dim=0)[:top])
    offsets = (2 * torch.arange(fine + 1, dtype=lo.dtype) / fine - 1) / coarse
    fine_alphas = (centres.unsqueeze(1) + offsets.view(1, -1, 1)).reshape(-1, rows).clamp(1e-4, 1.0)
    alphas = torch.cat([coarse_alphas, fine_alphas])
    errors = torch.cat([coarse_errors, evaluate(fine_alphas)])
    best = alphas.gather(0, errors.argmin(dim=0, keepdim=True))[0]
    return best * lo, best * hi


def lumpy(seed: int, n: int = 200_000) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    centres = torch.rand(40, generator=g) * 0.6 + 0.4
    pool = centres[torch.randint(0, 40, (14_000,), generator=g)] + torch.randn(14_000, generator=g) * 8e-4
    pool = pool.clamp(min=1e-3 / 6) * 6
    weights = torch.rand(14_000, generator=g) ** 3
    positive = pool[torch.multinomial(weights, n - int(n * 0.49), replacement=True, generator=g)]
    return torch.cat([torch.zeros(int(n * 0.49)), positive])


def activations() -> list[tuple[str, torch.Tensor, Grid]]:
    g = torch.Generator().manual_seed(0)
    laplace = torch.distributions.Laplace(0.0, 1.0).sample((2**17,))
    out = [(f"lumpy {seed}", lumpy(seed), Grid.for_activations(8, False, True)) for seed in range(6)]
    out.append(("relu laplace", laplace.clamp(min=0), Grid.for_activations(8, False, True)))
    signed = laplace * (1 + torch.rand(1, generator=g))
    out.append(("signed laplace", signed, Grid.for_activations(8, False, False)))
    return out


def exhaustive(values: torch.Tensor, grid: Grid, steps: int = 20_000) -> float:
    distinct, counts = torch.unique(values.double(), return_counts=True)
    objective = binned_squared_error(distinct.unsqueeze(0), counts.double().unsqueeze(0), grid)
    lo, hi = values.min().double().reshape(1), values.max().double().reshape(1)
    alphas = (torch.arange(1, steps + 1, dtype=torch.float64) / steps).unsqueeze(1)
    per_call = max(1, 2**22 // len(distinct))
    return float(torch.cat([objective(a * lo, a * hi) for a in alphas.split(per_call)]).min())


def timed(search: Callable, problems: list[tuple]) -> tuple[float, list[tuple[torch.Tensor, torch.Tensor]]]:
    started = time.perf_counter()
    ranges = [search(objective, lo, hi, chunk=chunk) for objective, lo, hi, chunk in problems]
    return time.perf_counter() - started, ranges


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the task runs one per tensor)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    weight_problems = []
    for module in random_resnet18().modules():
        if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
            rows = module.weight.detach().reshape(module.weight.shape[0], -1)
            grid = Grid.for_weights(8, True)
            lo, hi = rows.min(1).values, rows.max(1).values
            weight_problems.append((squared_error(rows, grid), lo, hi, _chunk(rows)))
    acts, act_problems = activations(), []
    for _, values, grid in acts:
        histogram = StreamingHistogram()
        histogram.update(values)
        centroids, counts = histogram.centroids()
        act_problems.append(
            (
                binned_squared_error(centroids.unsqueeze(0), counts.unsqueeze(0), grid),
                values.min().reshape(1),
                values.max().reshape(1),
                _chunk(centroids, 2),
            )
        )
    for label, problems in (
        ("resnet18 weights, per channel, W8", weight_problems),
        ("activations (histogram), A8", act_problems),
    ):
        old_s, new_s = [], []
        for _ in range(args.repeats):  # interleaved, so drifting machine load hits both alike
            old_s.append(timed(old_search, problems)[0])
            new_s.append(timed(grid_search, problems)[0])
        old, new = statistics.median(old_s), statistics.median(new_s)
        print(f"{label:<36} old {old:7.3f} s  new {new:7.3f} s  new / old {new / old:5.2f}x")
    _, old_ranges = timed(old_search, act_problems)
    _, new_ranges = timed(grid_search, act_problems)
    print("error above the exhaustive best (1/20000 grid, every value):   old      new")
    for (name, values, grid), old, new in zip(acts, old_ranges, new_ranges):
        best = exhaustive(values, grid)
        objective = squared_error(values.double().reshape(1, -1), grid)
        errors = [float(objective(lo.double(), hi.double())[0]) / best - 1 for lo, hi in (old, new)]
        print(f"  {name:<58} {errors[0]:7.2%}  {errors[1]:7.2%}")


if __name__ == "__main__":
    main()

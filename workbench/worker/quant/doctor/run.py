"""The doctor's stage after the ladder: diagnose every layer, measure what each costs, try the fixes of the
worst `max_findings` findings, and with doctor.apply keep the verified ones round by round; returns the
`doctor` block."""

from __future__ import annotations

import math

import torch

from workbench.worker.objectives.base import json_safe
from workbench.worker.quant.data import evaluate
from workbench.worker.quant.doctor import trial
from workbench.worker.quant.doctor.diagnose import diagnose, low_bits_sensitive
from workbench.worker.quant.doctor.findings import Finding
from workbench.worker.quant.doctor.remedies import NotApplicable

MIN_GAIN_DB = 0.1  # a gain below this is measurement noise, not a fix
PREFER_WITHIN_DB = 0.5  # a fix listed earlier (function-preserving first) wins over a later one this close
# The monitor may fall this share of the FP32 model's value (a few held-out samples of accuracy) when the
# logits measurably gain: the SQNR over every logit is the steadier measure, the monitor a guard against a
# real loss.
MONITOR_SLACK = 0.01
COST_GROUPS = 64  # measure every group's cost up to this many groups; above, only the findings' groups
COST_SAMPLES = 512  # held-out samples each group's cost is measured on


def _sqnr(value) -> float:
    return -math.inf if value is None else float(value)


class Doctor:
    """One diagnosis: the job, its float graph, the baseline trial and the measured trials by fix key."""

    def __init__(self, job):
        self.job = job
        self.spec = job.spec.doctor
        metric = job.ladder.metric
        self.higher = metric is None or bool(metric["higher_is_better"])
        self.monitor_name = "accuracy" if metric is None else metric.get("label", metric["name"])
        self.float_gm = trial.float_graph(job.sim)
        self.trials: dict[str, dict | None] = {}
        self.kept: list[trial.Change] = []  # the fixes apply() took, in order
        self.baseline = trial.quantize(job, [], self.float_gm)

    def better(self, new: dict, old: dict, min_db: float = MIN_GAIN_DB) -> bool:
        """More logit SQNR by min_db, and a monitor no worse than MONITOR_SLACK of the FP32 model's."""
        monitor_gain = (new["monitor"] - old["monitor"]) * (1 if self.higher else -1)
        if math.isnan(monitor_gain):
            monitor_gain = 0.0
        slack = MONITOR_SLACK * abs(float(self.job.fp32["accuracy"]))
        return _sqnr(new["sqnr_db"]) - _sqnr(old["sqnr_db"]) > min_db and monitor_gain >= -slack

    def costs(self, groups: list[str]) -> dict[str, float]:
        """dB of logit SQNR each group costs: what leaving it float gains on the ladder's quantized model,
        on the first COST_SAMPLES held-out samples (logits only: no monitor, so no validation loop)."""
        from workbench.worker.quant.pipeline import _logit_sqnr

        job, sim = self.job, self.job.sim
        batches = job.held_out.head(min(COST_SAMPLES, job.held_out.samples))
        reference = job.fp32["logits"][: batches.samples]

        def sqnr() -> float:
            logits = evaluate(sim, batches, job.ctx.check_stop, job.objective)["logits"]
            return _sqnr(_logit_sqnr(reference, logits))

        costs = {}
        with sim.keeping(), torch.no_grad():
            sim.all()
            whole = sqnr()
            for k, group in enumerate(groups):
                job.stages.within("doctor", k, len(groups) * 3, f"what {group} costs")
                sim.set_groups([g for g in sim.groups if g != group])
                costs[group] = sqnr() - whole
        return {g: (c if math.isfinite(c) else 0.0) for g, c in costs.items()}

    def attempt(self, changes: list[trial.Change]) -> dict | None:
        """The trial of `changes` (None where a fix does not fit the graph), each distinct set measured
        once."""
        key = "|".join(f"{c.key}:{c.label}" for c in changes)
        if key not in self.trials:
            try:
                self.trials[key] = trial.quantize(self.job, changes, self.float_gm)
            except NotApplicable:
                self.trials[key] = None
        return self.trials[key]

    def try_fixes(
        self,
        finding: Finding,
        wanted: set[str] | None,
        kept: list[trial.Change] = (),
        base: dict | None = None,
    ) -> tuple[trial.Change | None, dict | None]:
        """Try each of the finding's candidate fixes on top of `kept` (measured against `base`); the best is
        kept on the finding (an earlier candidate, function-preserving first, wins when it is close)."""
        base, kept = base or self.baseline, list(kept)
        best, best_result = None, None
        for change in finding.candidates:
            if (wanted is not None and change.key not in wanted) or change.key in {c.key for c in kept}:
                continue
            result = self.attempt(kept + [change])
            if result is None:
                continue
            row = {
                "fix": change.label or change.fix,
                "sqnr_db": result["sqnr_db"],
                "monitor": result["monitor"],
            }
            if kept:
                row["with"] = [c.key for c in kept]  # measured on top of the fixes applied before it
            finding.tried.append(row)
            if (
                best_result is None
                or _sqnr(result["sqnr_db"]) > _sqnr(best_result["sqnr_db"]) + PREFER_WITHIN_DB
            ):
                best, best_result = change, result
        if best is not None:
            finding.best, finding.fix = best, best.fix
            finding.gain = {
                "sqnr_db": _sqnr(best_result["sqnr_db"]) - _sqnr(base["sqnr_db"]),
                "monitor": best_result["monitor"] - base["monitor"],
            }
            finding.verified = self.better(best_result, base)
        return best, best_result

    def apply(self, pool: list[Finding], wanted: set[str] | None) -> tuple[dict, list[dict]]:
        """Round by round, apply the fix that gains the most on top of those applied before, then measure the
        rest again on top of it (one cause can hide another); stop when none helps. A fix with no measured
        gain is never applied, even one the spec names."""
        current, kept, applied = self.baseline, [], []
        pool = [f for f in pool if f.best is not None]
        while pool:
            if kept:
                for finding in pool:
                    self.try_fixes(finding, wanted, kept, current)
            ranked = sorted(
                (f for f in pool if f.best is not None and f.verified),
                key=lambda f: f.gain["sqnr_db"],
                reverse=True,
            )
            if not ranked:
                break
            finding = ranked[0]
            change = finding.best
            result = self.attempt(kept + [change])
            said = result["changed"][-1] if change.graph is not None else change.text
            applied.append(
                {
                    "id": finding.id,
                    "layer": finding.layer,
                    "fix": change.fix,
                    "changed": said,
                    "sqnr_db_before": current["sqnr_db"],
                    "sqnr_db_after": result["sqnr_db"],
                }
            )
            self.job.ctx.log(
                f"doctor applied {change.fix} to {finding.layer}: {said}; logit SQNR "
                f"{_sqnr(current['sqnr_db']):.1f} -> {_sqnr(result['sqnr_db']):.1f} dB"
            )
            kept.append(change)
            self.kept = list(kept)
            current = result
            pool = [f for f in pool if f is not finding and f.best is not None and f.best.key != change.key]
        return current, applied


def measure_cle_fixed(
    doctor: Doctor, findings: list[Finding], kept: list[trial.Change] = (), base: dict | None = None
) -> None:
    """The gain of the ladder's CLE for outliers it already equalised: the same recipe (with the fixes
    `kept`) quantized from the graph as it was before CLE, measured against `base` (the same with CLE; the
    baseline by default). Nothing is applied again; the severity is what the layer would cost without it."""
    if not findings:
        return
    base = base or doctor.baseline
    try:
        without = trial.quantize(doctor.job, list(kept), doctor.job.pre_cle["gm"])
    except NotApplicable:  # a kept fix does not fit the graph before CLE: measured on the baseline alone
        without, base = trial.quantize(doctor.job, [], doctor.job.pre_cle["gm"]), doctor.baseline
    gain = _sqnr(base["sqnr_db"]) - _sqnr(without["sqnr_db"])
    for finding in findings:
        finding.tried = [
            {"fix": "none (before CLE)", "sqnr_db": without["sqnr_db"], "monitor": without["monitor"]},
            {"fix": "cle (this run's ladder)", "sqnr_db": base["sqnr_db"], "monitor": base["monitor"]},
        ]
        if kept:  # measured on top of the fixes applied
            for row in finding.tried:
                row["with"] = [c.key for c in kept]
        finding.gain = {
            "sqnr_db": gain if math.isfinite(gain) else None,
            "monitor": base["monitor"] - without["monitor"],
        }
        finding.severity = max(gain, 0.0) if math.isfinite(gain) else 0.0


def _keep_doctored(job, doctor: Doctor, after: dict) -> str:
    """Which model the run saves: the doctor's where it applied fixes (later jobs, export and bench, then
    take the model the doctor rung measured), else the ladder's. A fix that leaves a layer in float cannot
    be saved in the quantized artifact, which quantizes every layer it lists: then the ladder's, said."""
    if not doctor.kept:
        return "ladder"
    floating = sorted(set().union(*(c.floating for c in doctor.kept)))
    if floating:
        job.ctx.log(
            f"doctor: the fixes leave {', '.join(floating)} in float, which the saved quantized model cannot "
            "hold: it is the ladder's; quantize again with those layers in mixed_precision to save them",
            "warning",
        )
        return "ladder"
    job.doctored_sim = after["sim"]
    return "doctor"


def run_doctor(job) -> dict:
    """The `doctor` block of the quantize result; with doctor.apply, the ladder's `doctor` rung too."""
    spec, log = job.spec.doctor, job.ctx.log
    if job.module_level is not None:
        log(
            "doctor: the model is quantized module by module (torch.fx could not trace it); its fixes need "
            "the graph, so there is nothing to try",
            "warning",
        )
        return {"findings": [], "baseline": None, "applied": [], "skipped": "module-level quantization"}
    doctor = Doctor(job)
    if job.spec.adaround.enabled or job.spec.qat.epochs:
        log(
            "doctor: fixes are tried with the ladder's recipe less AdaRound and QAT (too slow to repeat per "
            "fix)"
        )
    findings = diagnose(job, doctor.float_gm)
    groups = (
        job.sim.groups
        if len(job.sim.groups) <= COST_GROUPS
        else sorted({g for f in findings for g in f.groups})
    )
    costs = doctor.costs(groups)
    findings += low_bits_sensitive(job, costs, {g for f in findings for g in f.groups})
    for finding in findings:
        if finding.groups:  # a finding handed in by another check keeps its own severity
            finding.severity = max(costs.get(g, 0.0) for g in finding.groups)
    cle_fixed = [f for f in findings if f.evidence.get("fixed_by") == "cle"]
    if not spec.apply:
        measure_cle_fixed(doctor, cle_fixed)
    findings.sort(key=lambda f: f.severity, reverse=True)
    wanted = set(spec.fixes) or None
    tried = (
        findings[: spec.max_findings]
        if wanted is None
        else [f for f in findings if any(c.key in wanted for c in f.candidates)]
    )
    unmatched = sorted((wanted or set()) - {c.key for f in findings for c in f.candidates})
    if unmatched:
        log(
            f"doctor.fixes: {', '.join(unmatched)} match(es) no finding's fix, so nothing was tried for it; "
            "the findings' fixes are: "
            + (", ".join(sorted({c.key for f in findings for c in f.candidates})) or "none"),
            "warning",
        )
    for k, finding in enumerate(tried):
        job.stages.within("doctor", len(tried) + k, len(tried) * 3, f"trying fixes for {finding.layer}")
        doctor.try_fixes(finding, wanted)
    for finding in findings:
        gained = f", best {finding.fix} gains {finding.gain['sqnr_db']:+.1f} dB" if finding.gain else ""
        log(f"doctor: {finding.layer} ({finding.tensor}): {finding.cause}: {finding.summary}{gained}")
    base = doctor.baseline
    block = {
        "findings": [],
        "baseline": {
            "sqnr_db": base["sqnr_db"],
            "monitor": base["monitor"],
            "monitor_name": doctor.monitor_name,
        },
        "applied": [],
    }
    if spec.apply:
        after, block["applied"] = doctor.apply(tried, wanted)
        block["after"] = {"sqnr_db": after["sqnr_db"], "monitor": after["monitor"]}
        job.ladder.add("doctor", after["result"])
        block["saved_model"] = _keep_doctored(job, doctor, after)
        # On top of the fixes applied: another cause (a concat) can hide what CLE is worth until it is fixed.
        measure_cle_fixed(doctor, cle_fixed, doctor.kept, after)
        findings.sort(key=lambda f: f.severity, reverse=True)
        log(
            f"doctor: {len(block['applied'])} fix(es) applied, logit SQNR {_sqnr(base['sqnr_db']):.1f} -> "
            f"{_sqnr(after['sqnr_db']):.1f} dB (the doctor rung); the saved quantized model is the "
            f"{block['saved_model']}'s, the layer analysis the ladder's"
        )
    block["findings"] = [f.to_dict() for f in findings]
    return json_safe(block)

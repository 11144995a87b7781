"""The doctor's `backend_mismatch` findings, made from a QDQ export's per-module code comparison (its
`by_module` rows): one rule for the worker that writes them and the window that reads an export run's rows.
No torch, no Qt."""

from __future__ import annotations

__all__ = ["backend_findings", "beyond_ties"]


def _count(value) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def beyond_ties(numbers: dict) -> int:
    """Codes off that no rounding tie explains."""
    return _count(numbers.get("codes_off")) - _count(numbers.get("ties"))


def backend_findings(rows: list[dict]) -> list[dict]:
    """The doctor's `backend_mismatch` findings: one per module whose codes differ from the simulation's
    beyond rounding ties. Their gain is not measured (it needs another export), so `gain` is None; severity is
    the share of the module's codes off beyond ties, in percent (not dB: no re-quantization measured it).
    Rows that are not well-formed (an error row, a file from another build) are left out."""
    findings = []
    for row in rows or []:
        if not isinstance(row, dict) or not row.get("module") or row.get("error"):
            continue
        beyond = beyond_ties(row)
        if beyond <= 0:
            continue
        module, worst, codes = str(row["module"]), _count(row.get("worst_step")), _count(row.get("codes"))
        requantize = worst <= 1  # one step away from a tie: the backend rounds (requantizes) at another step
        share = beyond / codes if codes else 0.0
        configuration = str(row.get("configuration") or "")
        findings.append(
            {
                "id": f"{module}:activation:backend_mismatch",
                "layer": module,
                "tensor": "activation",
                "cause": "backend_mismatch",
                "summary": (
                    f"onnxruntime ({configuration}) computes {beyond:,} of {codes:,} codes "
                    f"of {module} differently from the simulation, away from rounding ties, up to "
                    f"{worst} step(s) apart"
                ),
                "evidence": {
                    "codes_off": _count(row.get("codes_off")),
                    "ties": _count(row.get("ties")),
                    "worst_step": worst,
                    "module": module,
                    "codes": codes,
                    "configuration": configuration,
                },
                "fix": "requantize_step" if requantize else "keep_float",
                "fix_text": _fix_text(module, worst, requantize),
                "tried": [],
                "gain": None,
                "severity": round(100.0 * share, 4),
            }
        )
    return findings


def _fix_text(module: str, worst: int, requantize: bool) -> str:
    lead = f"The step analysis (each quantizer fed onnxruntime's own input) finds {module}'s codes "
    if requantize:
        return lead + (
            "one step off where no tie explains it: the fused int8 kernel requantizes with its "
            "own multiplier at another step; add a requantization step (a QuantizeLinear) at "
            f"{module}'s output so both round in the same place"
        )
    return lead + (
        f"{worst} steps off: the file does not compute what the simulation does there; keep "
        f"{module} in float in the export"
    )

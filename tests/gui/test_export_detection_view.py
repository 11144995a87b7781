"""A detector's export in the Export tab: parity matched box by box is shown as boxes (worst IoU, score
difference, images and boxes checked, ties named, the first unmatched box), not as tensor differences it does
not have, and the run list's Result column gives the worst IoU."""

from __future__ import annotations

from workbench.gui.panels.export.export_view import box_parity_text, export_summary

PARITY = {
    "passed": True,
    "method": "boxes",
    "score_threshold": 0.05,
    "iou_min": 0.99,
    "score_tol": 0.001,
    "worst_iou": 0.9931,
    "max_score_diff": 0.00051,
    "ties": 3,
    "images": [
        {"image": 0, "boxes": 12, "passed": True, "extra": [{"side": "eager", "label": 2, "why": "tie: …"}]},
        {"image": 1, "boxes": 9, "passed": True, "extra": []},
    ],
}


def test_box_parity_reads_as_boxes():
    text = box_parity_text(PARITY)
    assert "worst IoU <b>0.9931</b>" in text and "scores within <b>0.00051</b>" in text
    assert "2 image(s), 21 box(es) scoring 0.05 or more · 3 tie(s) named" in text
    assert "unmatched" not in text  # a tie is named, not failed
    failed = {
        **PARITY,
        "passed": False,
        "images": [
            {
                "image": 0,
                "boxes": 2,
                "passed": False,
                "extra": [{"side": "onnxruntime", "label": 3, "score": 0.8, "box": [1.0, 2.0, 30.0, 40.0]}],
            }
        ],
    }
    assert (
        "1 box(es) unmatched, e.g. class 3 at [1.0, 2.0, 30.0, 40.0] (score 0.8) on onnxruntime's side"
        in (box_parity_text(failed))
    )


def test_the_run_list_gives_a_detectors_worst_iou():
    summary = export_summary({"format": "onnx_qdq"}, {"artifact": "/x/model_qdq.onnx", "parity": PARITY})
    assert summary["result"] == "✓ parity IoU 0.9931" and summary["what"] == "export · onnx_qdq"

"""scripts/gpu_check.py on a machine without CUDA: its parsing and its report (the GPU runs
themselves need a GPU)."""

import math

import gpu_check


def test_pytest_summary_is_read():
    assert gpu_check.pytest_counts("..\n2 passed, 173 deselected in 12.54s\n") == {"passed": 2, "deselected": 173}
    output = "FAILED tests/x.py::t\n1 failed, 1 passed, 1 error in 3.1s"
    assert gpu_check.pytest_counts(output) == {"failed": 1, "passed": 1, "errors": 1}
    assert gpu_check.pytest_counts("ImportError while loading conftest") == {}


def test_loss_gap_is_relative_and_infinite_when_runs_are_not_comparable():
    reference = [(50, 4.0), (100, 2.0)]
    assert math.isclose(gpu_check.loss_gap([(50, 4.2), (100, 1.9)], reference), 0.05)
    assert gpu_check.loss_gap([(50, 4.0)], reference) == math.inf  # a step missing
    assert gpu_check.loss_gap([(50, 4.0), (100, float("nan"))], reference) == math.inf
    assert gpu_check.loss_gap([], reference) == math.inf


def precision_row(losses, gap, error=""):
    return {"ok": not error, "losses": losses, "gap": gap, "skipped": 0, "seconds": 30, "error": error}


def test_report_passes_only_when_every_check_does():
    losses = [(50, 6.0), (100, 4.0)]
    precisions = {"fp32": precision_row(losses, 0.0), "bf16": precision_row(losses, 0.01)}
    precisions["fp16"] = precision_row(losses, 0.02)
    resume = {"ok": True, "resumed_at": 100, "gap": 0.01, "error": ""}
    two = {"skipped": "1 GPU on this machine"}
    text, ok = gpu_check.report("1 x GPU", {"passed": 2, "deselected": 9}, precisions, None, two, resume)
    assert ok and "FAIL" not in text
    assert "| bf16 | pass | 1.0% | 0 | 6.000 4.000 | 30 |" in text
    assert "two processes (NCCL): not run, 1 GPU on this machine" in text

    precisions["fp16"] = precision_row([], math.inf, "error: out of memory")
    text, ok = gpu_check.report("1 x GPU", {"passed": 2}, precisions, None, two, resume)
    assert not ok and "| fp16 | FAIL | inf% |" in text and "error: out of memory" in text
    precisions["fp16"] = precision_row(losses, 0.2)  # past the tolerance
    assert not gpu_check.report("1 x GPU", {"passed": 2}, precisions, None, two, resume)[1]
    precisions["fp16"] = precision_row(losses, 0.0)
    assert not gpu_check.report("1 x GPU", {"passed": 1, "failed": 1}, precisions, None, two, resume)[1]


def test_without_cuda_it_says_so_and_succeeds(tmp_path, capsys):
    output = tmp_path / "report.md"
    assert gpu_check.main(["--output", str(output)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("gpu-check: no CUDA device here") and len(printed.splitlines()) == 1
    assert not output.exists()


def test_decode_precisions_are_measured_and_reported(trained_run, corpus):
    import torch

    from benchmark_translation import bench_decode_precisions

    rows = bench_decode_precisions(trained_run, f"{corpus}/valid", torch.device("cpu"))
    assert list(rows) == ["fp32", "bf16", "fp16"]
    assert all(row["ok"] and row["sentences"] == 60 and row["per_s"] > 0 for row in rows.values())
    lines = gpu_check.translation_lines(rows, gpu_check.Verdicts())
    assert lines[4].startswith(f"| fp32 | pass | {rows['fp32']['per_s']:.1f} | {rows['fp32']['bleu']:.2f} |")

    rows["fp16"] = {"ok": False, "error": "RuntimeError: no kernel"}
    rows["bf16"]["bleu"] = rows["fp32"]["bleu"] - 2 * gpu_check.BLEU_TOLERANCE
    verdict = gpu_check.Verdicts()
    text = "\n".join(gpu_check.translation_lines(rows, verdict))
    assert verdict.failed == 2 and "| fp16 | FAIL | RuntimeError: no kernel |  |" in text and "| bf16 | FAIL |" in text


def test_checks_left_out_are_reported_as_not_run():
    text, ok = gpu_check.report("1 x GPU", {"passed": 3}, None, None, None, None)
    assert ok and "gpu-marked tests: pass (3 passed)" in text
    assert "precisions, base model, 300 updates: not run" in text and "restarted: not run" in text
    assert "two processes (NCCL): not run\n" in text

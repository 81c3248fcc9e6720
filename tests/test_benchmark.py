"""scripts/benchmark.py's labels and tables (its measurements need minutes; `make bench` runs them).
pytest puts scripts/ on the import path (pyproject.toml), as running a script there does."""

import torch

import benchmark_report
import benchmark_training


def test_fp32_on_cuda_is_reported_as_tf32_when_mt_train_would_use_it():
    assert benchmark_training.precision_name(torch.device("cpu"), "fp32") == "fp32"
    # torch computes allow_tf32 on access, without an instance attribute, so monkeypatch from
    # pytest 9.2 on undoes it with a delattr that fails: the test restores it itself
    matmul, before = torch.backends.cuda.matmul, torch.backends.cuda.matmul.allow_tf32
    try:
        matmul.allow_tf32 = True
        assert benchmark_training.precision_name(torch.device("cuda"), "fp32") == "fp32 (TF32 matmuls)"
        assert benchmark_training.precision_name(torch.device("cuda"), "bf16") == "bf16"
        matmul.allow_tf32 = False
        assert benchmark_training.precision_name(torch.device("cuda"), "fp32") == "fp32"
    finally:
        matmul.allow_tf32 = before


def test_each_precision_is_measured_against_the_ceiling_of_its_matrix_products():
    row = dict(config="base", compile=False, target_tokens=16384, seconds_per_update=0.1, target_tokens_per_s=163840)
    rows = [
        {**row, "precision": "fp32 (TF32 matmuls)", "model_flops_per_s": 100e12, "peak_memory_mb": 9000},
        {**row, "precision": "fp16", "model_flops_per_s": 200e12, "peak_memory_mb": 6000},
    ]
    table = benchmark_report.paper_configs_table(rows, {"tf32": 400_000.0, "bf16": 800_000.0})
    assert "| base | fp32 (TF32 matmuls) | no | 16,384 | 0.1 | 163,840 | 100.0 | 25.0% of tf32 | 9,000 |" in table
    assert benchmark_report.ceiling_for("fp32", {"fp32": 1.0, "bf16": 2.0}) == "fp32"
    assert "| base | fp16 | no | 16,384 | 0.1 | 163,840 | 200.0 | 25.0% of bf16 | 6,000 |" in table


def test_each_machine_keeps_its_own_page_and_a_new_run_replaces_only_its_block(tmp_path):
    amd = "cpu, AMD EPYC (family 25, model 17) [avx2, avx512f, avx512_bf16]"
    intel = "cpu, Intel(R) Xeon(R) Processor (family 6, model 207) [avx2, avx512f]"
    page = benchmark_report.machine_page(str(tmp_path), amd)
    assert page == str(tmp_path / "cpu-amd-epyc-family-25-model-17-avx2-avx512f-avx512-bf16.md")
    assert benchmark_report.machine_page(str(tmp_path), intel) != page
    benchmark_report.write_section(page, amd, "first\n")
    with open(page, "a", encoding="utf-8") as f:
        f.write("a note below\n")
    benchmark_report.write_section(page, amd, "second\n")
    text = open(page, encoding="utf-8").read()
    assert text.startswith(f"# make bench: {amd}\n")
    assert "second" in text and "first" not in text and text.endswith("a note below\n")

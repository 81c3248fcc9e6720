"""scripts/: every measuring script is run by a make target and named in docs/architecture.md."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# imported by the scripts, not run on their own
SHARED = {
    "measure.py",
    "engine_turns.py",
    "benchmark_report.py",
    "benchmark_training.py",
    "benchmark_translation.py",
    "serve_process.py",
}


def test_every_script_has_a_make_target_and_a_line_in_the_docs():
    makefile = open(os.path.join(ROOT, "Makefile"), encoding="utf-8").read()
    docs = open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8").read()
    scripts = sorted(f for f in os.listdir(os.path.join(ROOT, "scripts")) if f.endswith((".py", ".sh")))
    run = set(re.findall(r"scripts/([a-z_]+\.(?:py|sh))", makefile))
    assert [s for s in scripts if s not in SHARED and s not in run] == []
    assert [s for s in scripts if s not in docs] == []
    assert all(s in scripts for s in run)

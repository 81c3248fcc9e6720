"""Training curves: curves.png during a run, mt-plot for several runs (training/curves.py)."""

import json
import os

from PIL import Image

from conftest import run_cli
from mt_transformer.training.curves import plot_curves


def image_size(path) -> tuple[int, int]:
    with Image.open(path) as image:
        image.verify()  # a whole, valid PNG
    with Image.open(path) as image:
        assert image.format == "PNG"
        return image.size


def fake_metrics(steps=5):
    rows = []
    for i in range(1, steps + 1):
        rows.append({"step": 10 * i, "loss": 5.0 / i, "lr": 1e-3 * i, "tokens_per_s": 2000 + i})
        rows.append({"step": 10 * i, "valid_loss": 5.5 / i, "valid_bleu": 3.0 * i})
    return rows


def test_curves_are_a_png_of_the_expected_size(tmp_path):
    path = tmp_path / "curves.png"
    plot_curves([("a", fake_metrics()), ("b", fake_metrics(3))], str(path))
    assert image_size(path) == (1100, 750)
    assert not [n for n in os.listdir(tmp_path) if n != "curves.png"]  # no temporary file left


def test_training_refreshes_curves_png(trained_run):
    width, height = image_size(os.path.join(trained_run, "curves.png"))
    assert (width, height) == (1100, 750)


def test_mt_plot_draws_several_runs_and_refuses_a_directory_without_metrics(tmp_path, trained_run):
    other = tmp_path / "other"
    other.mkdir()
    (other / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in fake_metrics()), encoding="utf-8")
    out = tmp_path / "both.png"
    result = run_cli("mt-plot", trained_run, str(other), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert image_size(out) == (1100, 750)
    missing = run_cli("mt-plot", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "no metrics.jsonl" in missing.stderr


def test_run_log_redraws_curves_at_most_once_a_minute_and_at_the_end(tmp_path, monkeypatch):
    from mt_transformer.training import run_log

    now = [1000.0]
    monkeypatch.setattr(run_log.time, "monotonic", lambda: now[0])
    log = run_log.RunLog(str(tmp_path), step=0, writes=True, tensorboard=False)
    path = tmp_path / "curves.png"
    rows = fake_metrics(3)
    log.write(rows[0])
    log.refresh_curves()
    assert not path.exists()  # seconds after the start
    now[0] += run_log.CURVES_EVERY_S
    log.refresh_curves()
    assert path.exists()
    path.unlink()
    log.refresh_curves(final=True)
    assert not path.exists()  # nothing new to draw
    log.write(rows[1])
    log.refresh_curves(final=True)
    assert image_size(path) == (1100, 750)


def test_a_run_log_with_curves_off_draws_nothing(tmp_path):
    from mt_transformer.training import run_log

    log = run_log.RunLog(str(tmp_path), step=0, writes=True, tensorboard=False, curves=False)
    log.write(fake_metrics(1)[0])
    log.refresh_curves(final=True)
    assert os.listdir(tmp_path) == ["metrics.jsonl"]

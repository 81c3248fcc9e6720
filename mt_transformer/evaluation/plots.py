"""Pictures for people: training curves from `metrics.jsonl` and cross-attention heatmaps.

matplotlib's object API with the Agg canvas (no display, no global pyplot state); every PNG is
written to a temporary file and renamed, like every other output.
"""

from __future__ import annotations

import json
import os

from matplotlib.figure import Figure

from mt_transformer.files import atomic_path

# (metrics.jsonl key, panel title, line style); the two losses share a panel
CURVES = [
    ("loss", "loss (train: solid, valid: dashed)", "-"),
    ("valid_loss", None, "--"),
    ("valid_bleu", "valid BLEU", "-"),
    ("lr", "learning rate", "-"),
    ("tokens_per_s", "target tokens/s", "-"),
]
PANELS = {"loss": 0, "valid_loss": 0, "valid_bleu": 1, "lr": 2, "tokens_per_s": 3}


def read_metrics(run_dir: str) -> list[dict]:
    """The JSON lines of a run's metrics.jsonl (a line cut short by a crash is skipped)."""
    rows = []
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return rows


def plot_curves(runs: list[tuple[str, list[dict]]], path: str) -> None:
    """Four panels against the update step (loss, valid BLEU, learning rate, tokens/s), one colour
    per run, written to `path` as PNG."""
    figure = Figure(figsize=(11, 7.5), layout="constrained")
    axes = figure.subplots(2, 2, sharex=True).flatten()
    for colour, (name, rows) in enumerate(runs):
        for key, _, style in CURVES:
            points = [(row["step"], row[key]) for row in rows if row.get(key) is not None]
            if points:
                steps, values = zip(*points)
                label = name if key != "valid_loss" else None
                axes[PANELS[key]].plot(
                    steps,
                    values,
                    style,
                    color=f"C{colour % 10}",
                    label=label,
                    marker="o" if key.startswith("valid") and len(points) < 30 else None,
                    markersize=3,
                )
    for key, title, _ in CURVES:
        if title:
            axes[PANELS[key]].set_title(title)
    axes[2].ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    for ax in axes:
        ax.grid(alpha=0.3)
    for ax in axes[2:]:
        ax.set_xlabel("update step")
    if len(runs) > 1 or runs[0][0]:
        axes[0].legend(loc="upper right", fontsize="small")
    _save(figure, path)


def attention_heatmap(matrix, src_pieces: list[str], tgt_pieces: list[str], path: str, title: str) -> None:
    """Target pieces (rows) against source pieces (columns), EOS on both, labelled, as PNG."""
    src_labels, tgt_labels = src_pieces + ["</s>"], tgt_pieces + ["</s>"]
    # about a third of an inch per label, so 9-point labels never overlap
    width = min(max(6.0, 3 + 0.32 * len(src_labels)), 40)
    height = min(max(4.0, 2 + 0.3 * len(tgt_labels)), 40)
    figure = Figure(figsize=(width, height), layout="constrained")
    ax = figure.subplots()
    image = ax.imshow(matrix.numpy(), cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(src_labels)), src_labels, rotation=90, fontsize=9)
    ax.set_yticks(range(len(tgt_labels)), tgt_labels, fontsize=9)
    ax.set_xlabel("source")
    ax.set_ylabel("translation")
    ax.set_title(title, fontsize=10, loc="left")
    figure.colorbar(image, ax=ax, shrink=0.8, label="attention weight")
    _save(figure, path)


def _save(figure: Figure, path: str) -> None:
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=100)

"""The training curves a run draws into curves.png and `mt-plot` draws for several runs: loss,
valid BLEU, learning rate and tokens/s against the update step, from metrics.jsonl.

matplotlib's object API with the Agg canvas (no display, no global pyplot state).
"""

from __future__ import annotations

from matplotlib.figure import Figure

from mt_transformer.files import save_png

# (metrics.jsonl key, panel title, line style); the two losses share a panel
CURVES = [
    ("loss", "loss (train: solid, valid: dashed)", "-"),
    ("valid_loss", None, "--"),
    ("valid_bleu", "valid BLEU", "-"),
    ("lr", "learning rate", "-"),
    ("tokens_per_s", "target tokens/s", "-"),
]
PANELS = {"loss": 0, "valid_loss": 0, "valid_bleu": 1, "lr": 2, "tokens_per_s": 3}


def plot_curves(runs: list[tuple[str, list[dict]]], path: str) -> None:
    """Four panels against the update step (loss, valid BLEU, learning rate, tokens/s), one colour
    per run, written to `path` as PNG."""
    # fixed margins: the constrained layout solver is slow, and every run draws at its end
    figure = Figure(figsize=(11, 7.5))
    figure.subplots_adjust(left=0.07, right=0.98, bottom=0.07, top=0.95, wspace=0.15, hspace=0.15)
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
    save_png(figure, path)

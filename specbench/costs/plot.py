"""The cost curves of a profile as a figure: forward ms against new tokens n, one line
per context for the target and for each drafter."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from specbench.costs.fingerprint import fingerprint_id  # noqa: E402
from specbench.costs.profile import CostProfile  # noqa: E402


def draw(profile: CostProfile, path: Path) -> None:
    curves = [("target " + profile.key["model"], profile.target), *profile.drafters.items()]
    fig, axes = plt.subplots(1, len(curves), figsize=(5 * len(curves), 3.6), squeeze=False)
    for ax, (name, curve) in zip(axes[0], curves):
        n = curve.ns or list(range(1, curve.max_n + 1))
        for context, row in zip(curve.contexts, curve.ms):
            ax.plot(n, row, label=f"c={context}")
        ax.set_xlabel("new tokens n (tree rows) per forward")
        ax.set_ylabel("ms per forward (median)")
        ax.set_title(name, fontsize=9)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fingerprint = profile.key["fingerprint"]
    fig.suptitle(
        f"{profile.key['dtype']} on {fingerprint_id(fingerprint)} ({', '.join(fingerprint.get('isa', []))}; "
        f"{fingerprint['threads']} threads)",
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)

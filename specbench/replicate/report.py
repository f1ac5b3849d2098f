"""The replication report: per claim of the paper, what our runs say about its direction."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")  # files only; no display on a cluster node or in CI
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from specbench import ROOT  # noqa: E402
from specbench.errors import ConfigError  # noqa: E402
from specbench.replicate import regime, results  # noqa: E402
from specbench.replicate import verdicts as rules  # noqa: E402

VERDICTS = {True: "agrees", False: "does not agree", None: "cannot tell"}
MISSING = "missing runs"  # the evidence of a claim whose runs a set lacks starts so
# a claim's source starting so: the project's own hypothesis, not the paper's claim (reported apart, not counted)
FURTHER = "further check"


@dataclass
class Claim:
    source: str  # where the paper makes it, e.g. "Table 1"
    text: str  # the claim, in the paper's direction
    # our runs -> (agrees? None when our runs cannot tell, the evidence in a few words)
    check: Callable[[pd.DataFrame], "tuple[bool | None, str]"]


@dataclass(frozen=True)
class Headline:
    """One of the paper's abstract-level claims, in our words (the papers' sentences are not
    ours to copy) with where it says so, and the claims (their texts) whose verdicts test it."""

    where: str  # e.g. "Abstract"
    text: str
    claims: tuple[str, ...]


HEADLINE_CLAIMS = 4  # at most this many claim lines under a headline: five lines in all


def verdicts(claims: list[Claim], runs: pd.DataFrame) -> list[dict]:
    """A row per claim (claim_rows), as one set of runs has it."""
    return [row for claim in claims for row in claim_rows(claim, runs)]


def claim_rows(claim: Claim, runs: pd.DataFrame) -> list[dict]:
    """The claim's row; after a claim whose speed comparisons the regime gate marked not
    testable, a row of its own judging those cases on tau, worded as such."""
    with regime.collecting() as gated:
        agrees, evidence = checked(claim.check, runs)
    rows = [
        {
            "source": claim.source,
            "claim": claim.text,
            "ours": named(evidence, runs),
            "verdict": VERDICTS.get(agrees, agrees),  # or verdicts.NOT_TESTABLE
        }
    ]
    if gated and (further := tau_row(claim, gated, runs)):
        rows.append(further)
    return rows


def read_on_sets(claims: list[Claim], sets: list) -> list[dict]:
    """Each claim judged on every run set (runsets.RunSet, in the order a claim reads them, each
    gated by its own regime) and read from the first set that holds its runs; each row names
    that set (`set`) and what the other sets that hold its runs read (`others`); with no set,
    as no runs have them."""
    if not sets:
        return verdicts(claims, results.no_runs())
    rows = []
    for claim in claims:
        readings = []
        for runset in sets:
            with regime.gating(runset.regime):
                readings.append((runset, claim_rows(claim, runset.runs)))
        holding = [(s, r) for s, r in readings if not r[0]["ours"].startswith(MISSING)] or readings[:1]
        (chosen, chosen_rows), others = holding[0], holding[1:]
        for i, row in enumerate(chosen_rows):
            row["set"], row["regime"] = chosen.label, chosen.fit
            row["others"] = [(s.label, r[i]["verdict"]) for s, r in others if i < len(r)]
        rows += chosen_rows
    return rows


def tau_row(claim: Claim, gated: list, runs: pd.DataFrame) -> dict | None:
    """The further check after a speed claim the regime gate set aside: its cases judged on
    tau, where the paper's own tables show the faster side with the higher tau in most cells
    (its speed then follows tau on a GPU, where verification is about free); None where the
    paper claims no such tau."""
    names = gated[0][3]
    current = regime.current()
    lead, cells = regime.published_tau_lead(current.paper, names) if current else (0, 0)
    if not cells or lead * 2 <= cells:
        return None
    agrees, evidence = checked(
        lambda r: rules.every_higher([(case, a, b) for case, a, b, _ in gated], "tau", names), runs
    )
    return {
        "source": f"{FURTHER} ({claim.source}, tau)",
        "claim": f"What carries across hardware of the claim that {names[0]} is faster than {names[1]}: it accepts "
        "more tokens per target forward (tau)",
        "ours": named(f"the paper's tau is higher for {names[0]} in {lead} of {cells} cells; ours: {evidence}", runs),
        "verdict": VERDICTS.get(agrees, agrees),
    }


def checked(check, runs: pd.DataFrame):
    """(agrees, evidence) of a claim's check, a missing run or unreadable file as 'cannot tell'."""
    try:
        return check(runs)
    except (KeyError, ValueError, IndexError, ZeroDivisionError) as error:  # a run the check needs is missing
        return None, f"{MISSING} ({error.__class__.__name__}: {error})"
    except ConfigError as error:  # a file the check reads cannot be read here (a dataset's local copy)
        return None, f"cannot read what it needs: {error}"


def named(text: str, runs: pd.DataFrame) -> str:
    """`text` with each run's directory written as its name and other project paths relative
    to the project, so a report shows no machine's paths."""
    if "run" in runs:
        for run_dir, name in sorted(zip(runs["run_dir"], runs["run"]), key=lambda pair: -len(str(pair[0]))):
            if isinstance(run_dir, str) and isinstance(name, str):
                text = text.replace(run_dir, name)
    return text.replace(f"{ROOT}/", "")


def write(
    path: Path,
    title: str,
    header: list[str],
    rows: list[dict],
    tables: list[str],
    figures: list[Path],
    published_only: dict[str, str] | None = None,
    other_sets: list[tuple[str, str, list[str], list[Path]]] = (),
    headlines: list[Headline] = (),
) -> None:
    """The report: header lines (setup, run sets, interval method), the claims, and links to
    the tables (those holding published numbers only, with why) and figures: the first run
    set's in tables/ and figures/, each other set's (label, directory, tables, figures) in
    its own directory."""
    papers = [r for r in rows if not r["source"].startswith(FURTHER)]
    further = [r for r in rows if r["source"].startswith(FURTHER)]
    agreeing = sum(r["verdict"] == "agrees" for r in papers)
    causes = {cause: sum(r["verdict"] == cause for r in papers) for cause in rules.UNTESTABLE}
    untestable = ", ".join(f"{count} {cause.split(': ', 1)[1]}" for cause, count in causes.items() if count) or "none"
    on_sets = any("set" in r for r in rows)
    lines = [f"# {title}", ""] + headline_lines(headlines, rows)
    for line in header:
        lines += [line, ""]
    lines += [f"{agreeing} of {len(papers)} claims agree in direction; not testable: {untestable}.", ""]
    lines += [
        "## Summary",
        "",
        "One line per claim: our verdict and the number that decides it (the case that decides a claim made for "
        "every case), "
        "or why it cannot be tested here"
        + (", and the run set it was read from" if on_sets else "")
        + ". The evidence per case follows under Claims.",
        "",
        "| source | the paper's claim | verdict | deciding number, or why not testable |"
        + (" run set |" if on_sets else ""),
        "| --- | --- | --- | --- |" + (" --- |" if on_sets else ""),
    ]
    lines += [
        f"| {r['source']} | {r['claim']} | {r['verdict']} | {deciding(r)} |"
        + (f" {r.get('set', '')} |" if on_sets else "")
        for r in papers
    ]
    lines += ["", "## Claims", ""]
    lines += ["| source | the paper's claim | our run | direction |", "| --- | --- | --- | --- |"]
    lines += [f"| {r['source']} | {r['claim']} | {r['ours']}{elsewhere(r)} | {r['verdict']} |" for r in papers]
    if further:
        lines += [
            "",
            "Further checks (the project's own hypotheses, not the paper's claims; not counted above):",
            "",
            "| source | hypothesis | our run | direction |",
            "| --- | --- | --- | --- |",
        ]
        lines += [f"| {r['source']} | {r['claim']} | {r['ours']}{elsewhere(r)} | {r['verdict']} |" for r in further]
    lines += [""] + links(tables, figures, published_only or {}, "")
    for label, directory, set_tables, set_figures in other_sets:
        lines += ["", f"Run set {label}:", ""] + links(set_tables, set_figures, published_only or {}, f"{directory}/")
    lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")


def headline_lines(headlines: list[Headline], rows: list[dict]) -> list[str]:
    """The report's opening: each headline and, per claim that tests it, the verdict, the
    number that decides it, and the run set (and its regime) it was read from."""
    if not headlines:
        return []
    by_claim = {r["claim"]: r for r in rows}
    lines = ["## Headline", ""]
    for headline in headlines:
        lines.append(f"**{headline.where}: {headline.text}**")
        for text in headline.claims[:HEADLINE_CLAIMS]:
            row = by_claim.get(text)
            if row is None:
                lines.append(f"- {text}: no claim of this report tests it yet")
                continue
            read = f" (read on {row['set']}: {row['regime']})" if row.get("set") else ""
            lines.append(f"- {row['source']}, {row['claim']}: **{row['verdict']}**; {deciding(row)}{read}")
        lines.append("")
    return lines


def links(tables: list[str], figures: list[Path], only: dict[str, str], prefix: str) -> list[str]:
    compared = [t for t in tables if t not in only]
    lines = ["Tables (published / ours / delta): " + ", ".join(f"[{t}]({prefix}tables/{t}.md)" for t in compared)]
    if any(t in only for t in tables):
        lines += [
            "",
            "Tables (published only): "
            + "; ".join(f"[{t}]({prefix}tables/{t}.md): {only[t]}" for t in tables if t in only),
        ]
    drawn = [f"[{f.stem}]({prefix}figures/{f.name})" for f in figures if f.suffix == ".png"]
    return lines + ["", "Figures: " + (", ".join(drawn) if drawn else "none (no run to draw)")]


def elsewhere(row: dict) -> str:
    """What the other run sets that hold the claim's runs read."""
    others = row.get("others") or []
    return ("; read on " + row["set"] + ", also on " + "; ".join(f"{s}: {v}" for s, v in others)) if others else ""


INTERVAL = re.compile(
    r"(?:(?P<case>[^;:()]*?):? )?(?P<estimate>[+-][0-9.e+-]+) \[95% \w+ CI (?P<low>[+-][0-9.e+-]+), "
    r"(?P<high>[+-][0-9.e+-]+)\]"
)
UNTESTABLE_TEXT = re.compile(r"not testable at this scale(?: \((?P<paren>[^)]*)\)|: (?P<colon>[^;]*))")


def deciding(row: dict) -> str:
    """The number behind a claim's verdict, from its evidence: an untestable claim's first
    reason; else, of the intervals its cases give, the one that decides (agrees: the weakest
    support, the lowest low end; does not agree: the case lying wholly against it; cannot
    tell: the first case whose interval holds 0)."""
    text, verdict = row["ours"], row["verdict"]
    if str(verdict).startswith("not run"):  # its reason: the last parenthesis of the evidence
        return text[text.rindex("(") + 1 : text.rindex(")")] if "(" in text else text
    if str(verdict).startswith("not testable"):
        found = UNTESTABLE_TEXT.search(text)
        reason = (found.group("paren") or found.group("colon")) if found else text.split(": ", 1)[-1]
        return reason.strip()
    cases = [cases_of(m) for m in INTERVAL.finditer(text)]
    if not cases:
        return text.split(";")[0]
    if verdict == "agrees":
        chosen = min(cases, key=lambda c: c[2])
    elif verdict == "does not agree":
        chosen = min(cases, key=lambda c: c[3])
    else:
        chosen = next((c for c in cases if c[2] <= 0 <= c[3]), cases[0])
    return chosen[4].strip()


def cases_of(match: re.Match) -> tuple:
    return (
        (match.group("case") or "").strip(),
        float(match.group("estimate")),
        float(match.group("low")),
        float(match.group("high")),
        match.group(0),
    )


# no timestamp or library version in the files: the same figure gives the same bytes
FIXED_METADATA = {
    ".png": {"Software": None},
    ".pdf": {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None},
}


def save(fig, out_dir: Path, name: str) -> list[Path]:
    """A figure as PNG and PDF."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]
    for path in paths:
        fig.savefig(path, bbox_inches="tight", dpi=150, metadata=FIXED_METADATA[path.suffix])
    plt.close(fig)
    return paths


def delta_vs_tau_figure(points: pd.DataFrame, out_dir: Path, name: str, title: str) -> list[Path]:
    """TALON Figure 6's view: per prompt, draft forwards (δ) against tokens per target forward
    (τ) for EAGLE-3 and TALON, one panel per temperature, with a linear fit per method and
    the oracle δ = τ (a drafter that spends exactly one forward per accepted token)."""
    temperatures = sorted(points["temperature"].unique())
    fig, axes = plt.subplots(1, len(temperatures), figsize=(5.5 * len(temperatures), 4.2), squeeze=False)
    for ax, temperature in zip(axes[0], temperatures):
        part = points[points["temperature"] == temperature]
        for method, color in (("eagle3", "tab:orange"), ("talon", "tab:blue")):
            mine = part[part["method"] == method].sort_values("tau")
            ax.scatter(mine["tau"], mine["delta"], s=12, c=color, label=f"{method} (per prompt)")
            if len(mine) > 1:
                fit = np.polyfit(mine["tau"], mine["delta"], 1)
                ax.plot(mine["tau"], np.polyval(fit, mine["tau"]), color=color)
        top = max(part["tau"].max(), part["delta"].max()) * 1.05
        ax.plot([0, top], [0, top], "--", color="gray", label="oracle (delta = tau)")
        ax.set(
            xlabel="tau (tokens per target forward)",
            ylabel="delta (draft forwards per target forward)",
            title=f"T={temperature:g}, all datasets",
        )
        ax.legend(fontsize=7)
    fig.suptitle(title)
    return save(fig, out_dir, name)

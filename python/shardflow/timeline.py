"""Draw a pipeline's timeline from shard-run --trace and measure its bubble.

    python -m shardflow.timeline TRACE.json [-o timeline.png] [--run K]

TRACE.json is what `shard-run PIPELINE.shard --trace TRACE.json` writes
(Chrome trace JSON): every rank's pipeline actions of every run, on the
lane "pipeline". For one run (the last by default: the first pays for
warming up), this draws a row per rank with a block per action (forwards
F, backwards B, their input and weight parts I and W), each labelled as
the schedule names it (1F3: stage 1's forward of micro-batch 3), and
prints what each rank computed, the run's span from
the first action's start to the last one's end, and the measured bubble:

    bubble = 1 - sum over ranks of the time computing / (ranks x span)

the fraction of the ranks' time spent waiting. With one stage per rank,
it also prints the fraction a schedule of equal stages leaves idle in
theory, (p - 1) / (M + p - 1) for p stages and M micro-batches, the
bubble of GPipe and 1F1B.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

ACTION = re.compile(r"^(\d+)(F|B|I|W)(\d+)$")
COLORS = {"F": "#4C72B0", "B": "#55A868", "I": "#8172B2", "W": "#CCB974"}


def load(path: Path) -> dict[int, list[dict]]:
    """Per run: the compute actions, each {rank, stage, kind, microbatch,
    start, end} in seconds."""
    trace = json.loads(Path(path).read_text())
    lanes = {(e["pid"], e.get("tid")): e["args"]["name"] for e in trace["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    runs: dict[int, list[dict]] = defaultdict(list)
    for e in trace["traceEvents"]:
        if e.get("ph") != "X" or lanes.get((e["pid"], e.get("tid"))) != "pipeline":
            continue
        m = ACTION.match(e["name"])
        if not m:
            continue
        runs[e["args"].get("run", 0)].append({
            "rank": e["pid"], "stage": int(m.group(1)), "kind": m.group(2),
            "microbatch": int(m.group(3)), "start": e["ts"] * 1e-6,
            "end": (e["ts"] + e["dur"]) * 1e-6})
    return dict(runs)


def measure(actions: list[dict]) -> dict:
    """The run's span, each rank's time computing, the bubble, and the
    theory's bubble for equal stages when each rank runs one stage."""
    start = min(a["start"] for a in actions)
    end = max(a["end"] for a in actions)
    ranks = sorted({a["rank"] for a in actions})
    busy = {r: sum(a["end"] - a["start"] for a in actions if a["rank"] == r) for r in ranks}
    span = end - start
    bubble = 1.0 - sum(busy.values()) / (len(ranks) * span) if span > 0 else 0.0
    stages = {a["stage"] for a in actions}
    stages_of = defaultdict(set)
    for a in actions:
        stages_of[a["rank"]].add(a["stage"])
    microbatches = len({a["microbatch"] for a in actions})
    theory = None
    if all(len(s) == 1 for s in stages_of.values()):
        p = len(stages)
        theory = (p - 1) / (microbatches + p - 1)
    return {"start": start, "span": span, "busy": busy, "bubble": bubble, "ranks": ranks,
            "stages": len(stages), "microbatches": microbatches, "theory": theory}


def draw(actions: list[dict], stats: dict, path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    ranks = stats["ranks"]
    fig, ax = plt.subplots(figsize=(10, 1 + 0.6 * len(ranks)))
    for a in actions:
        row = ranks.index(a["rank"])
        left = (a["start"] - stats["start"]) * 1e3
        width = (a["end"] - a["start"]) * 1e3
        ax.barh(row, width, left=left, height=0.8, color=COLORS[a["kind"]], edgecolor="black",
                linewidth=0.5)
        ax.text(left + width / 2, row, f"{a['stage']}{a['kind']}{a['microbatch']}",
                ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels([f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds")
    ax.set_title(title)
    kinds = sorted({a["kind"] for a in actions}, key="FBIW".index)
    ax.legend(handles=[Patch(color=COLORS[k], label=k) for k in kinds], loc="upper right",
              fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("-o", "--output", type=Path, help="the plot (PNG, SVG, PDF)")
    parser.add_argument("--run", type=int, help="the run to draw (default: the last)")
    args = parser.parse_args(argv)
    runs = load(args.trace)
    if not runs:
        print(f"{args.trace}: no pipeline actions (trace a pipeline artifact: shard-run "
              "PIPELINE.shard --trace FILE)", file=sys.stderr)
        return 1
    run = max(runs) if args.run is None else args.run
    if run not in runs:
        print(f"{args.trace}: no run {run} (runs {sorted(runs)})", file=sys.stderr)
        return 1
    actions = runs[run]
    stats = measure(actions)
    print(f"run {run}: {stats['stages']} stages on {len(stats['ranks'])} ranks, "
          f"{stats['microbatches']} micro-batches, span {stats['span'] * 1e3:.3f} ms")
    for r in stats["ranks"]:
        print(f"  rank {r}: computing {stats['busy'][r] * 1e3:.3f} ms "
              f"({stats['busy'][r] / stats['span']:.1%} of the span)")
    line = f"bubble: {stats['bubble']:.3f} of the ranks' time"
    if stats["theory"] is not None:
        line += (f" (equal stages in theory: (p-1)/(M+p-1) = {stats['theory']:.3f})")
    print(line)
    if args.output:
        draw(actions, stats, args.output,
             f"{args.trace.name}, run {run}: bubble {stats['bubble']:.1%}")
        print(f"timeline written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

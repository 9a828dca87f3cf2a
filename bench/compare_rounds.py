#!/usr/bin/env python3
"""A lever's effect on the decoding step, paired by round: bench_generate's markdown rows labelled
'<model> <variant> r<N>' (--label), each variant of a model set against the baseline variant, cell by cell.

  compare_rounds.py GENERATE_MD [GENERATE_MD ...] --baseline VARIANT

For every model, cell (batch, context) and variant other than the baseline, the rounds both ran are paired; each round
gives the change of the step time, 100 (variant / baseline - 1) %, and the table shows their mean with its 95% t
interval over the rounds (none from one round). Rows without a round in their label (the peers') are left out.
Rounds of one call only: between calls the machine and the baseline move. Standard library only.

A run whose own copy-bandwidth measurement (the 'copy GB/s' column bench_generate writes once per run) falls below
--disturbed-below times the median of the runs read shared the GPU with something else (a peer process left running,
say): its rounds are left out of the pairing, and a line after the table names them, unless --keep-disturbed.
"""
import argparse
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "tables"))
from stats import one_sample_interval  # noqa: E402

LABEL = re.compile(r"^(\S+) (.+) r(\d+)$")
# Columns of a row (generate_bench_common.COLUMNS): system, label, batch, context, ..., decode ms/step.
LABEL_COLUMN, BATCH_COLUMN, CONTEXT_COLUMN, STEP_COLUMN, COPY_COLUMN = 1, 2, 3, 6, 10


def read_rounds(paths):
    """{(model, variant): {(batch, context): {round: ms}}} from the files' labelled rows, and {(model, variant, round):
    copy GB/s} of the runs that wrote one; fails on a repeated round."""
    rounds, copies = {}, {}
    for path in paths:
        if not os.path.exists(path):
            raise SystemExit(f"compare_rounds: no file {path}")
        for line in open(path):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) <= STEP_COLUMN or not line.startswith("|"):
                continue
            match = LABEL.match(cells[LABEL_COLUMN])
            if not match:
                continue
            model, variant, round_number = match.group(1), match.group(2), int(match.group(3))
            try:
                cell = (int(cells[BATCH_COLUMN]), int(cells[CONTEXT_COLUMN]))
                ms = float(cells[STEP_COLUMN])
            except ValueError:
                raise SystemExit(f"compare_rounds: {path}: the row '{cells[LABEL_COLUMN]}' has no batch, context or "
                                 f"step time where bench_generate writes them")
            by_round = rounds.setdefault((model, variant), {}).setdefault(cell, {})
            if round_number in by_round:
                raise SystemExit(f"compare_rounds: {model} {variant} round {round_number} at batch {cell[0]}, context "
                                 f"{cell[1]} appears twice")
            by_round[round_number] = ms
            try:
                copies.setdefault((model, variant, round_number), float(cells[COPY_COLUMN]))
            except (IndexError, ValueError):
                pass  # a row without the column: its run is never judged disturbed
    if not rounds:
        raise SystemExit(f"compare_rounds: no rows labelled '<model> <variant> r<N>' in {', '.join(paths)}")
    return rounds, copies


def disturbed_runs(copies, fraction):
    """The median copy bandwidth of the runs (None without any), and {(model, variant, round): copy GB/s} of those
    below fraction times it."""
    if not copies:
        return None, {}
    median = statistics.median(copies.values())
    return median, {run: gbs for run, gbs in copies.items() if gbs < fraction * median}


def comparisons(rounds, baseline, left_out=()):
    """Each table row: model, cell, variant, the paired baseline and variant times, the interval of the change (%);
    a round either side of which is in left_out (model, variant, round) is not paired."""
    rows = []
    for model in dict.fromkeys(m for m, _ in rounds):
        variants = [v for m, v in rounds if m == model]
        if baseline not in variants:
            raise SystemExit(f"compare_rounds: {model} has no rows of the baseline '{baseline}' (its variants: "
                             f"{', '.join(variants)})")
        base = rounds[(model, baseline)]
        for variant in variants:
            if variant == baseline:
                continue
            for cell, by_round in rounds[(model, variant)].items():
                shared = sorted(r for r in set(by_round) & set(base.get(cell, {}))
                                if (model, variant, r) not in left_out and (model, baseline, r) not in left_out)
                if not shared:
                    continue
                before = [base[cell][r] for r in shared]
                after = [by_round[r] for r in shared]
                change = one_sample_interval(100.0 * (a / b - 1.0) for a, b in zip(after, before))
                rows.append((model, cell, variant, before, after, change))
    return rows


def table(rows, baseline):
    lines = [f"| model | batch / context | variant | {baseline} ms | variant ms | change | 95% interval | rounds |",
             "|---|---|---|---|---|---:|---|---:|"]
    for model, (batch, context), variant, before, after, change in rows:
        interval = "none (one round)" if change.low is None else f"{change.low:+.1f}% to {change.high:+.1f}%"
        lines.append(f"| {model} | {batch} / {context} | {variant} | {' '.join(f'{v:.3f}' for v in before)} | "
                     f"{' '.join(f'{v:.3f}' for v in after)} | {change.difference:+.1f}% | {interval} | {change.n} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--baseline", required=True, help="the variant the others are set against, e.g. off")
    parser.add_argument("--disturbed-below", type=float, default=0.9,
                        help="a run whose copy bandwidth is below this fraction of the median is left out (0.9)")
    parser.add_argument("--keep-disturbed", action="store_true", help="pair every round, disturbed or not")
    args = parser.parse_args()
    rounds, copies = read_rounds(args.files)
    median, disturbed = disturbed_runs(copies, args.disturbed_below)
    if args.keep_disturbed:
        disturbed = {}
    rows = comparisons(rounds, args.baseline, disturbed)
    if not rows:
        raise SystemExit(f"compare_rounds: no variant shares a cell and a round with the baseline '{args.baseline}'")
    print(table(rows, args.baseline))
    if disturbed:
        runs = ", ".join(f"{m} {v} r{r} ({gbs:.0f} GB/s)" for (m, v, r), gbs in sorted(disturbed.items()))
        print(f"\nLeft out, their copy bandwidth below {args.disturbed_below} of the median "
              f"({median:.0f} GB/s): {runs}; --keep-disturbed pairs them.")


if __name__ == "__main__":
    main()

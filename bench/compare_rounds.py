#!/usr/bin/env python3
"""A lever's effect on the decoding step, paired by round: bench_generate's markdown rows labelled
'<model> <variant> r<N>' (--label), each variant of a model set against the baseline variant, cell by cell.

  compare_rounds.py GENERATE_MD [GENERATE_MD ...] --baseline VARIANT

For every model, cell (batch, context) and variant other than the baseline, the rounds both ran are paired; each round
gives the change of the step time, 100 (variant / baseline - 1) %, and the table shows their mean with its 95% t
interval over the rounds (none from one round). Rows without a round in their label (the peers') are left out.
Rounds of one call only: between calls the machine and the baseline move. Standard library only.
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "tables"))
from stats import one_sample_interval  # noqa: E402

LABEL = re.compile(r"^(\S+) (.+) r(\d+)$")
# Columns of a row (generate_bench_common.COLUMNS): system, label, batch, context, ..., decode ms/step.
LABEL_COLUMN, BATCH_COLUMN, CONTEXT_COLUMN, STEP_COLUMN = 1, 2, 3, 6


def read_rounds(paths):
    """{(model, variant): {(batch, context): {round: ms}}} from the files' labelled rows; fails on a repeated round."""
    rounds = {}
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
    if not rounds:
        raise SystemExit(f"compare_rounds: no rows labelled '<model> <variant> r<N>' in {', '.join(paths)}")
    return rounds


def comparisons(rounds, baseline):
    """Each table row: model, cell, variant, the paired baseline and variant times, the interval of the change (%)."""
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
                shared = sorted(set(by_round) & set(base.get(cell, {})))
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
    args = parser.parse_args()
    rows = comparisons(read_rounds(args.files), args.baseline)
    if not rows:
        raise SystemExit(f"compare_rounds: no variant shares a cell and a round with the baseline '{args.baseline}'")
    print(table(rows, args.baseline))


if __name__ == "__main__":
    main()

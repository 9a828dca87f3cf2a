#!/usr/bin/env python3
"""Greedy agreement of two systems on the same weights and prompts: their --tokens-out files (bench_generate's
format, 'C B id id ...' per context and batch) compared row by row.

  compare_generate_tokens.py REFERENCE OTHER [--names fathom gpt-fast] [--label MODEL] [--min-tokens 32]

Prints one line per row of REFERENCE: AGREE when both hold at least --min-tokens ids and they are equal over
the shorter, with how many distinct ids they hold, else DISAGREE with the first differing position (0-based, among
the new tokens) and both ids, or MISSING when OTHER has no such row. Exits 1 unless every row agrees. An agreement
over few distinct ids (a briefly trained model repeating a token) is said to be one: two paths can emit the same
repetition with logits that differ widely, so such a row checks little.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from generate_bench_common import read_ids_lines  # noqa: E402

REPETITION_MAX_DISTINCT = 2  # at most this many distinct ids in an agreeing row: a repetition


def main():
    p = argparse.ArgumentParser()
    p.add_argument("reference")
    p.add_argument("other")
    p.add_argument("--names", nargs=2, default=["reference", "other"])
    p.add_argument("--label", default="")
    p.add_argument("--min-tokens", type=int, default=32)
    a = p.parse_args()
    for path, name in ((a.reference, a.names[0]), (a.other, a.names[1])):
        if not os.path.exists(path):
            print(f"MISSING: {a.names[1]} vs {a.names[0]}, {a.label}: {name} wrote no ids ({path})")
            return 1
    ref, other = read_ids_lines(a.reference), read_ids_lines(a.other)
    if not ref:
        print(f"DISAGREE: {a.reference} holds no rows")
        return 1
    all_agree = True
    for (context, batch), ids in sorted(ref.items()):
        what = f"{a.names[1]} vs {a.names[0]}, {a.label} context {context} batch {batch}"
        if (context, batch) not in other:
            print(f"MISSING: {what}: no row in {a.other}")
            all_agree = False
            continue
        theirs = other[(context, batch)]
        n = min(len(ids), len(theirs))
        first = next((i for i in range(n) if ids[i] != theirs[i]), None)
        if first is not None:
            print(f"DISAGREE: {what}: first difference at new token {first} "
                  f"({a.names[0]} {ids[first]}, {a.names[1]} {theirs[first]})")
            all_agree = False
        elif n < a.min_tokens:
            print(f"DISAGREE: {what}: only {n} tokens to compare, fewer than {a.min_tokens}")
            all_agree = False
        else:
            distinct = len(set(ids[:n]))
            note = "; a repetition, which checks little" if distinct <= REPETITION_MAX_DISTINCT else ""
            ids_word = "id" if distinct == 1 else "ids"
            print(f"AGREE: {what}: {n} greedy tokens equal ({distinct} distinct {ids_word}{note})")
    return 0 if all_agree else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""bench/timeline/persistent_trace.py on traces whose answers are known, and its refusal of a trace with another
number of marks a layer. Standard library only.
  python3 tests/timeline/test_persistent_trace.py
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / 'support'))
from script_check import TIMELINE, run_script, verdict  # noqa: E402

KINDS = ['q/k/v input', 'q/k/v GEMM', 'barrier 1', 'attention: q/k', 'attention: tiles', 'attention: merge',
         'barrier 2', 'o_proj input + GEMM', 'barrier 3', 'gate/up input + GEMM', 'barrier 4', 'down input + GEMM',
         'barrier 5']


def trace(layers, per_layer, cycles_an_interval):
    """A trace at 1 GHz in which CTA c spends cycles_an_interval[c] cycles between any two marks."""
    lines = [f'# sm_clock_khz 1000000 layers {layers} marks_per_layer {per_layer}', 'cta,mark,clock']
    for cta, cycles in enumerate(cycles_an_interval):
        lines += [f'{cta},{mark},{5000000 + mark * cycles}' for mark in range(1 + per_layer * layers + 2)]
    return '\n'.join(lines) + '\n'


def rows(stdout):
    """{kind: (median, max)} from the script's table."""
    table = {}
    for line in stdout.splitlines()[1:]:
        *kind, median, top = line.split()
        table[' '.join(kind)] = (float(median), float(top))
    return table


def main():
    failures = []
    # Two layers; CTA 0 spends 1 us an interval, CTA 1 3 us: every kind of a layer sums to 2 and 6 us over the two
    # layers (median of the two CTAs 4, max 6), the head's two 1 and 3, the step 28 intervals.
    result = run_script(TIMELINE / 'persistent_trace.py', trace(2, len(KINDS), [1000, 3000]))
    if result.returncode != 0:
        failures.append(f'a 13-mark trace failed: {result.stderr.strip()}')
    else:
        expected = {kind: (4.0, 6.0) for kind in KINDS}
        expected.update({'head input': (2.0, 3.0), 'head GEMM': (2.0, 3.0), 'step': (56.0, 84.0)})
        got = rows(result.stdout)
        for kind, answer in expected.items():
            if got.get(kind) != answer:
                failures.append(f'{kind}: {got.get(kind)}, expected {answer}')
        if '2 CTAs, 2 layers' not in result.stdout.splitlines()[0]:
            failures.append(f'the header does not name 2 CTAs and 2 layers: {result.stdout.splitlines()[0]}')
    # A trace of the kernel's earlier layout (11 marks a layer) is refused by name.
    result = run_script(TIMELINE / 'persistent_trace.py', trace(1, 11, [1000]))
    if result.returncode == 0 or '11 marks a layer' not in result.stderr:
        failures.append(f'an 11-mark trace was not refused by name: rc {result.returncode}, {result.stderr.strip()}')
    return verdict('persistent_trace.py', failures)


if __name__ == '__main__':
    sys.exit(main())

#!/usr/bin/env python3
"""bench/compare_rounds.py on generate.md rows whose answers are known: the change of each round paired with the
baseline's same round, its mean and 95% t interval, rounds only one side ran left out, one round without an interval,
the peers' unlabelled rows ignored, a run of low copy bandwidth left out and named (or kept when asked); and its
refusals (no baseline, no labelled rows, a round twice). Standard library
only.
  python3 tests/bench/test_compare_rounds.py
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / 'support'))
from script_check import BENCH, run_script, verdict  # noqa: E402

SCRIPT = BENCH / 'compare_rounds.py'


def row(label, batch, context, ms, system='fathom generate', copy=3000.0):
    return f'| {system} | {label} | {batch} | {context} | 40 | 1.0 | {ms} | 1 | 1.0 | 1.0 | {copy} | 10.0 |'


def run(rows, *flags):
    text = '# title\n\n| system | model | ... |\n| --- | --- |\n' + '\n'.join(rows) + '\n'
    return run_script(SCRIPT, text, *flags, name='generate.md')


def main():
    failures = []
    rows = [row('m off r1', 1, 128, 1.0), row('m off r2', 1, 128, 1.0), row('m off r3', 1, 128, 1.0),
            row('m fast lever r1', 1, 128, 0.96), row('m fast lever r2', 1, 128, 0.98),
            row('m fast lever r3', 1, 128, 0.97),
            # batch 8: the variant's round 1 and the baseline's round 4 have no partner, so rounds 2 and 3 pair.
            row('m off r2', 8, 128, 2.0), row('m off r3', 8, 128, 2.0), row('m off r4', 8, 128, 1.0),
            row('m fast lever r1', 8, 128, 9.0), row('m fast lever r2', 8, 128, 2.2),
            row('m fast lever r3', 8, 128, 2.2),
            row('m slow r1', 1, 128, 1.1),  # one round: no interval
            row('m', 1, 128, 5.0, system='gpt-fast')]  # a peer's row, no round: left out
    result = run(rows, '--baseline', 'off')
    lines = result.stdout.splitlines()
    # Changes of -4, -2 and -3%: mean -3, sample std 1, half-width t(0.975, 2) / sqrt(3) = 2.484.
    want = ['| m | 1 / 128 | fast lever | 1.000 1.000 1.000 | 0.960 0.980 0.970 | -3.0% | -5.5% to -0.5% | 3 |',
            '| m | 8 / 128 | fast lever | 2.000 2.000 | 2.200 2.200 | +10.0% | +10.0% to +10.0% | 2 |',
            '| m | 1 / 128 | slow | 1.000 | 1.100 | +10.0% | none (one round) | 1 |']
    if result.returncode != 0 or lines[2:] != want:
        failures.append(f'the table: rc {result.returncode}, got\n{result.stdout}{result.stderr}\nexpected\n'
                        + '\n'.join(want))

    # A run whose copy bandwidth fell below 0.9 of the median (round 2 of the lever, at 1200 GB/s against 3000)
    # is left out and named; --keep-disturbed pairs it again.
    disturbed = [row('m off r1', 1, 128, 1.0), row('m off r2', 1, 128, 1.0), row('m off r3', 1, 128, 1.0),
                 row('m lever r1', 1, 128, 0.98), row('m lever r2', 1, 128, 2.5, copy=1200.0),
                 row('m lever r3', 1, 128, 0.96)]
    result = run(disturbed, '--baseline', 'off')
    want = ['| m | 1 / 128 | lever | 1.000 1.000 | 0.980 0.960 | -3.0% | -15.7% to +9.7% | 2 |', '',
            'Left out, their copy bandwidth below 0.9 of the median (3000 GB/s): m lever r2 (1200 GB/s); '
            '--keep-disturbed pairs them.']
    if result.returncode != 0 or result.stdout.splitlines()[2:] != want:
        failures.append(f'a disturbed run: rc {result.returncode}, got\n{result.stdout}{result.stderr}expected\n'
                        + '\n'.join(want))
    result = run(disturbed, '--baseline', 'off', '--keep-disturbed')
    if result.returncode != 0 or '| 3 |' not in result.stdout or 'Left out' in result.stdout:
        failures.append(f'--keep-disturbed: rc {result.returncode}, got\n{result.stdout}{result.stderr}')

    for what, bad_rows, flags, message in [
            ('no baseline', rows, ('--baseline', 'on'), "m has no rows of the baseline 'on' (its variants: off, "
                                                        "fast lever, slow)"),
            ('no labelled rows', [row('m', 1, 128, 1.0)], ('--baseline', 'off'), "no rows labelled"),
            ('a round twice', rows + [row('m off r1', 1, 128, 1.0)], ('--baseline', 'off'),
             'm off round 1 at batch 1, context 128 appears twice'),
            ('no shared round', [row('m off r1', 1, 128, 1.0), row('m on r2', 1, 128, 1.0)], ('--baseline', 'off'),
             "no variant shares a cell and a round with the baseline 'off'")]:
        result = run(bad_rows, *flags)
        if result.returncode == 0 or message not in result.stderr:
            failures.append(f'{what}: rc {result.returncode}, stderr {result.stderr!r}, expected {message!r}')

    return verdict('compare_rounds.py', failures)


if __name__ == '__main__':
    sys.exit(main())

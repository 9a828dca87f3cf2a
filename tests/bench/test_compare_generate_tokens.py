#!/usr/bin/env python3
"""bench/compare_generate_tokens.py on --tokens-out files whose answers are known: AGREE with the count of distinct
ids (and a repetition said to be one), DISAGREE at the first differing position or with too few tokens, MISSING for
a row or a file the other side lacks, and the exit status. Standard library only.
  python3 tests/bench/test_compare_generate_tokens.py
"""
import pathlib
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / 'support'))
from script_check import BENCH, verdict  # noqa: E402

SCRIPT = BENCH / 'compare_generate_tokens.py'


def run(reference, other, *flags):
    """The script on two files of the given text (None: a file that does not exist): its CompletedProcess."""
    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for name, text in (('reference.txt', reference), ('other.txt', other)):
            path = pathlib.Path(folder) / name
            if text is not None:
                path.write_text(text)
            paths.append(str(path))
        return subprocess.run([sys.executable, str(SCRIPT), *paths, '--names', 'fathom', 'peer', '--label', 'm',
                               *flags], capture_output=True, text=True)


def ids_row(context, batch, ids):
    return f'{context} {batch} ' + ' '.join(str(i) for i in ids) + '\n'


def main():
    failures = []
    varied = [5, 9, 2, 7] * 10  # 40 ids, 4 distinct
    repeated = [11] * 40
    reference = ids_row(128, 1, varied) + ids_row(128, 8, repeated)
    result = run(reference, reference)
    want = ['AGREE: peer vs fathom, m context 128 batch 1: 40 greedy tokens equal (4 distinct ids)',
            'AGREE: peer vs fathom, m context 128 batch 8: 40 greedy tokens equal (1 distinct id; a repetition, '
            'which checks little)']
    if result.stdout.splitlines() != want or result.returncode != 0:
        failures.append(f'agreement: got {result.stdout!r}, exit {result.returncode}')
    # Two distinct ids are still a repetition; three are not.
    for ids, want_note in (([4, 6] * 20, True), ([4, 6, 8] * 14, False)):
        result = run(ids_row(128, 1, ids), ids_row(128, 1, ids))
        if ('a repetition' in result.stdout) != want_note or result.returncode != 0:
            failures.append(f'{len(set(ids))} distinct ids: got {result.stdout!r}, exit {result.returncode}')

    differing = varied[:17] + [3] + varied[18:]
    result = run(reference, ids_row(128, 1, differing) + ids_row(128, 8, repeated))
    if ('DISAGREE: peer vs fathom, m context 128 batch 1: first difference at new token 17 (fathom 9, peer 3)'
            not in result.stdout or result.returncode != 1):
        failures.append(f'a differing id: got {result.stdout!r}, exit {result.returncode}')

    result = run(ids_row(128, 1, varied[:20]), ids_row(128, 1, varied[:20]))
    if 'only 20 tokens to compare, fewer than 32' not in result.stdout or result.returncode != 1:
        failures.append(f'too few tokens: got {result.stdout!r}, exit {result.returncode}')

    result = run(reference, ids_row(128, 1, varied))
    if 'MISSING: peer vs fathom, m context 128 batch 8: no row in' not in result.stdout or result.returncode != 1:
        failures.append(f'a missing row: got {result.stdout!r}, exit {result.returncode}')

    result = run(reference, None)
    if 'MISSING: peer vs fathom, m: peer wrote no ids' not in result.stdout or result.returncode != 1:
        failures.append(f'a missing file: got {result.stdout!r}, exit {result.returncode}')
    return verdict(SCRIPT, failures)


if __name__ == '__main__':
    sys.exit(main())

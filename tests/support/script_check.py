"""What the tests of fathom's Python scripts share (bench/timeline's, bench/compare_rounds.py): running a script on a
file of given text, and the verdict. A test puts this folder on sys.path to import it."""
import pathlib
import subprocess
import sys
import tempfile

BENCH = pathlib.Path(__file__).resolve().parents[2] / 'bench'
TIMELINE = BENCH / 'timeline'


def run_script(script, text, *flags, name='input.csv'):
    """The script at path `script` run on a file `name` holding `text`, with `flags` after the file: its
    CompletedProcess."""
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / name
        path.write_text(text)
        return subprocess.run([sys.executable, str(script), str(path), *flags], capture_output=True, text=True)


def verdict(script, failures):
    """Prints each failure and the verdict; the exit status."""
    for failure in failures:
        print('FAIL:', failure)
    print(f'{script}:', 'FAILED' if failures else 'passed')
    return 1 if failures else 0

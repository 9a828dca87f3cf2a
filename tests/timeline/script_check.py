"""What the tests of bench/timeline's scripts share: running a script on a file of given text, and the verdict."""
import pathlib
import subprocess
import sys
import tempfile

TIMELINE = pathlib.Path(__file__).resolve().parents[2] / 'bench' / 'timeline'


def run_script(script, text, *flags):
    """bench/timeline/`script` run on a file holding `text`, with `flags` after the file: its CompletedProcess."""
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / 'input.csv'
        path.write_text(text)
        return subprocess.run([sys.executable, str(TIMELINE / script), str(path), *flags], capture_output=True,
                              text=True)


def verdict(script, failures):
    """Prints each failure and the verdict; the exit status."""
    for failure in failures:
        print('FAIL:', failure)
    print(f'{script}:', 'FAILED' if failures else 'passed')
    return 1 if failures else 0

"""`tables.py pack` and `tables.py merge`: the results of the runs made on one machine travel as one
small archive (what the pages are drawn from, never a checkpoint) and merge into another folder, so a
table measured over several sessions continues where it stopped.

What travels, at its path under the --out folder:
- each finished training run: RUN/{metrics.jsonl, recipe.yaml, measured_by.json} and RUN.log (a run
  is finished once its measured_by.json is written; an unfinished one cannot continue without its
  checkpoints, so it stays behind);
- each finished distillation chain (its distill.json names a model for each fraction; one stopped
  midway, like an unfinished run, stays behind): CHAIN/{distill.json, distill.md, order.json,
  order.md, recipe.yaml, measured_by.json (where the chain has one)} and CHAIN.log;
- the records kept beside them: *.measured_by.json, *.noise.json, *.bench.log, *.cudnn.log.
"""

import filecmp
import os
import shutil
import tarfile
import tempfile

from .distill_results import is_finished
from .records import RECORD
from .runs import TableError

RUN_FILES = ("metrics.jsonl", "recipe.yaml", RECORD)
CHAIN_FILES = ("distill.json", "distill.md", "order.json", "order.md", "recipe.yaml", RECORD)
RECORD_SUFFIXES = (".measured_by.json", ".noise.json", ".bench.log", ".cudnn.log")


def units(root):
    """The finished runs and chains under root, as {relative folder: [relative files]}, and the
    loose records, as [relative files]. Checkpoints (and everything else) are left out."""
    found, records = {}, []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        relative = os.path.relpath(folder, root)
        if "distill.json" in files and not is_finished(folder):
            dirs[:] = []  # a chain stopped midway: it continues only where its checkpoints are
            continue
        if "distill.json" in files:
            keep = [f for f in CHAIN_FILES if f in files]
        elif RECORD in files and "metrics.jsonl" in files:
            keep = [f for f in RUN_FILES if f in files]
        else:
            keep = None
        if keep is not None:
            found[relative] = [os.path.join(relative, f) for f in keep]
            if os.path.isfile(folder + ".log"):
                found[relative].append(relative + ".log")
            dirs[:] = []  # a run's subfolders are its checkpoints
            continue
        records += [os.path.normpath(os.path.join(relative, f)) for f in sorted(files) if f.endswith(RECORD_SUFFIXES)]
    return found, records


def pack(out_dir, archive, log=print):
    """Writes ARCHIVE (.tar.gz) with the finished runs, chains and records under out_dir."""
    if not os.path.isdir(out_dir):
        raise TableError(f"pack: {out_dir} is not a folder of table runs")
    if os.path.isdir(archive):
        raise TableError(f"pack: the archive {archive} is a folder; name a file such as results.tar.gz")
    found, records = units(out_dir)
    if not found and not records:
        raise TableError(f"pack: {out_dir} holds no finished run, chain or record")
    files = sorted(f for fs in found.values() for f in fs) + records
    temp = archive + ".tmp"
    with tarfile.open(temp, "w:gz") as tar:
        for f in files:
            tar.add(os.path.join(out_dir, f), arcname=f, recursive=False)
    os.replace(temp, archive)
    log(f"pack: {len(found)} finished runs and chains, {len(records)} records ({len(files)} files, "
        f"{os.path.getsize(archive):,} bytes) in {archive}")
    return len(files)


def _extract(archive, into):
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar.getmembers():
                path = os.path.normpath(member.name)
                if not member.isfile() or os.path.isabs(path) or path.startswith(".."):
                    raise TableError(f"merge: {archive} holds '{member.name}', which is not a plain file inside "
                                     "the folder; it was not written by tables.py pack")
            tar.extractall(into)
    except (OSError, tarfile.TarError) as e:
        raise TableError(f"merge: cannot read {archive} ({e})") from None


def _same_files(a_root, b_root, files):
    return all(os.path.isfile(os.path.join(b_root, f)) and
               filecmp.cmp(os.path.join(a_root, f), os.path.join(b_root, f), shallow=False) for f in files)


def merge(archive, out_dir, log=print):
    """Merges a pack archive into out_dir: a run or record not there is added; one there and the same
    is kept; an unfinished local run is replaced by the archive's finished one. A finished local run
    or a record that differs from the archive's is a conflict: nothing is written, and the error names
    each one."""
    if not os.path.isfile(archive):
        raise TableError(f"merge: no archive at {archive}")
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise TableError(f"merge: --out {out_dir} is a file, not a folder")
    with tempfile.TemporaryDirectory() as staging:
        _extract(archive, staging)
        incoming, records = units(staging)
        local, _ = units(out_dir) if os.path.isdir(out_dir) else ({}, [])
        conflicts, added, replaced = [], [], []
        for folder, files in incoming.items():
            data = [f for f in files if not f.endswith(RECORD) and not f.endswith(".log")]
            if folder in local:
                if not _same_files(staging, out_dir, data):
                    conflicts.append(f"{folder}: a finished run here differs from the archive's")
            elif os.path.exists(os.path.join(out_dir, folder)):
                replaced.append(folder)
            else:
                added.append(folder)
        new_records = []
        for f in records:
            target = os.path.join(out_dir, f)
            if not os.path.exists(target):
                new_records.append(f)
            elif not _same_files(staging, out_dir, [f]):
                conflicts.append(f"{f}: differs from the archive's")
        if conflicts:
            raise TableError(f"merge: {len(conflicts)} conflict(s) between {archive} and {out_dir}, nothing merged:\n  "
                             + "\n  ".join(conflicts) + "\nMerge into an empty folder, or remove the local copies "
                             "named above to take the archive's.")
        for folder in replaced:  # an unfinished local run: its checkpoints belong to a run now finished elsewhere
            shutil.rmtree(os.path.join(out_dir, folder))
        for folder in replaced + added:
            for f in incoming[folder]:
                _copy(staging, out_dir, f)
        for f in new_records:
            _copy(staging, out_dir, f)
    log(f"merge: {len(added)} runs added, {len(replaced)} unfinished runs replaced, "
        f"{len(incoming) - len(added) - len(replaced)} already here, {len(new_records)} records added, into {out_dir}")
    return added, replaced, new_records


def _copy(root, out_dir, relative):
    target = os.path.join(out_dir, relative)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copy2(os.path.join(root, relative), target)

"""Where the numbers come from: a `measured_by` record (date, commit, device, command) written by the
invocation that measured something, kept with what it measured so that a page redrawn elsewhere (or
from a merged archive) still names the device, the commit and the GPU time behind it."""

import datetime
import json
import os
import platform
import shlex
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORD = "measured_by.json"  # inside a training run's folder, written once the run is complete


def device_name():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0] + " (training on the GPU)"
    except (OSError, subprocess.TimeoutExpired):
        pass
    return f"CPU only ({platform.machine()}, {os.cpu_count()} cores)"


def commit():
    if os.environ.get("FATHOM_COMMIT"):
        return os.environ["FATHOM_COMMIT"]
    out = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else "unknown"


_INVOCATION = None


def this_invocation():
    """This invocation's date, commit, device and command (asked once: nvidia-smi is slow)."""
    global _INVOCATION
    if _INVOCATION is None:
        _INVOCATION = {"date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
                       "commit": commit(), "device": device_name(),
                       "command": "scripts/tables.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])}
    return dict(_INVOCATION)


def write_json(path, data):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    temp = path + ".tmp"
    with open(temp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(temp, path)


def read_json(path):
    """A record as a dict, or None where there is none or it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def run_record(run_dir, jobs, seconds, seed):
    """Marks a training run complete, naming who measured it, how many runs shared the device with
    it (--jobs) and its wall time."""
    record = this_invocation()
    record.update({"jobs": jobs, "seconds": round(seconds, 1), "seed": seed})
    write_json(os.path.join(run_dir, RECORD), record)
    return record


def table_record(path, measured_now, device=None):
    """The record of a table measured as a whole (distillation chains, kernel benchmarks): this
    invocation when it ran anything, else the kept one. device: the one a kept benchmark log names,
    which outranks this machine's."""
    kept = read_json(path)
    if measured_now or kept is None:
        info = this_invocation()
        if device and not measured_now:
            info["device"] = device
            info["command"] += " (report redrawn from the kept benchmark logs)"
        write_json(path, info)
        return info
    return kept


def summarize(records):
    """One provenance from the records of a table's runs: each distinct date range, commit, device
    and command, the GPU (or CPU) minutes the runs took, and the largest --jobs any ran under."""
    records = [r for r in records if r]
    if not records:
        return None

    def distinct(key):
        return sorted({str(r.get(key, "unknown")) for r in records})
    dates = distinct("date")
    return {"date": dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}",
            "commit": ", ".join(distinct("commit")), "device": "; ".join(distinct("device")),
            "command": "`; `".join(distinct("command")),
            "minutes": sum(float(r.get("seconds", 0)) for r in records) / 60.0,
            "jobs": max(int(r.get("jobs", 1)) for r in records)}

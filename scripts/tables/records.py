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
RECORD = "measured_by.json"  # inside a training run's or chain's folder, written once it is complete


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


NOT_RECORDED = "not recorded (no measured_by.json)"


def summarize(records):
    """One provenance from the records of a table's runs (None where a run has none): each distinct date range,
    command, and the largest --jobs any ran under; each distinct commit with the number of runs made from it, and
    each distinct device with the number of runs made on it and the GPU (or CPU) minutes they took, so that runs
    made on several machines are credited to each."""
    if not records:
        return None
    kept = [r for r in records if r]
    missing = len(records) - len(kept)

    def distinct(key):
        return sorted({str(r.get(key, "unknown")) for r in kept})

    def counted(key):
        counts = {}
        for r in kept:
            value = str(r.get(key, "unknown"))
            counts[value] = counts.get(value, 0) + 1
        if missing:
            counts[NOT_RECORDED] = missing
        return sorted(counts.items(), key=lambda item: (item[0] == NOT_RECORDED, -item[1], item[0]))

    minutes = {}
    shared_minutes = 0.0
    for r in kept:
        device = str(r.get("device", "unknown"))
        run_minutes = float(r.get("seconds", 0)) / 60.0
        minutes[device] = minutes.get(device, 0.0) + run_minutes
        shared_minutes += run_minutes / max(int(r.get("jobs", 1)), 1)
    dates = distinct("date") or [NOT_RECORDED]
    return {"date": dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}",
            "commits": counted("commit"),
            "devices": [(device, n, minutes.get(device)) for device, n in counted("device")],
            "runs": len(records), "command": "`; `".join(distinct("command")) or NOT_RECORDED,
            "minutes": sum(minutes.values()), "shared_minutes": shared_minutes,
            "jobs": max([int(r.get("jobs", 1)) for r in kept] or [1])}


def device_time_line(info):
    """The page's device time: the runs' minutes of training summed and, where runs shared a device (--jobs), the
    minutes the devices were busy, estimated as each run's minutes over the number of runs that shared its device."""
    line = f"- device time: {info['minutes']:.1f} minutes of training over all runs"
    if info.get("jobs", 1) > 1:
        line += (f"; up to {info['jobs']} shared a device at once, so the devices were busy about "
                 f"{info['shared_minutes']:.1f} minutes (each run's minutes over the runs sharing its device)")
    return line


def runs_text(n, total):
    return f"all {n} runs" if n == total and n > 1 else f"{n} run{'' if n == 1 else 's'}"


def provenance_lines(info):
    """The commit and device lines of a page: one line where all its runs agree, else one line per commit and per
    device with the runs made from or on it (and each device's minutes)."""
    if "devices" not in info:  # one measurement (a kernel benchmark): its own record
        return [f"- commit: {info['commit']}", f"- device: {info['device']}"]
    total = info["runs"]
    lines = []
    if len(info["commits"]) == 1:
        lines.append(f"- commit: {info['commits'][0][0]}: {runs_text(info['commits'][0][1], total)}")
    else:
        lines.append("- commits (the runs made from each):")
        lines += [f"  - {commit}: {runs_text(n, total)}" for commit, n in info["commits"]]
    if len(info["devices"]) == 1:
        lines.append(f"- device: {info['devices'][0][0]}: {runs_text(info['devices'][0][1], total)}")
    else:
        lines.append("- devices (the runs made on each, and their minutes of training):")
        lines += [f"  - {device}: {runs_text(n, total)}" + (f", {m:.1f} minutes" if m is not None else "")
                  for device, n, m in info["devices"]]
    return lines

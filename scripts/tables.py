#!/usr/bin/env python3
"""Reproduces the papers' ablation tables with fathom: runs each table's recipes (or kernel benchmarks)
at a chosen scale, skips runs already complete, gathers metrics.jsonl, and writes OUT/<table>.md (the
paper's layout, the paper's figures beside ours, each effect marked agrees / disagrees) and
OUT/<table>.png.

  scripts/tables.py TABLE|all [--scale tiny|small|paper] [--out DIR] [--steps N] [--jobs N]
                    [--fathom PATH] [--bench PATH] [--set key=value ...]

Tables: moda-table3, moda-table6, mod, dsla-states (training); dsla-conversion, dsla-order (a teacher
trained once, then `fathom distill` chains; --steps sets the teacher's steps); moda-table7, moda-table2
(GPU kernels).
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tables import kernels, report  # noqa: E402
from tables.distill_runs import FOLDER as DISTILL_FOLDER  # noqa: E402
from tables.distill_tables import DISTILL_TABLES  # noqa: E402
from tables.metrics import RunMetrics  # noqa: E402
from tables.runs import SCALES, TableError, fathom_binary, read_metrics, scale_sets, train  # noqa: E402
from tables.training_tables import TABLES  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNEL_TABLES = ["moda-table7", "moda-table2"]
ALL = [t.name for t in TABLES] + [t.name for t in DISTILL_TABLES] + KERNEL_TABLES


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("table", choices=ALL + ["all"])
    ap.add_argument("--scale", default="small", choices=SCALES)
    ap.add_argument("--out", default="tables-out", help="run folders and outputs (default: tables-out)")
    ap.add_argument("--steps", type=int, help="training steps per run (default: the scale's)")
    ap.add_argument("--jobs", type=int, default=1, help="runs trained at once (a GPU fits several small ones)")
    ap.add_argument("--fathom", help="the fathom binary (default: build/fathom)")
    ap.add_argument("--bench", help="bench_moda_attention (default: build/bench/bench_moda_attention)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra override for every run")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error("--jobs must be at least 1")
    extra = {}
    for item in args.set:
        if "=" not in item:
            ap.error(f"--set {item}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        extra[k] = v
    args.extra = extra
    return args


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


def this_invocation():
    return {"date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}", "commit": commit(),
            "device": device_name(),
            "command": "scripts/tables.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])}


def measured_by(path, measured_now, device=None):
    """Where the numbers come from: this invocation when it ran anything, else the one that did
    (kept in PATH), so a report redrawn elsewhere still names the device that measured it. device:
    the one a kept benchmark log names, which outranks this machine's."""
    if measured_now or not os.path.isfile(path):
        info = this_invocation()
        if device and not measured_now:
            info["device"] = device
            info["command"] += " (report redrawn from the kept benchmark logs)"
        with open(path, "w", encoding="utf-8") as f:
            json.dump(info, f)
        return info
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def provenance(table, args, info, extra_lines=()):
    return [f"- date: {info['date']}",
            f"- commit: {info['commit']}",
            f"- device: {info['device']}",
            f"- scale: {args.scale}" + (f", {args.steps} steps per run" if args.steps else ""),
            f"- command: `{info['command']}`",
            f"- source: {table.source}"] + list(extra_lines)


def training_table(table, args, fathom, log):
    runs = table.runs(args.scale)
    sets = scale_sets(args.scale, args.steps, args.extra)
    out = os.path.abspath(args.out)
    log(f"{table.name}: {len(runs)} runs at scale {args.scale} in {out}/runs/{table.name}")
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(train, fathom, REPO, out, table.name, run, sets, log) for run in runs]
        # Wait for all before reporting the first failure, so no run is left half-written.
        errors = [f.exception() for f in futures]
        failed = [e for e in errors if e]
        if failed:
            raise failed[0]
        dirs = [f.result()[0] for f in futures]
        trained = any(f.result()[1] for f in futures)
    info = measured_by(os.path.join(out, "runs", table.name, "measured_by.json"), trained)
    measured = {run.key: RunMetrics(f"{table.name}/{run.key}", read_metrics(os.path.join(d, "metrics.jsonl")))
                for run, d in zip(runs, dirs)}
    sections, effects = table.sections(measured)
    steps = sorted({m.final_step for m in measured.values()})
    md = os.path.join(out, f"{table.name}.md")
    png = os.path.join(out, f"{table.name}.png")
    report.write_markdown(md, table.title, provenance(table, args, info, [
        f"- steps per run: {', '.join(map(str, steps))}; run folders: runs/{table.name}/ (each with its exact "
        f"`fathom train` command in the .log beside it)",
        f"- figure: [{table.name}.png]({table.name}.png)"]), sections + [summary(effects)])
    require_matplotlib(md)
    report.plot_loss_curves(png, table.title.split(":")[0], table.plot_rows(measured), table.routing_rows(measured))
    log(f"{table.name}: wrote {md} and {png}")


def distill_table(table, args, fathom, log):
    out = os.path.abspath(args.out)
    log(f"{table.name}: teacher and {len(table.orders)} distillation chain(s) at scale {args.scale} in "
        f"{out}/runs/{DISTILL_FOLDER}")
    results, ran = table.chains(fathom, REPO, out, args, log)
    # One record per table: the chains are shared, but each table may be redrawn from them on its own.
    info = measured_by(os.path.join(out, "runs", DISTILL_FOLDER, f"{table.name}.measured_by.json"), ran)
    sections, effects = table.sections(results)
    md = os.path.join(out, f"{table.name}.md")
    png = os.path.join(out, f"{table.name}.png")
    report.write_markdown(md, table.title, provenance(table, args, info, [
        f"- run folders: runs/{DISTILL_FOLDER}/teacher (`fathom train`) and runs/{DISTILL_FOLDER}/"
        f"{{{','.join(table.orders)}}} (`fathom distill`, each with distill.md, order.md and its exact command in "
        f"the .log beside it)",
        f"- figure: [{table.name}.png]({table.name}.png)"]),
        sections + [summary(effects, "signs only: one seed, a small teacher, short chains")])
    require_matplotlib(md)
    table.plot(png, results)
    log(f"{table.name}: wrote {md} and {png}")


def require_matplotlib(written):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise TableError(f"wrote {written}, but no PNG: matplotlib is not installed for {sys.executable} "
                         "(Debian: apt-get install python3-matplotlib; run /usr/bin/python3 scripts/tables.py "
                         "again with the same --out to draw it from the finished runs)") from None


def summary(effects, caveat="signs only: one seed, small models, short runs"):
    agree = sum(e.verdict() == "agrees" for e in effects)
    return [f"{agree} of {len(effects)} effects agree with the paper in direction ({caveat})."]


class KernelTable:
    def __init__(self, name):
        self.name = name
        self.title = {"moda-table7": "MoDA Table 7: the four MoDA kernels",
                      "moda-table2": "MoDA Table 2: kernel efficiency over T, G, L"}[name]
        self.source = ("Paper: Zhu et al., MoDA, Tables 2 (p. 9) and 7 (p. 13), A100 bf16 forward + backward; "
                       "ours: bench/bench_moda_attention (CUDA events, medians) and bench/attention_reference.py "
                       "--table2 for cuDNN (PyTorch) where torch is installed.")


def kernel_table(name, args, log):
    table = KernelTable(name)
    if args.scale == "tiny":
        log(f"{name}: skipped at scale tiny: the kernel sweeps time CUDA kernels and need a GPU "
            "(run --scale small on a FATHOM_CUDA=ON build)")
        return
    out = os.path.abspath(args.out)
    binary = None if kernels.have_logs(name, out) else kernels.bench_binary(args.bench, REPO)
    os.makedirs(out, exist_ok=True)
    if name == "moda-table7":
        rows, header, effects, points, ran = kernels.table7(binary, args.scale, out, log)
    else:
        rows, header, effects, points, ran = kernels.table2(binary, REPO, args.scale, out, log)
    info = measured_by(os.path.join(out, f"{name}.measured_by.json"), ran, kernels.bench_device(out, name))
    md = os.path.join(out, f"{name}.md")
    report.write_markdown(md, table.title,
                          provenance(table, args, info,
                                     [f"- benchmark arguments: `{' '.join(kernels.BENCH_ARGS[args.scale])}` "
                                      f"(raw output: {name}.bench.log)", f"- figure: [{name}.png]({name}.png)"]),
                          [report.markdown_table(header, rows), ["Effects (b - a):", ""] + report.effects_table(effects),
                           summary(effects, "signs only; A100 against H200, the paper's Triton kernels against fathom's")])
    require_matplotlib(md)
    (kernels.plot_table7 if name == "moda-table7" else kernels.plot_table2)(os.path.join(out, f"{name}.png"), points)
    log(f"{name}: wrote {md} and {name}.png")


def main(argv):
    args = parse_args(argv)
    names = ALL if args.table == "all" else [args.table]
    log = lambda text: print(text, flush=True)  # noqa: E731
    failures = []
    for name in names:
        try:
            training = next((t for t in TABLES if t.name == name), None)
            distilled = next((t for t in DISTILL_TABLES if t.name == name), None)
            if training:
                training_table(training, args, fathom_binary(args.fathom, REPO), log)
            elif distilled:
                distill_table(distilled, args, fathom_binary(args.fathom, REPO), log)
            else:
                kernel_table(name, args, log)
        except TableError as e:
            failures.append(name)
            print(f"tables: error: {name}: {e}", file=sys.stderr, flush=True)
    if failures:
        print(f"tables: {len(failures)} table(s) failed (see the errors above): {', '.join(failures)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

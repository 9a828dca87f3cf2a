#!/usr/bin/env python3
"""Reproduces the papers' ablation tables with fathom: runs each table's recipes at a chosen scale and
number of seeds (or its kernel benchmarks), skips runs already complete and resumes stopped ones,
gathers metrics.jsonl, and writes OUT/<table>.md (the paper's layout, the paper's figures beside ours
as mean ± std over seeds, each effect a mean difference with its 95% CI and a verdict: reproduced,
contradicted or unresolved) and OUT/<table>.png (with ± std error bars).

  scripts/tables.py TABLE|all [--scale tiny|small|reference|paper] [--seeds N] [--out DIR] [--steps N]
                    [--jobs N] [--fathom PATH] [--bench PATH] [--set key=value ...]
  scripts/tables.py noise TABLE|all [--scale reference] [--seeds N] [same options]
  scripts/tables.py pack --out DIR ARCHIVE.tar.gz
  scripts/tables.py merge ARCHIVE.tar.gz --out DIR

Tables: moda-table3, moda-table6, mod, dsla-states (training); dsla-conversion, dsla-order (a teacher
trained once, --steps sets its steps, with a plateau check of its validation curve; then one `fathom
distill` chain per order and seed, train.seed 1..N: entropy with 2 and 1 states, sensitivity, and random
shuffle i at seed i, so chains pair by seed); moda-table7, moda-table2 (GPU kernels). `noise` trains
a training table's baseline row at --seeds seeds and prints the seed-to-seed std of its validation
loss and tokens/s (the measurement a scale is chosen from); `pack` bundles the finished runs of DIR
(never checkpoints) into an archive, and `merge` adds one to DIR.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tables import archive, kernels, noise, report  # noqa: E402
from tables.distill_chains import FOLDER as DISTILL_FOLDER  # noqa: E402
from tables.distill_tables import DISTILL_TABLES, TEACHER_FIGURE  # noqa: E402
from tables.effects import summary  # noqa: E402
from tables.records import device_time_line, provenance_lines, summarize, table_record  # noqa: E402
from tables.runs import TableError, fathom_binary, other_seeds  # noqa: E402
from tables.scales import DEFAULT_SEEDS, SCALES  # noqa: E402
from tables.training import train_rows  # noqa: E402
from tables.training_tables import TABLES, Context  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNEL_TABLES = ["moda-table7", "moda-table2"]
ALL = [t.name for t in TABLES] + [t.name for t in DISTILL_TABLES] + KERNEL_TABLES
COMMANDS = ("noise", "pack", "merge")


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def output_folder(ap, path):
    if os.path.exists(path) and not os.path.isdir(path):
        ap.error(f"--out {path} is a file; name a folder (it is created if missing)")
    return path


def parse_table_args(argv, command=None):
    """The options of a table run (command None) or of `noise`."""
    ap = argparse.ArgumentParser(prog="tables.py" + (f" {command}" if command else ""), description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    training = [t.name for t in TABLES]
    ap.add_argument("table", choices=(training if command == "noise" else ALL) + ["all"])
    ap.add_argument("--scale", default="reference" if command == "noise" else "small", choices=SCALES)
    ap.add_argument("--seeds", type=positive_int,
                    help="seeds per row (default: " + ", ".join(f"{k} {v}" for k, v in DEFAULT_SEEDS.items()) +
                    (", and at least 3 for noise" if command == "noise" else "") + ")")
    ap.add_argument("--out", default="tables-out", help="run folders and outputs (default: tables-out)")
    ap.add_argument("--steps", type=positive_int, help="training steps per run (default: the scale's)")
    ap.add_argument("--jobs", type=positive_int, default=1,
                    help="runs trained at once (throughput is reported only with 1: a run alone on the device)")
    ap.add_argument("--fathom", help="the fathom binary (default: build/fathom)")
    ap.add_argument("--bench", help="bench_moda_attention (default: build/bench/bench_moda_attention)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra override for every run")
    args = ap.parse_args(argv)
    output_folder(ap, args.out)
    if args.seeds is None:
        args.seeds = max(3, DEFAULT_SEEDS[args.scale]) if command == "noise" else DEFAULT_SEEDS[args.scale]
    if command == "noise" and args.seeds < 2:
        ap.error("noise needs --seeds 2 or more: a std over one seed does not exist")
    extra = {}
    for item in args.set:
        key, equals, value = item.partition("=")
        if not equals or not key.strip():
            ap.error(f"--set {item}: expected KEY=VALUE")
        extra[key.strip()] = value
    args.extra = extra
    return args


def parse_pack_args(argv):
    ap = argparse.ArgumentParser(prog="tables.py pack", description="Bundles the finished runs, chains and "
                                 "records of a table folder (never checkpoints) into one .tar.gz archive.")
    ap.add_argument("archive", help="the archive to write (.tar.gz)")
    ap.add_argument("--out", required=True, help="the table folder to pack (the --out the tables ran with)")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.out):
        ap.error(f"--out {args.out} is not a folder")
    if os.path.isdir(args.archive):
        ap.error(f"{args.archive} is a folder; name the archive file to write, such as results.tar.gz")
    return args


def parse_merge_args(argv):
    ap = argparse.ArgumentParser(prog="tables.py merge", description="Merges an archive written by "
                                 "`tables.py pack` into a table folder; conflicting finished runs are refused.")
    ap.add_argument("archive", help="the archive written by tables.py pack")
    ap.add_argument("--out", required=True, help="the table folder to merge into (created if missing)")
    args = ap.parse_args(argv)
    output_folder(ap, args.out)
    return args


def provenance(table, args, info, extra_lines=()):
    lines = [f"- date: {info['date']}"] + provenance_lines(info) + [
        f"- scale: {args.scale}" + (f", {args.steps} steps per run" if args.steps else ""),
        f"- command: `{info['command']}`"]
    if "minutes" in info:
        lines.append(device_time_line(info))
    return lines + [f"- source: {table.source}"] + list(extra_lines)


def noise_line(table, rows):
    base = rows[table.baseline]
    std = base.std(lambda m: m.val_loss())
    text = f"{std:.4f} nats" if std is not None else "not measured (one seed; run with --seeds 3 or more)"
    return (f"- baseline noise: the seed-to-seed std of {table.label(table.baseline)}'s validation loss is {text} "
            f"over {len(base.seeds)} seed(s)")


def training_table(table, args, fathom, log):
    rows, records, _ = train_rows(table, None, args, fathom, REPO, log)
    info = summarize(records)
    ctx = Context(args.scale, alone=info["jobs"] == 1)
    sections, effects = table.sections(rows, ctx)
    steps = sorted({m.final_step for r in rows.values() for m in r.runs.values()})
    out = os.path.abspath(args.out)
    md = os.path.join(out, f"{table.name}.md")
    png = os.path.join(out, f"{table.name}.png")
    seeds = sorted({s for r in rows.values() for s in r.seeds})
    left_out = other_seeds(os.path.join(out, "runs", table.name), list(rows), seeds)
    report.write_markdown(md, table.title, provenance(table, args, info, [
        f"- seeds: {', '.join(map(str, seeds))} (train.seed); each row is the mean ± std over them"] +
        ([f"- {report.left_out_note('Runs', f'runs/{table.name}', seeds, left_out)}"] if left_out else []) + [
        noise_line(table, rows),
        f"- steps per run: {', '.join(map(str, steps))}; validation domain compared: "
        f"{rows[table.baseline].any_run().domain()}; run folders: runs/{table.name}/ROW/seed-N (each with its "
        f"exact `fathom train` command in the .log beside it)",
        f"- figure: [{table.name}.png]({table.name}.png)"]), sections + [summary(effects)])
    require_matplotlib(md)
    report.plot_loss_curves(png, table.title.split(":")[0], table.plot_rows(rows), table.routing_rows(rows))
    log(f"{table.name}: wrote {md} and {png}")


def distill_table(table, args, fathom, log):
    out = os.path.abspath(args.out)
    log(f"{table.name}: the teacher, then chains {', '.join(table.chains)} at {args.seeds} seed(s) at scale "
        f"{args.scale} in {out}/runs/{DISTILL_FOLDER}")
    results, _ = table.measure(fathom, REPO, out, args, log)
    # The records of the teacher's run and of each chain on the page (each kept in its folder): the machines,
    # commits and minutes behind them, wherever each was made.
    info = summarize(results.records)
    sections, effects = table.sections(results)
    md = os.path.join(out, f"{table.name}.md")
    png = os.path.join(out, f"{table.name}.png")
    report.write_markdown(md, table.title, provenance(table, args, info, [
        f"- seeds: {', '.join(map(str, results.seeds))} (train.seed of each chain; the teacher is trained once); "
        f"each row is the mean ± std over them, and chains of one seed share their batches (paired effects)",
        f"- run folders: runs/{DISTILL_FOLDER}/teacher (`fathom train`) and runs/{DISTILL_FOLDER}/"
        f"{{{','.join(table.chains)}}}/seed-N (`fathom distill`, each with distill.md, order.md and its exact "
        f"command in the .log beside it, and its measured_by.json); above, the teacher and each chain count as one "
        f"run",
        f"- figures: [{table.name}.png]({table.name}.png), the teacher's curve [{TEACHER_FIGURE}]({TEACHER_FIGURE})"]),
        sections + [summary(effects)])
    require_matplotlib(md)
    table.plot(png, results)
    table.plot_teacher(os.path.join(out, TEACHER_FIGURE), results)
    log(f"{table.name}: wrote {md}, {png} and {TEACHER_FIGURE}")


def require_matplotlib(written):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise TableError(f"wrote {written}, but no PNG: matplotlib is not installed for {sys.executable} "
                         "(Debian: apt-get install python3-matplotlib; run /usr/bin/python3 scripts/tables.py "
                         "again with the same --out to draw it from the finished runs)") from None


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
    info = table_record(os.path.join(out, f"{name}.measured_by.json"), ran, kernels.bench_device(out, name))
    md = os.path.join(out, f"{name}.md")
    report.write_markdown(md, table.title,
                          provenance(table, args, info, kernels.device_lines(out, name) +
                                     [f"- benchmark arguments: `{' '.join(kernels.BENCH_ARGS[args.scale])}` "
                                      f"(raw output: {name}.bench.log)", f"- figure: [{name}.png]({name}.png)"]),
                          [report.markdown_table(header, rows), ["How the timings move:", ""] +
                           kernels.changes_table(effects),
                           ["Medians of one benchmark run, the paper's Triton kernels on an A100 against fathom's on "
                            "this device: no interval, so no verdict."]])
    require_matplotlib(md)
    (kernels.plot_table7 if name == "moda-table7" else kernels.plot_table2)(os.path.join(out, f"{name}.png"), points)
    log(f"{name}: wrote {md} and {name}.png")


def run_tables(args):
    names = ALL if args.table == "all" else [args.table]
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
    return failures


def run_noise(args):
    failures = []
    for table in TABLES if args.table == "all" else [t for t in TABLES if t.name == args.table]:
        try:
            noise.measure(table, args, fathom_binary(args.fathom, REPO), REPO, log)
        except TableError as e:
            failures.append(table.name)
            print(f"tables: error: noise {table.name}: {e}", file=sys.stderr, flush=True)
    return failures


def log(text):
    # One write per line: runs launched side by side (--jobs) log from their own threads.
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def main(argv):
    command = argv[0] if argv and argv[0] in COMMANDS else None
    try:
        if command == "pack":
            args = parse_pack_args(argv[1:])
            archive.pack(args.out, args.archive, log)
            return 0
        if command == "merge":
            args = parse_merge_args(argv[1:])
            archive.merge(args.archive, args.out, log)
            return 0
    except TableError as e:
        print(f"tables: error: {e}", file=sys.stderr)
        return 1
    args = parse_table_args(argv[1:] if command else argv, command)
    failures = run_noise(args) if command == "noise" else run_tables(args)
    if failures:
        print(f"tables: {len(failures)} table(s) failed (see the errors above): {', '.join(failures)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

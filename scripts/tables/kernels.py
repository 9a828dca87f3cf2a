"""MoDA Tables 2 and 7: run bench_moda_attention (and PyTorch's cuDNN attention where torch is there),
read the Markdown rows they print, and lay them out beside the paper's A100 figures."""

import os
import subprocess
from dataclasses import dataclass

from .report import fmt, markdown_table, pyplot, save, signed
from .runs import TableError


@dataclass
class Change:
    """How a timing moves between two settings, beside the paper's: medians of one benchmark run,
    with no interval, so a page shows it without a verdict."""
    label: str
    paper: str
    measured: float
    unit: str


def changes_table(changes):
    rows = [[c.label, c.paper, f"{signed(c.measured, 3)} {c.unit}"] for c in changes]
    return markdown_table(["change (b - a)", "paper", "measured (medians)"], rows, ["---", "---", "---:"])

# Table 7 (p. 13), A100 fwd+bwd ms at T = 1024.
TABLE7_PAPER = {"naive": 2128.900, "flat": 13.102, "chunk": 6.286, "group": 1.460}
TABLE7_NAMES = {"naive": "naive (paper: PyTorch; fathom: a naive CUDA kernel)", "flat": "Flash-compatible", "chunk": "+ chunk-aware",
                "group": "+ group-aware"}
# Table 2 (p. 9), extra time (MoDA - FA2) / MoDA in %, where the paper prints it.
TABLE2_PAPER_EXTRA = {("T", 4096): 25.86, ("T", 8192): 18.99, ("T", 16384): 8.59, ("T", 32768): 4.38,
                      ("T", 65536): 2.73, ("G", 2): 27.07, ("G", 8): 8.59, ("G", 32): 2.84,
                      ("L", 64): 8.59, ("L", 128): 15.57, ("L", 256): 30.52}
BENCH_ARGS = {"small": ["--max-t", "16384", "--min-reps", "3"], "paper": ["--min-reps", "5"]}


def parse_markdown_rows(text, first_header):
    """Rows (dicts by header) of the first Markdown table whose first header cell is first_header."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_header:
            rows = []
            for body in lines[i + 2:]:
                if not body.startswith("|"):
                    break
                values = [c.strip() for c in body.strip().strip("|").split("|")]
                rows.append(dict(zip(cells, values)))
            return rows
    raise TableError(f"the benchmark printed no table headed '{first_header}'")


def number(row, key):
    text = row.get(key, "").rstrip("%").replace(",", "")
    try:
        return float(text)
    except ValueError:
        raise TableError(f"benchmark row {row} has no number under '{key}'") from None


def have_logs(name, out_dir):
    return os.path.isfile(os.path.join(out_dir, f"{name}.bench.log"))


def bench_device(out_dir, name):
    """The device line the benchmark printed into its kept log ("device: NVIDIA H200, ..."), or None."""
    path = os.path.join(out_dir, f"{name}.bench.log")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("device: "):
                    return line[len("device: "):].split(";")[0].strip()
    return None


def log_devices(out_dir, name):
    """[(log file, the GPU its first line names)] of the kept logs of a kernel table (bench_moda_attention's,
    and for Table 2 PyTorch's cuDNN reference, measured apart and possibly elsewhere), without the details
    after the name."""
    found = []
    for suffix in (".bench.log", ".cudnn.log"):
        path = os.path.join(out_dir, name + suffix)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                device = next((line[len("device: "):] for line in f if line.startswith("device: ")), None)
            if device:
                found.append((name + suffix, device.split(";")[0].split(",")[0].strip()))
    return found


def device_lines(out_dir, name):
    """The page's line per log where its logs were measured on different devices (else none: the record's
    device line names the one)."""
    logs = log_devices(out_dir, name)
    if len({device for _, device in logs}) < 2:
        return []
    return ["- the logs were measured on different devices:"] + [f"  - {f}: {device}" for f, device in logs]


def run_bench(command, log_path, log):
    """The benchmark's stdout; a log kept from an earlier invocation is reused (resumable)."""
    if os.path.isfile(log_path):
        log(f"  {os.path.basename(log_path)}: kept from an earlier run, not timed again")
        with open(log_path, encoding="utf-8") as f:
            return f.read().split("\n", 1)[1], False
    log(f"  running {' '.join(command)}")
    try:
        result = subprocess.run(command, capture_output=True, text=True)
    except OSError as e:
        raise TableError(f"cannot start {command[0]}: {e.strerror}") from None
    if result.returncode != 0:
        with open(log_path + ".failed", "w", encoding="utf-8") as f:
            f.write(" ".join(command) + "\n" + result.stdout + result.stderr)
        raise TableError(f"{' '.join(command)} failed (exit status {result.returncode}); see {log_path}.failed:\n"
                         + result.stderr[-1500:])
    with open(log_path, "w", encoding="utf-8") as f:
        f.write(" ".join(command) + "\n" + result.stdout)
    return result.stdout, True


def bench_binary(explicit, repo):
    path = explicit or os.path.join(repo, "build", "bench", "bench_moda_attention")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise TableError(f"no bench_moda_attention at {path} (build a FATHOM_CUDA=ON tree, or pass --bench)")
    return path


def table7(binary, scale, out_dir, log):
    text, ran = run_bench([binary, "table7"] + BENCH_ARGS[scale], os.path.join(out_dir, "moda-table7.bench.log"), log)
    rows = {r["kernel"]: r for r in parse_markdown_rows(text, "kernel")}
    missing = [k for k in TABLE7_PAPER if k not in rows]
    if missing:
        raise TableError(f"bench_moda_attention table7 printed no row for {', '.join(missing)}")
    order = list(TABLE7_PAPER)
    table, effects = [], []
    for i, k in enumerate(order):
        ours = number(rows[k], "fwd+bwd ms")
        table.append([TABLE7_NAMES[k], fmt(TABLE7_PAPER[k], 3), fmt(ours, 3),
                      f"{TABLE7_PAPER['naive'] / TABLE7_PAPER[k]:.1f}x",
                      f"{number(rows['naive'], 'fwd+bwd ms') / ours:.1f}x", rows[k].get("reps", "")])
        if i:
            prev = order[i - 1]
            effects.append(Change(f"{TABLE7_NAMES[k]} - {TABLE7_NAMES[prev]} (fwd+bwd ms)",
                                  f"{TABLE7_PAPER[k] - TABLE7_PAPER[prev]:+.3f} ms",
                                  ours - number(rows[prev], "fwd+bwd ms"), "ms"))
    header = ["kernel", "paper A100 fwd+bwd ms", "ours fwd+bwd ms", "paper speed-up vs naive",
              "ours speed-up vs naive", "reps"]
    return table, header, effects, [(k, TABLE7_PAPER[k], number(rows[k], "fwd+bwd ms")) for k in order], ran


def cudnn_reference(repo, scale, out_dir, log):
    """fwd+bwd ms of PyTorch's cuDNN attention by size label (T16K-G8, ...), or None without torch."""
    script = os.path.join(repo, "bench", "attention_reference.py")
    log_path = os.path.join(out_dir, "moda-table2.cudnn.log")
    if not os.path.isfile(log_path):
        probe = subprocess.run(["python3", "-c", "import torch; assert torch.cuda.is_available()"],
                               capture_output=True)
        if probe.returncode != 0:
            log("  moda-table2: no PyTorch with CUDA here, the cuDNN column stays empty (not measured)")
            return None
    text, _ = run_bench(["python3", script, "--table2"] + BENCH_ARGS[scale], log_path, log)
    return {r["size"]: number(r, "fwd+bwd ms") for r in parse_markdown_rows(text, "size") if r["backend"] == "cudnn"}


def table2(binary, repo, scale, out_dir, log):
    text, ran = run_bench([binary, "table2"] + BENCH_ARGS[scale], os.path.join(out_dir, "moda-table2.bench.log"), log)
    # The benchmark also prints fp32-accumulation and gradient-add variants; Table 2 sweeps T, G and L.
    rows = [r for r in parse_markdown_rows(text, "sweep") if r["sweep"] in ("T", "G", "L")]
    cudnn = cudnn_reference(repo, scale, out_dir, log)
    table, points = [], []
    for r in rows:
        sweep = r["sweep"]
        x = int(number(r, sweep))
        t, g = int(number(r, "T")), int(number(r, "G"))
        paper = TABLE2_PAPER_EXTRA.get((sweep, x))
        ours = number(r, "extra / MoDA")
        label = f"T{t // 1024}K-G{g}"
        cudnn_ms = cudnn.get(label) if cudnn and sweep != "L" else None
        table.append([sweep, t, g, int(number(r, "L")), fmt(number(r, "flash fwd+bwd ms"), 3),
                      fmt(cudnn_ms, 3) if cudnn_ms is not None else "-",
                      fmt(number(r, "group fwd+bwd ms"), 3), fmt(paper, 2) + "%" if paper is not None else "-",
                      f"{ours:.2f}%"])
        points.append((sweep, x, paper, ours))
    effects = []
    for sweep, sign, text_ in (("T", -1, "longer sequences"), ("G", -1, "larger GQA groups"),
                               ("L", 1, "more depth slots")):
        pts = sorted((p for p in points if p[0] == sweep), key=lambda p: p[1])
        if len(pts) >= 2:
            first, last = pts[0], pts[-1]
            pf = TABLE2_PAPER_EXTRA.get((sweep, first[1]))
            pl = TABLE2_PAPER_EXTRA.get((sweep, last[1]))
            paper_text = f"{pf:.2f}% -> {pl:.2f}%" if pf is not None and pl is not None else \
                ("falls" if sign < 0 else "rises")
            effects.append(Change(f"extra time, {text_} ({sweep} {first[1]} -> {last[1]})", paper_text,
                                  last[3] - first[3], "points"))
    header = ["sweep", "T", "G", "L", "fathom flash fwd+bwd ms", "cuDNN fwd+bwd ms", "MoDA group fwd+bwd ms",
              "paper extra / MoDA", "ours extra / MoDA"]
    return table, header, effects, points, ran


def plot_table7(path, points):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    names = [TABLE7_NAMES[k] for k, _, _ in points]
    xs = range(len(points))
    ax.bar([x - 0.2 for x in xs], [p for _, p, _ in points], 0.4, label="paper (A100)")
    ax.bar([x + 0.2 for x in xs], [o for _, _, o in points], 0.4, label="fathom (this device)")
    ax.set_yscale("log")
    ax.set_xticks(list(xs), names)
    ax.set_ylabel("fwd+bwd ms (log)")
    ax.set_title("MoDA Table 7: the four kernels, T = 1024, G = 8, L = 64")
    ax.legend()
    save(fig, path)


def plot_table2(path, points):
    plt = pyplot()
    sweeps = [s for s in ("T", "G", "L") if any(p[0] == s for p in points)]
    fig, axes = plt.subplots(1, len(sweeps), figsize=(5 * len(sweeps), 4), squeeze=False)
    for ax, sweep in zip(axes[0], sweeps):
        pts = sorted((p for p in points if p[0] == sweep), key=lambda p: p[1])
        ax.plot([p[1] for p in pts], [p[3] for p in pts], "o-", label="fathom")
        paper = [(p[1], p[2]) for p in pts if p[2] is not None]
        if paper:
            ax.plot(*zip(*paper), "s--", label="paper (A100)")
        ax.set_xscale("symlog", base=2, linthresh=1) if any(p[1] == 0 for p in pts) else \
            ax.set_xscale("log", base=2)
        ax.set_xlabel(sweep)
        ax.set_ylabel("extra time / MoDA (%)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("MoDA Table 2: group kernel vs attention without depth")
    save(fig, path)

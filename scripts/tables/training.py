"""Trains a table's rows at every seed (several runs at once with --jobs), skipping complete runs and
resuming stopped ones, and gathers the finished runs into rows.Row objects with their records."""

import os
from concurrent.futures import ThreadPoolExecutor

from .metrics import RunMetrics
from .records import RECORD, read_json
from .rows import Row
from .runs import check_run, data_order, read_metrics, run_dir_for, train
from .scales import COMPARED_DOMAIN, scale_sets, seeds


def train_rows(table, keys, args, fathom, repo, log):
    """Trains the rows named by keys (None: all) of `table` at args.seeds seeds. Returns
    ({key: Row}, [the runs' measured_by records], whether anything trained now)."""
    runs = [r for r in table.runs(args.scale) if keys is None or r.key in keys]
    sets = scale_sets(args.scale, args.steps, args.extra)
    out = os.path.abspath(args.out)
    seeded = [run.at_seed(seed) for run in runs for seed in seeds(args.seeds)]
    log(f"{table.name}: {len(seeded)} runs ({len(runs)} rows x {args.seeds} seeds) at scale {args.scale} in "
        f"{out}/runs/{table.name}")
    for run in seeded:  # a run made with other settings is refused before any run trains
        check_run(repo, out, table.name, run, sets)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(train, fathom, repo, out, table.name, run, sets, log, args.jobs) for run in seeded]
        # Wait for all before reporting the first failure, so no run is left half-written.
        failed = [f.exception() for f in futures if f.exception()]
        if failed:
            raise failed[0]
        trained = any(f.result()[1] for f in futures)
    domain = COMPARED_DOMAIN[args.scale]
    rows, records = {}, []
    for run in runs:
        per_seed = {}
        for seed in seeds(args.seeds):
            run_dir = run_dir_for(out, table.name, run.at_seed(seed))
            per_seed[seed] = RunMetrics(f"{table.name}/{run.key}/seed-{seed}",
                                        read_metrics(os.path.join(run_dir, "metrics.jsonl")), domain)
            records.append(read_json(os.path.join(run_dir, RECORD)))
        rows[run.key] = Row(run.key, per_seed, data_order(repo, run, sets))
    return rows, records, trained

"""`tables.py noise`: trains one table's baseline row at several seeds and reports the seed-to-seed
noise of its final validation loss and tokens/s, and what that noise means for the paper's effects:
the measurement a scale is chosen from."""

import math
import os

from . import stats
from .records import write_json
from .training import train_rows


def measure(table, args, fathom, repo, log):
    """Trains the baseline at args.seeds seeds, prints its noise and writes OUT/<table>.noise.json."""
    rows, records, _ = train_rows(table, {table.baseline}, args, fathom, repo, log)
    row = rows[table.baseline]
    losses = row.values(lambda m: m.val_loss())
    speeds = row.values(lambda m: m.tokens_per_second())
    loss_std = stats.sample_std(losses)
    seconds = [float(r.get("seconds", 0)) for r in records if r]
    jobs = max(int(r.get("jobs", 1)) for r in records if r) if any(records) else args.jobs
    run = row.any_run()
    result = {"table": table.name, "baseline": table.baseline, "scale": args.scale, "seeds": row.seeds,
              "steps": run.final_step, "overrides": args.extra, "domain": run.domain(),
              "val_loss": losses, "val_loss_mean": stats.mean(losses), "val_loss_std": loss_std,
              "tokens_per_second": speeds, "tokens_per_second_mean": stats.mean(speeds),
              "tokens_per_second_std": stats.sample_std(speeds), "jobs": jobs,
              "seconds_per_run": stats.mean(seconds) if seconds else None, "effects": []}
    lines = [f"{table.name}: baseline '{table.baseline}' at scale {args.scale}, {len(row.seeds)} seeds, "
             f"{run.final_step} steps" + (f", overrides {args.extra}" if args.extra else ""),
             f"  validation loss ({run.domain()}): mean {result['val_loss_mean']:.4f}, seed std "
             + (f"{loss_std:.4f} nats" if loss_std is not None else "- (one seed)"),
             f"  tokens/s: mean {result['tokens_per_second_mean']:,.0f}, seed std "
             + (f"{result['tokens_per_second_std']:,.0f}" if result['tokens_per_second_std'] is not None else "-")
             + (f" ({jobs} runs shared the device: --jobs {jobs})" if jobs > 1 else " (each run alone)")]
    if seconds:
        lines.append(f"  wall time per run: {result['seconds_per_run']:.0f} s (mean)")
    if loss_std is not None:
        # Before any other row ran, the std of a difference is estimated as that of two independent runs;
        # pairing by seed shrinks it where the rows' runs move together.
        spread = math.sqrt(2.0) * loss_std
        half = stats.critical_t(len(losses) - 1) * spread / math.sqrt(len(losses))
        lines.append(f"  an effect's 95% CI half-width at {len(losses)} seeds, unpaired: ±{half:.4f} nats")
        for label, size in table.effect_sizes(result["val_loss_mean"]):
            needed = stats.seeds_needed(spread, size)
            result["effects"].append({"effect": label, "size": size, "seeds_needed": needed})
            lines.append(f"  {label}: paper {size:.4f} nats -> "
                         + (f"{needed} seeds resolve it" if needed else f"more than {stats.MAX_SEEDS} seeds"))
    write_json(os.path.join(os.path.abspath(args.out), f"{table.name}.noise.json"), result)
    for line in lines:
        log(line)
    return result

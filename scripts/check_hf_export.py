#!/usr/bin/env python3
"""Checks fathom's remote-code HF exports against fathom itself.

For each model kind it trains a tiny model for a few steps on the quickstart corpus with the quickstart
tokenizer, exports it with `fathom export --format hf`, loads the export's fathom_core.py (plain
PyTorch, no transformers) and checks, on the CPU in fp32:
  - its full-forward logits equal `fathom logits` (MoD: top-k routing, and causal routing);
  - its cached decoding gives the logits of its own full forward;
  - its greedy continuation equals `fathom generate --temperature 0` token for token.
With --transformers it also loads the export with AutoModelForCausalLM.from_pretrained(...,
trust_remote_code=True) and checks its logits against `fathom logits` and its greedy `generate`
against `fathom generate`.

    scripts/check_hf_export.py --fathom build/fathom [--transformers] [--report FILE.md]

Exit status: 0 when everything matches, 1 on a mismatch, 77 when torch (or, with --transformers,
transformers) is not installed, 2 on bad arguments or a failing fathom command.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # never leave __pycache__ in the export or the source tree

SKIP = 77
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER = os.path.join(ROOT, "data/tokenizers/quickstart-4k.json")
CORPUS = os.path.join(ROOT, "data/corpus/quickstart/train")
PROMPT = "The state of our union is"  # greedy continuations start here
# Logits are compared over a longer text, so MoD's top-k and causal routing differ on it.
TEXT = ("Tonight, I want to talk about the economy, our schools and the jobs of the future. Over the last year we "
        "have worked together, and the nation is stronger for it; but there is more to do, and we must do it now.")
NEW_TOKENS = 40
LOGIT_TOLERANCE = 1e-4  # fp32, relative to the largest logit

# name -> recipe sections beyond the shared tiny model (each kind, and the variants whose math differs).
KINDS = {
    "moda": "moda: {variant: attn_kv+ffn_kv}\n",
    "moda-pre-reader-extra": "moda: {variant: extra_attn_kv+ffn_kv, depth_key: reader, max_slots: 2}\n",
    "mod-predictor": "mod: {capacity: 0.5, every: 2, router_weight: sigmoid, causal: predictor}\n",
    "mod-aux-loss": "mod: {capacity: 0.25, every: 2, causal: aux_loss}\n",
    "dsla-hybrid": "dsla: {states: 2, gamma: head}\n",
}
MODEL_EXTRA = {"moda-pre-reader-extra": ", norm: pre, tie_embeddings: true", "dsla-hybrid": ", layers: [attention, dsla]"}
DEVICE_KINDS = ["moda", "mod-predictor", "dsla-hybrid"]


def run(command, what):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.stderr.write(f"{what} failed ({result.returncode}): {' '.join(command)}\n{result.stderr}\n")
        sys.exit(2)
    return result.stdout


def read_safetensors(path, torch):
    """{name: tensor} of a safetensors file (F32 and I32 entries)."""
    dtypes = {"F32": torch.float32, "I32": torch.int32}
    with open(path, "rb") as f:
        data = f.read()
    (header_size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_size])
    body = data[8 + header_size:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry["dtype"] not in dtypes:
            raise ValueError(f"{path}: '{name}' is {entry['dtype']}; this check reads F32 and I32")
        begin, end = entry["data_offsets"]
        flat = torch.frombuffer(bytearray(body[begin:end]), dtype=dtypes[entry["dtype"]])
        tensors[name] = flat.reshape(entry["shape"]) if entry["shape"] else flat.reshape(())
    return tensors


def train_and_export(fathom, work, kind, steps):
    run_dir, export_dir = os.path.join(work, kind), os.path.join(work, kind + "-hf")
    recipe = os.path.join(work, kind + ".yaml")
    with open(recipe, "w") as f:
        f.write("model: {d_model: 64, n_layers: 4, n_heads: 4, n_kv_heads: 2, ffn_hidden: 128, vocab_size: 4096"
                + MODEL_EXTRA.get(kind, "") + "}\n" + KINDS[kind]
                + f"data: {{tokenizer: {TOKENIZER}, documents: lines, train: [{CORPUS}]}}\n"
                + f"train: {{device: cpu, seed: 7, batch_size: 4, seq_len: 64, steps: {steps}, "
                + "optimizer: {lr: 4.0e-3}, schedule: {warmup_steps: 5}}\n"
                + f"log: {{dir: {run_dir}, every: 1000}}\n")
    run([fathom, "train", recipe], f"training {kind}")
    run([fathom, "export", "--format", "hf", "--checkpoint", run_dir, "--out", export_dir], f"exporting {kind}")
    return run_dir, export_dir


def fathom_logits(fathom, run_dir, routing, work, torch):
    out = os.path.join(work, f"logits-{routing}.safetensors")
    run([fathom, "logits", "--checkpoint", run_dir, "--prompt", TEXT, "--device", "cpu", "--routing", routing,
         "--out", out], "fathom logits")
    saved = read_safetensors(out, torch)
    return saved["ids"].long(), saved["logits"]


def fathom_continuation(fathom, run_dir):
    """`fathom generate`'s greedy continuation text (fp32 on the CPU, past the end-of-text token)."""
    text = run([fathom, "generate", "--checkpoint", run_dir, "--prompt", PROMPT, "--max-new-tokens", str(NEW_TOKENS),
                "--temperature", "0", "--ignore-eos", "--device", "cpu"], "fathom generate")
    if not text.startswith(PROMPT):
        sys.stderr.write(f"fathom generate did not echo the prompt: {text!r}\n")
        sys.exit(2)
    return text[len(PROMPT):].rstrip("\n")


def decode(fathom, ids):
    return run([fathom, "tokenizer", "decode", "--tokenizer", TOKENIZER] + [str(i) for i in ids],
               "fathom tokenizer decode").rstrip("\n")


def relative_difference(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


class Report:
    def __init__(self):
        self.rows, self.failed = [], False

    def check(self, kind, what, ok, detail):
        self.rows.append((kind, what, "match" if ok else "MISMATCH", detail))
        self.failed |= not ok
        print(f"{kind:24} {what:44} {'ok' if ok else 'MISMATCH'}  {detail}", flush=True)

    def markdown(self, header):
        lines = [header, "", "| model | check | result | detail |", "|---|---|---|---|"]
        lines += [f"| {k} | {w} | {r} | {d.replace('|', '/')} |" for k, w, r, d in self.rows]
        lines += ["", "All checks match." if not self.failed else "**Some checks do not match.**", ""]
        return "\n".join(lines)


def greedy(step, ids, torch):
    """Greedy continuation: step(tokens) gives the logits [1, T, vocab] of the tokens it is fed next."""
    logits = step(ids)
    out = []
    for _ in range(NEW_TOKENS):
        out.append(int(torch.argmax(logits[0, -1])))
        logits = step(torch.tensor([[out[-1]]]))
    return out


def check_core(kind, export_dir, fathom, run_dir, work, report, torch):
    sys.path.insert(0, export_dir)
    try:
        import fathom_core
    finally:
        sys.path.pop(0)
    with open(os.path.join(export_dir, "config.json")) as f:
        config = json.load(f)
    model = fathom_core.FathomLM(fathom_core.FathomSpec(config)).eval()
    model.load_state_dict(read_safetensors(os.path.join(export_dir, "model.safetensors"), torch), strict=True)
    del sys.modules["fathom_core"]  # each export loads its own copy
    mod = config["fathom"]["mod"]["capacity"] > 0
    with torch.no_grad():
        for routing in ("topk", "causal") if mod else ("topk",):
            ids, expected = fathom_logits(fathom, run_dir, routing, work, torch)
            diff = relative_difference(model(ids, mod_routing=routing), expected)
            report.check(kind, f"fathom_core logits = fathom logits ({routing})", diff < LOGIT_TOLERANCE,
                         f"max relative difference {diff:.1e} over {ids.shape[1]} tokens")
        cache = model.new_cache(1)
        stepped = torch.cat([model(ids[:, :3], cache)] + [model(ids[:, t:t + 1], cache) for t in range(3, ids.shape[1])],
                            dim=1)
        diff = relative_difference(stepped, model(ids, mod_routing="causal"))
        report.check(kind, "fathom_core cached decoding = full forward", diff < LOGIT_TOLERANCE,
                     f"max relative difference {diff:.1e}")
        prompt = torch.tensor([[int(i) for i in run([fathom, "tokenizer", "encode", "--tokenizer", TOKENIZER, PROMPT],
                                                     "fathom tokenizer encode").split()]])
        cache = model.new_cache(1)
        tokens = greedy(lambda t: model(t, cache), prompt, torch)
    expected_text = fathom_continuation(fathom, run_dir)
    text = decode(fathom, tokens)
    report.check(kind, f"fathom_core greedy {NEW_TOKENS} tokens = fathom generate", text == expected_text,
                 f"{text[:60]!r}" if text == expected_text else f"{text!r} vs fathom's {expected_text!r}")
    return prompt, tokens, expected_text


def check_transformers(kind, export_dir, fathom, run_dir, work, prompt, tokens, expected_text, report, torch):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(export_dir, trust_remote_code=True, dtype=torch.float32).eval()
    mod = model.config.fathom["mod"]["capacity"] > 0
    with torch.no_grad():
        for routing in ("topk", "causal") if mod else ("topk",):
            model.config.mod_routing = routing
            ids, expected = fathom_logits(fathom, run_dir, routing, work, torch)
            diff = relative_difference(model(ids).logits, expected)
            report.check(kind, f"transformers logits = fathom logits ({routing})", diff < LOGIT_TOLERANCE,
                         f"max relative difference {diff:.1e}")
        model.config.mod_routing = "topk"
        model.generation_config.eos_token_id = None  # as --ignore-eos: run the whole length
        out = model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False, attention_mask=torch.ones_like(prompt))
    generated = [int(t) for t in out[0, prompt.shape[1]:]]
    text = decode(fathom, generated)
    report.check(kind, f"transformers generate {NEW_TOKENS} tokens = fathom generate",
                 generated == tokens and text == expected_text,
                 f"{text[:60]!r}" if text == expected_text else f"{text!r} vs fathom's {expected_text!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fathom", required=True, help="the fathom binary")
    parser.add_argument("--transformers", action="store_true", help="also load the exports with transformers")
    parser.add_argument("--kinds", nargs="+", choices=sorted(KINDS), help="the models to check (default: all; "
                        "with --transformers: " + ", ".join(DEVICE_KINDS) + ")")
    parser.add_argument("--steps", type=int, default=30, help="training steps of each tiny model (default 30)")
    parser.add_argument("--report", help="also write the results as Markdown to this file")
    parser.add_argument("--keep", help="keep the runs and exports in this new folder")
    args = parser.parse_args()
    if not (os.path.isfile(args.fathom) and os.access(args.fathom, os.X_OK)):
        parser.error(f"--fathom {args.fathom} is not an executable file")
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    if args.keep and os.path.exists(args.keep):
        parser.error(f"--keep {args.keep} already exists; name a new folder")
    try:
        import torch
    except ImportError:
        print("skipped: no torch for this python (Debian: apt-get install python3-torch)")
        return SKIP
    if args.transformers:
        try:
            import transformers
        except ImportError:
            print("skipped: --transformers asked for, but transformers is not installed")
            return SKIP
    torch.manual_seed(0)
    kinds = args.kinds or (DEVICE_KINDS if args.transformers else sorted(KINDS))
    work = args.keep or tempfile.mkdtemp(prefix="fathom-hf-check-")
    os.makedirs(work, exist_ok=True)
    report, start = Report(), time.time()
    try:
        for kind in kinds:
            run_dir, export_dir = train_and_export(os.path.abspath(args.fathom), work, kind, args.steps)
            prompt, tokens, text = check_core(kind, export_dir, args.fathom, run_dir, work, report, torch)
            if args.transformers:
                check_transformers(kind, export_dir, args.fathom, run_dir, work, prompt, tokens, text, report, torch)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    versions = f"torch {torch.__version__}" + (f", transformers {transformers.__version__}" if args.transformers else "")
    header = (f"# fathom HF export check\n\nTiny models trained {args.steps} steps on the quickstart corpus, exported "
              f"with `fathom export --format hf` (F32), compared with fathom on the CPU in fp32 ({versions}; "
              f"{time.time() - start:.0f} s). Logits tolerance: {LOGIT_TOLERANCE:g} of the largest logit.")
    if args.report:
        with open(args.report, "w") as f:
            f.write(report.markdown(header))
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())

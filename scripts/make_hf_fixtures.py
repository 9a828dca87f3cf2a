#!/usr/bin/env python3
"""HF parity fixtures for fathom, and a check that fathom's HF exports load in transformers.

  make_hf_fixtures.py generate OUT_DIR
      Writes tiny random models with transformers' save_pretrained, each in OUT_DIR/<name>/ with
      config.json + model.safetensors, plus OUT_DIR/<name>/io.safetensors holding `input_ids`
      (I64 [2, 16]) and the fp32 `logits` transformers computes for them. Sizes are odd on purpose
      (GQA 6 query / 2 KV heads, intermediate 80, vocab 97). Stored dtypes differ per model, so the
      fixtures also cover fathom's BF16 and F16 import: the weights are rounded to the stored dtype
      first and the logits computed in fp32 from the rounded values.
      The F32 olmo2 fixture also holds the training side: io.safetensors gets `loss` (F32 [1], HF's
      mean next-token cross-entropy with labels = input_ids, shifted inside the model, no z-loss) and
      grads.safetensors the fp32 gradient of that loss for every parameter, under its HF name.
        olmo2         Olmo2ForCausalLM, hidden 48, 3 layers, theta 10000, F32
        llama3_rope   LlamaForCausalLM, hidden 48, 2 layers, llama3 rope scaling, BF16
        llama_tied    LlamaForCausalLM, hidden 32, 2 layers, tied embeddings, F16

  make_hf_fixtures.py check EXPORT_DIR...
      Each EXPORT_DIR is a folder `fathom export --format hf` wrote plus fathom_io.safetensors
      (`input_ids`, fathom's fp32 `logits`). Loads it with from_pretrained (fp32) and prints the
      relative L2 difference of the logits; exits 1 if any exceeds 1e-4 (F32 exports) or 1e-2.

Needs torch, transformers (5.x) and safetensors. Runs on the CPU.
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Olmo2Config, Olmo2ForCausalLM

SEQ = 16
BATCH = 2


# Fixtures that also store the loss and the gradients of every parameter (fp32 ones only, so the
# gradients are those of exactly the stored weights).
WITH_GRADIENTS = {"olmo2"}


def loss_and_gradients(model, ids):
    """HF's training loss for labels = input_ids and d loss / d parameter by HF name, all fp32."""
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    grads = {name: p.grad.float().contiguous() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return loss.detach().float().reshape(1), grads


def fixture_specs():
    common = dict(vocab_size=97, intermediate_size=80, num_attention_heads=6, num_key_value_heads=2,
                  max_position_embeddings=256, rms_norm_eps=1e-6, initializer_range=0.2,
                  bos_token_id=None, eos_token_id=96, pad_token_id=None)
    return [
        ("olmo2", Olmo2ForCausalLM,
         Olmo2Config(hidden_size=48, num_hidden_layers=3,
                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **common),
         torch.float32),
        # original_max_position 1024 with low/high factors 1/4 puts the head's 4 frequencies
        # (wavelengths 6, 63, 628, 6283) in all three regimes of the llama3 rule.
        ("llama3_rope", LlamaForCausalLM,
         LlamaConfig(hidden_size=48, num_hidden_layers=2,
                     rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0,
                                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 1024}, **common),
         torch.bfloat16),
        ("llama_tied", LlamaForCausalLM,
         LlamaConfig(hidden_size=36, num_hidden_layers=2, tie_word_embeddings=True,
                     rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, **common),
         torch.float16),
    ]


def generate(out_dir):
    torch.manual_seed(1234)
    for name, cls, config, stored_dtype in fixture_specs():
        model = cls(config).eval()
        with torch.no_grad():
            # Norm weights start at 1; random ones make the parity test see every norm.
            for pname, p in model.named_parameters():
                if "norm" in pname:
                    p.copy_(1 + 0.3 * torch.randn_like(p))
            # Round to the stored dtype so fp32 logits are those of exactly the stored weights.
            for p in model.parameters():
                p.copy_(p.to(stored_dtype).to(torch.float32))
        ids = torch.randint(0, config.vocab_size, (BATCH, SEQ), generator=torch.Generator().manual_seed(7))
        with torch.no_grad():
            logits = model(input_ids=ids).logits.float()
        io = {"input_ids": ids.contiguous(), "logits": logits.contiguous()}
        folder = os.path.join(out_dir, name)
        if name in WITH_GRADIENTS:
            assert stored_dtype == torch.float32, "gradients are stored only for F32 fixtures"
            io["loss"], grads = loss_and_gradients(model, ids)  # draws no random numbers
            os.makedirs(folder, exist_ok=True)
            save_file(grads, os.path.join(folder, "grads.safetensors"))
            print(f"== {name}: loss {io['loss'].item():.6f}, {len(grads)} gradients")
        model.to(stored_dtype).save_pretrained(folder)
        save_file(io, os.path.join(folder, "io.safetensors"))
        for extra in ("generation_config.json",):  # not needed by fathom; keeps the fixtures small
            path = os.path.join(folder, extra)
            if os.path.exists(path):
                os.remove(path)
        print(f"== {name}: {sorted(os.listdir(folder))}")
        with open(os.path.join(folder, "config.json")) as f:
            print(f.read())


def check(export_dirs):
    worst_fail = False
    for folder in export_dirs:
        io = load_file(os.path.join(folder, "fathom_io.safetensors"))
        with open(os.path.join(folder, "config.json")) as f:
            config = json.load(f)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        with torch.no_grad():
            logits = model(input_ids=io["input_ids"].long()).logits.float()
        want = io["logits"].float()
        rel = ((logits - want).norm() / want.norm()).item()
        limit = 1e-4 if config.get("dtype", "float32") == "float32" else 1e-2
        ok = rel <= limit
        worst_fail |= not ok
        print(f"{'PASS' if ok else 'FAIL'} {folder}: {type(model).__name__} ({config.get('dtype')}), "
              f"logits {tuple(logits.shape)}, relative L2 vs fathom {rel:.3e} (limit {limit:g})")
        # What transformers itself would write for the loaded model: differences in keys or values
        # show where fathom's config.json departs from the format transformers expects.
        resaved = json.loads(model.config.to_json_string())
        for key in sorted(set(config) | set(resaved)):
            if key != "transformers_version" and config.get(key) != resaved.get(key):
                print(f"    config.json {key}: fathom {config.get(key)!r}, transformers {resaved.get(key)!r}")
    return 1 if worst_fail else 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "generate":
        generate(sys.argv[2])
    elif len(sys.argv) >= 3 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2:]))
    else:
        sys.exit(__doc__)

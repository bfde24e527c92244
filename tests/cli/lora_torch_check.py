#!/usr/bin/env python3
"""The LoRA gradients of `oomb run` against PyTorch autograd of the same PEFT LoRA forward (issue 26).

oomb writes its seeded random base weights (a plain run, no optimizer) and then, on that base, runs a
LoRA step (all seven projections, B drawn non-zero) and writes the adapter as PEFT's folder and the
adapters' gradients. This script reads the files with the standard library and torch, builds the
Hugging Face Qwen2 forward in float64 with every targeted projection y = W x + (alpha / r) B A x
(PEFT's LoRA Linear without dropout), takes autograd's gradients of every lora_A and lora_B and
compares them and the loss with oomb's. Exit code 77 (skipped) when torch is not importable.
Usage: lora_torch_check.py path/to/oomb
"""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("torch is not installed: skipped")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_torch_check import projection, qwen2_loss, read_checkpoint, read_safetensors  # noqa: E402

REL_TOL = 1e-5  # oomb runs fp32 (chunked, paged attention); the reference is float64
RANK, ALPHA = 4, 8.0


def lora_loss(t, ad, cfg, ids, scale):
    """The Qwen2 loss with PEFT's LoRA Linear on every adapted projection: W x + b + scale B A x."""
    def linear(t, h, module, layer):
        y = projection(t, h, module, layer)
        name = "base_model.model.model.layers.%d.%s" % (layer, module)
        a = ad.get(name + ".lora_A.weight")
        return y if a is None else y + scale * ((h @ a.T) @ ad[name + ".lora_B.weight"].T)
    return qwen2_loss(t, cfg, ids, linear)


def main():
    oomb = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        model = json.loads(subprocess.run([oomb, "models", "--show", "tiny"], check=True, capture_output=True,
                                          text=True).stdout)
        rng = random.Random(20261202)
        n = 320  # several chunks of 128 and pages of 32, the last chunk ragged
        ids = [rng.randrange(model["vocab"]) for _ in range(n)]
        tokens = os.path.join(tmp, "tokens.bin")
        open(tokens, "wb").write(struct.pack("<%dI" % n, *ids))
        common = ["--model", "tiny", "--context", str(n), "--chunk", "128", "--page", "32", "--tokens", tokens,
                  "--max-shard-bytes", "100000", "--json", "--quiet"]
        base, grads, adapter = (os.path.join(tmp, d) for d in ("base", "grads", "adapter"))
        subprocess.run([oomb, "run", *common, "--init-std", "0.1", "--save-weights", base], check=True,
                       capture_output=True, text=True)
        run = subprocess.run([oomb, "run", *common, "--weights", base, "--lora-rank", str(RANK), "--lora-alpha",
                              str(ALPHA), "--lora-targets", "all-linear", "--lora-init-b-std", "0.05",
                              "--dump-grads", grads, "--save-adapter", adapter], check=True, capture_output=True,
                             text=True)
        ours_loss = json.loads(run.stdout)["loss"]
        t = read_checkpoint(base)
        if "lm_head.weight" not in t:
            t["lm_head.weight"] = t["model.embed_tokens.weight"]
        ad = read_safetensors(os.path.join(adapter, "adapter_model.safetensors"))
        cfg = json.load(open(os.path.join(adapter, "adapter_config.json")))
        assert cfg["r"] == RANK and cfg["lora_alpha"] == ALPHA and cfg["bias"] == "none", cfg
        for v in ad.values():
            v.requires_grad_(True)
        loss = lora_loss(t, ad, model, ids, cfg["lora_alpha"] / cfg["r"])
        loss.backward()
        ours = read_checkpoint(grads)
        assert set(ours) == set(ad), set(ours) ^ set(ad)
        worst, worst_name = 0.0, ""
        for name, a in ad.items():
            err = ((ours[name] - a.grad).norm() / a.grad.norm().clamp_min(1e-300)).item()
            if err > worst:
                worst, worst_name = err, name
        loss_err = abs(ours_loss - loss.item()) / abs(loss.item())
        print("oomb LoRA loss %.9f, PyTorch (float64, PEFT LoRA on HF Qwen2) %.9f, relative difference %.2e; "
              "worst adapter gradient relative L2 %.2e (%s) over %d tensors (tolerance %.0e)"
              % (ours_loss, loss.item(), loss_err, worst, worst_name, len(ad), REL_TOL))
        sys.exit(0 if loss_err <= REL_TOL and worst <= REL_TOL else 1)


if __name__ == "__main__":
    main()

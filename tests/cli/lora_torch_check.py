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
from hf_torch_check import read_checkpoint, rms_norm, rotate_half  # noqa: E402

REL_TOL = 1e-5  # oomb runs fp32 (chunked, paged attention); the reference is float64
RANK, ALPHA = 4, 8.0


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", name
        b, end = e["data_offsets"]
        out[name] = torch.tensor(struct.unpack("<%df" % ((end - b) // 4), data[b:end]),
                                 dtype=torch.float64).reshape(e["shape"])
    return out


def lora_loss(t, ad, cfg, ids, scale):
    n = len(ids)
    hd, nq, nkv = cfg["head_dim"], cfg["q_heads"], cfg["kv_heads"]

    def lin(h, module, layer):
        name = "model.layers.%d.%s" % (layer, module)
        y = h @ t[name + ".weight"].T
        if name + ".bias" in t:
            y = y + t[name + ".bias"]
        a = ad.get("base_model.model.%s.lora_A.weight" % name)
        if a is not None:
            y = y + scale * ((h @ a.T) @ ad["base_model.model.%s.lora_B.weight" % name].T)
        return y

    x = t["model.embed_tokens.weight"][torch.tensor(ids)]
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    freqs = torch.outer(torch.arange(n, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    mask = torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)
    for l in range(cfg["layers"]):
        p = "model.layers.%d." % l
        h = rms_norm(x, t[p + "input_layernorm.weight"], cfg["norm_eps"])
        q = lin(h, "self_attn.q_proj", l).view(n, nq, hd)
        k = lin(h, "self_attn.k_proj", l).view(n, nkv, hd)
        v = lin(h, "self_attn.v_proj", l).view(n, nkv, hd)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(nq // nkv, dim=1)
        v = v.repeat_interleave(nq // nkv, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / hd ** 0.5 + mask
        a = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(n, nq * hd)
        x = x + lin(a, "self_attn.o_proj", l)
        h = rms_norm(x, t[p + "post_attention_layernorm.weight"], cfg["norm_eps"])
        g = lin(h, "mlp.gate_proj", l)
        u = lin(h, "mlp.up_proj", l)
        x = x + lin(torch.nn.functional.silu(g) * u, "mlp.down_proj", l)
    x = rms_norm(x, t["model.norm.weight"], cfg["norm_eps"])
    logits = x @ t["lm_head.weight"].T
    return torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:]))


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
        single = os.path.join(grads, "model.safetensors")
        ours = read_safetensors(single) if os.path.exists(single) else read_checkpoint(grads)
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

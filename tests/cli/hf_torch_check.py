#!/usr/bin/env python3
"""The loss of `oomb run` against a PyTorch implementation of the Hugging Face Qwen2 forward.

oomb writes its (seeded random) weights as a sharded Hugging Face checkpoint and reads a token
file; this script reads the same shards with nothing but the standard library and torch, computes
Qwen2ForCausalLM's loss in float64 (RMSNorm, q/k/v biases, rotate-half RoPE, grouped-query causal
attention, SwiGLU, untied LM head, mean cross-entropy over the N - 1 next tokens) and compares.
Exit code 77 (skipped) when torch is not importable.
Usage: hf_torch_check.py path/to/oomb
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

REL_TOL = 1e-5  # oomb runs fp32 (chunked, paged attention); the reference is float64


def read_safetensors(path):
    """Every tensor of one F32 safetensors file, as float64."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    tensors = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", name
        b, end = e["data_offsets"]
        values = struct.unpack("<%df" % ((end - b) // 4), data[b:end])
        tensors[name] = torch.tensor(values, dtype=torch.float64).reshape(e["shape"])
    return tensors


def read_checkpoint(folder):
    """A checkpoint folder as oomb writes it: model.safetensors, or the index and its shards."""
    single = os.path.join(folder, "model.safetensors")
    if os.path.exists(single):
        return read_safetensors(single)
    index = json.load(open(os.path.join(folder, "model.safetensors.index.json")))
    tensors = {}
    for shard in sorted(set(index["weight_map"].values())):
        tensors.update(read_safetensors(os.path.join(folder, shard)))
    missing = set(index["weight_map"]) - set(tensors)
    assert not missing, missing
    return tensors


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def projection(t, h, module, layer):
    """h W^T (+ b) of model.layers.<layer>.<module> (nn.Linear)."""
    name = "model.layers.%d.%s" % (layer, module)
    y = h @ t[name + ".weight"].T
    return y + t[name + ".bias"] if name + ".bias" in t else y


def qwen2_loss(t, cfg, ids, linear=projection):
    """Qwen2ForCausalLM's mean next-token loss (a float64 tensor); linear(t, h, module, layer) computes
    each projection (a LoRA check adds its adapters there)."""
    n = len(ids)
    hd, nq, nkv = cfg["head_dim"], cfg["q_heads"], cfg["kv_heads"]
    x = t["model.embed_tokens.weight"][torch.tensor(ids)]
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    freqs = torch.outer(torch.arange(n, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    mask = torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)
    for l in range(cfg["layers"]):
        p = "model.layers.%d." % l
        h = rms_norm(x, t[p + "input_layernorm.weight"], cfg["norm_eps"])
        q = linear(t, h, "self_attn.q_proj", l).view(n, nq, hd)
        k = linear(t, h, "self_attn.k_proj", l).view(n, nkv, hd)
        v = linear(t, h, "self_attn.v_proj", l).view(n, nkv, hd)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(nq // nkv, dim=1)  # HF repeat_kv: query head j uses kv head j // group
        v = v.repeat_interleave(nq // nkv, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / hd ** 0.5 + mask
        a = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(n, nq * hd)
        x = x + linear(t, a, "self_attn.o_proj", l)
        h = rms_norm(x, t[p + "post_attention_layernorm.weight"], cfg["norm_eps"])
        g = linear(t, h, "mlp.gate_proj", l)
        u = linear(t, h, "mlp.up_proj", l)
        x = x + linear(t, torch.nn.functional.silu(g) * u, "mlp.down_proj", l)
    x = rms_norm(x, t["model.norm.weight"], cfg["norm_eps"])
    logits = x @ t["lm_head.weight"].T
    return torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:]))


def main():
    oomb = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        model = json.loads(subprocess.run([oomb, "models", "--show", "tiny"], check=True, capture_output=True,
                                          text=True).stdout)
        rng = random.Random(20261201)
        n = 320  # several chunks of 128 and pages of 32, the last chunk ragged
        ids = [rng.randrange(model["vocab"]) for _ in range(n)]
        tokens = os.path.join(tmp, "tokens.bin")
        open(tokens, "wb").write(struct.pack("<%dI" % n, *ids))
        ck = os.path.join(tmp, "ck")
        run = subprocess.run([oomb, "run", "--model", "tiny", "--context", str(n), "--chunk", "128", "--page", "32",
                              "--init-std", "0.1", "--tokens", tokens, "--save-weights", ck, "--max-shard-bytes",
                              "100000", "--json", "--quiet"], check=True, capture_output=True, text=True)
        ours = json.loads(run.stdout)["loss"]
        theirs = qwen2_loss(read_checkpoint(ck), model, ids).item()
        err = abs(ours - theirs) / abs(theirs)
        print("oomb loss %.9f, PyTorch (HF Qwen2 semantics, float64) %.9f, relative difference %.2e (tolerance %.0e)"
              % (ours, theirs, err, REL_TOL))
        sys.exit(0 if err <= REL_TOL else 1)


if __name__ == "__main__":
    main()

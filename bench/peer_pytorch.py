#!/usr/bin/env python3
"""The peer of oomb's full-sequence reference in PyTorch: one training step (forward and backward
over the whole sequence, fp32, naive causal attention with the N x N probabilities, as the
reference keeps them) of a Qwen2-shaped decoder read from an oomb model file (models/llm/*.json).

Same shapes as oomb (GQA, q/k/v bias, rotate-half RoPE, RMSNorm, SwiGLU, tied or untied head,
mean cross-entropy over the N-1 next-token predictions), the same thread count, weights seeded
alike (normal, std 0.02; the values do not change the time), and the same tokens (a file of
little-endian uint32 ids written by bench/executor_bench.cpp, or seeded random ones).

Prints one line: `peer_pytorch step_s=<fastest> ...`. Without torch it prints why and exits 0
(the bench then reports the comparison as skipped). Needs python3-torch (Debian) with
libopenblas0-pthread installed, so that torch's BLAS is OpenBLAS and not the reference BLAS.
"""
import argparse
import json
import os
import math
import sys
import time

# torch.set_num_threads() does not reach OpenBLAS's own thread pool (Debian's torch calls the
# system OpenBLAS, pthread build): at --threads 1 a second BLAS thread still ran, so "1 thread"
# was up to 2 cores. The pool size is read when the library loads, so set it before the import.
for _i, _arg in enumerate(sys.argv[:-1]):
    if _arg == "--threads":
        os.environ["OPENBLAS_NUM_THREADS"] = sys.argv[_i + 1]
        os.environ["OMP_NUM_THREADS"] = sys.argv[_i + 1]

try:
    import torch
except ImportError:
    print("peer_pytorch: skipped: no torch (apt-get install -y libopenblas0-pthread python3-torch)")
    sys.exit(0)


def inv_freqs(d, theta, scaling):
    """Plain RoPE, or Hugging Face's llama3 scaling (models/rope.h); other scalings are refused."""
    inv_freq = theta ** (-2.0 * torch.arange(d // 2, dtype=torch.float64) / d)
    if not scaling or scaling.get("rope_type", scaling.get("type")) == "default":
        return inv_freq
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind != "llama3":
        raise SystemExit("peer_pytorch: rope_scaling of type %r is not supported" % kind)
    f, lo, hi = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    orig = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    s = (orig / wavelen - lo) / (hi - lo)
    mid = (1 - s) * inv_freq / f + s * inv_freq
    return torch.where(wavelen < orig / hi, inv_freq, torch.where(wavelen > orig / lo, inv_freq / f, mid))


def rope(x, theta, scaling=None):  # x [n, heads, d]
    n, _, d = x.shape
    half = d // 2
    inv_freq = inv_freqs(d, theta, scaling)
    ang = torch.arange(n, dtype=torch.float64)[:, None] * inv_freq[None, :]
    c = torch.cos(ang).float()[:, None, :]
    s = torch.sin(ang).float()[:, None, :]
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def build(m, layers, gen):
    H, qd, kvd, F, V = m["hidden"], m["q_heads"] * m["head_dim"], m["kv_heads"] * m["head_dim"], m["ffn_hidden"], m["vocab"]

    def p(*shape, ones=False):
        t = torch.ones(*shape) if ones else torch.randn(*shape, generator=gen) * 0.02
        return t.requires_grad_(True)

    P = {"embed": p(V, H), "final_norm": p(H, ones=True)}
    if not m.get("tied_embeddings", False):
        P["lm_head"] = p(V, H)
    for l in range(layers):
        P[f"{l}.in"] = p(H, ones=True)
        P[f"{l}.q"], P[f"{l}.k"], P[f"{l}.v"] = p(qd, H), p(kvd, H), p(kvd, H)
        if m.get("qkv_bias", False):
            P[f"{l}.qb"], P[f"{l}.kb"], P[f"{l}.vb"] = p(qd), p(kvd), p(kvd)
        P[f"{l}.o"] = p(H, qd)
        P[f"{l}.post"] = p(H, ones=True)
        P[f"{l}.gate"], P[f"{l}.up"], P[f"{l}.down"] = p(F, H), p(F, H), p(H, F)
    return P


def step(m, layers, P, tokens):
    n = tokens.numel()
    hq, hk, d = m["q_heads"], m["kv_heads"], m["head_dim"]
    eps, theta = m["norm_eps"], m["rope_theta"]
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    x = P["embed"][tokens]
    for l in range(layers):
        h = rmsnorm(x, P[f"{l}.in"], eps)
        q = torch.nn.functional.linear(h, P[f"{l}.q"], P.get(f"{l}.qb"))
        k = torch.nn.functional.linear(h, P[f"{l}.k"], P.get(f"{l}.kb"))
        v = torch.nn.functional.linear(h, P[f"{l}.v"], P.get(f"{l}.vb"))
        q = rope(q.view(n, hq, d), theta, m.get("rope_scaling")).transpose(0, 1)  # [hq, n, d]
        k = rope(k.view(n, hk, d), theta, m.get("rope_scaling")).transpose(0, 1)
        v = v.view(n, hk, d).transpose(0, 1)
        k = k.repeat_interleave(hq // hk, dim=0)
        v = v.repeat_interleave(hq // hk, dim=0)
        s = (q @ k.transpose(1, 2)) / (d ** 0.5)
        s = s.masked_fill(~mask, float("-inf")).softmax(-1)
        o = (s @ v).transpose(0, 1).reshape(n, hq * d)
        x = x + torch.nn.functional.linear(o, P[f"{l}.o"])
        h = rmsnorm(x, P[f"{l}.post"], eps)
        g = torch.nn.functional.linear(h, P[f"{l}.gate"])
        u = torch.nn.functional.linear(h, P[f"{l}.up"])
        x = x + torch.nn.functional.linear(torch.nn.functional.silu(g) * u, P[f"{l}.down"])
    h = rmsnorm(x, P["final_norm"], eps)
    logits = torch.nn.functional.linear(h, P.get("lm_head", P["embed"]))
    loss = torch.nn.functional.cross_entropy(logits[:-1], tokens[1:])
    loss.backward()
    return loss.item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-json", required=True, help="an oomb model file (oomb.model/1)")
    ap.add_argument("--layers", type=int, default=0, help="cut the model to this many layers (0: all)")
    ap.add_argument("--context", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--tokens", default="", help="little-endian uint32 token ids (default: seeded random)")
    ap.add_argument("--steps", type=int, default=2, help="timed steps after one warm-up; the fastest is printed")
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    with open(a.model_json) as f:
        m = json.load(f)
    layers = a.layers or m["layers"]
    torch.set_num_threads(a.threads)
    gen = torch.Generator().manual_seed(a.seed)
    if a.tokens:
        with open(a.tokens, "rb") as f:
            data = f.read()
        tokens = torch.frombuffer(bytearray(data), dtype=torch.int32).to(torch.int64)[: a.context]
        if tokens.numel() != a.context:
            sys.exit(f"peer_pytorch: {a.tokens} holds {tokens.numel()} tokens, --context is {a.context}")
    else:
        tokens = torch.randint(0, m["vocab"], (a.context,), generator=gen)
    P = build(m, layers, gen)
    times = []
    for i in range(a.steps + 1):
        for t in P.values():
            t.grad = None
        t0 = time.perf_counter()
        loss = step(m, layers, P, tokens)
        if i > 0:  # the first step is a warm-up (allocator, first touch)
            times.append(time.perf_counter() - t0)
    print(f"peer_pytorch step_s={min(times):.4f} loss={loss:.4f} threads={torch.get_num_threads()} "
          f"torch={torch.__version__} model={m['id']} layers={layers} context={a.context}")


if __name__ == "__main__":
    main()

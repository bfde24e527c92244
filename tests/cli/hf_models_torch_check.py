#!/usr/bin/env python3
"""A second implementation of the models oomb runs, written from Hugging Face transformers'
modelling semantics in PyTorch, checked against `oomb run` on the CPU.

For each case (a tiny Hugging Face config.json of one family: Qwen3-MoE, Mixtral, gpt-oss, with
sliding-window, chunk-local and global layers, attention sinks, biases, clamped SwiGLU, YaRN RoPE
and the load-balancing loss; Llama with attention_bias and linear RoPE scaling) it
  1. asks oomb for the model's tensor names and shapes (`oomb run --save-weights`, one step),
  2. draws its own weights (wider than oomb's initialisation, so that routing, clamps, sinks and
     windows all matter) and tokens, and writes them as a safetensors file and a token file,
  3. runs `oomb run --weights W --tokens T --dump-grads G --json` with a chunk-recurrent schedule
     (several chunks, offloaded pages), and
  4. computes the same step here from the config alone, in float64, with the operations written as
     transformers writes them (topk then softmax for gpt-oss, softmax then topk then renormalise for
     Mixtral and Qwen3-MoE with norm_topk_prob, sinks as an extra softmax column, masks as
     key > query - window or the same attention chunk, load_balancing_loss_func over every layer's
     logits concatenated),
then compares the loss and every parameter gradient (relative L2 error).

Without torch it says so and exits 77 (ctest's skip code; hf_torch_test.sh finds the Python that
has it). Needs python3-torch (Debian): apt-get install -y libopenblas0-pthread python3-torch
Usage: hf_models_torch_check.py path/to/oomb [--case NAME] [--keep DIR] [--tolerance 1e-5]
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError:
    print("torch is not installed: skipped (apt-get install -y libopenblas0-pthread python3-torch)")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_torch_check import read_safetensors, rms_norm, rotate_half  # noqa: E402

torch.set_default_dtype(torch.float64)

# ---------------------------------------------------------------------------------------------
# The cases: tiny configs as Hugging Face writes them, and the oomb run flags of each.

BASE = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "vocab_size": 96, "rms_norm_eps": 1e-6, "max_position_embeddings": 4096, "tie_word_embeddings": False}

CASES = {
    # Qwen3-MoE: q/k RMSNorm, softmax over every expert, top-k renormalised; one dense layer.
    "qwen3_moe": dict(BASE, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", num_hidden_layers=3,
                      intermediate_size=48, moe_intermediate_size=24, num_experts=6, num_experts_per_tok=2,
                      norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1], rope_theta=10000.0),
    # Qwen3-MoE without renormalisation (the top k keep their share of the full softmax), chunk-local
    # and sliding layers beside a global one, and the load-balancing loss.
    "qwen3_moe_local": dict(BASE, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
                            num_hidden_layers=3, intermediate_size=48, moe_intermediate_size=24, num_experts=5,
                            num_experts_per_tok=2, norm_topk_prob=False, rope_theta=10000.0,
                            layer_types=["chunked_attention", "sliding_attention", "full_attention"],
                            attention_chunk_size=24, sliding_window=12,
                            _flags=["--router-aux-loss", "0.05"]),
    # Mixtral: every layer sliding (its sliding_window), softmax then top-2 then renormalised.
    "mixtral": dict(BASE, architectures=["MixtralForCausalLM"], model_type="mixtral", num_hidden_layers=2,
                    intermediate_size=32, num_local_experts=4, num_experts_per_tok=2, sliding_window=20,
                    rope_theta=1000000.0),
    # gpt-oss: sliding and full layers alternating, sinks, q/k/v/o biases, router and expert biases,
    # top-k of the logits then softmax over the k, clamped SwiGLU (a small limit so the clamps act),
    # YaRN RoPE, the load-balancing loss.
    "gpt_oss": dict(BASE, architectures=["GptOssForCausalLM"], model_type="gpt_oss", num_hidden_layers=2,
                    intermediate_size=32, num_local_experts=4, num_experts_per_tok=2, sliding_window=16,
                    attention_bias=True, swiglu_limit=0.6, rope_theta=150000.0,
                    rope_scaling={"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16,
                                  "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False},
                    layer_types=["sliding_attention", "full_attention"], _flags=["--router-aux-loss", "0.02"]),

    # Llama with attention_bias (q, k, v and o_proj biases) and linear RoPE scaling.
    "llama_bias_linear": dict(BASE, architectures=["LlamaForCausalLM"], model_type="llama", num_hidden_layers=2,
                              intermediate_size=48, attention_bias=True, rope_theta=10000.0,
                              rope_scaling={"rope_type": "linear", "factor": 4.0}),
}

RUN = ["--context", "96", "--chunk", "32", "--page", "8", "--resident-layers", "1"]

# ---------------------------------------------------------------------------------------------
# safetensors written by hand (F32; a little-endian u64 header size, a JSON header of
# {name: {dtype, shape, data_offsets}}, then the data). hf_torch_check.py reads them.


def write_safetensors(path, tensors):
    header, offset, chunks = {}, 0, []
    for name in sorted(tensors):
        data = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        chunks.append(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))


# ---------------------------------------------------------------------------------------------
# The model, from the config (transformers' semantics).


def rope_tables(cfg, n):
    d, base = cfg["head_dim"], cfg["rope_theta"]
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2) / d)
    scale = 1.0
    rs = cfg.get("rope_scaling")
    if rs and rs.get("rope_type", rs.get("type")) == "yarn":
        factor = rs["factor"]
        orig = rs.get("original_max_position_embeddings") or cfg["max_position_embeddings"]

        def mscale(s, m=1.0):
            return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0

        if rs.get("attention_factor") is not None:
            scale = rs["attention_factor"]
        elif rs.get("mscale") and rs.get("mscale_all_dim"):
            scale = mscale(factor, rs["mscale"]) / mscale(factor, rs["mscale_all_dim"])
        else:
            scale = mscale(factor)

        def corr_dim(rot):
            return d * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))

        lo, hi = corr_dim(rs.get("beta_fast") or 32), corr_dim(rs.get("beta_slow") or 1)
        if rs.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, d - 1)
        if lo == hi:
            hi += 0.001
        ramp = ((torch.arange(d // 2) - lo) / (hi - lo)).clamp(0, 1)
        extrapolation = 1 - ramp
        inv_freq = inv_freq / factor * (1 - extrapolation) + inv_freq * extrapolation
    elif rs and rs.get("rope_type", rs.get("type")) == "linear":  # position interpolation
        inv_freq = inv_freq / rs["factor"]
    elif rs:
        raise SystemExit("hf_models_torch_check: rope_scaling %r is not written here" % rs)
    ang = torch.arange(n)[:, None] * inv_freq[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    return torch.cos(ang) * scale, torch.sin(ang) * scale


def rotate(x, cos, sin):  # x [heads, n, d]
    return x * cos + rotate_half(x) * sin


def layer_kind(cfg, l):
    if "layer_types" in cfg:
        return cfg["layer_types"][l]
    if cfg["model_type"] == "mixtral" and cfg.get("sliding_window"):
        return "sliding_attention"
    return "full_attention"


def mask(cfg, l, n):
    q = torch.arange(n)[:, None]
    k = torch.arange(n)[None, :]
    allowed = k <= q
    kind = layer_kind(cfg, l)
    if kind == "sliding_attention":
        allowed = allowed & (k > q - cfg["sliding_window"])
    elif kind == "chunked_attention":
        allowed = allowed & (k // cfg["attention_chunk_size"] == q // cfg["attention_chunk_size"])
    return allowed


def attention(cfg, P, pre, l, x, cos, sin):
    n = x.shape[0]
    hq, hkv, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]

    def proj(name, heads):
        y = x @ P[pre + name + ".weight"].T
        if pre + name + ".bias" in P:
            y = y + P[pre + name + ".bias"]
        return y.view(n, heads, d).transpose(0, 1)  # [heads, n, d]

    q, k, v = proj("self_attn.q_proj", hq), proj("self_attn.k_proj", hkv), proj("self_attn.v_proj", hkv)
    if pre + "self_attn.q_norm.weight" in P:  # Qwen3: RMSNorm over each head, before RoPE
        q = rms_norm(q, P[pre + "self_attn.q_norm.weight"], cfg["rms_norm_eps"])
        k = rms_norm(k, P[pre + "self_attn.k_norm.weight"], cfg["rms_norm_eps"])
    q, k = rotate(q, cos, sin), rotate(k, cos, sin)
    k = k.repeat_interleave(hq // hkv, dim=0)
    v = v.repeat_interleave(hq // hkv, dim=0)
    scores = (q @ k.transpose(1, 2)) * d ** -0.5
    scores = scores.masked_fill(~mask(cfg, l, n), float("-inf"))
    if pre + "self_attn.sinks" in P:  # gpt-oss: one more logit per head, dropped after the softmax
        sinks = P[pre + "self_attn.sinks"].view(hq, 1, 1).expand(hq, n, 1)
        probs = torch.softmax(torch.cat([scores, sinks], dim=-1), dim=-1)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1)
    o = (probs @ v).transpose(0, 1).reshape(n, hq * d)
    y = o @ P[pre + "self_attn.o_proj.weight"].T
    if pre + "self_attn.o_proj.bias" in P:
        y = y + P[pre + "self_attn.o_proj.bias"]
    return y


def dense_mlp(P, pre, x):
    g = x @ P[pre + "gate_proj.weight"].T
    u = x @ P[pre + "up_proj.weight"].T
    return (torch.nn.functional.silu(g) * u) @ P[pre + "down_proj.weight"].T


def moe(cfg, P, pre, x, router_logits):
    fam = cfg["model_type"]
    E, K = (cfg.get("num_experts") or cfg.get("num_local_experts")), cfg["num_experts_per_tok"]
    module = pre + ("block_sparse_moe." if fam == "mixtral" else "mlp.")
    logits = x @ P[module + "gate.weight"].T
    if module + "gate.bias" in P:
        logits = logits + P[module + "gate.bias"]
    router_logits.append(logits)
    if fam == "gpt_oss":  # GptOssTopKRouter: top-k of the logits, softmax over those k
        top, idx = torch.topk(logits, K, dim=-1)
        w = torch.softmax(top, dim=-1)
    else:  # Mixtral / Qwen3-MoE: softmax over every expert, top-k, renormalised (norm_topk_prob)
        w, idx = torch.topk(torch.softmax(logits, dim=-1), K, dim=-1)
        if fam == "mixtral" or cfg.get("norm_topk_prob", False):
            w = w / w.sum(-1, keepdim=True)
    y = torch.zeros_like(x)
    for e in range(E):
        rows, slot = torch.where(idx == e)
        if rows.numel() == 0:
            continue
        xe = x[rows]
        ex = module + "experts.%d." % e
        if fam == "mixtral":
            out = (torch.nn.functional.silu(xe @ P[ex + "w1.weight"].T) * (xe @ P[ex + "w3.weight"].T)) @ P[ex + "w2.weight"].T
        elif fam == "gpt_oss":  # GptOssExperts: clamped gate and up, gate * sigmoid(1.702 gate) * (up + 1)
            lim = cfg.get("swiglu_limit", 7.0)
            gate = (xe @ P[ex + "gate_proj.weight"].T + P[ex + "gate_proj.bias"]).clamp(max=lim)
            up = (xe @ P[ex + "up_proj.weight"].T + P[ex + "up_proj.bias"]).clamp(min=-lim, max=lim)
            out = ((up + 1) * gate * torch.sigmoid(gate * 1.702)) @ P[ex + "down_proj.weight"].T + P[ex + "down_proj.bias"]
        else:
            out = dense_mlp(P, ex, xe)
        y = y.index_add(0, rows, out * w[rows, slot][:, None])
    return y


def is_moe_layer(cfg, l):
    if cfg["model_type"] in ("llama", "qwen3", "qwen2", "mistral"):
        return False
    if cfg["model_type"] != "qwen3_moe":
        return True
    step = cfg.get("decoder_sparse_step", 1)
    return l not in cfg.get("mlp_only_layers", []) and (l + 1) % step == 0


def load_balancing_loss(cfg, router_logits):
    """transformers' load_balancing_loss_func (no attention mask): every layer's logits concatenated."""
    E, K = (cfg.get("num_experts") or cfg.get("num_local_experts")), cfg["num_experts_per_tok"]
    logits = torch.cat(router_logits, dim=0)
    p = torch.softmax(logits, dim=-1)
    _, sel = torch.topk(p, K, dim=-1)
    tokens_per_expert = torch.nn.functional.one_hot(sel, E).to(p.dtype).mean(dim=0)  # [K, E]
    return torch.sum(tokens_per_expert * p.mean(dim=0)[None, :]) * E


def step(cfg, P, tokens, aux_coef):
    n = len(tokens)
    eps = cfg["rms_norm_eps"]
    cos, sin = rope_tables(cfg, n)
    x = P["model.embed_tokens.weight"][torch.tensor(tokens)]
    router_logits = []
    for l in range(cfg["num_hidden_layers"]):
        pre = "model.layers.%d." % l
        x = x + attention(cfg, P, pre, l, rms_norm(x, P[pre + "input_layernorm.weight"], eps), cos, sin)
        h = rms_norm(x, P[pre + "post_attention_layernorm.weight"], eps)
        x = x + (moe(cfg, P, pre, h, router_logits) if is_moe_layer(cfg, l) else dense_mlp(P, pre + "mlp.", h))
    x = rms_norm(x, P["model.norm.weight"], eps)
    head = P["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else P["lm_head.weight"]
    logits = x @ head.T
    loss = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(tokens[1:]))
    if aux_coef > 0 and router_logits:
        loss = loss + aux_coef * load_balancing_loss(cfg, router_logits)
    return loss


# ---------------------------------------------------------------------------------------------


def draw_weights(shapes, gen):
    """Wider than oomb's initialisation: matrices N(0, 0.08^2), norms 1 + N(0, 0.1^2), biases
    N(0, 0.05^2), sinks N(0, 1)."""
    out = {}
    for name in sorted(shapes):
        shape = shapes[name]
        r = gen.standard_normal(shape)
        if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            w = 1 + 0.1 * r
        elif name.endswith(".sinks"):
            w = r
        elif name.endswith(".bias"):
            w = 0.05 * r
        else:
            w = 0.08 * r
        out[name] = w.astype(np.float32)
    return out


def run_oomb(oomb, args, what):
    proc = subprocess.run([oomb, "run"] + args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit("hf_models_torch_check: %s failed (exit %d): oomb run %s\n%s" % (what, proc.returncode, " ".join(args),
                                                                           proc.stderr.strip()))
    return proc.stdout


def check_case(name, oomb, work, tolerance):
    cfg = dict(CASES[name])
    flags = cfg.pop("_flags", [])
    aux = float(flags[flags.index("--router-aux-loss") + 1]) if "--router-aux-loss" in flags else 0.0
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    model = os.path.join(d, "config.json")
    # 1. the names and shapes, from one step of oomb's own (the optimizer is off: the weights saved
    # are the ones it started from).
    run_oomb(oomb, ["--model", model] + RUN + ["--quiet", "--save-weights", os.path.join(d, "names.safetensors")],
             "reading the tensor names")
    shapes = {k: tuple(v.shape) for k, v in read_safetensors(os.path.join(d, "names.safetensors")).items()}
    # 2. our weights and tokens.
    gen = np.random.default_rng(sum(map(ord, name)))
    weights = draw_weights(shapes, gen)
    write_safetensors(os.path.join(d, "weights.safetensors"), weights)
    n = int(RUN[RUN.index("--context") + 1])
    tokens = gen.integers(0, cfg["vocab_size"], size=n).astype("<u4")
    tokens.tofile(os.path.join(d, "tokens.bin"))
    # 3. oomb's step.
    out = run_oomb(oomb, ["--model", model] + RUN + flags +
                   ["--quiet", "--json", "--weights", os.path.join(d, "weights.safetensors"), "--tokens",
                    os.path.join(d, "tokens.bin"), "--dump-grads", os.path.join(d, "grads.safetensors")], "the step")
    oomb_loss = json.loads(out)["loss"]
    oomb_grads = read_safetensors(os.path.join(d, "grads.safetensors"))
    # 4. ours.
    P = {k: torch.tensor(v.astype(np.float64), requires_grad=True) for k, v in weights.items()}
    loss = step(cfg, P, [int(t) for t in tokens], aux)
    loss.backward()
    worst, worst_name, failures = 0.0, "", []
    missing = sorted(set(P) ^ set(oomb_grads))
    if missing:
        failures.append("tensors in one set of gradients only: " + ", ".join(missing[:6]))
    for k in sorted(set(P) & set(oomb_grads)):
        ref = P[k].grad if P[k].grad is not None else torch.zeros_like(P[k])
        got = oomb_grads[k]
        norm = ref.norm().item()
        err = (got - ref).norm().item() / (norm if norm > 0 else 1.0)
        if err > worst:
            worst, worst_name = err, k
        if not err <= tolerance:
            failures.append("%s: relative L2 error %.3g (|grad| %.3g)" % (k, err, norm))
    loss_err = abs(oomb_loss - loss.item()) / abs(loss.item())
    if not loss_err <= tolerance:
        failures.append("loss: oomb %.12g, peer %.12g (relative error %.3g)" % (oomb_loss, loss.item(), loss_err))
    print("%-17s loss %.9f (peer %.9f, rel. error %.2e), %d gradients, worst rel. L2 %.2e (%s)%s" %
          (name, oomb_loss, loss.item(), loss_err, len(P), worst, worst_name, "" if not failures else ": FAILED"))
    for f in failures[:12]:
        print("  " + f)
    return not failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("oomb", help="the oomb binary (build/oomb)")
    ap.add_argument("--case", choices=sorted(CASES), action="append", help="one case (repeatable; default: all)")
    ap.add_argument("--keep", help="write the cases' configs, weights, tokens and gradients into this folder")
    ap.add_argument("--tolerance", type=float, default=1e-5, help="largest relative L2 error (default 1e-5)")
    a = ap.parse_args()
    if not os.access(a.oomb, os.X_OK):
        raise SystemExit("hf_models_torch_check: %s is not an executable (build it first: bash scripts/setup.sh)" % a.oomb)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="oomb-peer-") as tmp:
        work = a.keep or tmp
        ok = all([check_case(c, a.oomb, work, a.tolerance) for c in (a.case or sorted(CASES))])
    print("hf_models_torch_check: " + ("every loss and gradient within %g" % a.tolerance if ok else "FAILED"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""PyTorch eager timing of the V2-Lite-shaped layer that gpucheck wrote.

Usage: torch_layer.py WORK [REPS]

Reads WORK/timing.json (gpucheck's inputs, CPU outputs and CUDA-backend
times), runs the same MoE layer in PyTorch eager mode on the GPU the way
DeepSeek's model.py does (absorbed MLA, per-expert loop), and prints its
times next to the CUDA backend's, with each result's max|d|/max|ref| against
the CPU backend's float32 output. Variants: float32 or bfloat16, with the
weights resident on the GPU, or read from the checkpoint and copied to the
GPU on every forward (+load), which is what the trace view does.
"""
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

PREFIX = "model.layers.0."


def load_weights(ckpt, dtype):
    """Layer 0's tensors, on the GPU; BF16 weights converted to dtype."""
    index = json.load(open(os.path.join(ckpt, "model.safetensors.index.json")))
    weights = {}
    for shard in sorted(set(index["weight_map"].values())):
        for name, t in load_file(os.path.join(ckpt, shard)).items():
            if name.startswith(PREFIX):
                weights[name[len(PREFIX):]] = t.to("cuda", non_blocking=False).to(dtype)
    return weights


def rmsnorm(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rope(x, cos, sin):
    """Rotate the interleaved pairs (x[2i], x[2i+1]) of the last dimension."""
    p = x.unflatten(-1, (-1, 2))
    a, b = p[..., 0], p[..., 1]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)


def mlp(x, w, prefix):
    g = x @ w[prefix + ".gate_proj.weight"].T
    u = x @ w[prefix + ".up_proj.weight"].T
    return (F.silu(g) * u) @ w[prefix + ".down_proj.weight"].T


def forward(w, h, lens, cos, sin, cfg, scale):
    heads, nope, rd = cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"]
    vd, kvl, eps = cfg["v_head_dim"], cfg["kv_lora_rank"], cfg["rms_norm_eps"]
    n, dt = h.shape[0], h.dtype
    x = rmsnorm(h, w["input_layernorm.weight"], eps)
    q = (x @ w["self_attn.q_proj.weight"].T).view(n, heads, nope + rd)
    q_nope, q_pe = q.split([nope, rd], -1)
    kv = x @ w["self_attn.kv_a_proj_with_mqa.weight"].T
    lat, k_pe = kv.split([kvl, rd], -1)
    lat = rmsnorm(lat, w["self_attn.kv_a_layernorm.weight"], 1e-6)
    q_pe = rope(q_pe, cos[:, None, :], sin[:, None, :])
    k_pe = rope(k_pe, cos, sin)
    wkv_b = w["self_attn.kv_b_proj.weight"].view(heads, nope + vd, kvl)
    q_abs = torch.einsum("thd,hdc->thc", q_nope, wkv_b[:, :nope])
    ctx, o = [], 0
    for t in lens:
        s = slice(o, o + t)
        o += t
        scores = (torch.einsum("thc,sc->ths", q_abs[s], lat[s]) + torch.einsum("thr,sr->ths", q_pe[s], k_pe[s])) * scale
        mask = torch.full((t, t), float("-inf"), device=h.device).triu_(1)
        p = (scores.float() + mask[:, None, :]).softmax(-1).to(dt)
        ctx.append(torch.einsum("ths,sc->thc", p, lat[s]))
    out = torch.einsum("thc,hdc->thd", torch.cat(ctx), wkv_b[:, -vd:]).flatten(1)
    h1 = h + out @ w["self_attn.o_proj.weight"].T

    x = rmsnorm(h1, w["post_attention_layernorm.weight"], eps)
    probs = (x.float() @ w["mlp.gate.weight"].float().T).softmax(-1)
    weights, ids = probs.topk(cfg["num_experts_per_tok"], -1)
    weights = (weights * cfg["routed_scaling_factor"]).to(dt)
    y = torch.zeros_like(x)
    counts = torch.bincount(ids.flatten(), minlength=cfg["n_routed_experts"]).tolist()
    for e, c in enumerate(counts):
        if c:
            tok, top = torch.where(ids == e)
            y[tok] += mlp(x[tok], w, f"mlp.experts.{e}") * weights[tok, top, None]
    return h1 + (y + mlp(x, w, "mlp.shared_experts"))


def median_ms(fn, reps):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def read_f32(path):
    return torch.from_numpy(np.fromfile(path, dtype="<f4")).cuda()


def rel_err(got, want):
    return ((got.float() - want).abs().max() / want.abs().max()).item()


def main():
    work = sys.argv[1]
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    info = json.load(open(os.path.join(work, "timing.json")))
    ckpt = info["checkpoint"]
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    scale = info["softmax_scale"]
    resident = {dt: load_weights(ckpt, dt) for dt in (torch.float32, torch.bfloat16)}
    print(f"PyTorch {torch.__version__} eager on {torch.cuda.get_device_name()}, median of {reps} (ms); "
          "err = max|d|/max|ref| of hidden_out against the CPU backend")
    cols = ["torch-fp32", "torch-fp32+load", "torch-bf16", "torch-bf16+load", "cuda-fp32", "cuda-bf16"]
    print(f"{'shape':8}" + "".join(f" {c:>16}" for c in cols))
    ratios = []
    for s in info["shapes"]:
        hidden = cfg["hidden_size"]
        h32 = read_f32(s["hidden"]).view(-1, hidden)
        cos, sin = read_f32(s["cos"]).view(h32.shape[0], -1), read_f32(s["sin"]).view(h32.shape[0], -1)
        ref = read_f32(s["cpu_out"]).view(-1, hidden)
        row, errs = {}, {}
        with torch.no_grad():
            for dt, tag in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
                h, c, sn = h32.to(dt), cos.to(dt), sin.to(dt)
                w = resident[dt]
                errs[tag] = rel_err(forward(w, h, s["lens"], c, sn, cfg, scale), ref)
                row[f"torch-{tag}"] = median_ms(lambda: forward(w, h, s["lens"], c, sn, cfg, scale), reps)
                row[f"torch-{tag}+load"] = median_ms(
                    lambda: forward(load_weights(ckpt, dt), h, s["lens"], c, sn, cfg, scale), reps)
        row["cuda-fp32"], row["cuda-bf16"] = s["ms"]["cuda-fp32"], s["ms"]["cuda-bf16"]
        print(f"{s['name']:8}" + "".join(f" {row[c]:16.1f}" for c in cols))
        print(f"{'  err':8} {errs['fp32']:16.1e} {'':16} {errs['bf16']:16.1e}")
        for tag in ("fp32", "bf16"):
            ratios.append((s["name"], tag, row[f"cuda-{tag}"] / row[f"torch-{tag}+load"], row[f"cuda-{tag}"] / row[f"torch-{tag}"]))
    print("\ncuda time / torch time (below 1: the CUDA backend is faster)")
    print(f"{'shape':8} {'prec':5} {'vs +load':>9} {'vs resident':>12}")
    for name, tag, load, res in ratios:
        print(f"{name:8} {tag:5} {load:9.2f} {res:12.2f}")


if __name__ == "__main__":
    main()

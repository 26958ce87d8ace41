#!/usr/bin/python3
"""golden_losses.py: golden per-step losses of the reference trainer, from PyTorch.

Reads what `build/tests/test-gpt-train --dump DIR` wrote (the C trainer's initial weights,
every step's batch, the hyper-parameters), trains the same Llama-style model in PyTorch float32
(CPU) with torch.optim.AdamW, and writes one line per step: "step loss_hex loss".

    make BUILD=build build/tests/test-gpt-train
    build/tests/test-gpt-train --dump /tmp/gpt-golden
    /usr/bin/python3 scripts/golden_losses.py /tmp/gpt-golden tests/data/golden-gpt-tiny.txt

Needs Debian's python3-torch (apt-get install python3-torch; run it with /usr/bin/python3).
The model follows gpt/model.h exactly: parameter order and shapes of the weights file, RMSNorm
(eps inside the sqrt), RoPE "rotate half" with tables rounded once to float32 from double,
causal attention with grouped KV heads, SwiGLU, untied output projection, mean cross-entropy,
AdamW with weight decay on matrices only.

Attention and loss stay in their math forms here: softmax(q k^T / sqrt(hd)) v over the whole
(T,T) matrix and cross-entropy over the whole (B,T,V) logits. The C trainer's defaults are
flash-style attention (an online softmax over key blocks) and the chunked cross-entropy
(docs/trainer.md): the same functions summed in another order, so the goldens serve both forms.
test-gpt-train's tolerance (1e-5 relative per step) covers the difference: over the 10 golden
steps the worst relative difference is 9.3e-08 with the defaults and with --attention naive
--loss full (measured 2026-12-01).
"""
import json
import math
import struct
import sys

import numpy as np
import torch


def read_weights(path, cfg):
    with open(path, "rb") as f:
        hdr = struct.unpack("<10i", f.read(40))
        if hdr[0] != 0x57545047 or hdr[1] != 1:
            sys.exit(f"{path}: not a GPTW v1 weights file (re-run test-gpt-train --dump)")
        L, C, A, KV, F, V, T, n = hdr[2:]
        assert (L, C, A, KV, F, V) == (cfg["layers"], cfg["hidden"], cfg["heads"], cfg["kv_heads"],
                                       cfg["ffn"], cfg["vocab"]), "config.json and weights.bin disagree"
        data = np.frombuffer(f.read(), dtype="<f4")
    hd = C // A
    kvd = hd * KV
    shapes = [(V, C)]
    for _ in range(L):
        shapes += [(C,), (C, C), (kvd, C), (kvd, C), (C, C), (C,), (F, C), (F, C), (C, F)]
    shapes += [(C,), (V, C)]
    assert len(shapes) == n
    out, off = [], 0
    for s in shapes:
        k = int(np.prod(s))
        out.append(torch.tensor(data[off:off + k].reshape(s).copy()))
        off += k
    assert off == data.size, "trailing data in weights.bin"
    return out


def read_batches(path):
    with open(path, "rb") as f:
        magic, ver, steps, n = struct.unpack("<4i", f.read(16))
        if magic != 0x42545047 or ver != 1:
            sys.exit(f"{path}: not a GPTB v1 batches file")
        data = np.frombuffer(f.read(), dtype="<i4").reshape(steps, 2, n)
    return data


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: golden_losses.py DUMP_DIR OUT_FILE")
    d, out_path = sys.argv[1], sys.argv[2]
    cfg = json.load(open(f"{d}/config.json"))
    torch.manual_seed(0)
    torch.set_num_threads(1)
    L, C, A, KV, F, V = (cfg[k] for k in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab"))
    B, T = cfg["batch"], cfg["seq"]
    hd = C // A
    G = A // KV
    eps = cfg["norm_eps"]
    params = [torch.nn.Parameter(p) for p in read_weights(f"{d}/weights.bin", cfg)]
    batches = read_batches(f"{d}/batches.bin")

    # RoPE tables (T, hd/2): angle t * theta^(-2j/hd) in double, rounded once to float32
    h2 = hd // 2
    ang = np.array([[t * math.pow(cfg["rope_theta"], -2.0 * j / hd) for j in range(h2)] for t in range(T)])
    cos_t = torch.tensor(np.cos(ang).astype(np.float32))
    sin_t = torch.tensor(np.sin(ang).astype(np.float32))

    def rmsnorm(x, w):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w

    def rope(x):  # x (B,T,H,hd)
        x0, x1 = x[..., :h2], x[..., h2:]
        c, s = cos_t[None, :, None, :], sin_t[None, :, None, :]
        return torch.cat([x0 * c - x1 * s, x1 * c + x0 * s], dim=-1)

    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)

    def forward(tokens, targets):
        it = iter(params)
        wte = next(it)
        x = wte[tokens]                                         # (B,T,C)
        for _ in range(L):
            rms1, wq, wk, wv, wo, rms2, w1, w3, w2 = (next(it) for _ in range(9))
            h = rmsnorm(x, rms1)
            q = rope((h @ wq.T).view(B, T, A, hd))              # (B,T,A,hd)
            k = rope((h @ wk.T).view(B, T, KV, hd))             # (B,T,KV,hd)
            v = (h @ wv.T).view(B, T, KV, hd)
            k = k.repeat_interleave(G, dim=2)                   # head h reads KV head h // G
            v = v.repeat_interleave(G, dim=2)
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))    # (B,A,T,hd)
            att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
            att = att.masked_fill(mask, float("-inf")).softmax(-1)
            a = (att @ v).transpose(1, 2).reshape(B, T, C)
            x = x + a @ wo.T
            h = rmsnorm(x, rms2)
            x = x + (torch.nn.functional.silu(h @ w1.T) * (h @ w3.T)) @ w2.T
        normf, wout = next(it), next(it)
        logits = rmsnorm(x, normf) @ wout.T                     # (B,T,V)
        return torch.nn.functional.cross_entropy(logits.view(-1, V), targets.view(-1))

    decay = [p for p in params if p.dim() == 2]
    nodecay = [p for p in params if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["adam_eps"])
    lines = []
    for s in range(cfg["steps"]):
        tok = torch.tensor(batches[s, 0].astype(np.int64)).view(B, T)
        tgt = torch.tensor(batches[s, 1].astype(np.int64)).view(B, T)
        opt.zero_grad()
        loss = forward(tok, tgt)
        loss.backward()
        opt.step()
        lv = float(loss.item())
        lines.append(f"{s} {float(np.float32(lv)).hex()} {lv:.9g}")
        print(lines[-1])
    with open(out_path, "w") as f:
        f.write("gpt-golden v1\n")
        f.write(f"# torch {torch.__version__}, float32, CPU; config {json.dumps(cfg, sort_keys=True)}\n")
        f.write("# step loss_hex loss; made by scripts/golden_losses.py from test-gpt-train --dump\n")
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

"""Exactness under a quarter of one step's saved bytes: losses, every gradient and the final
weights bit-identical with and without smartswap, swapping shown, resident saved bytes within
the budget as measured apart from the adapter (helpers.Meter)."""
import torch
import torch.nn.functional as F
from torch import nn

import smartswap
from helpers import Meter, assert_identical, param_storages, run, saved_bytes_of_step

STEPS = 8


def check(model, step_fn, device, opt_fn=None, steps=STEPS, fraction=0.25, **kw):
    opt_fn = opt_fn or (lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3))
    model = model.to(device)
    saved, largest = saved_bytes_of_step(model, step_fn)
    budget = int(saved * fraction)
    assert largest <= budget, "the test model's largest saved tensor must fit a quarter"
    plain = run(model, opt_fn, step_fn, steps)
    ss = smartswap.SmartSwap(activation_budget=budget, device=device, **kw)
    box = {}
    meter = Meter(ss, exclude=lambda: box.get("ex", set()))
    holder = {}

    def stepped(m, i):
        if "m" not in holder:
            holder["m"] = m
            box["ex"] = param_storages(m)
        return step_fn(m, i)

    swapped = run(model, opt_fn, stepped, steps, ss=ss, meter=meter)
    st = ss.stats()
    ss.close()
    assert_identical(plain, swapped)
    assert st["iterations"] == steps
    assert st["swapped_out_bytes"] > 0, st
    assert st["swapped_in_bytes"] > 0, st
    assert max(meter.step_peaks) <= budget, (str(meter.step_peaks), budget, str(st))
    assert st["peak_saved_bytes"] <= budget, (st["peak_saved_bytes"], budget)
    assert st["plans_made"] >= 1, st
    return st, meter, budget


class Block(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True,
                                                norm_first=True, activation="gelu")

    def forward(self, x, mask):
        return self.layer(x, src_mask=mask, is_causal=True)


class TinyTransformer(nn.Module):
    def __init__(self, vocab=96, d=64, heads=4, ff=128, layers=3):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads, ff) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        S = idx.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(S, device=idx.device)
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.norm(x))


def test_nn_transformer(device):
    torch.manual_seed(0)
    model = TinyTransformer()
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(0, 96, (8, 33), generator=g) for _ in range(STEPS)]

    def step(m, i):
        d = data[i].to(device)
        logits = m(d[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), d[:, 1:].reshape(-1))
        loss.backward()
        return loss

    st, _, _ = check(model, step, device)
    assert st["stage"] == "stable"


class MoE(nn.Module):
    """Top-2 of 4 experts per token; an expert that gets no token runs no operator."""

    def __init__(self, d=48, experts=4, hidden=96, k=2):
        super().__init__()
        self.k = k
        self.router = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(d, hidden), nn.GELU(),
                                                   nn.Linear(hidden, d)) for _ in range(experts))

    def forward(self, x):
        B, S, D = x.shape
        flat = x.reshape(-1, D)
        w = self.router(flat).softmax(-1)
        top, idx = w.topk(self.k, dim=-1)
        out = torch.zeros_like(flat)
        for e, ex in enumerate(self.experts):
            rows, slot = (idx == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            y = ex(flat[rows]) * top[rows, slot].unsqueeze(-1)
            out = out.index_add(0, rows, y)
        return out.reshape(B, S, D)


class MoEModel(nn.Module):
    def __init__(self, vocab=80, d=48, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.moes = nn.ModuleList(MoE(d) for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.emb(idx)
        for n, moe in zip(self.norms, self.moes):
            x = x + moe(n(x))
        return self.head(x)


def test_moe_varying_lengths(device):
    torch.manual_seed(0)
    model = MoEModel()
    g = torch.Generator().manual_seed(2)
    lengths = [int(torch.randint(12, 40, (1,), generator=g)) for _ in range(STEPS)]
    lengths[0] = 39   # the sizing probe runs step 0: let it be the longest
    data = [torch.randint(0, 80, (4, L + 1), generator=g) for L in lengths]

    def step(m, i):
        d = data[i].to(device)
        logits = m(d[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), d[:, 1:].reshape(-1))
        loss.backward()
        return loss

    check(model, step, device)


def llama_accumulated(device):
    """A 2-layer Hugging Face Llama trained with 2 accumulated micro-batches per step."""
    transformers = __import__("pytest").importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=64)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    g = torch.Generator().manual_seed(3)
    micro = 2
    data = [[torch.randint(0, 128, (2, 24), generator=g) for _ in range(micro)]
            for _ in range(STEPS)]

    def step(m, i):
        total = 0.0
        for d in data[i]:
            d = d.to(device)
            out = m(input_ids=d, labels=d)
            (out.loss / micro).backward()
            total = total + out.loss.detach()
        return total / micro

    return model, step


def test_hf_llama_grad_accumulation(device):
    model, step = llama_accumulated(device)
    check(model, step, device, steps=6)


def test_budget_sweep_accumulated(device):
    """Resident saved bytes, swap-in buffers included, stay within the budget at every hook
    return for a sweep of budgets, not one: a Stable plan made for one micro-batch pattern asks
    for swap-ins of another, and a prefetch that does not fit must be refused (a miss), never
    allocated over the budget."""
    model, step = llama_accumulated(device)
    for fraction in (0.30, 0.35, 0.40, 0.45, 0.50):
        check(model, step, device, steps=6, fraction=fraction)

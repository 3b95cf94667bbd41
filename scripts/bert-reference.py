#!/usr/bin/env python3
"""Reference sentence embeddings for tests/semantic/embed_bert.rs, computed without candle or torch.

A plain numpy BERT forward pass in float64 (embeddings, post-LN encoder layers with exact
erf GELU), then sentence-transformers' pipeline for all-MiniLM-L6-v2: mean pooling over the
attention mask and L2 normalisation. The only shared code with the Rust side is the
tokenizer (the `tokenizers` wheel, the same library the crate wraps): the point is to check
candle's forward pass and our pooling, not to re-implement WordPiece.

Usage (numpy, tokenizers and safetensors from PyPI; no torch):
    python3 -m venv /tmp/bertref && /tmp/bertref/bin/pip install numpy tokenizers safetensors
    /tmp/bertref/bin/python scripts/bert-reference.py [MODEL_DIR] [SENTENCE ...]
MODEL_DIR defaults to target/models/all-MiniLM-L6-v2 (scripts/fetch-model.sh fetches it).
Prints, per sentence, the values tests/semantic/embed_bert.rs pins: the first 8 components and two
whole-vector checksums (see `checksums`).
"""

import json
import math
import os
import sys

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

# Keep in step with tests/semantic/embed_bert.rs. The second is the example sentence-transformers'
# docs print (its vector begins 0.0676569, 0.0634959, 0.0487131, ...); the last is far past
# the 256-token limit, so it checks truncation and the top position embeddings too.
WORDS = (
    "the river runs past old stone houses and green fields "
    "under a grey sky while children play near water"
).split()
LONG = " ".join(WORDS[i % len(WORDS)] for i in range(5000))
SENTENCES = [
    "A man is eating food.",
    "This is an example sentence",
    "Vikingfs keeps a derived vector index of every file in the namespace.",
    LONG,
]


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


_erf = np.frompyfunc(math.erf, 1, 1)


def gelu(x):
    # BERT's "gelu" is the exact erf form, not the tanh approximation.
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))


def forward(w, cfg, ids):
    """Last hidden state of one unpadded sequence: (len, hidden)."""
    n = len(ids)
    eps = cfg["layer_norm_eps"]
    heads = cfg["num_attention_heads"]
    hd = cfg["hidden_size"] // heads
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:n]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."

        def lin(name, h):
            return h @ w[p + name + ".weight"].T + w[p + name + ".bias"]

        q = lin("attention.self.query", x).reshape(n, heads, hd).transpose(1, 0, 2)
        k = lin("attention.self.key", x).reshape(n, heads, hd).transpose(1, 0, 2)
        v = lin("attention.self.value", x).reshape(n, heads, hd).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        ctx = (s @ v).transpose(1, 0, 2).reshape(n, heads * hd)
        x = layer_norm(
            lin("attention.output.dense", ctx) + x,
            w[p + "attention.output.LayerNorm.weight"],
            w[p + "attention.output.LayerNorm.bias"],
            eps,
        )
        h = gelu(lin("intermediate.dense", x))
        x = layer_norm(
            lin("output.dense", h) + x,
            w[p + "output.LayerNorm.weight"],
            w[p + "output.LayerNorm.bias"],
            eps,
        )
    return x


def checksums(v):
    """Two numbers every component feeds into, so the test checks the whole vector compactly:
    the plain sum and a sum weighted by (i mod 7) - 3."""
    weights = np.array([(i % 7) - 3 for i in range(len(v))], dtype=np.float64)
    return float(v.sum()), float(v @ weights)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    args = sys.argv[1:]
    model_dir = args.pop(0) if args else os.path.join(here, "..", "target", "models", "all-MiniLM-L6-v2")
    sentences = args or SENTENCES
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    max_len = min(256, cfg["max_position_embeddings"])
    try:
        with open(os.path.join(model_dir, "sentence_bert_config.json")) as f:
            max_len = min(json.load(f)["max_seq_length"], cfg["max_position_embeddings"])
    except FileNotFoundError:
        pass
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_len)
    w = {k: v.astype(np.float64) for k, v in load_file(os.path.join(model_dir, "model.safetensors")).items()}
    for s in sentences:
        ids = tok.encode(s).ids
        # Unpadded, so every token counts in the mean: the same as masking the padding out.
        pooled = forward(w, cfg, ids).mean(0)
        v = pooled / np.linalg.norm(pooled)
        total, weighted = checksums(v)
        print(json.dumps({
            "text": s if len(s) <= 80 else s[:60] + f"... ({len(s.split())} words)",
            "tokens": len(ids),
            "first8": [round(float(x), 7) for x in v[:8]],
            "sum": round(total, 7),
            "weighted_sum": round(weighted, 7),
        }))


if __name__ == "__main__":
    main()

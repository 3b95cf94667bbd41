//! The BERT encoder's forward pass, written out over `gemm`'s matrix products.
//!
//! Owns a BERT model's configuration (`config.json`) and its weights laid out as Hugging Face
//! names them (`embeddings.*`, `encoder.layer.N.*`, optionally under a `bert.` prefix), and
//! turns texts' token ids into one hidden state per token. Pooling and normalisation are the
//! embedder's (`bert.rs`). It is inference only: dropout is the identity, token types are all
//! 0, and there is no pooler, cross-attention or cache.
//!
//! Why by hand rather than on candle's tensors (as it was until issue 27): on 2 cores candle ran
//! at about a third of what its own matrix products can do. The products were never the
//! problem; what was is everything between them: the exact GELU one f64 `erf` at a time, the
//! softmax one `f32::exp` at a time, both on one thread, the head transposes copied into fresh
//! tensors, and every op a new buffer. Here:
//! - texts are packed, not padded: the linear layers run over all the tokens of a batch as one
//!   matrix, and attention runs per text and head over that text's own tokens, so a short text
//!   costs its length wherever it sits and needs no attention mask;
//! - query, key and value are one product (their weights side by side), each bias is the
//!   product's starting value, and the weights are stored transposed once at load, so each
//!   linear layer is a single `gemm` call with nothing copied before or after;
//! - GELU, softmax and layer normalisation are single passes over rows, spread over rayon's
//!   pool like the products, with `erf` and `exp` as f32 polynomials the compiler vectorises
//!   (`erf` within 5e-7 of the true one, `exp` within a few ulp), for AVX2 when the CPU has it;
//! - the activations' buffers are allocated once per call and reused by every layer.
//!
//! The maths is the reference BERT's and is held to a float64 numpy run of it
//! (`scripts/bert-reference.py`, `tests/semantic/embed_bert.rs`);
//! `benches/embed.rs` measures it against the candle version it replaced.

use std::collections::HashMap;

use candle_core::{DType, Tensor};
use gemm::Parallelism;
use rayon::prelude::*;
use serde::Deserialize;

use super::int8::QLinear;

/// The fields of a BERT `config.json` the forward pass needs; the rest are training's.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: Activation,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
    pub model_type: Option<String>,
    /// Only "absolute" (the default) is computed here.
    pub position_embedding_type: Option<String>,
}

/// The feed-forward activation, as Hugging Face's `ACT2FN` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub(super) enum Activation {
    /// The exact GELU, x·Φ(x) (all-MiniLM-L6-v2's).
    #[serde(rename = "gelu")]
    Gelu,
    /// GELU's tanh approximation.
    #[serde(alias = "gelu_new", alias = "gelu_pytorch_tanh", rename = "gelu_fast")]
    GeluTanh,
    #[serde(rename = "relu")]
    Relu,
}

/// A loaded encoder: f32 weights in plain vectors (about 90 MB for all-MiniLM-L6-v2).
pub(super) struct Encoder {
    hidden: usize,
    heads: usize,
    head_size: usize,
    intermediate: usize,
    activation: Activation,
    word: Vec<f32>,
    position: Vec<f32>,
    /// Token type 0's row: every text here is a single segment.
    token_type0: Vec<f32>,
    max_positions: usize,
    vocab: usize,
    norm: Norm,
    layers: Vec<Layer>,
}

/// A linear layer y = x·W + b, W stored (d_in, d_out) row-major: the transpose of the
/// checkpoint's (d_out, d_in), so a product reads both operands along their rows.
struct Linear {
    /// (d_in, d_out), row-major; empty when the layer runs in int8 (`q`).
    w: Vec<f32>,
    b: Vec<f32>,
    d_in: usize,
    d_out: usize,
    q: Option<QLinear>,
}

struct Norm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
    eps: f32,
}

/// One transformer layer: self-attention, then the feed-forward block, each added to its
/// input and layer-normalised (BERT is post-norm).
struct Layer {
    /// Query, key and value in one: (hidden, 3·hidden), in that order.
    qkv: Linear,
    attention_out: Linear,
    attention_norm: Norm,
    intermediate: Linear,
    output: Linear,
    output_norm: Norm,
}

/// The activations of one batch, reused by every layer and every batch of a call.
#[derive(Default)]
pub(super) struct Scratch {
    /// (tokens, hidden): the hidden states, the layers' input and output.
    x: Vec<f32>,
    /// (tokens, 3·hidden): queries, keys and values.
    qkv: Vec<f32>,
    /// (tokens, hidden): the heads' outputs side by side.
    ctx: Vec<f32>,
    /// (tokens, intermediate).
    inter: Vec<f32>,
    /// (tokens, hidden): the attention block's and the feed-forward block's outputs.
    out: Vec<f32>,
}

/// Rows per task of the row-wise passes: enough work to outweigh rayon's hand-off.
const ROWS_PER_TASK: usize = 16;

/// A checkpoint's tensors by name, read as f32.
struct Weights<'a> {
    tensors: &'a HashMap<String, Tensor>,
    prefix: String,
    /// Linear layers in 8-bit integers where the CPU can ([`QLinear`]).
    int8: bool,
}

impl Weights<'_> {
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, String> {
        let full = format!("{}{name}", self.prefix);
        let t = self
            .tensors
            .get(&full)
            .ok_or_else(|| format!("no tensor {full}"))?;
        if t.dims() != shape {
            return Err(format!(
                "tensor {full} has shape {:?}, expected {shape:?}",
                t.dims()
            ));
        }
        t.to_dtype(DType::F32)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(|e| format!("tensor {full}: {e}"))
    }

    /// The linear layers `names` (each (d_out_i, d_in) in the checkpoint) as one (d_in, Σ d_out).
    fn linear(&self, names: &[&str], d_in: usize, d_out: usize) -> Result<Linear, String> {
        let total = d_out * names.len();
        let mut w = vec![0.0; d_in * total];
        let mut b = Vec::with_capacity(total);
        for (part, name) in names.iter().enumerate() {
            let wt = self.get(&format!("{name}.weight"), &[d_out, d_in])?;
            for (o, row) in wt.chunks_exact(d_in).enumerate() {
                for (i, &v) in row.iter().enumerate() {
                    w[i * total + part * d_out + o] = v;
                }
            }
            b.extend(self.get(&format!("{name}.bias"), &[d_out])?);
        }
        let q = if self.int8 {
            QLinear::new(&w, d_in, total)
        } else {
            None
        };
        Ok(Linear {
            w: if q.is_some() { Vec::new() } else { w },
            b,
            d_in,
            d_out: total,
            q,
        })
    }

    fn norm(&self, name: &str, dim: usize, eps: f64) -> Result<Norm, String> {
        Ok(Norm {
            gamma: self.get(&format!("{name}.weight"), &[dim])?,
            beta: self.get(&format!("{name}.bias"), &[dim])?,
            eps: eps as f32,
        })
    }
}

impl Encoder {
    /// Whether the linear layers run in 8-bit integers.
    pub fn int8(&self) -> bool {
        self.layers.first().is_some_and(|l| l.qkv.q.is_some())
    }

    /// The weights in `tensors`, checked against `config`'s shapes. A checkpoint saved from a
    /// `BertFor…` model keeps them under `bert.` (or its `model_type`); a sentence-transformers
    /// one has them at the top.
    /// With `int8`, the linear layers run in 8-bit integers when the CPU has AVX-512 VNNI
    /// ([`QLinear`]), in f32 otherwise.
    pub fn load(
        tensors: &HashMap<String, Tensor>,
        c: &Config,
        int8: bool,
    ) -> Result<Encoder, String> {
        let prefix = ["bert", c.model_type.as_deref().unwrap_or("bert")]
            .into_iter()
            .find(|p| tensors.contains_key(&format!("{p}.embeddings.word_embeddings.weight")))
            .map_or(String::new(), |p| format!("{p}."));
        let w = Weights {
            tensors,
            prefix,
            int8,
        };
        let h = c.hidden_size;
        let f = c.intermediate_size;
        let layers = (0..c.num_hidden_layers)
            .map(|i| {
                let l = |name: &str| format!("encoder.layer.{i}.{name}");
                Ok(Layer {
                    qkv: w.linear(
                        &[
                            &l("attention.self.query"),
                            &l("attention.self.key"),
                            &l("attention.self.value"),
                        ],
                        h,
                        h,
                    )?,
                    attention_out: w.linear(&[&l("attention.output.dense")], h, h)?,
                    attention_norm: w.norm(
                        &l("attention.output.LayerNorm"),
                        h,
                        c.layer_norm_eps,
                    )?,
                    intermediate: w.linear(&[&l("intermediate.dense")], h, f)?,
                    output: w.linear(&[&l("output.dense")], f, h)?,
                    output_norm: w.norm(&l("output.LayerNorm"), h, c.layer_norm_eps)?,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let token_type = w.get(
            "embeddings.token_type_embeddings.weight",
            &[c.type_vocab_size, h],
        )?;
        if token_type.is_empty() {
            return Err("type_vocab_size must be at least 1".into());
        }
        Ok(Encoder {
            hidden: h,
            heads: c.num_attention_heads,
            head_size: h / c.num_attention_heads,
            intermediate: f,
            activation: c.hidden_act,
            word: w.get("embeddings.word_embeddings.weight", &[c.vocab_size, h])?,
            position: w.get(
                "embeddings.position_embeddings.weight",
                &[c.max_position_embeddings, h],
            )?,
            token_type0: token_type[..h].to_vec(),
            max_positions: c.max_position_embeddings,
            vocab: c.vocab_size,
            norm: w.norm("embeddings.LayerNorm", h, c.layer_norm_eps)?,
            layers,
        })
    }

    pub fn hidden_size(&self) -> usize {
        self.hidden
    }

    /// Hidden states of the texts `seqs` (token ids, each at most `max_position_embeddings`
    /// long), one row of `hidden_size` per token, the texts' rows one after another, in
    /// `scratch`; the returned slice borrows it. No text sees another: packing them together
    /// only shares the matrix products' work.
    pub fn forward<'s>(
        &self,
        seqs: &[&[u32]],
        scratch: &'s mut Scratch,
    ) -> Result<&'s [f32], String> {
        let h = self.hidden;
        let tokens: usize = seqs.iter().map(|s| s.len()).sum();
        for s in seqs {
            if s.len() > self.max_positions {
                return Err(format!(
                    "{} tokens, more than the {} positions",
                    s.len(),
                    self.max_positions
                ));
            }
            if let Some(id) = s.iter().find(|&&id| id as usize >= self.vocab) {
                return Err(format!("token id {id} outside the vocabulary"));
            }
        }
        if tokens == 0 {
            return Ok(&[]);
        }
        let resize = |v: &mut Vec<f32>, len| {
            v.clear();
            v.resize(len, 0.0);
        };
        resize(&mut scratch.x, tokens * h);
        resize(&mut scratch.qkv, tokens * 3 * h);
        resize(&mut scratch.ctx, tokens * h);
        resize(&mut scratch.inter, tokens * self.intermediate);
        resize(&mut scratch.out, tokens * h);

        // Embeddings: word + token type 0 + position, layer-normalised.
        let mut rows = scratch.x.chunks_exact_mut(h);
        for s in seqs {
            for (pos, &id) in s.iter().enumerate() {
                let row = rows.next().expect("one row per token");
                let word = &self.word[id as usize * h..][..h];
                let position = &self.position[pos * h..][..h];
                for (((r, w), t), p) in row
                    .iter_mut()
                    .zip(word)
                    .zip(&self.token_type0)
                    .zip(position)
                {
                    *r = (w + t) + p;
                }
            }
        }
        scratch
            .x
            .par_chunks_mut(h * ROWS_PER_TASK)
            .for_each(|rows| self.norm.rows(rows, None));

        let starts: Vec<usize> = seqs
            .iter()
            .scan(0, |at, s| {
                let start = *at;
                *at += s.len();
                Some(start)
            })
            .collect();
        for layer in &self.layers {
            self.layer(layer, seqs, &starts, tokens, scratch);
        }
        Ok(&scratch.x)
    }

    fn layer(
        &self,
        layer: &Layer,
        seqs: &[&[u32]],
        starts: &[usize],
        tokens: usize,
        s: &mut Scratch,
    ) {
        let h = self.hidden;
        layer.qkv.forward(&s.x, tokens, &mut s.qkv);
        self.attention(seqs, starts, &s.qkv, &mut s.ctx);
        // out ← ctx·W + b, then x ← norm(out + x): the residual is added in the norm's pass.
        layer.attention_out.forward(&s.ctx, tokens, &mut s.out);
        let norm = &layer.attention_norm;
        s.x.par_chunks_mut(h * ROWS_PER_TASK)
            .zip(s.out.par_chunks(h * ROWS_PER_TASK))
            .for_each(|(xs, ys)| norm.rows(xs, Some(ys)));
        layer.intermediate.forward(&s.x, tokens, &mut s.inter);
        let act = self.activation;
        s.inter
            .par_chunks_mut(self.intermediate * ROWS_PER_TASK)
            .for_each(|xs| activate(act, xs));
        layer.output.forward(&s.inter, tokens, &mut s.out);
        let norm = &layer.output_norm;
        s.x.par_chunks_mut(h * ROWS_PER_TASK)
            .zip(s.out.par_chunks(h * ROWS_PER_TASK))
            .for_each(|(xs, ys)| norm.rows(xs, Some(ys)));
    }

    /// Scaled dot-product self-attention of each text over its own tokens, per head, into
    /// `ctx` (tokens, hidden), the heads side by side.
    fn attention(&self, seqs: &[&[u32]], starts: &[usize], qkv: &[f32], ctx: &mut [f32]) {
        let (h, d) = (self.hidden, self.head_size);
        let stride = 3 * h;
        let scale = 1.0 / (d as f32).sqrt();
        let tasks: Vec<(usize, usize)> = (0..seqs.len())
            .filter(|&i| !seqs[i].is_empty())
            .flat_map(|i| (0..self.heads).map(move |head| (i, head)))
            .collect();
        // Each task's (len, head_size) output; copied into place after, so the tasks share
        // nothing writable.
        let outs: Vec<Vec<f32>> = tasks
            .par_iter()
            .map_init(Vec::new, |scores: &mut Vec<f32>, &(i, head)| {
                let n = seqs[i].len();
                let rows = &qkv[starts[i] * stride..(starts[i] + n) * stride];
                scores.clear();
                scores.resize(n * n, 0.0);
                let mut out = vec![0.0f32; n * d];
                let q = head * d;
                let (k, v) = (h + head * d, 2 * h + head * d);
                // SAFETY: every pointer stays within its slice: row r < n of a block of
                // `stride`-long rows, columns below q + d ≤ h, k + d ≤ 2h, v + d ≤ 3h =
                // stride; `scores` is (n, n) and `out` (n, d), both row-major and exclusively
                // borrowed here.
                unsafe {
                    // scores = scale · Q·Kᵀ (K read transposed through its strides).
                    gemm::gemm(
                        n,
                        n,
                        d,
                        scores.as_mut_ptr(),
                        1,
                        n as isize,
                        false,
                        rows.as_ptr().add(q),
                        1,
                        stride as isize,
                        rows.as_ptr().add(k),
                        stride as isize,
                        1,
                        0.0,
                        scale,
                        false,
                        false,
                        false,
                        Parallelism::None,
                    );
                }
                softmax_rows(scores, n);
                // SAFETY: as above; `out` is (n, d).
                unsafe {
                    gemm::gemm(
                        n,
                        d,
                        n,
                        out.as_mut_ptr(),
                        1,
                        d as isize,
                        false,
                        scores.as_ptr(),
                        1,
                        n as isize,
                        rows.as_ptr().add(v),
                        1,
                        stride as isize,
                        0.0,
                        1.0,
                        false,
                        false,
                        false,
                        Parallelism::None,
                    );
                }
                out
            })
            .collect();
        for (&(i, head), out) in tasks.iter().zip(&outs) {
            for (r, o) in out.chunks_exact(d).enumerate() {
                ctx[(starts[i] + r) * h + head * d..][..d].copy_from_slice(o);
            }
        }
    }
}

impl Linear {
    /// out (rows, d_out) = x (rows, d_in)·W + b.
    fn forward(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        if let Some(q) = &self.q {
            return q.forward(x, rows, &self.b, out);
        }
        assert!(x.len() >= rows * self.d_in && out.len() >= rows * self.d_out);
        for row in out[..rows * self.d_out].chunks_exact_mut(self.d_out) {
            row.copy_from_slice(&self.b);
        }
        // SAFETY: the assertion above keeps the (rows, d_in) and (rows, d_out) row-major
        // operands inside `x` and `out`; `w` is (d_in, d_out); `out` is exclusively borrowed
        // and does not overlap `x`.
        unsafe {
            gemm::gemm(
                rows,
                self.d_out,
                self.d_in,
                out.as_mut_ptr(),
                1,
                self.d_out as isize,
                true,
                x.as_ptr(),
                1,
                self.d_in as isize,
                self.w.as_ptr(),
                1,
                self.d_out as isize,
                1.0,
                1.0,
                false,
                false,
                false,
                Parallelism::Rayon(0),
            );
        }
    }
}

impl Norm {
    /// xs ← layer_norm(xs + ys), or layer_norm(xs) without `ys`, row by row.
    fn rows(&self, xs: &mut [f32], ys: Option<&[f32]>) {
        #[cfg(target_arch = "x86_64")]
        if avx2() {
            // SAFETY: this CPU has AVX2 and FMA, all `rows_avx2` needs.
            return unsafe { self.rows_avx2(xs, ys) };
        }
        self.rows_any(xs, ys);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn rows_avx2(&self, xs: &mut [f32], ys: Option<&[f32]>) {
        self.rows_any(xs, ys);
    }

    #[inline(always)]
    fn rows_any(&self, xs: &mut [f32], ys: Option<&[f32]>) {
        let h = self.gamma.len();
        match ys {
            Some(ys) => {
                for (x, y) in xs.chunks_exact_mut(h).zip(ys.chunks_exact(h)) {
                    for (x, y) in x.iter_mut().zip(y) {
                        *x += y;
                    }
                    self.apply(x);
                }
            }
            None => xs.chunks_exact_mut(h).for_each(|x| self.apply(x)),
        }
    }

    /// row ← layer_norm(row).
    #[inline(always)]
    fn apply(&self, row: &mut [f32]) {
        let n = row.len() as f32;
        let mean = sum(row) / n;
        let mut var = 0.0;
        let mut lanes = [0.0f32; LANES];
        let mut chunks = row.chunks_exact(LANES);
        for c in &mut chunks {
            for (l, x) in lanes.iter_mut().zip(c) {
                let d = x - mean;
                *l += d * d;
            }
        }
        for x in chunks.remainder() {
            var += (x - mean) * (x - mean);
        }
        var += lanes.iter().sum::<f32>();
        let inv = 1.0 / (var / n + self.eps).sqrt();
        for ((x, g), b) in row.iter_mut().zip(&self.gamma).zip(&self.beta) {
            *x = (*x - mean) * inv * g + b;
        }
    }
}

/// Accumulators of the vectorised sums: one AVX register of f32.
const LANES: usize = 8;

#[inline(always)]
fn sum(xs: &[f32]) -> f32 {
    let mut lanes = [0.0f32; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for c in &mut chunks {
        for (l, x) in lanes.iter_mut().zip(c) {
            *l += x;
        }
    }
    chunks.remainder().iter().sum::<f32>() + lanes.iter().sum::<f32>()
}

#[inline(always)]
fn max(xs: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for c in &mut chunks {
        for (l, &x) in lanes.iter_mut().zip(c) {
            *l = if x > *l { x } else { *l };
        }
    }
    chunks
        .remainder()
        .iter()
        .chain(&lanes)
        .fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m })
}

/// Whether this CPU has AVX2 and FMA: the row passes then run 8 floats per instruction, not
/// the 4 of the x86-64 baseline the crate is built for (`gemm` picks its kernels the same way).
/// Measured on one core, it took 4% off the encoder's CPU time.
#[cfg(target_arch = "x86_64")]
fn avx2() -> bool {
    static AVX2: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVX2.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    })
}

/// Each `n`-long row of `rows` ← its softmax.
fn softmax_rows(rows: &mut [f32], n: usize) {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: this CPU has AVX2 and FMA, all `softmax_rows_avx2` needs.
        return unsafe { softmax_rows_avx2(rows, n) };
    }
    rows.chunks_exact_mut(n).for_each(softmax);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn softmax_rows_avx2(rows: &mut [f32], n: usize) {
    rows.chunks_exact_mut(n).for_each(softmax);
}

/// row ← softmax(row).
#[inline(always)]
fn softmax(row: &mut [f32]) {
    let m = max(row);
    for x in row.iter_mut() {
        *x = exp(*x - m);
    }
    let inv = 1.0 / sum(row);
    for x in row.iter_mut() {
        *x *= inv;
    }
}

fn activate(act: Activation, xs: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: this CPU has AVX2 and FMA, all `activate_avx2` needs.
        return unsafe { activate_avx2(act, xs) };
    }
    activate_any(act, xs);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn activate_avx2(act: Activation, xs: &mut [f32]) {
    activate_any(act, xs);
}

#[inline(always)]
fn activate_any(act: Activation, xs: &mut [f32]) {
    match act {
        Activation::Gelu => {
            for x in xs {
                *x = 0.5 * *x * (1.0 + erf(*x * std::f32::consts::FRAC_1_SQRT_2));
            }
        }
        Activation::GeluTanh => {
            // candle's and PyTorch's: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
            const C: f32 = 0.797_884_6;
            for x in xs {
                let v = *x;
                *x = 0.5 * v * (1.0 + tanh(C * v * (1.0 + 0.044_715 * v * v)));
            }
        }
        Activation::Relu => {
            for x in xs {
                *x = x.max(0.0);
            }
        }
    }
}

/// eˣ for x ≤ 88 (Cephes' expf: x = n·ln 2 + r, |r| ≤ ln 2 / 2, a degree-6 polynomial in r,
/// times 2ⁿ built in the exponent bits), within 2 ulp; straight-line arithmetic, so a loop of
/// it vectorises. Below −87 it gives about 1e-38 rather than 0: nothing here tells them apart.
#[inline(always)]
fn exp(x: f32) -> f32 {
    // Adding and taking away 1.5·2²³ rounds to the nearest integer without a call to `round`.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let n = (x * std::f32::consts::LOG2_E + ROUND) - ROUND;
    // ln 2 in two parts, the first exact in a few bits, so n·LN2_HI has no rounding error.
    let r = (x - n * 0.693_359_4) + n * 2.121_944_4e-4;
    let p = 1.987_569_1e-4;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// erf(x) within 5e-7 (XLA's rational approximation: x·P(x²)/Q(x²) on [−4, 4], where erf is
/// within an ulp of ±1 in f32 and stays there beyond).
#[inline(always)]
fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let p = -2.726_142_3e-10;
    let p = p * x2 + 2.770_681_4e-8;
    let p = p * x2 - 2.101_024e-6;
    let p = p * x2 - 5.692_506_4e-5;
    let p = p * x2 - 7.349_906_3e-4;
    let p = p * x2 - 2.954_600_1e-3;
    let p = p * x2 - 1.609_603_3e-2;
    let q = -1.456_607_2e-5;
    let q = q * x2 - 2.133_740_6e-4;
    let q = q * x2 - 1.682_827e-3;
    let q = q * x2 - 7.373_329e-3;
    let q = q * x2 - 1.426_474e-2;
    x * p / q
}

/// tanh through `exp`: 1 − 2/(e^{2x} + 1), exact enough for an activation.
#[inline(always)]
fn tanh(x: f32) -> f32 {
    1.0 - 2.0 / (exp(2.0 * x) + 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_and_erf_match_std_and_a_series() {
        for i in -8700..=8800 {
            let x = i as f32 / 100.0;
            let (got, want) = (exp(x), x.exp());
            assert!(
                (got - want).abs() <= want * 3e-7,
                "exp({x}) {got} vs {want}"
            );
        }
        // erf by its Taylor series in f64, fine for |x| ≤ 3.
        let series = |x: f64| {
            let (mut term, mut total) = (x, x);
            for n in 1..200 {
                term *= -x * x / n as f64;
                total += term / (2 * n + 1) as f64;
            }
            total * 2.0 / std::f64::consts::PI.sqrt()
        };
        for i in -300..=300 {
            let x = i as f32 / 100.0;
            let want = series(f64::from(x));
            assert!(
                (f64::from(erf(x)) - want).abs() < 5e-7,
                "erf({x}) {} vs {want}",
                erf(x)
            );
        }
        // Past the clamp, within an ulp of ±1.
        assert!((erf(10.0) - 1.0).abs() < 1.2e-7 && erf(-10.0) == -erf(10.0));
    }
}

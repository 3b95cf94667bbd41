//! The BERT encoder's throughput, beside the candle forward pass it replaced and the
//! machine's own matrix-product peak, in one run.
//!
//! - `gemm peak`: a 2048³ f32 product with `gemm` on rayon's pool (all cores unless
//!   `RAYON_NUM_THREADS`), the ceiling any encoder built on it can approach;
//! - `old`: the candle encoder of commit 1b609a3 (copied below, with its padded batches of 8
//!   sorted by length), run through the same tokenizer;
//! - `new`: `vikingfs::embed::BertEmbedder` in f32;
//! - `int8`: the same with its linear layers in 8-bit integers (`Precision::Int8`), on a CPU
//!   with AVX-512 VNNI; its line also gives the cosine of its vectors to f32's (lowest and
//!   mean), what the quantisation costs before any search measures it.
//!
//! Texts are real prose and code nobody here wrote: windows cut from
//! /usr/share/common-licenses/* and the Python standard library's .py files. `full` holds
//! windows of the model's full 256 word pieces; `mixed` the same windows cut to lengths spread
//! evenly from a few tokens to 256 (as passages of files come). Each `embed` call gets
//! `--per-call` texts. Old and new alternate, `--repeats` times; the table shows medians, and
//! the largest difference between the two paths' vectors.
//!
//! GFLOP/s counts the encoder's multiply-adds as 2 flops each, per text of n tokens and per
//! layer: 2n(4h² + 2hf) for the projections and the feed-forward block, 4n²h for attention
//! (6.0 GFLOP per 256-token window). `cpu-s` is the process's CPU time over the same runs (all
//! threads): on a machine others share, it moves less than the wall clock.
//!
//! `cargo bench --bench embed -- [--windows N] [--repeats R] [--per-call C] [--no-old]`
//! (`scripts/bench-embed.sh`); the model comes from `VIKINGFS_TEST_MODEL`, else
//! target/models/all-MiniLM-L6-v2.

use std::path::{Path, PathBuf};
use std::time::Instant;

use tokenizers::{Tokenizer, TruncationParams};
use vikingfs::config::Precision;
use vikingfs::embed::{BertEmbedder, Embedder};

struct Args {
    windows: usize,
    repeats: usize,
    per_call: usize,
    old: bool,
}

fn args() -> Args {
    let mut a = Args {
        windows: 200,
        repeats: 3,
        per_call: 32,
        old: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut num = || -> usize {
            it.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{flag} takes a number"))
        };
        match flag.as_str() {
            "--windows" => a.windows = num(),
            "--repeats" => a.repeats = num(),
            "--per-call" => a.per_call = num().max(1),
            "--no-old" => a.old = false,
            // cargo bench passes --bench.
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

fn model_dir() -> PathBuf {
    std::env::var_os("VIKINGFS_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("target/models/all-MiniLM-L6-v2")
        })
}

fn tokenizer(dir: &Path, max_tokens: usize) -> Tokenizer {
    let mut t = Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    t.with_truncation(Some(TruncationParams {
        max_length: max_tokens,
        ..Default::default()
    }))
    .unwrap();
    t.with_padding(None);
    t
}

/// Files of real text on this machine, in a fixed order.
fn sources() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir("/usr/share/common-licenses")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    let mut py: Vec<PathBuf> = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("python3."))
        })
        .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "py"))
        .collect();
    files.sort();
    py.sort();
    files.extend(py);
    files
}

/// `n` texts of at least `max_tokens` word pieces each: consecutive 2,500-byte pieces of the
/// source files (cut at character boundaries), those the tokenizer fills a window with.
fn windows(tok: &Tokenizer, n: usize, max_tokens: usize) -> Vec<String> {
    let mut out = Vec::new();
    for f in sources() {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        let mut rest = text.as_str();
        while rest.len() > 2500 && out.len() < n {
            let mut cut = 2500;
            while !rest.is_char_boundary(cut) {
                cut += 1;
            }
            let (piece, after) = rest.split_at(cut);
            rest = after;
            if tok.encode(piece, true).unwrap().get_ids().len() >= max_tokens {
                out.push(piece.to_string());
            }
        }
        if out.len() == n {
            break;
        }
    }
    assert_eq!(out.len(), n, "not enough text on this machine");
    out
}

/// The windows cut to word counts spread evenly over their lengths (a fixed shuffle, so one
/// call mixes short and long texts).
fn mixed(full: &[String]) -> Vec<String> {
    let n = full.len();
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        order.swap(i, (state % (i as u64 + 1)) as usize);
    }
    full.iter()
        .zip(order)
        .map(|(t, k)| {
            let words: Vec<&str> = t.split_whitespace().collect();
            let keep = (words.len() * (k + 1)).div_ceil(n).max(1);
            words[..keep].join(" ")
        })
        .collect()
}

fn flops(tokens: &[usize]) -> f64 {
    // all-MiniLM-L6-v2: 6 layers, hidden 384, feed-forward 1536.
    let (l, h, f) = (6.0, 384.0, 1536.0);
    tokens
        .iter()
        .map(|&n| {
            let n = n as f64;
            l * (2.0 * n * (4.0 * h * h + 2.0 * h * f) + 4.0 * n * n * h)
        })
        .sum()
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn gemm_peak(repeats: usize) -> f64 {
    let n = 2048;
    let a: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 - 3.0).collect();
    let b: Vec<f32> = (0..n * n).map(|i| (i % 5) as f32 - 2.0).collect();
    let mut c = vec![0.0f32; n * n];
    let times = (0..repeats + 1)
        .map(|_| {
            let t = Instant::now();
            // SAFETY: three n×n row-major matrices, each its own allocation.
            unsafe {
                gemm::gemm(
                    n,
                    n,
                    n,
                    c.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    a.as_ptr(),
                    1,
                    n as isize,
                    b.as_ptr(),
                    1,
                    n as isize,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::Rayon(0),
                );
            }
            t.elapsed().as_secs_f64()
        })
        .collect::<Vec<_>>();
    // The first run pays for page faults.
    2.0 * (n * n * n) as f64 / median(times[1..].to_vec()) / 1e9
}

/// CPU seconds this process has used, all threads.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// Wall and CPU seconds to embed `texts`, `per_call` per call, and the vectors.
fn run(
    embed: &dyn Fn(&[&str]) -> Vec<Vec<f32>>,
    texts: &[String],
    per_call: usize,
) -> (f64, f64, Vec<Vec<f32>>) {
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let (t, cpu) = (Instant::now(), cpu_seconds());
    let mut out = Vec::with_capacity(texts.len());
    for call in refs.chunks(per_call) {
        out.extend(embed(call));
    }
    (t.elapsed().as_secs_f64(), cpu_seconds() - cpu, out)
}

fn main() {
    let a = args();
    let dir = model_dir();
    let new = BertEmbedder::load(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let max_tokens = new.max_tokens();
    let int8 = BertEmbedder::load_with(&dir, Precision::Int8)
        .map_err(|e| println!("int8: {e}"))
        .ok();
    let tok = tokenizer(&dir, max_tokens);
    let old = a
        .old
        .then(|| old::Embedder::load(&dir, tokenizer(&dir, max_tokens)));
    let full = windows(&tok, a.windows, max_tokens);
    let mixed = mixed(&full);
    let threads = rayon::current_num_threads();
    println!(
        "{} windows, {} texts per embed call, {threads} threads, {} repeats (medians)",
        full.len(),
        a.per_call,
        a.repeats
    );
    let peak = gemm_peak(a.repeats.max(3));
    println!("gemm peak (2048³ f32): {peak:.1} GFLOP/s");

    let new_embed = |t: &[&str]| new.embed(t).unwrap();
    let old_embed = |t: &[&str]| old.as_ref().unwrap().embed(t);
    // Warm-up: the allocator's arenas, rayon's threads, the caches.
    new_embed(&[full[0].as_str()]);
    let int8_embed = |t: &[&str]| int8.as_ref().unwrap().embed(t).unwrap();
    if int8.is_some() {
        int8_embed(&[full[0].as_str()]);
    }
    if a.old {
        old_embed(&[full[0].as_str()]);
    }

    println!(
        "{:<6} {:<4} {:>6} {:>8} {:>9} {:>10} {:>9} {:>8} {:>8} {:>12}",
        "set",
        "path",
        "texts",
        "tokens",
        "seconds",
        "windows/s",
        "GFLOP/s",
        "of peak",
        "cpu-s",
        "GFLOP/cpu-s"
    );
    for (name, texts) in [("full", &full), ("mixed", &mixed)] {
        let tokens: Vec<usize> = texts
            .iter()
            .map(|t| tok.encode(t.as_str(), true).unwrap().get_ids().len())
            .collect();
        let work = flops(&tokens);
        let (mut t_old, mut t_new) = (Vec::new(), Vec::new());
        let (mut c_old, mut c_new) = (Vec::new(), Vec::new());
        let (mut t_q, mut c_q, mut cosines) = (Vec::new(), Vec::new(), Vec::new());
        let mut diff = 0.0f32;
        for _ in 0..a.repeats {
            let (s, c, vn) = run(&new_embed, texts, a.per_call);
            t_new.push(s);
            c_new.push(c);
            if int8.is_some() {
                let (s, c, vq) = run(&int8_embed, texts, a.per_call);
                t_q.push(s);
                c_q.push(c);
                cosines = vn.iter().zip(&vq).map(|(x, y)| cosine(x, y)).collect();
            }
            if a.old {
                let (s, c, vo) = run(&old_embed, texts, a.per_call);
                t_old.push(s);
                c_old.push(c);
                for (x, y) in vn.iter().zip(&vo) {
                    for (p, q) in x.iter().zip(y) {
                        diff = diff.max((p - q).abs());
                    }
                }
            }
        }
        let total: usize = tokens.iter().sum();
        let row = |path: &str, secs: f64, cpu: f64| {
            let gflops = work / secs / 1e9;
            println!(
                "{name:<6} {path:<4} {:>6} {total:>8} {secs:>9.2} {:>10.1} {gflops:>9.1} {:>7.0}% {cpu:>8.2} {:>12.1}",
                texts.len(),
                texts.len() as f64 / secs,
                100.0 * gflops / peak,
                work / cpu / 1e9
            );
        };
        let (s_new, c_new) = (median(t_new), median(c_new));
        if a.old {
            let (s_old, c_old) = (median(t_old), median(c_old));
            row("old", s_old, c_old);
            row("new", s_new, c_new);
            println!(
                "{name:<6} new/old {:.2}x windows/s, {:.2}x CPU time; largest |old - new| component {diff:.2e}",
                s_old / s_new,
                c_old / c_new
            );
        } else {
            row("new", s_new, c_new);
        }
        if int8.is_some() {
            let (s_q, c_q) = (median(t_q), median(c_q));
            row("int8", s_q, c_q);
            let lowest = cosines.iter().copied().fold(1.0f64, f64::min);
            let mean = cosines.iter().sum::<f64>() / cosines.len().max(1) as f64;
            println!(
                "{name:<6} int8/new {:.2}x windows/s, {:.2}x CPU time; cosine to f32's vectors: lowest {lowest:.4}, mean {mean:.5}",
                s_new / s_q,
                c_new / c_q
            );
        }
    }
}

fn cosine(x: &[f32], y: &[f32]) -> f64 {
    let dot: f64 = x
        .iter()
        .zip(y)
        .map(|(a, b)| f64::from(*a) * f64::from(*b))
        .sum();
    let n = |v: &[f32]| v.iter().map(|a| f64::from(*a).powi(2)).sum::<f64>().sqrt();
    dot / (n(x) * n(y))
}

/// The encoder as it was at commit 1b609a3 (src/embed/encoder.rs, verbatim but for
/// visibility), and the batching and pooling of its embedder (src/embed/bert.rs).
#[allow(dead_code)]
mod old {
    use candle_core::{DType, Device, Result, Tensor, D};
    use candle_nn::{Embedding, LayerNorm, Linear, Module, VarBuilder};
    use serde::Deserialize;

    /// The fields of a BERT `config.json` the forward pass needs; the rest are training's.
    #[derive(Debug, Clone, Deserialize)]
    pub struct Config {
        pub vocab_size: usize,
        pub hidden_size: usize,
        pub num_hidden_layers: usize,
        pub num_attention_heads: usize,
        pub intermediate_size: usize,
        pub hidden_act: Activation,
        pub max_position_embeddings: usize,
        pub type_vocab_size: usize,
        pub layer_norm_eps: f64,
        #[serde(default)]
        pub pad_token_id: u32,
        pub model_type: Option<String>,
        /// Only "absolute" (the default) is computed here.
        pub position_embedding_type: Option<String>,
    }

    /// The feed-forward activation, as Hugging Face's `ACT2FN` names them.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
    pub enum Activation {
        /// The exact GELU, x·Φ(x) (all-MiniLM-L6-v2's).
        #[serde(rename = "gelu")]
        Gelu,
        /// GELU's tanh approximation.
        #[serde(alias = "gelu_new", alias = "gelu_pytorch_tanh", rename = "gelu_fast")]
        GeluTanh,
        #[serde(rename = "relu")]
        Relu,
    }

    impl Activation {
        fn forward(self, xs: &Tensor) -> Result<Tensor> {
            match self {
                Activation::Gelu => xs.gelu_erf(),
                Activation::GeluTanh => xs.gelu(),
                Activation::Relu => xs.relu(),
            }
        }
    }

    /// A loaded encoder. Its tensors live on one device (the CPU, here).
    pub struct Encoder {
        embeddings: Embeddings,
        layers: Vec<Layer>,
        device: Device,
    }

    struct Embeddings {
        word: Embedding,
        position: Embedding,
        token_type: Embedding,
        norm: LayerNorm,
    }

    /// One transformer layer: self-attention, then the feed-forward block, each added to its
    /// input and layer-normalised (BERT is post-norm).
    struct Layer {
        query: Linear,
        key: Linear,
        value: Linear,
        attention_out: Linear,
        attention_norm: LayerNorm,
        intermediate: Linear,
        activation: Activation,
        output: Linear,
        output_norm: LayerNorm,
        heads: usize,
        head_size: usize,
    }

    impl Encoder {
        /// The weights in `vb`, checked against `config`'s shapes. A checkpoint saved from a
        /// `BertFor…` model keeps them under `bert.` (or its `model_type`); a sentence-transformers
        /// one has them at the top.
        pub fn load(vb: VarBuilder, config: &Config) -> Result<Encoder> {
            let prefix = ["bert", config.model_type.as_deref().unwrap_or("bert")]
                .into_iter()
                .find(|p| vb.contains_tensor(&format!("{p}.embeddings.word_embeddings.weight")));
            let vb = match prefix {
                Some(p) => vb.pp(p),
                None => vb,
            };
            let embeddings = Embeddings::load(vb.pp("embeddings"), config)?;
            let layers = (0..config.num_hidden_layers)
                .map(|i| Layer::load(vb.pp(format!("encoder.layer.{i}")), config))
                .collect::<Result<Vec<_>>>()?;
            Ok(Encoder {
                embeddings,
                layers,
                device: vb.device().clone(),
            })
        }

        pub fn device(&self) -> &Device {
            &self.device
        }

        /// Hidden states, (batch, len, hidden), of `ids` and `type_ids` (batch, len). `mask`
        /// (batch, len) is 1 for a real token and 0 for padding: no token attends to padding.
        pub fn forward(&self, ids: &Tensor, type_ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
            let mut hidden = self.embeddings.forward(ids, type_ids)?;
            // (batch, 1, 1, len): 0 where a token may be attended to, f32::MIN where not, added to
            // the scores before the softmax (f32::MIN rather than -inf: an all-padding row stays a
            // number).
            let min = f64::from(f32::MIN);
            let bias = mask
                .to_dtype(DType::F32)?
                .affine(-min, min)?
                .unsqueeze(1)?
                .unsqueeze(1)?;
            for layer in &self.layers {
                hidden = layer.forward(&hidden, &bias)?;
            }
            Ok(hidden)
        }
    }

    impl Embeddings {
        fn load(vb: VarBuilder, c: &Config) -> Result<Embeddings> {
            let hidden = c.hidden_size;
            Ok(Embeddings {
                word: candle_nn::embedding(c.vocab_size, hidden, vb.pp("word_embeddings"))?,
                position: candle_nn::embedding(
                    c.max_position_embeddings,
                    hidden,
                    vb.pp("position_embeddings"),
                )?,
                token_type: candle_nn::embedding(
                    c.type_vocab_size,
                    hidden,
                    vb.pp("token_type_embeddings"),
                )?,
                norm: candle_nn::layer_norm(hidden, c.layer_norm_eps, vb.pp("LayerNorm"))?,
            })
        }

        fn forward(&self, ids: &Tensor, type_ids: &Tensor) -> Result<Tensor> {
            let (_, len) = ids.dims2()?;
            let positions = Tensor::arange(0u32, len as u32, ids.device())?;
            let xs = (self.word.forward(ids)? + self.token_type.forward(type_ids)?)?
                .broadcast_add(&self.position.forward(&positions)?)?;
            self.norm.forward(&xs)
        }
    }

    impl Layer {
        fn load(vb: VarBuilder, c: &Config) -> Result<Layer> {
            let hidden = c.hidden_size;
            let linear = |d_in, d_out, name: &str| candle_nn::linear(d_in, d_out, vb.pp(name));
            let norm = |name: &str| candle_nn::layer_norm(hidden, c.layer_norm_eps, vb.pp(name));
            Ok(Layer {
                query: linear(hidden, hidden, "attention.self.query")?,
                key: linear(hidden, hidden, "attention.self.key")?,
                value: linear(hidden, hidden, "attention.self.value")?,
                attention_out: linear(hidden, hidden, "attention.output.dense")?,
                attention_norm: norm("attention.output.LayerNorm")?,
                intermediate: linear(hidden, c.intermediate_size, "intermediate.dense")?,
                activation: c.hidden_act,
                output: linear(c.intermediate_size, hidden, "output.dense")?,
                output_norm: norm("output.LayerNorm")?,
                heads: c.num_attention_heads,
                head_size: hidden / c.num_attention_heads,
            })
        }

        fn forward(&self, xs: &Tensor, bias: &Tensor) -> Result<Tensor> {
            let attended = self.attention(xs, bias)?;
            let attended = self
                .attention_norm
                .forward(&(self.attention_out.forward(&attended)? + xs)?)?;
            let fed = self
                .activation
                .forward(&self.intermediate.forward(&attended)?)?;
            self.output_norm
                .forward(&(self.output.forward(&fed)? + attended)?)
        }

        /// Multi-head scaled dot-product self-attention, heads concatenated: (batch, len, hidden).
        fn attention(&self, xs: &Tensor, bias: &Tensor) -> Result<Tensor> {
            let (batch, len, _) = xs.dims3()?;
            // (batch, len, hidden) → (batch, heads, len, head_size).
            let split = |t: Tensor| {
                t.reshape((batch, len, self.heads, self.head_size))?
                    .transpose(1, 2)?
                    .contiguous()
            };
            let q = split(self.query.forward(xs)?)?;
            let k = split(self.key.forward(xs)?)?;
            let v = split(self.value.forward(xs)?)?;
            let scores =
                (q.matmul(&k.t()?)? / (self.head_size as f64).sqrt())?.broadcast_add(bias)?;
            let probs = candle_nn::ops::softmax_last_dim(&scores)?;
            probs
                .matmul(&v)?
                .transpose(1, 2)?
                .contiguous()?
                .flatten_from(D::Minus2)
        }
    }
    /// The old `BertEmbedder`'s inference: batches of 8 texts sorted by length, padded,
    /// masked mean pooling, L2 normalisation.
    pub struct Embedder {
        model: Encoder,
        tokenizer: tokenizers::Tokenizer,
        pad_id: u32,
    }

    const BATCH: usize = 8;

    impl Embedder {
        pub fn load(dir: &std::path::Path, tokenizer: tokenizers::Tokenizer) -> Embedder {
            let config: Config =
                serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap())
                    .unwrap();
            let weights = std::fs::read(dir.join("model.safetensors")).unwrap();
            let device = Device::Cpu;
            let tensors = candle_core::safetensors::load_buffer(&weights, &device).unwrap();
            let vb = VarBuilder::from_tensors(tensors, DType::F32, &device);
            Embedder {
                model: Encoder::load(vb, &config).unwrap(),
                tokenizer,
                pad_id: config.pad_token_id,
            }
        }

        fn embed_batch(&self, seqs: &[&[u32]]) -> Result<Vec<Vec<f32>>> {
            let len = seqs.iter().map(|s| s.len()).max().unwrap_or(0);
            let mut ids = Vec::with_capacity(seqs.len() * len);
            let mut mask = Vec::with_capacity(seqs.len() * len);
            for s in seqs {
                ids.extend_from_slice(s);
                ids.extend(std::iter::repeat_n(self.pad_id, len - s.len()));
                mask.extend(std::iter::repeat_n(1u32, s.len()));
                mask.extend(std::iter::repeat_n(0u32, len - s.len()));
            }
            let device = self.model.device();
            let shape = (seqs.len(), len);
            let ids = Tensor::from_vec(ids, shape, device)?;
            let mask = Tensor::from_vec(mask, shape, device)?;
            let type_ids = ids.zeros_like()?;
            let hidden = self.model.forward(&ids, &type_ids, &mask)?;
            let mask = mask.to_dtype(DType::F32)?;
            let summed = hidden.broadcast_mul(&mask.unsqueeze(2)?)?.sum(1)?;
            let counts = mask.sum_keepdim(1)?.clamp(1e-9f32, f32::MAX)?;
            let mean = summed.broadcast_div(&counts)?;
            let norm = mean
                .sqr()?
                .sum_keepdim(1)?
                .sqrt()?
                .clamp(1e-12f32, f32::MAX)?;
            mean.broadcast_div(&norm)?.to_vec2::<f32>()
        }

        pub fn embed(&self, texts: &[&str]) -> Vec<Vec<f32>> {
            let encodings: Vec<_> = texts
                .iter()
                .map(|t| self.tokenizer.encode(*t, true).unwrap())
                .collect();
            let mut order: Vec<usize> = (0..texts.len()).collect();
            order.sort_by_key(|&i| encodings[i].get_ids().len());
            let mut out = vec![Vec::new(); texts.len()];
            for chunk in order.chunks(BATCH) {
                let seqs: Vec<&[u32]> = chunk.iter().map(|&i| encodings[i].get_ids()).collect();
                for (&i, v) in chunk.iter().zip(self.embed_batch(&seqs).unwrap()) {
                    out[i] = v;
                }
            }
            out
        }
    }
}

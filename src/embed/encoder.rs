//! The BERT encoder's forward pass, on candle's tensors and layers.
//!
//! Owns a BERT model's configuration (`config.json`) and its weights laid out as Hugging Face
//! names them (`embeddings.*`, `encoder.layer.N.*`, optionally under a `bert.` prefix), and
//! turns token ids and an attention mask into one hidden state per token. Pooling and
//! normalisation are the embedder's (`bert.rs`). It is inference only: dropout is the identity,
//! and there is no pooler, cross-attention or cache.
//!
//! Why written here rather than taken from candle-transformers: this is the only model of the
//! hundred that crate compiles which vikingfs runs, and that crate was the longest step of a
//! cold build (two minutes of one core, on the critical path of every test binary). The maths
//! is the reference BERT's and is held to a float64 numpy run of it
//! (`scripts/bert-reference.py`, `tests/semantic/embed_bert.rs`).

use candle_core::{DType, Device, Result, Tensor, D};
use candle_nn::{Embedding, LayerNorm, Linear, Module, VarBuilder};
use serde::Deserialize;

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
    #[serde(default)]
    pub pad_token_id: u32,
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
pub(super) struct Encoder {
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
        let scores = (q.matmul(&k.t()?)? / (self.head_size as f64).sqrt())?.broadcast_add(bias)?;
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        probs
            .matmul(&v)?
            .transpose(1, 2)?
            .contiguous()?
            .flatten_from(D::Minus2)
    }
}

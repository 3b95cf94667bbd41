//! In-process sentence embeddings from a local BERT model (e.g. all-MiniLM-L6-v2).
//!
//! Owns loading a sentence-transformers model directory (`config.json`, `tokenizer.json`,
//! `model.safetensors`, optionally `sentence_bert_config.json`) and running it with candle on
//! the CPU in f32: WordPiece tokens truncated to the model's maximum sequence length, the
//! encoder, mean pooling over the attention mask, L2 normalisation — the same vectors
//! sentence-transformers gives for such a model. No network: the files must already be on
//! disk (`scripts/fetch-model.sh` fetches all-MiniLM-L6-v2).

use std::fs;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokenizers::{Tokenizer, TruncationParams};

use super::encoder::{Config, Encoder};
use super::{EmbedError, Embedder};

/// Texts per forward pass. Attention costs grow with the square of the longest text in a
/// batch, so larger batches mostly buy padding. Measured on 256-token windows (2 cores): 8 was
/// ~10% faster than 16 and peaked at 270 instead of 420 MiB, the attention scores of a batch
/// (8 × 12 heads × 256² f32 = 25 MB) staying under glibc's 32 MB mmap threshold, so they reuse
/// heap memory instead of page-faulting in fresh zeroed pages on every op.
const BATCH: usize = 8;
/// sentence-transformers' default when a model directory does not say (and all-MiniLM-L6-v2's
/// own value).
const DEFAULT_MAX_SEQ: usize = 256;
/// How much of each end of the weights file goes into the model id: enough that different
/// weights of the same size give a different id, without reading 90 MB on every open.
const ID_SAMPLE: usize = 1 << 20;
const REMEDY: &str = "point embedding.dense.model at a sentence-transformers model directory \
                      (scripts/fetch-model.sh fetches all-MiniLM-L6-v2)";

/// A loaded model: its weights (about 90 MB for all-MiniLM-L6-v2) live as long as it does.
/// `embed` takes `&self` and may run on several threads at once; each call's matrix products
/// are spread over rayon's global pool (`RAYON_NUM_THREADS`, else one thread per core), so
/// concurrent calls share those cores rather than multiply them.
pub struct BertEmbedder {
    model: Encoder,
    tokenizer: Tokenizer,
    dim: usize,
    max_tokens: usize,
    pad_id: u32,
    model_id: String,
    /// For error messages.
    dir: PathBuf,
}

#[derive(Deserialize)]
struct SentenceBertConfig {
    max_seq_length: Option<usize>,
}

impl BertEmbedder {
    /// Load the model in `dir`. Every missing or unreadable file is an [`EmbedError::Config`]
    /// naming it.
    pub fn load(dir: &Path) -> Result<BertEmbedder, EmbedError> {
        let config_path = dir.join("config.json");
        let config_text = read_to_string(&config_path)?;
        let config: Config =
            serde_json::from_str(&config_text).map_err(|e| bad_file(&config_path, e))?;
        // RoBERTa-style models load into the same layers but number positions differently:
        // they would run and give wrong vectors, so refuse them here.
        if let Some(t) = config.model_type.as_deref().filter(|t| *t != "bert") {
            return Err(bad_file(
                &config_path,
                format!("model_type {t:?} is not \"bert\""),
            ));
        }
        if let Some(t) = config
            .position_embedding_type
            .as_deref()
            .filter(|t| *t != "absolute")
        {
            return Err(bad_file(
                &config_path,
                format!("position_embedding_type {t:?} is not \"absolute\""),
            ));
        }
        if config.hidden_size == 0 || config.max_position_embeddings == 0 {
            return Err(bad_file(
                &config_path,
                "hidden_size and max_position_embeddings must be at least 1",
            ));
        }
        if config.num_attention_heads == 0
            || !config
                .hidden_size
                .is_multiple_of(config.num_attention_heads)
        {
            return Err(bad_file(
                &config_path,
                format!(
                    "hidden_size {} is not a multiple of num_attention_heads {}",
                    config.hidden_size, config.num_attention_heads
                ),
            ));
        }

        let st_config_path = dir.join("sentence_bert_config.json");
        let st_config_text = match fs::read_to_string(&st_config_path) {
            Ok(t) => Some(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(bad_file(&st_config_path, e)),
        };
        let max_seq = match &st_config_text {
            Some(t) => serde_json::from_str::<SentenceBertConfig>(t)
                .map_err(|e| bad_file(&st_config_path, e))?
                .max_seq_length
                .unwrap_or(DEFAULT_MAX_SEQ),
            None => DEFAULT_MAX_SEQ,
        };
        // Positions past the embedding table do not exist; [CLS] and [SEP] need two slots.
        let max_tokens = max_seq.min(config.max_position_embeddings).max(2);

        let tokenizer_path = dir.join("tokenizer.json");
        let tokenizer_text = read_to_string(&tokenizer_path)?;
        let mut tokenizer: Tokenizer = tokenizer_text
            .parse()
            .map_err(|e| bad_file(&tokenizer_path, e))?;
        // tokenizer.json carries its own truncation and fixed padding (128 for
        // all-MiniLM-L6-v2); sentence-transformers overrides both, and so do we: truncate to
        // the model's sequence length, pad per batch below.
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_tokens,
                ..Default::default()
            }))
            .map_err(|e| bad_file(&tokenizer_path, e))?;
        tokenizer.with_padding(None);
        let pad_id = config.pad_token_id;

        let weights_path = dir.join("model.safetensors");
        // Read rather than mmap: a model file replaced under a live mapping is undefined
        // behaviour, and the weights are copied into tensors anyway.
        let weights = fs::read(&weights_path).map_err(|e| bad_file(&weights_path, e))?;
        let model_id = model_id(
            dir,
            &[
                &config_text,
                &tokenizer_text,
                st_config_text.as_deref().unwrap_or(""),
            ],
            &weights,
        );
        let device = Device::Cpu;
        let tensors = candle_core::safetensors::load_buffer(&weights, &device)
            .map_err(|e| bad_file(&weights_path, e))?;
        drop(weights);
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &device);
        let model = Encoder::load(vb, &config).map_err(|e| bad_file(&weights_path, e))?;

        Ok(BertEmbedder {
            model,
            tokenizer,
            dim: config.hidden_size,
            max_tokens,
            pad_id,
            model_id,
            dir: dir.to_path_buf(),
        })
    }

    /// Word pieces per text, `[CLS]` and `[SEP]` included; the rest of a longer text is ignored.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    fn inference_error(&self, e: impl std::fmt::Display) -> EmbedError {
        EmbedError::Inference {
            model: self.dir.display().to_string(),
            msg: e.to_string(),
        }
    }

    /// Unit vectors of one batch of token id sequences (none empty: each has [CLS], [SEP]).
    fn embed_batch(&self, seqs: &[&[u32]]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let err = |e: candle_core::Error| self.inference_error(e);
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
        let ids = Tensor::from_vec(ids, shape, device).map_err(err)?;
        let mask = Tensor::from_vec(mask, shape, device).map_err(err)?;
        let type_ids = ids.zeros_like().map_err(err)?;
        // (batch, len, hidden). The mask keeps padding out of attention; it must also keep
        // it out of the mean, or a text's vector would depend on its batch mates.
        let hidden = self.model.forward(&ids, &type_ids, &mask).map_err(err)?;
        let mask = mask.to_dtype(DType::F32).map_err(err)?;
        let summed = hidden
            .broadcast_mul(&mask.unsqueeze(2).map_err(err)?)
            .and_then(|t| t.sum(1))
            .map_err(err)?;
        // Clamped as sentence-transformers does, for a tokenizer without [CLS]/[SEP] and an
        // empty text.
        let counts = mask
            .sum_keepdim(1)
            .and_then(|t| t.clamp(1e-9f32, f32::MAX))
            .map_err(err)?;
        let mean = summed.broadcast_div(&counts).map_err(err)?;
        let norm = mean
            .sqr()
            .and_then(|t| t.sum_keepdim(1))
            .and_then(|t| t.sqrt())
            // sentence-transformers' Normalize clamps the norm the same way.
            .and_then(|t| t.clamp(1e-12f32, f32::MAX))
            .map_err(err)?;
        mean.broadcast_div(&norm)
            .and_then(|t| t.to_vec2::<f32>())
            .map_err(err)
    }
}

impl Embedder for BertEmbedder {
    fn dim(&self) -> usize {
        self.dim
    }

    fn model_id(&self) -> String {
        self.model_id.clone()
    }

    fn describe(&self) -> String {
        super::local_name(&self.dir)
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut encodings = Vec::with_capacity(texts.len());
        for t in texts {
            let enc = self
                .tokenizer
                .encode(*t, true)
                .map_err(|e| self.inference_error(format!("tokenizing: {e}")))?;
            encodings.push(enc);
        }
        // Batch texts of similar length together so little of each batch is padding; the
        // results go back in input order.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| encodings[i].get_ids().len());
        let mut out = vec![Vec::new(); texts.len()];
        for chunk in order.chunks(BATCH) {
            let seqs: Vec<&[u32]> = chunk.iter().map(|&i| encodings[i].get_ids()).collect();
            for (&i, v) in chunk.iter().zip(self.embed_batch(&seqs)?) {
                out[i] = v;
            }
        }
        Ok(out)
    }
}

/// `bert:{dir name}:{12 hex digits}` over the text files and a sample of the weights (their
/// length and first and last MiB), so replacing any model file changes the vector space's id.
fn model_id(dir: &Path, texts: &[&str], weights: &[u8]) -> String {
    let mut h = Sha256::new();
    for t in texts {
        // Length-prefixed, so moving bytes from one file to the next changes the hash.
        h.update((t.len() as u64).to_le_bytes());
        h.update(t.as_bytes());
    }
    h.update((weights.len() as u64).to_le_bytes());
    h.update(&weights[..weights.len().min(ID_SAMPLE)]);
    h.update(&weights[weights.len().saturating_sub(ID_SAMPLE)..]);
    let name = fs::canonicalize(dir)
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| dir.display().to_string());
    format!("bert:{name}:{}", &hex::encode(h.finalize())[..12])
}

fn read_to_string(path: &Path) -> Result<String, EmbedError> {
    fs::read_to_string(path).map_err(|e| bad_file(path, e))
}

fn bad_file(path: &Path, e: impl std::fmt::Display) -> EmbedError {
    // One line: tokenizer and serde errors may carry newlines.
    let msg = e
        .to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    EmbedError::Config(format!("{}: {msg}; {REMEDY}", path.display()))
}

//! vikingfs's BERT encoder's linear layers in 8-bit integers, for CPUs with AVX-512 VNNI.
//!
//! A crate of its own so that it is compiled optimised in every profile: the tests run the
//! model through it, and its kernel unoptimised is a thousand times slower (vikingfs's own
//! code is built without optimisation for the tests; `Cargo.toml` optimises this crate).
//!
//! A linear layer is most of a BERT forward pass (about nine tenths of its arithmetic at 256
//! word pieces). In f32 it runs at the speed of the CPU's fused multiply-adds, which `gemm`
//! already nearly reaches; `vpdpbusd` does four times as many multiply-adds per instruction
//! (64 products of an unsigned and a signed byte, summed in fours into 16 i32 lanes), so the
//! same layer in 8-bit integers is what can make the encoder several times faster.
//!
//! The quantisation is the usual dynamic one:
//! - weights: per output column, `q = round(w / s)` with `s = max |w| / 127`, once at load;
//! - activations: per row (token), over the row's own range, `a = round((x − lo) / t)` with
//!   `t = (hi − lo) / 255`, at each call: unsigned, as `vpdpbusd` wants, and all 256 steps
//!   spent where the row's values are (after GELU they are mostly positive, and a symmetric
//!   scale around 0 wasted half of them: over `benches/embed.rs`'s windows the vectors' cosine
//!   to f32's was 0.9952 at worst and 0.9980 on average that way, 0.9984 and 0.9991 this way);
//! - `y = s · (t · Σ a·q + lo · Σ q) + b`, the sum exact in i32 (at most 1,536 · 255 · 127 <
//!   2³¹), with each column's `Σ q` computed at load.
//!
//! What it costs in quality is measured, not assumed: vikingfs's `tests/semantic/embed_bert.rs`
//! holds the int8 embeddings to the f32 ones, and `scripts/bench-search.sh` compares the search quality
//! of both (docs/search-bench.md).
//!
//! Layout: the weights are packed in panels of 64 output columns; within a panel, for each
//! group of 4 inputs, 64 columns × 4 bytes — the four 64-byte vectors one step of the kernel
//! loads. The kernel keeps a tile of 6 rows × 64 columns in 24 registers.

use rayon::prelude::*;

/// Output columns a panel holds (four 16-lane vectors).
const PANEL: usize = 64;
/// Rows of the kernel's register tile.
const MR: usize = 6;
/// Rows one task quantises and multiplies (its activations stay in the L2 cache).
const BLOCK: usize = 16 * MR;

/// Whether this CPU runs [`QLinear`] (AVX-512 F, BW and VNNI).
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// A linear layer's weights in 8-bit integers, packed for the kernel.
pub struct QLinear {
    d_in: usize,
    d_out: usize,
    packed: Vec<i8>,
    /// Each output column's weight scale.
    scale: Vec<f32>,
    /// Each output column's `Σ q`.
    colsum: Vec<f32>,
}

impl QLinear {
    /// `w` is (d_in, d_out), row-major. `None` when the shape does not suit the kernel (d_in a
    /// multiple of 4, d_out of 64: every BERT-base and -small shape is) or the CPU lacks VNNI.
    pub fn new(w: &[f32], d_in: usize, d_out: usize) -> Option<QLinear> {
        if !available()
            || !d_in.is_multiple_of(4)
            || !d_out.is_multiple_of(PANEL)
            || w.len() != d_in * d_out
        {
            return None;
        }
        let scale: Vec<f32> = (0..d_out)
            .map(|n| (0..d_in).fold(0.0f32, |m, k| m.max(w[k * d_out + n].abs())) / 127.0)
            .collect();
        let mut packed = vec![0i8; d_in * d_out];
        let mut colsum = vec![0f32; d_out];
        for k in 0..d_in {
            for n in 0..d_out {
                let q = if scale[n] > 0.0 {
                    (w[k * d_out + n] / scale[n]).round().clamp(-127.0, 127.0) as i8
                } else {
                    0
                };
                let (p, j) = (n / PANEL, n % PANEL);
                packed[p * d_in * PANEL + (k / 4) * 4 * PANEL + j * 4 + k % 4] = q;
                colsum[n] += f32::from(q);
            }
        }
        Some(QLinear {
            d_in,
            d_out,
            packed,
            scale,
            colsum,
        })
    }

    /// out (rows, d_out) = x (rows, d_in)·W + b, over rayon's pool in blocks of rows.
    pub fn forward(&self, x: &[f32], rows: usize, b: &[f32], out: &mut [f32]) {
        let (k, n) = (self.d_in, self.d_out);
        assert!(x.len() >= rows * k && out.len() >= rows * n && b.len() == n);
        out[..rows * n]
            .par_chunks_mut(BLOCK * n)
            .zip(x[..rows * k].par_chunks(BLOCK * k))
            .for_each(|(out, x)| {
                let rows = x.len() / k;
                let mut a = vec![0u8; rows * k];
                let mut t = vec![(0f32, 0f32); rows];
                // SAFETY: `new` made this QLinear only on a CPU with AVX-512 F, BW and VNNI;
                // `a` and `t` hold `rows` rows of `k`, `out` `rows` rows of `n`.
                unsafe {
                    quantize_rows(x, k, &mut a, &mut t);
                    self.block(&a, &t, rows, b, out);
                }
            });
    }

    /// One block of rows, quantised: every panel, tile by tile.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn block(&self, a: &[u8], t: &[(f32, f32)], rows: usize, b: &[f32], out: &mut [f32]) {
        // SAFETY: the caller's contract (the CPU features this function is compiled for,
        // and the lengths named above).
        unsafe {
            let (k, n) = (self.d_in, self.d_out);
            for p in 0..n / PANEL {
                let panel = self.packed[p * k * PANEL..][..k * PANEL].as_ptr();
                let col = p * PANEL;
                let mut m = 0;
                while m < rows {
                    let mr = (rows - m).min(MR);
                    let a = a[m * k..].as_ptr();
                    let out = out[m * n + col..].as_mut_ptr();
                    let t = &t[m..m + mr];
                    let e = Epilogue {
                        t,
                        scale: &self.scale[col..col + PANEL],
                        colsum: &self.colsum[col..col + PANEL],
                        bias: &b[col..col + PANEL],
                        out,
                        ldo: n,
                    };
                    match mr {
                        6 => tile::<6>(a, k, panel, e),
                        5 => tile::<5>(a, k, panel, e),
                        4 => tile::<4>(a, k, panel, e),
                        3 => tile::<3>(a, k, panel, e),
                        2 => tile::<2>(a, k, panel, e),
                        _ => tile::<1>(a, k, panel, e),
                    }
                    m += mr;
                }
            }
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn block(&self, _: &[u8], _: &[(f32, f32)], _: usize, _: &[f32], _: &mut [f32]) {
        unreachable!("QLinear::new makes none without AVX-512 VNNI")
    }
}

/// Where a tile's sums go: `out[m][j] = scale[j] · (t · sum + lo · colsum[j]) + bias[j]`
/// with `(t, lo) = t[m]`.
struct Epilogue<'a> {
    t: &'a [(f32, f32)],
    scale: &'a [f32],
    colsum: &'a [f32],
    bias: &'a [f32],
    out: *mut f32,
    ldo: usize,
}

/// Rows of `x` (each `k` long) as unsigned bytes `round((x − lo) / t)` in `a`, their
/// `(t, lo)` in `t`: `lo` the row's least value, `t = (hi − lo) / 255` (0 for a constant row,
/// whose bytes are all 0 and whose value is `lo`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn quantize_rows(x: &[f32], k: usize, a: &mut [u8], t: &mut [(f32, f32)]) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract (the CPU features this function is compiled for); every
    // load and store is within `row` and `out`, both `k` long.
    unsafe {
        for ((row, out), t) in x
            .chunks_exact(k)
            .zip(a.chunks_exact_mut(k))
            .zip(t.iter_mut())
        {
            let whole = k / 16 * 16;
            let (mut lo, mut hi) = (_mm512_set1_ps(f32::MAX), _mm512_set1_ps(f32::MIN));
            for i in (0..whole).step_by(16) {
                let v = _mm512_loadu_ps(row.as_ptr().add(i));
                lo = _mm512_min_ps(lo, v);
                hi = _mm512_max_ps(hi, v);
            }
            let (lo, hi) = row[whole..].iter().fold(
                (_mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi)),
                |(l, h), &v| (l.min(v), h.max(v)),
            );
            let step = (hi - lo) / 255.0;
            *t = (step, lo);
            let inv = if step > 0.0 { 1.0 / step } else { 0.0 };
            let (vinv, vlo) = (_mm512_set1_ps(inv), _mm512_set1_ps(lo));
            for i in (0..whole).step_by(16) {
                // Rounded to nearest (even), the MXCSR default; within 0..=255.
                let v = _mm512_sub_ps(_mm512_loadu_ps(row.as_ptr().add(i)), vlo);
                let q = _mm512_cvtps_epi32(_mm512_mul_ps(v, vinv));
                let q = _mm512_min_epi32(q, _mm512_set1_epi32(255));
                _mm_storeu_si128(out.as_mut_ptr().add(i).cast(), _mm512_cvtepi32_epi8(q));
            }
            for i in whole..k {
                out[i] = ((row[i] - lo) * inv).round_ties_even().clamp(0.0, 255.0) as u8;
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn quantize_rows(_: &[f32], _: usize, _: &mut [u8], _: &mut [(f32, f32)]) {
    unreachable!("QLinear::new makes none without AVX-512 VNNI")
}

/// R rows of `a` (stride `k`) times one panel: 4·R accumulators of 16 lanes, one `vpdpbusd`
/// each per 4 inputs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn tile<const R: usize>(a: *const u8, k: usize, panel: *const i8, e: Epilogue<'_>) {
    // SAFETY: the caller's contract (the CPU features this function is compiled for,
    // and the lengths named above).
    unsafe {
        use std::arch::x86_64::*;
        let mut acc = [[_mm512_setzero_si512(); 4]; R];
        for k4 in 0..k / 4 {
            let bp = panel.add(k4 * 4 * PANEL);
            let b = [
                _mm512_loadu_si512(bp.cast()),
                _mm512_loadu_si512(bp.add(64).cast()),
                _mm512_loadu_si512(bp.add(128).cast()),
                _mm512_loadu_si512(bp.add(192).cast()),
            ];
            for (m, acc) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_epi32(a.add(m * k + k4 * 4).cast::<i32>().read_unaligned());
                for j in 0..4 {
                    acc[j] = _mm512_dpbusd_epi32(acc[j], av, b[j]);
                }
            }
        }
        for (m, acc) in acc.iter().enumerate() {
            let (t, lo) = (_mm512_set1_ps(e.t[m].0), _mm512_set1_ps(e.t[m].1));
            for (j, &sum) in acc.iter().enumerate() {
                let c = j * 16;
                let v = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(sum),
                    t,
                    _mm512_mul_ps(lo, _mm512_loadu_ps(e.colsum[c..].as_ptr())),
                );
                let y = _mm512_fmadd_ps(
                    v,
                    _mm512_loadu_ps(e.scale[c..].as_ptr()),
                    _mm512_loadu_ps(e.bias[c..].as_ptr()),
                );
                _mm512_storeu_ps(e.out.add(m * e.ldo + c), y);
            }
        }
    }
}

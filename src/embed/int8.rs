//! The encoder's linear layers in 8-bit integers on CPUs with AVX-512 VNNI: the kernel is the
//! `vikingfs-int8` crate (`crates/int8`, compiled optimised even for the tests); this module
//! holds it to the f32 product.

pub(super) use vikingfs_int8::{available, QLinear};

#[cfg(test)]
mod tests {
    use super::*;

    /// The int8 product against the f32 one on random data: each output within the error
    /// the two roundings allow.
    #[test]
    fn matches_the_f32_product_within_its_rounding() {
        if !available() {
            eprintln!("no AVX-512 VNNI here: nothing to test");
            return;
        }
        let (k, n) = (384, 128);
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut rnd = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        };
        let w: Vec<f32> = (0..k * n).map(|_| rnd() * 0.1).collect();
        let b: Vec<f32> = (0..n).map(|_| rnd()).collect();
        // 13 rows: two full tiles and a short one; one row all zeros.
        let rows = 13;
        let mut x: Vec<f32> = (0..rows * k).map(|_| rnd() * 3.0).collect();
        x[5 * k..6 * k].fill(0.0);
        let q = QLinear::new(&w, k, n).unwrap();
        let mut out = vec![0.0; rows * n];
        q.forward(&x, rows, &b, &mut out);
        for r in 0..rows {
            for c in 0..n {
                let want: f32 = (0..k).map(|i| x[r * k + i] * w[i * n + c]).sum::<f32>() + b[c];
                let got = out[r * n + c];
                // Each product is off by at most half a step of either factor.
                let xs = x[r * k..][..k].iter().fold(0.0f32, |m, v| m.max(v.abs())) * 2.0 / 255.0;
                let ws = (0..k).fold(0.0f32, |m, i| m.max(w[i * n + c].abs())) / 127.0;
                let bound = k as f32 * (xs * 0.1 + ws * 3.0) * 0.5 + 1e-4;
                assert!(
                    (got - want).abs() <= bound,
                    "row {r} col {c}: {got} vs {want} (bound {bound})"
                );
                if r == 5 {
                    assert_eq!(got, b[c], "a row of zeros gives the bias");
                }
            }
        }
        // The error is far below that worst case: typically a percent of the spread.
        let err: f32 = (0..rows * n)
            .map(|i| {
                let (r, c) = (i / n, i % n);
                let want: f32 = (0..k).map(|j| x[r * k + j] * w[j * n + c]).sum::<f32>() + b[c];
                (out[i] - want).powi(2)
            })
            .sum::<f32>()
            / (rows * n) as f32;
        assert!(err.sqrt() < 0.05, "rms error {}", err.sqrt());
    }
}

//! The pieces of the `dp_sgd` and `gradient_moments` examples, at tiny sizes, against
//! independent oracles: the shipped digits, the MNIST IDX loader, DP-SGD's clipping and noise
//! calibration against a loop of single-example backward passes, Poisson batches through the
//! example's batcher, the
//! per-example moments against the loop and the batch gradient, and the moment optimizers
//! against Burn's Adam and their definitions.
// Both examples include `examples/common`; each test uses one copy.
#![allow(clippy::duplicate_mod)]

#[allow(dead_code)]
#[path = "../examples/dp_sgd.rs"]
mod dp_sgd;

#[allow(dead_code)]
#[path = "../examples/gradient_moments.rs"]
mod gradient_moments;

use std::io::Write;

use burn::backend::Autodiff;
use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use burn_vmap::testing::TestBackend;
use burn_vmap::{ParamGrads, Vmap};

type I = Vmap<TestBackend>;
type AD = Autodiff<I>;

// -------------------------------------------------------------------------------------------------
// Helpers (plain Rust over `Vec<f32>`: the oracles)
// -------------------------------------------------------------------------------------------------

/// Every gradient of `g` as `(path, values)`.
fn values(g: &ParamGrads<I>) -> Vec<(String, Vec<f32>)> {
    dp_sgd::common::flat_params(g)
        .into_iter()
        .map(|(p, t)| (p, dp_sgd::common::to_vec(t)))
        .collect()
}

/// One example's gradients, by its own backward pass (no vmap involved).
fn single_example_grads<M, L>(model: &M, loss: L) -> Vec<(String, Vec<f32>)>
where
    M: burn::module::AutodiffModule<AD>,
    L: FnOnce(&M) -> Tensor<AD, 1>,
{
    let mut grads = loss(model).backward();
    values(&ParamGrads::from_module(&mut grads, model))
}

fn norm(g: &[(String, Vec<f32>)]) -> f64 {
    g.iter()
        .flat_map(|(_, v)| v.iter())
        .map(|&x| (x as f64) * (x as f64))
        .sum::<f64>()
        .sqrt()
}

fn assert_close(what: &str, got: &[(String, Vec<f32>)], want: &[(String, Vec<f64>)], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: parameter count");
    for ((p, g), (q, w)) in got.iter().zip(want) {
        assert_eq!(p, q, "{what}: parameter order");
        assert_eq!(g.len(), w.len(), "{what}: {p} size");
        for (k, (&a, &b)) in g.iter().zip(w).enumerate() {
            assert!(
                (a as f64 - b).abs() <= tol * (1.0 + b.abs()),
                "{what}: {p}[{k}] = {a}, expected {b}"
            );
        }
    }
}

/// Every float parameter of a module, flattened, in visiting order.
struct Params(Vec<Vec<f32>>);
impl<B: Backend> ModuleVisitor<B> for Params {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.0.push(
            param
                .val()
                .into_data()
                .convert::<f32>()
                .to_vec::<f32>()
                .unwrap(),
        );
    }
}
fn params<B: Backend, M: Module<B>>(m: &M) -> Vec<Vec<f32>> {
    let mut v = Params(Vec::new());
    m.visit(&mut v);
    v.0
}

fn digits_batch(n: usize) -> (dp_sgd::common::Dataset, Vec<usize>) {
    let digits = dp_sgd::common::load_digits().unwrap();
    // Rows spread over the file (different classes).
    let idx = (0..n).map(|i| i * 97 % digits.len()).collect();
    (digits, idx)
}

// -------------------------------------------------------------------------------------------------
// Data
// -------------------------------------------------------------------------------------------------

#[test]
fn should_load_the_shipped_digits() {
    let d = dp_sgd::common::load_digits().unwrap();
    assert_eq!(d.len(), 1797);
    assert_eq!(d.dim, 64);
    assert_eq!(d.pixels.len(), 1797 * 64);
    assert_eq!(d.pixel_max, 16);
    assert_eq!(d.pixels.iter().copied().min(), Some(0));
    assert_eq!(d.pixels.iter().copied().max(), Some(16));
    let mut counts = [0usize; 10];
    for &l in &d.labels {
        counts[l as usize] += 1; // panics if a label is past 9
    }
    // Every class is there, about a tenth each (174..=183 in the UCI file).
    assert!(
        counts.iter().all(|&c| (170..=190).contains(&c)),
        "{counts:?}"
    );
    // The first image of the file (a zero).
    assert_eq!(&d.pixels[..8], &[0, 0, 5, 13, 9, 1, 0, 0]);
    assert_eq!(d.labels[0], 0);

    // Tensors are scaled to [0, 1].
    let (x, y) = d.batch::<TestBackend>(&[0, 1], &Default::default());
    assert_eq!(x.dims(), [2, 64]);
    let xs = x.into_data().to_vec::<f32>().unwrap();
    assert!((xs[2] - 5.0 / 16.0).abs() < 1e-6);
    assert_eq!(
        y.into_data().convert::<i64>().to_vec::<i64>().unwrap(),
        vec![0, 1]
    );
}

#[test]
fn should_split_digits_without_losing_or_repeating_rows() {
    let d = dp_sgd::common::load_digits().unwrap();
    let mut rng = dp_sgd::common::SplitMix64(3);
    let (train, test) = d.split(360, &mut rng);
    assert_eq!((train.len(), test.len()), (1437, 360));
    let mut rows: Vec<&[u8]> = train
        .pixels
        .chunks(64)
        .chain(test.pixels.chunks(64))
        .collect();
    let mut all: Vec<&[u8]> = d.pixels.chunks(64).collect();
    rows.sort();
    all.sort();
    assert_eq!(rows, all);
    // Batches of an epoch: disjoint, full, the remainder dropped.
    let batches = dp_sgd::common::epoch_batches(10, 4, &mut rng);
    assert_eq!(batches.len(), 2);
    let mut seen: Vec<usize> = batches.concat();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 8);
}

#[test]
fn should_reject_malformed_digits_csv() {
    let parse = |s: &str| dp_sgd::common::parse_digits_csv(s.as_bytes());
    let row = |pixel: &str, label: &str| {
        let mut f = vec!["0"; 64];
        f[5] = pixel;
        format!("{},{label}\n", f.join(","))
    };
    assert_eq!(parse(&row("16", "9")).unwrap().len(), 1);
    let e = parse(&format!("{}0,1,2\n", row("1", "1"))).unwrap_err();
    assert!(
        e.to_string().contains("line 2") && e.to_string().contains("3 fields"),
        "{e}"
    );
    let e = parse(&row("17", "1")).unwrap_err();
    assert!(e.to_string().contains("pixel 17"), "{e}");
    let e = parse(&row("1", "10")).unwrap_err();
    assert!(e.to_string().contains("label 10"), "{e}");
    let e = parse(&row("x", "1")).unwrap_err();
    assert!(e.to_string().contains("`x` is not a number"), "{e}");
}

fn idx_bytes(dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut out = vec![0, 0, 0x08, dims.len() as u8];
    for d in dims {
        out.extend(d.to_be_bytes());
    }
    out.extend_from_slice(data);
    out
}

#[test]
fn should_read_mnist_idx_files_plain_and_gzipped() {
    let dir = std::env::temp_dir().join(format!("burn_vmap_idx_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Three 2x2 training images, gzipped; two test images, plain.
    let train_px: Vec<u8> = (0..12).map(|i| i * 20).collect();
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(dir.join("train-images-idx3-ubyte.gz")).unwrap(),
        flate2::Compression::default(),
    );
    gz.write_all(&idx_bytes(&[3, 2, 2], &train_px)).unwrap();
    gz.finish().unwrap();
    std::fs::write(
        dir.join("train-labels-idx1-ubyte"),
        idx_bytes(&[3], &[7, 0, 9]),
    )
    .unwrap();
    std::fs::write(
        dir.join("t10k-images-idx3-ubyte"),
        idx_bytes(&[2, 2, 2], &[255, 0, 0, 255, 1, 2, 3, 4]),
    )
    .unwrap();
    std::fs::write(dir.join("t10k-labels-idx1-ubyte"), idx_bytes(&[2], &[1, 2])).unwrap();

    let (train, test) = dp_sgd::common::load_mnist(&dir).unwrap();
    assert_eq!((train.len(), train.dim, train.pixel_max), (3, 4, 255));
    assert_eq!(train.pixels, train_px);
    assert_eq!(train.labels, vec![7, 0, 9]);
    assert_eq!(test.labels, vec![1, 2]);
    let (x, _) = test.batch::<TestBackend>(&[0], &Default::default());
    assert_eq!(
        x.into_data().to_vec::<f32>().unwrap(),
        vec![1.0, 0.0, 0.0, 1.0]
    );

    // Errors: label count differs, bad magic, truncated data, missing files.
    std::fs::write(
        dir.join("t10k-labels-idx1-ubyte"),
        idx_bytes(&[3], &[1, 2, 3]),
    )
    .unwrap();
    let e = dp_sgd::common::load_mnist_split(&dir, "t10k").unwrap_err();
    assert!(
        e.to_string().contains("[2, 2, 2]") && e.to_string().contains("[3]"),
        "{e}"
    );
    std::fs::write(
        dir.join("t10k-labels-idx1-ubyte"),
        [0u8, 0, 0x0D, 1, 0, 0, 0, 2, 1, 2],
    )
    .unwrap();
    let e = dp_sgd::common::load_mnist_split(&dir, "t10k").unwrap_err();
    assert!(e.to_string().contains("magic 0x00000d01"), "{e}");
    std::fs::write(dir.join("t10k-labels-idx1-ubyte"), idx_bytes(&[5], &[1, 2])).unwrap();
    let e = dp_sgd::common::load_mnist_split(&dir, "t10k").unwrap_err();
    assert!(e.to_string().contains("expected 5 bytes"), "{e}");
    let e = dp_sgd::common::load_mnist(&dir.join("nowhere")).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    std::fs::remove_dir_all(&dir).unwrap();
}

// -------------------------------------------------------------------------------------------------
// DP-SGD
// -------------------------------------------------------------------------------------------------

type DpMlp = dp_sgd::common::Mlp<AD>;

/// The mean over the batch of every example's gradient clipped to `clip`, by a loop of
/// single-example backward passes.
fn looped_clipped_mean(
    model: &DpMlp,
    data: &dp_sgd::common::Dataset,
    idx: &[usize],
    clip: f64,
) -> (Vec<(String, Vec<f64>)>, Vec<f64>) {
    let device = Default::default();
    let mut sum: Vec<(String, Vec<f64>)> = Vec::new();
    let mut norms = Vec::new();
    for &i in idx {
        let (x, y) = data.batch::<AD>(&[i], &device);
        let g = single_example_grads(model, |m| m.loss(x, y));
        let n = norm(&g);
        norms.push(n);
        let scale = (clip / n).min(1.0);
        if sum.is_empty() {
            sum = g
                .iter()
                .map(|(p, v)| (p.clone(), vec![0.0; v.len()]))
                .collect();
        }
        for ((_, s), (_, v)) in sum.iter_mut().zip(&g) {
            for (a, &b) in s.iter_mut().zip(v) {
                *a += b as f64 * scale;
            }
        }
    }
    for (_, s) in &mut sum {
        for a in s.iter_mut() {
            *a /= idx.len() as f64;
        }
    }
    (sum, norms)
}

/// The example's DP-SGD wrapper with no noise and `q·N` = the batch size: its gradient is the
/// mean of the clipped per-example gradients.
fn dp_mean(
    model: &DpMlp,
    x: Tensor<AD, 2>,
    y: Tensor<AD, 1, burn::tensor::Int>,
    clip: f64,
    microbatch: Option<usize>,
) -> ParamGrads<I> {
    let b = x.dims()[0];
    let config =
        burn_vmap::privacy::DpSgdConfig::new(clip, 0.0, 1.0, b).with_microbatch_size(microbatch);
    let mut dp = burn_vmap::privacy::DpSgd::with_rng(
        burn::optim::SgdConfig::new().init::<AD, DpMlp>(),
        config,
        burn_vmap::privacy::PrivacyRng::seeded(0),
    )
    .unwrap();
    dp.noisy_gradient(model, dp_sgd::loss, Some((x, y)))
        .unwrap()
}

#[test]
fn should_equal_the_mean_of_clipped_per_example_gradients_without_noise() {
    let device = Default::default();
    I::seed(&device, 11);
    let model = DpMlp::new(&[64, 8, 10], &device);
    let (data, idx) = digits_batch(6);
    let clip = 0.5;
    let (want, norms) = looped_clipped_mean(&model, &data, &idx, clip);
    // The test means something only if some examples are clipped and some are not.
    assert!(norms.iter().any(|&n| n > clip), "{norms:?}");

    // Microbatch sizes that divide the batch and that do not (a ragged last microbatch).
    for microbatch in [None, Some(2), Some(3), Some(4)] {
        let (x, y) = data.batch::<AD>(&idx, &device);
        let got = dp_mean(&model, x, y, clip, microbatch);
        assert_close(
            &format!("microbatch {microbatch:?}"),
            &values(&got),
            &want,
            1e-5,
        );
    }

    // Clipping to a huge norm is the plain batch gradient of the mean loss.
    let (x, y) = data.batch::<AD>(&idx, &device);
    let plain = single_example_grads(&model, |m| m.loss(x.clone(), y.clone()));
    let plain: Vec<(String, Vec<f64>)> = plain
        .into_iter()
        .map(|(p, v)| (p, v.into_iter().map(f64::from).collect()))
        .collect();
    let got = dp_mean(&model, x, y, 1e6, None);
    assert_close("no clipping", &values(&got), &plain, 1e-5);
}

#[test]
fn should_draw_poisson_batches_through_the_examples_batcher() {
    use std::sync::Arc;
    let digits = Arc::new(dp_sgd::common::load_digits().unwrap());
    let n = digits.len();
    let mut loader = burn_vmap::privacy::PoissonLoader::<AD, _, _>::with_rng(
        Arc::new(dp_sgd::Indices(n)),
        Arc::new(dp_sgd::Rows(digits.clone())),
        16.0 / n as f64,
        Default::default(),
        burn_vmap::privacy::PrivacyRng::seeded(4),
    )
    .unwrap();
    let sizes: Vec<usize> = (0..20)
        .map(|_| {
            let step = loader.next_batch();
            if let Some((x, y)) = &step.batch {
                assert_eq!((x.dims(), y.dims()), ([step.size, 64], [step.size]));
            }
            step.size
        })
        .collect();
    // Poisson sampling: the sizes vary around q·N = 16.
    assert!(sizes.iter().any(|&s| s != sizes[0]), "{sizes:?}");
    let mean = sizes.iter().sum::<usize>() as f64 / 20.0;
    assert!((mean - 16.0).abs() < 5.0, "{sizes:?}");
}

#[test]
fn should_start_clones_of_a_model_from_the_same_weights() {
    let device = Default::default();
    let a = DpMlp::new(&[64, 4, 10], &device);
    let b = a.clone();
    assert_eq!(params(&a), params(&b));
}

#[test]
fn should_train_with_the_dp_step() {
    // A few DP steps with little noise lower the loss of a fixed batch.
    let device = Default::default();
    I::seed(&device, 2);
    let mut model = DpMlp::new(&[64, 16, 10], &device);
    let (data, idx) = digits_batch(16);
    let (x, y) = data.batch::<AD>(&idx, &device);
    let before = model.loss(x.clone(), y.clone()).into_scalar();
    let config = burn_vmap::privacy::DpSgdConfig::new(1.0, 0.01, 1.0, 16).with_microbatch_size(8);
    let mut dp =
        burn_vmap::privacy::DpSgd::new(burn::optim::SgdConfig::new().init::<AD, DpMlp>(), config)
            .unwrap();
    for _ in 0..20 {
        model = dp
            .step(0.5, model, dp_sgd::loss, Some((x.clone(), y.clone())))
            .unwrap();
    }
    let after = model.loss(x, y).into_scalar();
    assert!(after < 0.75 * before, "loss {before} -> {after}");
    assert_eq!(dp.steps(), 20);
}

// -------------------------------------------------------------------------------------------------
// Gradient moments
// -------------------------------------------------------------------------------------------------

type GmMlp = gradient_moments::common::Mlp<AD>;

fn gm_batch(n: usize) -> (gradient_moments::common::Dataset, Vec<usize>) {
    let digits = gradient_moments::common::load_digits().unwrap();
    let idx = (0..n).map(|i| i * 89 % digits.len()).collect();
    (digits, idx)
}

fn gm_values(g: &ParamGrads<I>) -> Vec<(String, Vec<f32>)> {
    gradient_moments::common::flat_params(g)
        .into_iter()
        .map(|(p, t)| (p, gradient_moments::common::to_vec(t)))
        .collect()
}

fn to_f64(v: Vec<(String, Vec<f32>)>) -> Vec<(String, Vec<f64>)> {
    v.into_iter()
        .map(|(p, v)| (p, v.into_iter().map(f64::from).collect()))
        .collect()
}

#[test]
fn should_compute_the_moments_of_the_per_example_gradients() {
    let device = Default::default();
    I::seed(&device, 4);
    let model = GmMlp::new(&[64, 6, 5, 10], &device);
    let (data, idx) = gm_batch(6);
    let (x, y) = data.batch::<AD>(&idx, &device);
    let s = gradient_moments::moments(&model, x.clone(), y.clone()).unwrap();
    assert_eq!(s.layers, vec!["layers.0", "layers.1", "layers.2"]);
    assert_eq!(s.norms.len(), 4);

    // The loop oracle: one backward pass per example.
    let per: Vec<Vec<(String, Vec<f32>)>> = idx
        .iter()
        .map(|&i| {
            let (xi, yi) = data.batch::<AD>(&[i], &device);
            single_example_grads(&model, |m| m.loss(xi, yi))
        })
        .collect();
    let b = per.len() as f64;
    let moment = |f: &dyn Fn(f32) -> f64| -> Vec<(String, Vec<f64>)> {
        per[0]
            .iter()
            .enumerate()
            .map(|(p, (path, v))| {
                let m = (0..v.len())
                    .map(|k| per.iter().map(|g| f(g[p].1[k])).sum::<f64>() / b)
                    .collect();
                (path.clone(), m)
            })
            .collect()
    };
    let mean = gm_values(&s.mean);
    let sq = gm_values(&s.mean_sq);
    assert_close("E[g]", &mean, &moment(&|g| g as f64), 1e-5);
    assert_close("E[g²]", &sq, &moment(&|g| (g as f64).powi(2)), 1e-5);

    // E[g] is the batch gradient of the mean loss.
    let batch = to_f64(single_example_grads(&model, |m| m.loss(x, y)));
    assert_close("E[g] vs batch gradient", &mean, &batch, 1e-5);

    // Var = E[g²] − E[g]² ≥ 0 (up to rounding), and some of it is positive.
    let mut total_var = 0.0;
    for ((_, m), (_, q)) in mean.iter().zip(&sq) {
        for (&m, &q) in m.iter().zip(q) {
            let var = q as f64 - (m as f64).powi(2);
            assert!(var >= -1e-6 * (1.0 + q as f64), "negative variance {var}");
            total_var += var.max(0.0);
        }
    }
    assert!(total_var > 0.0);

    // E[sign g]: in [-1, 1] and the loop's mean of signs wherever no example's gradient is so
    // small that rounding could flip its sign.
    let sign = gm_values(&s.mean_sign);
    for (p, (_, v)) in sign.iter().enumerate() {
        for (k, &e) in v.iter().enumerate() {
            assert!((-1.0..=1.0).contains(&e));
            let gs: Vec<f32> = per.iter().map(|g| g[p].1[k]).collect();
            if gs.iter().all(|g| *g == 0.0 || g.abs() > 1e-6) {
                let want = gs
                    .iter()
                    .map(|g| g.signum() as f64 * (*g != 0.0) as u8 as f64)
                    .sum::<f64>()
                    / b;
                assert!((e as f64 - want).abs() < 1e-5, "E[sign g] {e} vs {want}");
            }
        }
    }

    // Per-example norms: per layer and global, against the loop.
    let norms: Vec<Vec<f32>> = s
        .norms
        .iter()
        .map(|t| gradient_moments::common::to_vec(t.clone()))
        .collect();
    for (i, g) in per.iter().enumerate() {
        let global = norm(g);
        assert!((norms[3][i] as f64 - global).abs() < 1e-5 * (1.0 + global));
        for (l, layer) in s.layers.iter().enumerate() {
            let own: Vec<(String, Vec<f32>)> = g
                .iter()
                .filter(|(p, _)| p.starts_with(&format!("{layer}.")))
                .cloned()
                .collect();
            let n = norm(&own);
            assert!(
                (norms[l][i] as f64 - n).abs() < 1e-5 * (1.0 + n),
                "{layer} norm of example {i}"
            );
        }
    }
    // Loss: the mean of the per-example losses.
    let want_loss = model
        .loss(
            data.batch::<AD>(&idx, &device).0,
            data.batch::<AD>(&idx, &device).1,
        )
        .into_scalar() as f64;
    assert!((s.loss - want_loss).abs() < 1e-5);

    // SNR per layer: signal / noise of those moments.
    let stats = gradient_moments::layer_stats(&s);
    assert_eq!(stats.len(), 3);
    for st in &stats {
        assert!(st.signal > 0.0 && st.noise > 0.0);
        assert!((st.snr - st.signal / st.noise).abs() < 1e-12 * st.snr.max(1.0));
        assert!((0.0..=1.0).contains(&st.sign_agreement));
    }
}

#[test]
fn should_match_burns_adam_when_fed_the_squared_mean_gradient() {
    use gradient_moments::{Method, MomentOptimizer, moments, plain_sgd};
    let device = Default::default();
    I::seed(&device, 9);
    let init = GmMlp::new(&[64, 6, 10], &device);
    let (data, idx) = gm_batch(8);
    let (x, y) = data.batch::<AD>(&idx, &device);
    let lr = 0.01;

    let mut ours = init.clone();
    let mut opt = MomentOptimizer::new(Method::Adam);
    let mut sgd = plain_sgd();
    let mut theirs = init.clone();
    let mut adam = AdamConfig::new().with_epsilon(1e-8).init::<AD, GmMlp>();
    for _ in 0..3 {
        let s = moments(&ours, x.clone(), y.clone()).unwrap();
        ours = opt.step(&mut sgd, lr, ours, &s);
        let grads = theirs.loss(x.clone(), y.clone()).backward();
        let grads = GradientsParams::from_grads(grads, &theirs);
        theirs = adam.step(lr, theirs, grads);
    }
    for (a, b) in params(&ours).iter().zip(params(&theirs)) {
        for (&a, &b) in a.iter().zip(&b) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }
    // It moved.
    assert!(params(&ours)[0] != params(&init)[0]);
}

#[test]
fn should_step_with_the_per_example_moments() {
    use gradient_moments::{Method, MomentOptimizer, moments, plain_sgd};
    let device = Default::default();
    I::seed(&device, 10);
    let init = GmMlp::new(&[64, 6, 10], &device);
    let (data, idx) = gm_batch(8);
    let (x, y) = data.batch::<AD>(&idx, &device);
    let s = moments(&init, x, y).unwrap();
    let mean = gm_values(&s.mean);
    let sq = gm_values(&s.mean_sq);
    let sign = gm_values(&s.mean_sign);
    let lr = 0.1;
    let w0 = params(&init);

    // First step (bias-corrected moments = this batch's): Adam-MSQ moves by
    // lr · E[g] / (sqrt(E[g²]) + ε), at most lr per coordinate since E[g]² ≤ E[g²].
    let opt = &mut MomentOptimizer::new(Method::AdamMsq);
    let w1 = params(&opt.step(&mut plain_sgd(), lr, init.clone(), &s));
    for p in 0..w0.len() {
        for k in 0..w0[p].len() {
            let u = mean[p].1[k] as f64 / ((sq[p].1[k] as f64).sqrt() + 1e-8);
            assert!(u.abs() <= 1.0 + 1e-4);
            let want = w0[p][k] as f64 - lr * u;
            assert!((w1[p][k] as f64 - want).abs() < 1e-5, "MSQ {p}[{k}]");
        }
    }
    // Sign-mean moves by lr · E[sign g].
    let opt = &mut MomentOptimizer::new(Method::SignMean);
    let w1 = params(&opt.step(&mut plain_sgd(), lr, init, &s));
    for p in 0..w0.len() {
        for k in 0..w0[p].len() {
            let want = w0[p][k] as f64 - lr * sign[p].1[k] as f64;
            assert!((w1[p][k] as f64 - want).abs() < 1e-5, "sign {p}[{k}]");
        }
    }
}

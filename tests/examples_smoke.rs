//! The pieces of the `gradient_moments` and `per_example_gradients` examples, at tiny sizes,
//! against independent oracles: the shipped digits, the per-example moments against a loop of
//! Burn's own single-example backward passes and the batch gradient, the moment optimizers
//! against Burn's Adam and their definitions; and four examples run end to end: the README's
//! main one (`dp_sgd`) and the burn-train one (`dp_learner`, resumed from its checkpoint) among
//! them.

// Each example is compiled as it is shipped, with its own copy of `examples/common`.
#![allow(clippy::duplicate_mod)]

#[cfg(feature = "train")]
#[allow(dead_code)]
#[path = "../examples/dp_learner.rs"]
mod dp_learner;

#[allow(dead_code)]
#[path = "../examples/dp_sgd.rs"]
mod dp_sgd;

#[allow(dead_code)]
#[path = "../examples/gradient_moments.rs"]
mod gradient_moments;

#[allow(dead_code)]
#[path = "../examples/per_example_gradients.rs"]
mod per_example_gradients;

use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{Device, Tensor};
use burn_vmap::ParamGrads;

use gradient_moments::common;

// -------------------------------------------------------------------------------------------------
// Helpers (plain Rust over `Vec<f32>`: the oracles)
// -------------------------------------------------------------------------------------------------

type Mlp = common::Mlp;

/// Every gradient of `g` as `(path, values)`.
fn values(g: &ParamGrads) -> Vec<(String, Vec<f32>)> {
    common::flat_params(g)
        .into_iter()
        .map(|(p, t)| (p, common::to_vec(t)))
        .collect()
}

/// Every float parameter of a module: its path, id and rank, in visiting order.
#[derive(Default)]
struct ParamInfo {
    at: Vec<String>,
    params: Vec<(String, ParamId, usize)>,
}

impl ModuleVisitor for ParamInfo {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.at.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.at.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.params.push((self.at.join("."), param.id, D));
    }
}

/// Burn's gradient of parameter `id` (rank `rank`) as flat values.
fn burn_grad(grads: &GradientsParams, id: ParamId, rank: usize) -> Vec<f32> {
    match rank {
        1 => common::to_vec(grads.get::<1>(id).expect("a gradient")),
        2 => common::to_vec(grads.get::<2>(id).expect("a gradient")),
        r => panic!("rank {r}"),
    }
}

/// The gradients of `loss` by Burn's own backward pass (no transform involved), in the
/// module's visiting order.
fn burn_grads(model: &Mlp, loss: impl FnOnce(&Mlp) -> Tensor<1>) -> Vec<(String, Vec<f32>)> {
    let trained = model.clone().train();
    let grads = GradientsParams::from_grads(loss(&trained).backward(), &trained);
    let mut info = ParamInfo::default();
    model.visit(&mut info);
    info.params
        .into_iter()
        .map(|(path, id, rank)| (path, burn_grad(&grads, id, rank)))
        .collect()
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

fn to_f64(v: Vec<(String, Vec<f32>)>) -> Vec<(String, Vec<f64>)> {
    v.into_iter()
        .map(|(p, v)| (p, v.into_iter().map(f64::from).collect()))
        .collect()
}

/// Every float parameter of a module, flattened, in visiting order.
struct Params(Vec<Vec<f32>>);

impl ModuleVisitor for Params {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.0.push(common::to_vec(param.val()));
    }
}

fn params<M: Module>(m: &M) -> Vec<Vec<f32>> {
    let mut v = Params(Vec::new());
    m.visit(&mut v);
    v.0
}

fn gm_batch(n: usize) -> (common::Dataset, Vec<usize>) {
    let digits = common::load_digits().unwrap();
    // Rows spread over the file (different classes).
    let idx = (0..n).map(|i| i * 89 % digits.len()).collect();
    (digits, idx)
}

// -------------------------------------------------------------------------------------------------
// Data
// -------------------------------------------------------------------------------------------------

#[test]
fn should_load_the_shipped_digits() {
    let d = common::load_digits().unwrap();
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
    let (x, y) = d.batch(&[0, 1], &Device::default());
    assert_eq!(x.dims(), [2, 64]);
    let xs = common::to_vec(x);
    assert!((xs[2] - 5.0 / 16.0).abs() < 1e-6);
    assert_eq!(
        y.into_data()
            .convert::<i64>()
            .try_into_vec::<i64>()
            .unwrap(),
        vec![0, 1]
    );
    // The file is found from the package root (`data/`).
    assert!(
        common::digits_path()
            .unwrap()
            .ends_with("data/digits.csv.gz")
    );
}

#[test]
fn should_split_digits_without_losing_or_repeating_rows() {
    let d = common::load_digits().unwrap();
    let mut rng = common::SplitMix64(3);
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
    let batches = common::epoch_batches(10, 4, &mut rng);
    assert_eq!(batches.len(), 2);
    let mut seen: Vec<usize> = batches.concat();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 8);
}

#[test]
fn should_reject_malformed_digits_csv() {
    let parse = |s: &str| common::parse_digits_csv(s.as_bytes());
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

// -------------------------------------------------------------------------------------------------
// Gradient moments
// -------------------------------------------------------------------------------------------------

#[test]
fn should_compute_the_moments_of_the_per_example_gradients() {
    let device = Device::default();
    device.seed(4);
    let model = Mlp::new(&[64, 6, 5, 10], &device);
    let (data, idx) = gm_batch(6);
    let (x, y) = data.batch(&idx, &device);
    let s = gradient_moments::moments(&model, x.clone(), y.clone()).unwrap();
    assert_eq!(s.layers, vec!["layers.0", "layers.1", "layers.2"]);
    assert_eq!(s.norms.len(), 4);

    // The loop oracle: one backward pass per example.
    let per: Vec<Vec<(String, Vec<f32>)>> = idx
        .iter()
        .map(|&i| {
            let (xi, yi) = data.batch(&[i], &device);
            burn_grads(&model, |m| m.loss(xi, yi))
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
    let mean = values(&s.mean);
    let sq = values(&s.mean_sq);
    assert_close("E[g]", &mean, &moment(&|g| g as f64), 1e-5);
    assert_close("E[g²]", &sq, &moment(&|g| (g as f64).powi(2)), 1e-5);

    // E[g] is the batch gradient of the mean loss.
    let batch = to_f64(burn_grads(&model, |m| m.loss(x, y)));
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
    let sign = values(&s.mean_sign);
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
    let norms: Vec<Vec<f32>> = s.norms.iter().map(|t| common::to_vec(t.clone())).collect();
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
    let (xb, yb) = data.batch(&idx, &device);
    let want_loss = model.loss(xb, yb).into_scalar::<f32>() as f64;
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
    use gradient_moments::{Method, MomentOptimizer, MomentsFn, plain_sgd};
    let device = Device::default();
    device.seed(9);
    let init = Mlp::new(&[64, 6, 10], &device);
    let (data, idx) = gm_batch(8);
    let (x, y) = data.batch(&idx, &device);
    let lr = 0.01;

    let moments = MomentsFn::new();
    let mut ours = init.clone();
    let mut opt = MomentOptimizer::new(Method::Adam);
    let mut sgd = plain_sgd();
    let mut theirs = init.clone().train();
    let mut adam = AdamConfig::new().with_epsilon(1e-8).init();
    for _ in 0..3 {
        let s = moments.call(&ours, x.clone(), y.clone()).unwrap();
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
    let device = Device::default();
    device.seed(10);
    let init = Mlp::new(&[64, 6, 10], &device);
    let (data, idx) = gm_batch(8);
    let (x, y) = data.batch(&idx, &device);
    let s = moments(&init, x, y).unwrap();
    let mean = values(&s.mean);
    let sq = values(&s.mean_sq);
    let sign = values(&s.mean_sign);
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

// -------------------------------------------------------------------------------------------------
// The examples end to end
// -------------------------------------------------------------------------------------------------

#[test]
fn should_train_and_plot_the_gradient_moments() {
    let out = std::env::temp_dir().join(format!("burn_vmap_moments_{}", std::process::id()));
    let args: Vec<String> = [
        "gradient_moments",
        "--epochs",
        "1",
        "--batch-size",
        "128",
        "--lr",
        "0.01",
        "--out",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([out.display().to_string()])
    .collect();
    gradient_moments::run_with(&args).unwrap();
    for plot in ["snr.svg", "loss.svg", "norms.svg"] {
        let svg = std::fs::read_to_string(out.join(plot)).unwrap();
        assert!(svg.starts_with("<svg") && svg.len() > 1000, "{plot}");
    }
    std::fs::remove_dir_all(&out).unwrap();

    // A flag that does not parse is an error, not a panic.
    let bad: Vec<String> = ["gradient_moments", "--epochs", "ten"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let e = gradient_moments::run_with(&bad).unwrap_err();
    assert!(
        e.to_string().contains("--epochs: cannot parse `ten`"),
        "{e}"
    );
}

#[test]
fn should_run_the_per_example_gradients_example() {
    // It asserts its own checks: the mean of the per-example gradients is Burn's batch
    // gradient, both transforms agree, clipping bounds the norms.
    per_example_gradients::main();
}

/// The README's main example, one epoch (23 steps of expected batch 64 on the digits): both
/// models learn (chance is 10%), ε is the accountant's for those steps, and flags that do not
/// parse or contradict each other are errors. On Flex, where the README's command runs it (on
/// lavapipe its 23 steps take 16 s; the DP step is tested there in `tests/privacy.rs`).
#[test]
#[cfg_attr(
    feature = "wgpu",
    ignore = "the README runs it on Flex; 16 s on lavapipe, and tests/privacy.rs steps on wgpu"
)]
fn should_run_the_main_dp_sgd_example() {
    let args = |a: &[&str]| -> Vec<String> {
        std::iter::once("dp_sgd")
            .chain(a.iter().copied())
            .map(String::from)
            .collect()
    };
    let outcome = dp_sgd::run_with(&args(&["--epochs", "1"])).unwrap();
    assert!(outcome.baseline_accuracy > 0.5, "{outcome:?}");
    assert!(outcome.private_accuracy > 0.3, "{outcome:?}");
    assert!(
        outcome.epsilon.is_finite() && outcome.epsilon > 0.0,
        "{outcome:?}"
    );
    let e = dp_sgd::run_with(&args(&["--sigma", "1", "--target-epsilon", "2"])).unwrap_err();
    assert!(e.to_string().contains("not both"), "{e}");
    let e = dp_sgd::run_with(&args(&["--clip", "one"])).unwrap_err();
    assert!(e.to_string().contains("--clip: cannot parse `one`"), "{e}");
}

/// The burn-train example for one epoch (23 steps), then resumed from its checkpoint for a
/// second: the model learns (chance is 10%; in eight runs 45-71% after the first epoch, 74-85%
/// after the second), and the resumed run accounts both epochs' steps.
#[cfg(feature = "train")]
#[test]
#[cfg_attr(
    feature = "wgpu",
    ignore = "Flex, as the README runs it; tests/train.rs trains through the Learner on wgpu"
)]
fn should_run_and_resume_the_dp_learner_example() {
    let dir = std::env::temp_dir().join(format!("burn_vmap_dp_learner_{}", std::process::id()));
    // A first run, not a resumed one: nothing left from an earlier process of the same id.
    let _ = std::fs::remove_dir_all(&dir);
    let args = |a: &[&str]| -> Vec<String> {
        ["dp_learner", "--dir", &dir.display().to_string()]
            .into_iter()
            .chain(a.iter().copied())
            .map(String::from)
            .collect()
    };
    let first = dp_learner::run_with(&args(&["--epochs", "1"])).unwrap();
    assert_eq!(first.steps, 23, "{first:?}");
    assert!(first.accuracy > 0.15, "{first:?}");
    let resumed = dp_learner::run_with(&args(&["--epochs", "2", "--resume", "1"])).unwrap();
    assert_eq!(resumed.steps, 46, "{resumed:?}");
    assert!(resumed.accuracy > 0.5, "{resumed:?}");
    assert!(resumed.epsilon > first.epsilon, "{first:?} {resumed:?}");
    std::fs::remove_dir_all(&dir).unwrap();
    let no_dir = ["dp_learner", "--resume", "1"].map(String::from);
    let e = dp_learner::run_with(&no_dir).unwrap_err();
    assert!(e.to_string().contains("--resume needs the --dir"), "{e}");
}

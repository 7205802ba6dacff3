//! The DP-SGD mechanism and optimizer: one step equals clip + sum + noise + divide by hand, the
//! noise has the calibrated standard deviation, empty batches take noise-only steps, ragged
//! microbatches give the same sum, per-layer clipping, one recording across Poisson steps,
//! BatchNorm is refused; and one test per defect of issue 26 (NaN examples, N under
//! add/remove, clones and seeds, one sampling rate, one parameter set, the statement, resume),
//! the budget and the replace-one relation.

#[path = "shared/tied.rs"]
mod tied;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::{Dataset, InMemDataset};
use burn::module::Module;
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig};
use burn::optim::{GradientsParams, SgdConfig};
use burn::tensor::{Device, Int, Tensor, TensorData};
use burn_vmap::privacy::{
    DpConfig, DpLoader, DpMechanism, DpRecord, DpSgd, Neighbouring, NoiseKind, PoissonSampler,
    PrivacyError, PrivacyRng, Sampled, clip_per_layer,
};
use burn_vmap::{ParamGrads, VmapError, clip_by_global_norm, global_norm, micro_grad_module};
use tied::Tied;

type Batch = (Tensor<2>, Tensor<2>);
/// One example's features and targets, as the datasets hold it.
type Item = (Vec<f32>, Vec<f32>);

fn dev() -> Device {
    Device::default()
}

/// A freshly initialized model (plain: not in training mode).
fn model() -> Linear {
    LinearConfig::new(3, 2).init(&dev())
}

fn loss(m: &Linear, (x, y): Batch) -> Tensor<1> {
    (m.forward(x) - y).powi_scalar(2).sum()
}

fn batch(n: usize) -> Batch {
    let x: Vec<f32> = (0..n * 3)
        .map(|i| ((i * 7) % 11) as f32 * 0.5 - 2.0)
        .collect();
    let y: Vec<f32> = (0..n * 2).map(|i| ((i * 3) % 5) as f32 - 2.0).collect();
    (
        Tensor::from_data(TensorData::new(x, [n, 3]), &dev()),
        Tensor::from_data(TensorData::new(y, [n, 2]), &dev()),
    )
}

fn floats<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .unwrap()
}

fn values(g: &ParamGrads) -> Vec<f32> {
    let mut v = floats(g.get::<2>("weight").unwrap());
    v.extend(floats(g.get::<1>("bias").unwrap()));
    v
}

fn assert_close(a: &[f32], b: &[f32], tol: f32) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{a:?} vs {b:?}");
    }
}

/// The rows of [`batch`] as a dataset, batched back by [`Rows`].
fn rows(n: usize) -> Arc<InMemDataset<(Vec<f32>, Vec<f32>)>> {
    let (x, y) = batch(n);
    let (x, y) = (floats(x), floats(y));
    let items = (0..n)
        .map(|i| (x[i * 3..i * 3 + 3].to_vec(), y[i * 2..i * 2 + 2].to_vec()))
        .collect();
    Arc::new(InMemDataset::new(items))
}

#[derive(Clone)]
struct Rows;

impl Batcher<(Vec<f32>, Vec<f32>), Batch> for Rows {
    fn batch(&self, items: Vec<(Vec<f32>, Vec<f32>)>, device: &Device) -> Batch {
        let n = items.len();
        let (x, y): (Vec<Vec<f32>>, Vec<Vec<f32>>) = items.into_iter().unzip();
        (
            Tensor::from_data(TensorData::new(x.concat(), [n, 3]), device),
            Tensor::from_data(TensorData::new(y.concat(), [n, 2]), device),
        )
    }
}

/// [`Rows`], after a change to the items (an example made non-finite).
#[derive(Clone)]
struct Patched(fn(&mut Vec<Item>));
impl Batcher<Item, Batch> for Patched {
    fn batch(&self, mut items: Vec<Item>, device: &Device) -> Batch {
        (self.0)(&mut items);
        Rows.batch(items, device)
    }
}

/// The public batch size the add/remove tests divide by.
const B: f64 = 10.0;

fn config(c: f64, sigma: f64, q: f64) -> DpConfig {
    DpConfig::new(
        c,
        sigma,
        q,
        Neighbouring::AddRemove {
            expected_batch_size: B,
        },
    )
}

fn seeded(config: DpConfig, seed: u64) -> DpMechanism {
    DpMechanism::seeded(config, seed).unwrap()
}

/// A loader of `n` rows; at `q = 1` every batch is [`batch`]`(n)`.
fn loader(dp: &DpMechanism, n: usize) -> DpLoader<(Vec<f32>, Vec<f32>), Batch> {
    dp.loader(rows(n), Arc::new(Rows), dev()).unwrap()
}

/// The next batch of a fresh loader of `n` rows.
fn next(dp: &DpMechanism, n: usize) -> Sampled<Batch> {
    loader(dp, n).next_batch().unwrap()
}

/// An empty batch: a loader of no rows.
fn empty(dp: &DpMechanism) -> Sampled<Batch> {
    let none: Arc<InMemDataset<(Vec<f32>, Vec<f32>)>> = Arc::new(InMemDataset::new(vec![]));
    dp.loader(none, Arc::new(Rows), dev())
        .unwrap()
        .next_batch()
        .unwrap()
}

fn sgd(dp: DpMechanism) -> DpSgd {
    DpSgd::new(SgdConfig::new().init(), dp)
}

const C: f64 = 1.0;
const SIGMA: f64 = 1.3;
const Q: f64 = 0.05;

#[test]
fn should_equal_clip_sum_noise_divide_by_hand() {
    let m = model();
    let mut dp = seeded(config(C, SIGMA, 1.0), 5);
    let (ours, report) = dp.noisy_gradient(&m, loss, next(&dp, 7)).unwrap();
    assert_eq!((report.step, report.sampled, report.non_finite), (1, 7, 0));

    let (sum, _) = micro_grad_module(loss)
        .transform_fn(|g| clip_by_global_norm(g, C))
        .call(&m, batch(7))
        .unwrap();
    let by_hand: Vec<f32> = values(&sum).iter().map(|v| v / B as f32).collect();
    // The noise: σC per coordinate, so the difference is noise / B.
    let diff: Vec<f64> = values(&ours)
        .iter()
        .zip(&by_hand)
        .map(|(a, b)| (a - b) as f64 * B)
        .collect();
    assert!(diff.iter().all(|d| d.abs() < 6.0 * SIGMA * C), "{diff:?}");
    assert!(diff.iter().any(|d| d.abs() > 1e-3), "noise was added");
    assert_eq!(dp.steps(), 1);
}

/// Every example's gradient by Burn's own backward, clipped to `c`, summed: by hand.
fn clipped_sum_by_hand(m: &Linear, (x, y): Batch, c: f32, per_layer: bool) -> Vec<f32> {
    let n = x.dims()[0];
    let mut total = vec![0.0f32; 8];
    let trained = m.clone().train();
    for i in 0..n {
        let xi = x.clone().narrow(0, i, 1);
        let yi = y.clone().narrow(0, i, 1);
        let g = GradientsParams::from_grads(loss(&trained, (xi, yi)).backward(), &trained);
        let w = floats(g.get::<2>(trained.weight.id).unwrap());
        let b = floats(g.get::<1>(trained.bias.as_ref().unwrap().id).unwrap());
        let norm = |v: &[f32]| v.iter().map(|a| a * a).sum::<f32>().sqrt();
        let (sw, sb) = if per_layer {
            let per = c / 2f32.sqrt();
            (per / norm(&w).max(per), per / norm(&b).max(per))
        } else {
            let all = (norm(&w).powi(2) + norm(&b).powi(2)).sqrt();
            let s = c / all.max(c);
            (s, s)
        };
        for (t, v) in total
            .iter_mut()
            .zip(w.iter().map(|v| v * sw).chain(b.iter().map(|v| v * sb)))
        {
            *t += v;
        }
    }
    total
}

#[test]
fn should_equal_the_loop_of_burns_backward_without_noise() {
    let plain = model();
    for (m, per_layer) in [
        (plain.clone(), false),
        (plain.clone(), true),
        (plain.train(), false),
    ] {
        for c in [0.1, 1.0, 100.0] {
            let mut dp = seeded(config(c, 0.0, 1.0).with_per_layer_clipping(per_layer), 1);
            // A model in training mode (autodiff parameters) gives the same gradient.
            let (ours, report) = dp.noisy_gradient(&m, loss, next(&dp, 9)).unwrap();
            let want: Vec<f32> = clipped_sum_by_hand(&m.valid(), batch(9), c as f32, per_layer)
                .iter()
                .map(|v| v / B as f32)
                .collect();
            assert_close(&values(&ours), &want, 1e-5);
            if c == 0.1 && !per_layer {
                assert_eq!(report.clipped, 9, "every example is clipped at C = 0.1");
            }
            if c == 100.0 {
                assert_eq!(report.clipped, 0);
            }
        }
    }
}

#[test]
fn should_step_the_optimizer_with_the_noisy_gradient() {
    let m = model().train(); // as a Burn training loop holds it
    let before = values_of(&m);
    let mut dp = seeded(config(C, SIGMA, 1.0), 9);
    let (grads, _) = dp.noisy_gradient(&m, loss, next(&dp, 5)).unwrap();
    let mut opt = sgd(seeded(config(C, SIGMA, 1.0), 9));
    let batch = next(opt.mechanism(), 5);
    let (after, _) = opt.step(0.1, m, loss, batch).unwrap();
    let want: Vec<f32> = before
        .iter()
        .zip(values(&grads))
        .map(|(p, g)| p - 0.1 * g)
        .collect();
    assert_close(&values_of(&after), &want, 1e-5);
}

fn values_of(m: &Linear) -> Vec<f32> {
    let mut v = floats(m.weight.val());
    v.extend(floats(m.bias.as_ref().unwrap().val()));
    v
}

#[test]
fn should_give_the_same_sum_with_a_ragged_last_microbatch() {
    let m = model();
    let sum = |mb: Option<usize>| {
        let mut dp = seeded(config(C, 0.0, 1.0).with_microbatch_size(mb), 1);
        values(&dp.noisy_gradient(&m, loss, next(&dp, 7)).unwrap().0)
    };
    let whole = sum(None);
    for mb in [1, 2, 3, 4, 7, 9] {
        assert_close(&sum(Some(mb)), &whole, 1e-5);
    }
}

#[test]
fn should_record_the_loss_once_across_poisson_batches() {
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let counted = |m: &Linear, b: Batch| {
        CALLS.fetch_add(1, Ordering::Relaxed);
        loss(m, b)
    };
    let mut dp = sgd(seeded(config(C, SIGMA, 0.05).with_microbatch_size(3), 4));
    let mut data = loader(dp.mechanism(), 200);
    let mut m = model();
    let mut sizes = Vec::new();
    for _ in 0..8 {
        let b = data.next_batch().unwrap();
        sizes.push(b.size());
        (m, _) = dp.step(0.05, m, counted, b).unwrap();
    }
    assert!(sizes.windows(2).any(|w| w[0] != w[1]), "{sizes:?}");
    assert_eq!(CALLS.load(Ordering::Relaxed), 1, "batch sizes {sizes:?}");
    assert_eq!(dp.mechanism().steps(), 8);
}

/// A loss closure that moves a value in (a temperature, a weight that changes with the step)
/// is one closure type whatever the value, and all function pointers of a signature are one
/// type: each step computes the loss it is given, not the first step's recording.
#[test]
fn should_record_a_capturing_loss_or_a_function_pointer_at_every_step() {
    fn doubled(m: &Linear, b: Batch) -> Tensor<1> {
        loss(m, b) * 2.0
    }
    fn release<F>(dp: &mut DpMechanism, m: &Linear, loss_fn: F) -> Vec<f32>
    where
        F: Fn(&Linear, Batch) -> Tensor<1> + Send + Sync + 'static,
    {
        let batch = next(dp, 5);
        values(&dp.noisy_gradient(m, loss_fn, batch).unwrap().0)
    }
    let m = model();
    // C large enough to clip nothing: the released sum is linear in the loss's scale.
    let fresh = || seeded(config(1e6, 0.0, 1.0), 1);
    let scaled = |scale: f32| move |m: &Linear, b: Batch| loss(m, b) * scale;
    let mut kept = fresh();
    let mut released = Vec::new();
    for scale in [1.0, 3.0, 3.0, 0.5] {
        let got = release(&mut kept, &m, scaled(scale));
        let want = release(&mut fresh(), &m, scaled(scale));
        assert_eq!(got, want, "scale {scale}: a stale recording");
        released.push(got);
    }
    assert_ne!(released[0], released[1]);

    let pointer = |f: fn(&Linear, Batch) -> Tensor<1>| f;
    let mut kept = fresh();
    let plain = release(&mut kept, &m, pointer(loss));
    let twice = release(&mut kept, &m, pointer(doubled));
    let want: Vec<f32> = plain.iter().map(|v| v * 2.0).collect();
    assert_close(&twice, &want, 1e-5);
}

#[test]
fn should_take_any_tree_as_the_batch() {
    // A bare tensor: the loss sees one example as [1, 3].
    #[derive(Clone)]
    struct Xs;
    impl Batcher<(Vec<f32>, Vec<f32>), Tensor<2>> for Xs {
        fn batch(&self, items: Vec<(Vec<f32>, Vec<f32>)>, device: &Device) -> Tensor<2> {
            Rows.batch(items, device).0
        }
    }
    let m = model();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let shapes = seen.clone();
    let loss = move |m: &Linear, x: Tensor<2>| {
        shapes.lock().unwrap().push(x.dims());
        m.forward(x).sum()
    };
    let mut dp = seeded(config(C, 0.0, 1.0), 1);
    let b = dp
        .loader(rows(4), Arc::new(Xs), dev())
        .unwrap()
        .next_batch()
        .unwrap();
    let (g, _) = dp.noisy_gradient(&m, loss, b).unwrap();
    assert_eq!(seen.lock().unwrap().as_slice(), &[[1, 3]]);
    assert_eq!(g.get::<1>("bias").unwrap().dims(), [2]);
}

#[test]
fn should_draw_noise_with_the_calibrated_std() {
    // An empty batch: the noisy gradient is the noise alone, divided by B.
    let m: Linear = LinearConfig::new(40, 50).init(&dev());
    let mut dp = seeded(config(C, SIGMA, Q), 11);
    let b = empty(&dp);
    let (g, report) = dp
        .noisy_gradient(&m, |m: &Linear, (x, _): Batch| m.forward(x).sum(), b)
        .unwrap();
    assert_eq!(report.sampled, 0);
    let v: Vec<f64> = floats(g.get::<2>("weight").unwrap())
        .iter()
        .map(|x| *x as f64 * B)
        .collect();
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let std = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    // 2000 draws: the sample std is within 5% of σC with overwhelming probability.
    assert!((std - SIGMA * C).abs() < 0.05 * SIGMA * C, "std {std}");
    assert!(mean.abs() < 4.0 * SIGMA * C / n.sqrt(), "mean {mean}");
    assert_eq!(g.get::<1>("bias").unwrap().dims(), [50], "every parameter");
    assert_eq!(dp.steps(), 1, "an empty batch is a step of the mechanism");
}

#[test]
fn should_leave_frozen_parameters_alone() {
    let m = model();
    let m = Linear {
        bias: m.bias.map(|b| b.set_require_grad(false)),
        ..m
    };
    let mut dp = sgd(seeded(config(C, SIGMA, 1.0), 3));
    let bias = floats(m.bias.as_ref().unwrap().val());
    let weight = floats(m.weight.val());
    let b = empty(dp.mechanism());
    let (m, _) = dp.step(0.1, m, loss, b).unwrap();
    let b = next(dp.mechanism(), 3);
    let (m, _) = dp.step(0.1, m, loss, b).unwrap();
    assert_eq!(floats(m.bias.as_ref().unwrap().val()), bias);
    assert_ne!(floats(m.weight.val()), weight);
}

#[test]
fn should_account_every_step_and_agree_with_the_accountant() {
    use burn_vmap::privacy::accounting::{PldAccountant, PoissonGaussian, RdpAccountant};
    let mut dp = sgd(seeded(config(C, SIGMA, Q), 2));
    let mut data = loader(dp.mechanism(), 200);
    let mut m = model();
    for _ in 0..5 {
        let b = data.next_batch().unwrap();
        (m, _) = dp.step(0.05, m, loss, b).unwrap();
    }
    // Hardened noise (the default): the discrete Gaussian's RDP, by both queries; never below
    // the continuous Gaussian's (defect 9 below).
    let event = PoissonGaussian::new(Q, SIGMA).unwrap();
    let mut rdp = RdpAccountant::discrete_gaussian();
    rdp.compose(event, 5).unwrap();
    let mut pld = PldAccountant::new();
    pld.compose(event, 5).unwrap();
    let dp = dp.mechanism();
    assert_eq!(dp.steps(), 5);
    assert!((dp.epsilon_rdp().unwrap() - rdp.epsilon(1e-5).unwrap()).abs() < 1e-12);
    assert!((dp.epsilon().unwrap() - rdp.epsilon(1e-5).unwrap()).abs() < 1e-12);
    assert!(dp.epsilon().unwrap() >= pld.epsilon(1e-5).unwrap());
    for text in [dp.statement(), dp.statement_rdp()].map(|s| s.unwrap().to_string()) {
        assert!(text.contains("Poisson"), "{text}");
    }
}

#[test]
fn should_clip_every_layer_to_its_share() {
    let d = dev();
    let g = (
        Tensor::<1>::from_floats([3.0, 4.0], &d),
        Tensor::<2>::from_floats([[0.1, 0.0]], &d),
    );
    let (a, b) = clip_per_layer(g, 2f64.sqrt());
    // P = 2 leaves: each clipped to norm 1; the small one unchanged.
    assert_close(&floats(a), &[0.6, 0.8], 1e-6);
    assert_close(&floats(b), &[0.1, 0.0], 1e-6);
    let big = (
        Tensor::<1>::from_floats([30.0, 40.0], &d),
        Tensor::<1>::from_floats([7.0], &d),
    );
    let norm = floats(global_norm(&clip_per_layer(big, 1.0)))[0];
    assert!(norm <= 1.0 + 1e-6, "{norm}");
}

#[test]
fn should_refuse_bad_settings_naming_them() {
    let err = |c: DpConfig| match DpMechanism::new(c) {
        Err(PrivacyError::Argument { argument, .. }) => argument,
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("accepted"),
    };
    let replace = |n| DpConfig::new(C, SIGMA, Q, Neighbouring::ReplaceOne { dataset_size: n });
    assert_eq!(err(config(0.0, SIGMA, Q)), "clip_norm");
    assert_eq!(err(config(f64::NAN, SIGMA, Q)), "clip_norm");
    assert_eq!(err(config(C, -1.0, Q)), "noise_multiplier");
    assert_eq!(err(config(C, SIGMA, 1.5)), "sampling_rate");
    assert_eq!(err(config(C, SIGMA, 0.0)), "sampling_rate");
    assert_eq!(err(replace(0)), "dataset_size");
    let no_size = DpConfig::new(
        C,
        SIGMA,
        Q,
        Neighbouring::AddRemove {
            expected_batch_size: 0.0,
        },
    );
    assert_eq!(err(no_size), "expected_batch_size");
    assert_eq!(err(config(C, SIGMA, Q).with_delta(1.0)), "delta");
    assert_eq!(
        err(config(C, SIGMA, Q).with_microbatch_size(0)),
        "microbatch_size"
    );
    // Replace-one states N: a dataset of another size is refused.
    let dp = DpMechanism::new(replace(100)).unwrap();
    match dp.loader(rows(50), Arc::new(Rows), dev()) {
        Err(PrivacyError::Argument { argument, got, .. }) => {
            assert_eq!(argument, "dataset");
            assert!(got.contains("50"), "{got}");
        }
        other => panic!("{other:?}"),
    }
    let budget = |e, d| {
        DpMechanism::new(config(C, SIGMA, Q))
            .unwrap()
            .with_budget(e, d)
    };
    assert!(matches!(
        budget(0.0, 1e-5),
        Err(PrivacyError::Argument {
            argument: "epsilon",
            ..
        })
    ));
    assert!(matches!(
        budget(1.0, 0.0),
        Err(PrivacyError::Argument {
            argument: "delta",
            ..
        })
    ));
}

/// Batches whose targets have one row too many: the step's loss fails.
#[derive(Clone)]
struct Mismatched;
impl Batcher<(Vec<f32>, Vec<f32>), Batch> for Mismatched {
    fn batch(&self, items: Vec<(Vec<f32>, Vec<f32>)>, device: &Device) -> Batch {
        let (x, _) = Rows.batch(items, device);
        let n = x.dims()[0];
        (x, Tensor::zeros([n + 1, 2], device))
    }
}

/// The next batch of a fresh loader of 4 rows whose targets have a row too many.
fn mismatched(dp: &DpMechanism) -> Sampled<Batch> {
    dp.loader(rows(4), Arc::new(Mismatched), dev())
        .unwrap()
        .next_batch()
        .unwrap()
}

/// A step that fails after reading its batch (its targets have a row too many) is refused
/// with the leaf that does not hold one row per example, and accounted: the error depends on
/// the data, and the caller sees it.
#[test]
fn should_refuse_mismatched_batches_and_account_them() {
    let mut dp = seeded(config(C, SIGMA, 1.0), 1);
    let b = mismatched(&dp);
    let err = dp.noisy_gradient(&model(), loss, b).unwrap_err();
    match &err {
        PrivacyError::Batch { expected, got } => {
            assert!(expected.contains("one row per sampled example"), "{err}");
            assert!(got.contains("5 rows") && got.contains("batch"), "{err}");
        }
        other => panic!("{other}"),
    }
    assert_eq!(dp.steps(), 1);
}

/// The noise is drawn while the clipped sum is computed (hardened noise, on a thread of its
/// own): a step that fails after it started drops it, and the next step draws fresh noise.
#[test]
fn should_never_release_the_noise_of_a_failed_step() {
    let m = model();
    let step = |dp: &mut DpMechanism| values(&dp.noisy_gradient(&m, loss, next(dp, 4)).unwrap().0);
    // Same seed, same model, same batch (q = 1): the released values are reproducible...
    let first = step(&mut seeded(config(C, SIGMA, 1.0), 6));
    assert_eq!(first, step(&mut seeded(config(C, SIGMA, 1.0), 6)));
    // ...and after a failed step, the next one releases other noise than the failed one drew.
    let mut failed = seeded(config(C, SIGMA, 1.0), 6);
    let bad = mismatched(&failed);
    assert!(failed.noisy_gradient(&m, loss, bad).is_err());
    let after = step(&mut failed);
    assert_ne!(after, first);
    assert_eq!(
        failed.steps(),
        2,
        "the failed step read its batch: accounted"
    );
}

#[derive(Module, Debug)]
struct Normed {
    fc: Linear,
    bn: BatchNorm,
}

#[test]
fn should_refuse_batch_norm_naming_its_path() {
    let m = Normed {
        fc: LinearConfig::new(3, 2).init(&dev()),
        bn: BatchNormConfig::new(2).init(&dev()),
    };
    let mut dp = sgd(seeded(config(C, SIGMA, 1.0), 1));
    let loss = |m: &Normed, (x, _y): Batch| {
        let h: Tensor<3> = m.bn.forward(m.fc.forward(x).unsqueeze_dim(2));
        h.sum()
    };
    for b in [next(dp.mechanism(), 4), empty(dp.mechanism())] {
        let err = dp.step(0.1, m.clone(), loss, b).map(|_| ()).unwrap_err();
        match &err {
            PrivacyError::Vmap(VmapError::MixesExamples { path, .. }) => assert_eq!(path, "bn"),
            other => panic!("{other}"),
        }
        assert!(err.to_string().contains("GroupNorm"));
    }
    assert_eq!(dp.mechanism().steps(), 0, "a refused step is not accounted");
}

/// A tied parameter's uses clipped apart would bound their joint norm, not the norm of their
/// sum (up to √2·C for two equal uses): the step refuses the model, unaccounted.
#[test]
fn should_refuse_a_tied_parameter_unaccounted() {
    let m = Tied::new(&dev());
    let mut dp = sgd(seeded(config(C, SIGMA, 1.0), 1));
    let loss = |m: &Tied, (x, _y): Batch| m.b.forward(m.a.forward(x)).sum();
    let b = next(dp.mechanism(), 4);
    let err = dp.step(0.1, m, loss, b).map(|_| ()).unwrap_err();
    match &err {
        PrivacyError::Vmap(VmapError::SharedParameter { first, second, .. }) => {
            assert_eq!((first.as_str(), second.as_str()), ("a.weight", "b.weight"));
        }
        other => panic!("{other}"),
    }
    assert_eq!(dp.mechanism().steps(), 0, "a refused step is not accounted");
}

// -------------------------------------------------------------------------------------------
// The eight defects of the mechanism before 0.3 (issue 26), one test each: each fails on the
// mechanism they were found in.
// -------------------------------------------------------------------------------------------

/// Defect 1: one example with a NaN gradient made the released model NaN. It contributes zero
/// now, still counts as sampled, and the step reports it.
#[test]
fn should_keep_the_model_finite_with_a_nan_example() {
    let poisoned = || Arc::new(Patched(|items| items[2].0[1] = f32::NAN));
    let m = model();
    let mut dp = seeded(config(C, 0.0, 1.0), 1);
    let mut data = dp.loader(rows(6), poisoned(), dev()).unwrap();
    let (got, report) = dp
        .noisy_gradient(&m, loss, data.next_batch().unwrap())
        .unwrap();
    assert_eq!((report.sampled, report.non_finite), (6, 1));
    // The same as the clipped sum of the five finite examples.
    let (x, y) = batch(6);
    let keep = Tensor::<1, Int>::from_ints([0, 1, 3, 4, 5], &dev());
    let finite = (x.select(0, keep.clone()), y.select(0, keep));
    let (want, _) = micro_grad_module(loss)
        .transform_fn(|g| clip_by_global_norm(g, C))
        .call(&m, finite)
        .unwrap();
    let want: Vec<f32> = values(&want).iter().map(|v| v / B as f32).collect();
    assert_close(&values(&got), &want, 1e-5);
    // Through the optimizer, with noise: the model stays finite.
    let mut opt = sgd(seeded(config(C, SIGMA, 1.0), 2));
    let mut data = opt.mechanism().loader(rows(6), poisoned(), dev()).unwrap();
    let (m, report) = opt.step(0.1, m, loss, data.next_batch().unwrap()).unwrap();
    assert!(
        values_of(&m).iter().all(|v| v.is_finite()),
        "{:?}",
        values_of(&m)
    );
    assert_eq!(report.non_finite, 1);
}

/// An example whose gradient norm is infinite (not NaN) is non-finite and not clipped: the two
/// counts never both take one example (on wgpu a loss divided by zero gave an infinite norm
/// where Flex gave NaN, and the example was counted twice).
#[test]
fn should_count_an_infinite_norm_as_non_finite_only() {
    // The residual squared overflows: the output gradient is -inf, the input finite and
    // non-zero, so every entry of the gradient is infinite and none NaN.
    let huge = Arc::new(Patched(|items| items[2].1[0] = f32::MAX));
    let m = model();
    let mut dp = seeded(config(1e-6, 0.0, 1.0), 1);
    let mut data = dp.loader(rows(6), huge, dev()).unwrap();
    let sampled = data.next_batch().unwrap();
    // The premise: that example's norm is +inf on this backend.
    let (x, y) = sampled.batch().unwrap().clone();
    let one = (x.narrow(0, 2, 1), y.narrow(0, 2, 1));
    let (g, _) = micro_grad_module(loss).call(&m, one).unwrap();
    let norm = floats(global_norm(&g))[0];
    assert!(norm.is_infinite() && norm > 0.0, "{norm}");
    // C = 1e-6: every finite example is clipped.
    let (_, report) = dp.noisy_gradient(&m, loss, sampled).unwrap();
    assert_eq!(
        (report.sampled, report.non_finite, report.clipped),
        (6, 1, 5)
    );
}

/// Defect 2: the noisy sum was divided by `q · N` with `N` private under add/remove. Now by the
/// public expected batch size, whatever the dataset's size.
#[test]
fn should_not_read_n_under_add_remove() {
    let m = model();
    let grad = |n: usize| {
        let mut dp = seeded(config(C, 0.0, 1.0), 1);
        let (g, _) = dp.noisy_gradient(&m, loss, next(&dp, n)).unwrap();
        values(&g)
    };
    // q = 1: the batch is the whole dataset, and the sum is divided by B = 10, not by q·N.
    let (sum, _) = micro_grad_module(loss)
        .transform_fn(|g| clip_by_global_norm(g, C))
        .call(&m, batch(4))
        .unwrap();
    let want: Vec<f32> = values(&sum).iter().map(|v| v / B as f32).collect();
    assert_close(&grad(4), &want, 1e-6);
    let text = seeded(config(C, SIGMA, Q), 1)
        .statement()
        .unwrap()
        .to_string();
    assert!(text.contains("N is private and never read"), "{text}");
}

/// Defect 3: the generator and the sampler were `Clone` (a noise stream could be replayed),
/// and a seeded run stated the same guarantee as an unseeded one.
#[test]
fn should_neither_clone_generators_nor_call_a_seeded_run_private() {
    struct Probe<T>(std::marker::PhantomData<T>);
    trait NotClone {
        const CLONE: bool = false;
    }
    impl<T> NotClone for Probe<T> {}
    #[allow(dead_code)]
    impl<T: Clone> Probe<T> {
        const CLONE: bool = true;
    }
    const {
        assert!(Probe::<Linear>::CLONE);
    }
    const {
        assert!(!Probe::<PrivacyRng>::CLONE);
    }
    const {
        assert!(!Probe::<PoissonSampler>::CLONE);
    }
    const {
        assert!(!Probe::<DpMechanism>::CLONE);
    }
    const {
        assert!(!Probe::<Sampled<Batch>>::CLONE);
    }
    let seeded = seeded(config(C, SIGMA, Q), 1).statement().unwrap();
    let private = DpMechanism::new(config(C, SIGMA, Q))
        .unwrap()
        .statement()
        .unwrap();
    assert!(!seeded.is_private() && private.is_private());
    assert!(seeded.to_string().starts_with("NOT PRIVATE"), "{seeded}");
    assert!(!private.to_string().contains("NOT PRIVATE"), "{private}");
}

/// Defect 4: the sampling rate was given to the loader and to the configuration, and could
/// disagree. Now the loader samples at the mechanism's rate, and the step takes only the
/// batches this mechanism's loader sampled, once, in order.
#[test]
fn should_sample_at_the_mechanisms_rate_and_take_only_its_batches() {
    let mut dp = seeded(config(C, SIGMA, 0.25), 1);
    let other = seeded(config(C, SIGMA, 0.25), 1);
    let mut data = loader(&dp, 100);
    assert_eq!(data.sampler().sampling_rate(), 0.25);
    let foreign = loader(&other, 100).next_batch().unwrap();
    let err = dp.noisy_gradient(&model(), loss, foreign).unwrap_err();
    assert!(matches!(err, PrivacyError::Batch { .. }), "{err}");
    let first = data.next_batch().unwrap();
    let second = data.next_batch().unwrap();
    let err = dp.noisy_gradient(&model(), loss, second).unwrap_err();
    assert!(err.to_string().contains("sampling order"), "{err}");
    drop(first);
    assert_eq!(dp.steps(), 0);
}

/// Defect 5: an empty step and a non-empty step updated different sets of parameters. Both
/// give every trainable parameter a gradient (noise alone on an empty batch), a parameter the
/// loss does not reach included.
#[test]
fn should_touch_the_same_parameters_on_empty_and_full_steps() {
    #[derive(Module, Debug)]
    struct Two {
        used: Linear,
        unused: Linear,
    }
    let m = Two {
        used: LinearConfig::new(3, 2).init(&dev()),
        unused: LinearConfig::new(4, 4).init(&dev()),
    };
    let loss = |m: &Two, b: Batch| loss(&m.used, b);
    let mut dp = seeded(config(C, SIGMA, 1.0), 1);
    let b = empty(&dp);
    let (on_empty, _) = dp.noisy_gradient(&m, loss, b).unwrap();
    let b = next(&dp, 5);
    let (on_full, _) = dp.noisy_gradient(&m, loss, b).unwrap();
    let ids = |g: &ParamGrads| {
        g.iter()
            .map(|(p, id, _)| (p.to_string(), id))
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&on_empty), ids(&on_full));
    assert_eq!(on_full.len(), 4);
    let unused: Tensor<2> = on_full.get("unused.weight").unwrap();
    assert!(
        floats(unused).iter().any(|v| *v != 0.0),
        "noise on the unused parameter"
    );
}

/// Defect 6: the noise was textbook `f32` Gaussians, open to floating-point attacks (Mironov
/// 2012). By default it is the exact discrete Gaussian on the grid 2⁻²⁰: every released value
/// times the (power-of-two) normaliser lies on the grid.
#[test]
fn should_draw_hardened_noise_on_a_grid_by_default() {
    let public = Neighbouring::AddRemove {
        expected_batch_size: 8.0,
    };
    let config = DpConfig::new(C, SIGMA, 1.0, public);
    assert_eq!(config.noise, NoiseKind::default());
    let mut dp = seeded(config, 3);
    let (g, _) = dp.noisy_gradient(&model(), loss, next(&dp, 5)).unwrap();
    for v in values(&g) {
        let on_grid = v as f64 * 8.0 * 2f64.powi(20);
        assert_eq!(on_grid.fract(), 0.0, "{v}");
    }
    assert!(
        dp.statement()
            .unwrap()
            .to_string()
            .contains("discrete Gaussian")
    );
}

/// Defect 7: the statement omitted what it assumes.
#[test]
fn should_state_what_the_guarantee_assumes() {
    let dp = DpMechanism::new(DpConfig::new(
        C,
        SIGMA,
        Q,
        Neighbouring::ReplaceOne { dataset_size: 200 },
    ))
    .unwrap();
    let text = dp.statement().unwrap().to_string();
    for needle in [
        "Poisson sampling",
        "replace one example",
        "N = 200 is public",
        "seed is secret",
        "peer is trusted",
        "hyper-parameter tuning",
        "δ = 1e-5 against 1/N = 0.005",
    ] {
        assert!(text.contains(needle), "`{needle}` in\n{text}");
    }
    assert!(!text.contains("WARNING"), "{text}");
    let large_delta = DpMechanism::new(
        DpConfig::new(C, SIGMA, Q, Neighbouring::ReplaceOne { dataset_size: 200 }).with_delta(0.01),
    )
    .unwrap();
    assert!(
        large_delta
            .statement()
            .unwrap()
            .to_string()
            .contains("WARNING δ ≥ 1/N")
    );
}

/// Defect 8: nothing could be saved, so a resumed run restarted ε at zero. Save at step k,
/// resume, continue: the same ε as the uninterrupted run, different noise.
#[test]
fn should_resume_with_the_same_epsilon_and_fresh_noise() {
    let m = model();
    let run = |dp: &mut DpMechanism, steps: usize| {
        let mut data = loader(dp, 50);
        let mut last = vec![];
        for _ in 0..steps {
            let b = data.next_batch().unwrap();
            last = values(&dp.noisy_gradient(&m, loss, b).unwrap().0);
        }
        last
    };
    let mut whole = DpMechanism::new(config(C, SIGMA, Q)).unwrap();
    run(&mut whole, 6);
    let mut first = DpMechanism::new(config(C, SIGMA, Q)).unwrap();
    run(&mut first, 4);
    let path = std::env::temp_dir().join(format!("burn-vmap-resume-{}.bpk", std::process::id()));
    first.record().save(&path).unwrap();
    let record = DpRecord::load(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(record, first.record());
    let mut resumed = DpMechanism::from_record(record).unwrap();
    assert_eq!(resumed.steps(), 4);
    run(&mut resumed, 2);
    assert_eq!(resumed.steps(), whole.steps());
    assert_eq!(resumed.epsilon().unwrap(), whole.epsilon().unwrap());
    // A seeded run resumed twice from one record with one seed would replay; two resumes from
    // the operating system never do.
    let bytes = first.record().to_bytes().unwrap();
    let a = run(
        &mut DpMechanism::from_record(DpRecord::from_bytes(&bytes).unwrap()).unwrap(),
        1,
    );
    let b = run(
        &mut DpMechanism::from_record(DpRecord::from_bytes(&bytes).unwrap()).unwrap(),
        1,
    );
    assert_ne!(a, b, "fresh noise on every resume");
    // A seeded run stays "not private" across a resume.
    let seeded_record = seeded(config(C, SIGMA, Q), 3).record();
    assert!(DpMechanism::from_record(seeded_record).unwrap().is_seeded());
}

#[test]
fn should_stop_before_the_step_that_exceeds_the_budget() {
    use burn_vmap::privacy::accounting::{PoissonGaussian, RdpAccountant};
    let (q, sigma, eps) = (0.2, 1.5, 3.0);
    let mut dp = sgd(seeded(config(C, sigma, q), 1)
        .with_budget(eps, 1e-5)
        .unwrap());
    let allowed = dp.mechanism().remaining_steps().unwrap();
    assert!((2..200).contains(&allowed), "{allowed}");
    // Hardened noise: the discrete Gaussian's RDP.
    let epsilon_after = |steps| {
        let mut rdp = RdpAccountant::discrete_gaussian();
        rdp.compose(PoissonGaussian::new(q, sigma).unwrap(), steps)
            .unwrap();
        rdp.epsilon(1e-5).unwrap()
    };
    assert!(epsilon_after(allowed) <= eps && epsilon_after(allowed + 1) > eps);
    let mut data = loader(dp.mechanism(), 20);
    let mut m = model();
    for _ in 0..allowed {
        let b = data.next_batch().unwrap();
        (m, _) = dp.step(0.01, m, loss, b).unwrap();
    }
    let before = values_of(&m);
    let b = data.next_batch().unwrap();
    match dp.step(0.01, m.clone(), loss, b) {
        Err(PrivacyError::Budget {
            steps, max_steps, ..
        }) => {
            assert_eq!((steps, max_steps), (allowed, allowed));
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    assert_eq!(values_of(&m), before);
    assert_eq!(dp.mechanism().steps(), allowed);
    assert!(dp.mechanism().epsilon().unwrap() <= eps);
}

#[test]
fn should_state_a_larger_epsilon_for_replace_one_than_add_remove() {
    let steps = |relation| {
        let mut dp = seeded(DpConfig::new(C, SIGMA, Q, relation), 1);
        let mut data = dp.loader(rows(20), Arc::new(Rows), dev()).unwrap();
        for _ in 0..3 {
            let b = data.next_batch().unwrap();
            dp.noisy_gradient(&model(), loss, b).unwrap();
        }
        dp.epsilon().unwrap()
    };
    let add_remove = steps(Neighbouring::AddRemove {
        expected_batch_size: 1.0,
    });
    let replace = steps(Neighbouring::ReplaceOne { dataset_size: 20 });
    // Group privacy: 2ε' at a smaller δ', at least twice the add/remove ε.
    assert!(replace >= 2.0 * add_remove, "{replace} vs {add_remove}");
    assert!(replace < 4.0 * add_remove, "{replace} vs {add_remove}");
}

// -------------------------------------------------------------------------------------------
// Issue 43 (no silent wrong answer): one test per defect of the mechanism, each failing on the
// mechanism it was found in.
// -------------------------------------------------------------------------------------------

/// Two rows per example (an augmentation: the example and its mirror image).
#[derive(Clone)]
struct Augmented;
impl Batcher<Item, Batch> for Augmented {
    fn batch(&self, items: Vec<Item>, device: &Device) -> Batch {
        let mirrored = items
            .iter()
            .map(|(x, y)| (x.iter().rev().copied().collect(), y.clone()));
        let doubled = items.iter().cloned().chain(mirrored).collect();
        Rows.batch(doubled, device)
    }
}

/// The same two rows per example, stacked on a second axis: `[B, 2, ..]`.
#[derive(Clone)]
struct Stacked;
impl Batcher<Item, (Tensor<3>, Tensor<3>)> for Stacked {
    fn batch(&self, items: Vec<Item>, device: &Device) -> (Tensor<3>, Tensor<3>) {
        let n = items.len();
        let (x, y) = Augmented.batch(items, device);
        let stack = |t: Tensor<2>| {
            let d = t.dims()[1];
            // Rows 0..n are the examples, n..2n their mirror images: [2, n, d] -> [n, 2, d].
            t.reshape([2, n, d]).swap_dims(0, 1)
        };
        (stack(x), stack(y))
    }
}

/// Defect 2: a batcher that emits two rows per example had each row clipped to C, a released
/// sum of sensitivity 2C accounted as C. The step refuses such a batch (and says how to stack
/// the rows); stacked on a second axis, an example's rows are one clipped contribution.
#[test]
fn should_refuse_several_rows_per_example_and_clip_stacked_rows_together() {
    let mut dp = seeded(config(C, 0.0, 1.0), 1);
    let batch = dp
        .loader(rows(4), Arc::new(Augmented), dev())
        .unwrap()
        .next_batch()
        .unwrap();
    let err = dp.noisy_gradient(&model(), loss, batch).unwrap_err();
    match &err {
        PrivacyError::Batch { expected, got } => {
            assert!(expected.contains("4 examples were sampled"), "{err}");
            assert!(expected.contains("[4, k, ..]"), "{err}");
            assert!(got.contains("8 rows"), "{err}");
        }
        other => panic!("{other}"),
    }
    // Stacked: the loss of one example sums over its two rows, whose gradients are clipped
    // together, once per example (σ = 0: the released value is the clipped sum over B).
    let m = model();
    let mut dp = seeded(config(C, 0.0, 1.0), 1);
    let batch = dp
        .loader(rows(4), Arc::new(Stacked), dev())
        .unwrap()
        .next_batch()
        .unwrap();
    let stacked_loss = |m: &Linear, (x, y): (Tensor<3>, Tensor<3>)| {
        let [_, k, d] = x.dims();
        let out = m.forward(x.reshape([k, d]));
        (out - y.reshape([k, 2])).powi_scalar(2).sum()
    };
    let (released, report) = dp.noisy_gradient(&m, stacked_loss, batch).unwrap();
    assert_eq!(report.sampled, 4);
    // By hand: per example, the sum of its two rows' gradients, clipped to C; summed; over B.
    let (x, y) = Augmented.batch((0..4).map(|i| rows(4).get(i).unwrap()).collect(), &dev());
    let per_example = (0..4).map(|i| {
        let pick = Tensor::<1, Int>::from_ints([i as i64, i as i64 + 4], &dev());
        let trained = m.clone().train();
        let l = loss(
            &trained,
            (x.clone().select(0, pick.clone()), y.clone().select(0, pick)),
        );
        let g = GradientsParams::from_grads(l.backward(), &trained);
        let mut v = floats(g.get::<2>(trained.weight.id).unwrap());
        v.extend(floats(
            g.get::<1>(trained.bias.as_ref().unwrap().id).unwrap(),
        ));
        let norm = v.iter().map(|a| a * a).sum::<f32>().sqrt();
        let scale = (C as f32 / norm).min(1.0);
        v.into_iter().map(|a| a * scale).collect::<Vec<_>>()
    });
    let expected = per_example.fold(vec![0.0; 8], |acc: Vec<f32>, v| {
        acc.iter().zip(&v).map(|(a, b)| a + b).collect()
    });
    let expected: Vec<f32> = expected.iter().map(|v| v / B as f32).collect();
    assert_close(&values(&released), &expected, 1e-5);
}

/// Defect 4: a step that failed after reading its batch was not accounted, although its error
/// depends on the data and the caller sees it. Refusals of the model alone (BatchNorm) stay
/// unaccounted (`should_refuse_batch_norm_naming_its_path`).
#[test]
fn should_account_a_step_that_fails_after_reading_its_batch() {
    let mut dp = seeded(config(C, SIGMA, 1.0), 1);
    let mut accountant = seeded(config(C, SIGMA, 1.0), 1);
    for _ in 0..2 {
        let b = mismatched(&dp);
        assert!(dp.noisy_gradient(&model(), loss, b).is_err());
        let b = next(&accountant, 4);
        accountant.noisy_gradient(&model(), loss, b).unwrap();
    }
    assert_eq!(dp.steps(), 2);
    assert_eq!(dp.epsilon().unwrap(), accountant.epsilon().unwrap());
}

/// `bytes` (a record's burnpack scalars) with `key` set to `value`, read back as a record.
fn patched(bytes: Vec<u8>, key: &str, value: burn_pack::Scalar) -> Result<DpRecord, PrivacyError> {
    let reader = burn_pack::Reader::from_bytes(burn_pack::Bytes::from_bytes_vec(bytes)).unwrap();
    let mut scalars: Vec<(String, burn_pack::Scalar)> = reader
        .scalars()
        .iter()
        .filter(|(k, _)| k.as_str() != key)
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    scalars.push((key.into(), value));
    let writer = scalars
        .into_iter()
        .fold(burn_pack::Writer::new(Vec::new()), |w, (k, v)| {
            w.with_scalar(&k, v)
        });
    DpRecord::from_bytes(&writer.into_bytes().unwrap())
}

/// Defect 5: `DpRecord`'s fields were public, so `record.seeded = false` relabelled a seeded run
/// as private and `record.steps = 0` restarted ε on resume (the `compile_fail` example in
/// `DpRecord`'s docs). A record read from bytes is checked as a configuration is.
#[test]
fn should_refuse_a_record_whose_settings_are_out_of_their_domain() {
    let dp = seeded(config(C, SIGMA, Q), 1)
        .with_budget(5.0, 1e-5)
        .unwrap();
    let bytes = dp.record().to_bytes().unwrap();
    let record = DpRecord::from_bytes(&bytes).unwrap();
    assert_eq!(
        (record.steps(), record.is_seeded(), record.budget()),
        (0, true, Some((5.0, 1e-5)))
    );
    assert_eq!(record.config(), dp.config());
    use burn_pack::Scalar::Float;
    for (key, value, argument) in [
        ("dp.clip_norm", Float(-1.0), "clip_norm"),
        ("dp.noise_multiplier", Float(f64::NAN), "noise_multiplier"),
        ("dp.sampling_rate", Float(1.5), "sampling_rate"),
        ("dp.budget.epsilon", Float(0.0), "epsilon"),
        ("dp.budget.delta", Float(1.0), "delta"),
    ] {
        match patched(bytes.clone(), key, value) {
            Err(PrivacyError::Argument { argument: a, .. }) => assert_eq!(a, argument, "{key}"),
            other => panic!("{key}: {:?}", other.map(|_| ())),
        }
    }
}

/// Defect 7: the README said that with `clip_and_flag` as a `transform_fn` a non-finite example
/// contributes zero; the sum is NaN (no scaling zeroes a NaN) and the flags count the example,
/// as its documentation now says; the mechanism's step zeroes it
/// (`should_keep_the_model_finite_with_a_nan_example`).
#[test]
fn should_flag_a_nan_example_without_zeroing_it_in_clip_and_flag() {
    let (x, y) = batch(4);
    let x = x.slice_assign([1..2, 0..1], Tensor::from_floats([[f32::NAN]], &dev()));
    let clipped = micro_grad_module(|m: &Linear, (x, y): Batch| loss(m, (x, y)))
        .transform_fn(|g: ParamGrads| burn_vmap::privacy::clip_and_flag(g, C));
    let ((sum, flags), _) = clipped.call(&model(), (x, y)).unwrap();
    assert!(
        values(&sum).iter().all(|v| v.is_nan()),
        "a NaN example makes the sum NaN"
    );
    assert_eq!(floats(flags)[0], 1.0, "and is counted as non-finite");
}

/// Defect 3: the clipped sum was accumulated in f32, whose rounding grows with the batch (an
/// example's contribution can vanish: `0.5 + 1e-9` is `0.5` in f32). It is accumulated in the
/// widest float (f64 on Flex): the released value is the f32 rounding of the f64 sum, where a
/// plain f32 sum loses the small examples.
#[test]
fn should_accumulate_the_clipped_sum_in_f64() {
    use burn_vmap::accumulate::Sum;
    const N: usize = 2001;
    // Linear 1 -> 1, loss W·x + b: the weight's gradient is x, the bias's 1; norms below C = 2,
    // so no example is scaled (the factor is exactly 1).
    let items: Vec<Item> = (0..N)
        .map(|i| (vec![if i == 0 { 0.5 } else { 1e-9 }], vec![0.0]))
        .collect();
    #[derive(Clone)]
    struct One;
    impl Batcher<Item, Tensor<2>> for One {
        fn batch(&self, items: Vec<Item>, device: &Device) -> Tensor<2> {
            let x: Vec<f32> = items.iter().map(|(x, _)| x[0]).collect();
            Tensor::from_data(TensorData::new(x, [items.len(), 1]), device)
        }
    }
    let model: Linear = LinearConfig::new(1, 1).init(&dev());
    let loss = |m: &Linear, x: Tensor<2>| m.forward(x).sum();
    let public = Neighbouring::AddRemove {
        expected_batch_size: 1.0,
    };
    // σ = 0, plain noise (no grid): the release is the sum itself, cast to the model's f32.
    let config = DpConfig::new(2.0, 0.0, 1.0, public).with_noise(NoiseKind::Plain);
    let mut dp = DpMechanism::seeded(config, 1).unwrap();
    let batch = dp
        .loader(
            Arc::new(InMemDataset::new(items.clone())),
            Arc::new(One),
            dev(),
        )
        .unwrap()
        .next_batch()
        .unwrap();
    let (released, _) = dp.noisy_gradient(&model, loss, batch).unwrap();
    let w = floats(released.get::<2>("weight").unwrap())[0];
    let exact: f64 = items.iter().map(|(x, _)| f64::from(x[0])).sum();
    if dev().supports_dtype(burn::tensor::DType::F64) {
        assert_eq!(w, exact as f32, "the f32 rounding of the f64 sum");
    }
    // A plain f32 sum of the same per-example gradients loses the small examples.
    let (plain, _) = micro_grad_module(move |m: &Linear, (x,): (Tensor<2>,)| loss(m, x))
        .accumulator(Sum)
        .call(&model, (One.batch(items, &dev()),))
        .unwrap();
    let narrow = floats(plain.get::<2>("weight").unwrap())[0];
    assert_ne!(narrow, exact as f32, "the f32 sum rounds the examples away");
}

/// Defect 9: the hardened noise (the discrete Gaussian) was accounted by the continuous
/// Gaussian's privacy loss distribution, which is not proven for it. Its ε is the Rényi DP of
/// the Poisson-subsampled discrete Gaussian (Zhu & Wang's general bound), at least the
/// continuous Gaussian's; plain noise keeps the continuous Gaussian's PLD.
#[test]
fn should_account_hardened_noise_as_the_subsampled_discrete_gaussian() {
    use burn_vmap::privacy::accounting::{PldAccountant, PoissonGaussian, RdpAccountant};
    const STEPS: u64 = 5;
    let run = |noise: NoiseKind| {
        let mut dp = seeded(config(C, SIGMA, Q).with_noise(noise), 1);
        let mut data = loader(&dp, 40);
        for _ in 0..STEPS {
            let b = data.next_batch().unwrap();
            dp.noisy_gradient(&model(), loss, b).unwrap();
        }
        dp
    };
    let event = PoissonGaussian::new(Q, SIGMA).unwrap();
    let delta = config(C, SIGMA, Q).delta;
    let mut discrete = RdpAccountant::discrete_gaussian();
    discrete.compose(event, STEPS).unwrap();
    let mut pld = PldAccountant::new();
    pld.compose(event, STEPS).unwrap();

    let hardened = run(NoiseKind::default());
    assert_eq!(
        hardened.epsilon().unwrap(),
        discrete.epsilon(delta).unwrap()
    );
    assert_eq!(hardened.epsilon_rdp().unwrap(), hardened.epsilon().unwrap());
    assert!(hardened.epsilon().unwrap() > pld.epsilon(delta).unwrap());
    let statement = hardened.statement().unwrap().to_string();
    assert!(statement.contains("Zhu & Wang"), "{statement}");
    assert!(statement.contains("discrete Gaussian"), "{statement}");

    let plain = run(NoiseKind::Plain);
    assert_eq!(plain.epsilon().unwrap(), pld.epsilon(delta).unwrap());
    assert!(plain.epsilon().unwrap() < plain.epsilon_rdp().unwrap());
}

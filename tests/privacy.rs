//! The DP-SGD optimizer: one step equals clip + sum + noise + divide by hand, the noise has the
//! calibrated standard deviation and comes from the operating system unless seeded, empty
//! batches take noise-only steps, ragged microbatches give the same sum, per-layer clipping,
//! one recording across Poisson steps, BatchNorm is refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use burn::module::Module;
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig};
use burn::optim::{GradientsParams, SgdConfig};
use burn::tensor::{Device, Tensor, TensorData};
use burn_vmap::privacy::{
    DpSgd, DpSgdConfig, PoissonSampler, PrivacyError, PrivacyRng, add_gaussian_noise,
    clip_per_layer,
};
use burn_vmap::{ParamGrads, VmapError, clip_by_global_norm, global_norm, micro_grad_module};

type Batch = (Tensor<2>, Tensor<2>);

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

fn sgd(config: DpSgdConfig, seed: u64) -> DpSgd {
    DpSgd::with_rng(SgdConfig::new().init(), config, PrivacyRng::seeded(seed)).unwrap()
}

const C: f64 = 1.0;
const SIGMA: f64 = 1.3;
const Q: f64 = 0.05;
const N: usize = 200;

#[test]
fn should_equal_clip_sum_noise_divide_by_hand() {
    let m = model();
    let mut dp = sgd(DpSgdConfig::new(C, SIGMA, Q, N), 5);
    let ours = dp.noisy_gradient(&m, loss, Some(batch(7))).unwrap();

    let (sum, _) = micro_grad_module(loss)
        .transform_fn(|g| clip_by_global_norm(g, C))
        .call(&m, batch(7))
        .unwrap();
    let noisy = add_gaussian_noise(sum, SIGMA * C, &mut PrivacyRng::seeded(5)).unwrap();
    let by_hand: Vec<f32> = values(&noisy)
        .iter()
        .map(|v| v / (Q * N as f64) as f32)
        .collect();
    assert_close(&values(&ours), &by_hand, 1e-5);
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
            let config = DpSgdConfig::new(c, 0.0, Q, N).with_per_layer_clipping(per_layer);
            // A model in training mode (autodiff parameters) gives the same gradient.
            let ours = sgd(config, 1)
                .noisy_gradient(&m, loss, Some(batch(9)))
                .unwrap();
            let want: Vec<f32> = clipped_sum_by_hand(&plain_of(&m), batch(9), c as f32, per_layer)
                .iter()
                .map(|v| v / (Q * N as f64) as f32)
                .collect();
            assert_close(&values(&ours), &want, 1e-5);
        }
    }
}

#[test]
fn should_step_the_optimizer_with_the_noisy_gradient() {
    let m = model().train(); // as a Burn training loop holds it
    let before = values_of(&m);
    let grads = sgd(DpSgdConfig::new(C, SIGMA, Q, N), 9)
        .noisy_gradient(&m, loss, Some(batch(5)))
        .unwrap();
    let after = sgd(DpSgdConfig::new(C, SIGMA, Q, N), 9)
        .step(0.1, m, loss, Some(batch(5)))
        .unwrap();
    let want: Vec<f32> = before
        .iter()
        .zip(values(&grads))
        .map(|(p, g)| p - 0.1 * g)
        .collect();
    assert_close(&values_of(&after), &want, 1e-5);
}

/// The model's parameters off autodiff.
fn plain_of(m: &Linear) -> Linear {
    m.valid()
}

fn values_of(m: &Linear) -> Vec<f32> {
    let mut v = floats(m.weight.val());
    v.extend(floats(m.bias.as_ref().unwrap().val()));
    v
}

#[test]
fn should_give_the_same_sum_with_a_ragged_last_microbatch() {
    let m = model();
    let config = |mb: Option<usize>| DpSgdConfig::new(C, 0.0, Q, N).with_microbatch_size(mb);
    let whole = sgd(config(None), 1)
        .noisy_gradient(&m, loss, Some(batch(7)))
        .unwrap();
    for mb in [1, 2, 3, 4, 7, 9] {
        let ragged = sgd(config(Some(mb)), 1)
            .noisy_gradient(&m, loss, Some(batch(7)))
            .unwrap();
        assert_close(&values(&ragged), &values(&whole), 1e-5);
    }
}

#[test]
fn should_record_the_loss_once_across_poisson_batches() {
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let counted = |m: &Linear, b: Batch| {
        CALLS.fetch_add(1, Ordering::Relaxed);
        loss(m, b)
    };
    let mut dp = sgd(DpSgdConfig::new(C, SIGMA, Q, N).with_microbatch_size(3), 4);
    let mut sampler = PoissonSampler::with_rng(N, Q, PrivacyRng::seeded(8)).unwrap();
    let mut m = model();
    let mut sizes = Vec::new();
    for _ in 0..8 {
        let size = sampler.sample().len();
        sizes.push(size);
        m = dp
            .step(0.05, m, counted, (size > 0).then(|| batch(size)))
            .unwrap();
    }
    assert!(sizes.windows(2).any(|w| w[0] != w[1]), "{sizes:?}");
    assert_eq!(CALLS.load(Ordering::Relaxed), 1, "batch sizes {sizes:?}");
    assert_eq!(dp.steps(), 8);
}

#[test]
fn should_take_any_tree_as_the_batch() {
    // A bare tensor: the loss sees one example as [1, 3].
    let m = model();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let shapes = seen.clone();
    let loss = move |m: &Linear, x: Tensor<2>| {
        shapes.lock().unwrap().push(x.dims());
        m.forward(x).sum()
    };
    let g = sgd(DpSgdConfig::new(C, 0.0, 1.0, 4), 1)
        .noisy_gradient(&m, loss, Some(batch(4).0))
        .unwrap();
    assert_eq!(seen.lock().unwrap().as_slice(), &[[1, 3]]);
    // d(sum(x W + b))/db = 1 per output and example, clipped to C = 1 with the weight's share.
    assert_eq!(g.get::<1>("bias").unwrap().dims(), [2]);
}

#[test]
fn should_draw_noise_with_the_calibrated_std() {
    // An empty batch: the noisy gradient is the noise alone, divided by q·N.
    let m: Linear = LinearConfig::new(40, 50).init(&dev());
    let mut dp = sgd(DpSgdConfig::new(C, SIGMA, Q, N), 11);
    let g = dp
        .noisy_gradient(&m, |m: &Linear, x: Tensor<2>| m.forward(x).sum(), None)
        .unwrap();
    let v: Vec<f64> = floats(g.get::<2>("weight").unwrap())
        .iter()
        .map(|x| *x as f64 * Q * N as f64)
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
fn should_take_noise_only_steps_on_empty_batches() {
    let m = model();
    let before = values_of(&m);
    let mut dp = DpSgd::new(SgdConfig::new().init(), DpSgdConfig::new(C, SIGMA, Q, N)).unwrap();
    let m = dp.step(0.1, m, loss, None::<Batch>).unwrap();
    let after = values_of(&m);
    assert!(
        before.iter().zip(&after).all(|(a, b)| a != b),
        "every parameter moves"
    );
    assert!(dp.epsilon().unwrap() > 0.0);
}

#[test]
fn should_leave_frozen_parameters_alone() {
    let m = model();
    let m = Linear {
        bias: m.bias.map(|b| b.set_require_grad(false)),
        ..m
    };
    let mut dp = sgd(DpSgdConfig::new(C, SIGMA, Q, N), 3);
    let g = dp.noisy_gradient(&m, loss, None::<Batch>).unwrap();
    assert_eq!(g.paths().collect::<Vec<_>>(), vec!["weight"]);
    let g = dp.noisy_gradient(&m, loss, Some(batch(3))).unwrap();
    assert_eq!(g.paths().collect::<Vec<_>>(), vec!["weight"]);
    // A step moves the weight alone, and the bias stays frozen for the next one.
    let bias = floats(m.bias.as_ref().unwrap().val());
    let weight = floats(m.weight.val());
    let m = dp.step(0.1, m, loss, Some(batch(3))).unwrap();
    let m = dp.step(0.1, m, loss, Some(batch(3))).unwrap();
    assert_eq!(floats(m.bias.as_ref().unwrap().val()), bias);
    assert_ne!(floats(m.weight.val()), weight);
}

#[test]
fn should_draw_different_noise_without_a_seed() {
    let m = model();
    let noise = || {
        let mut dp = DpSgd::new(SgdConfig::new().init(), DpSgdConfig::new(C, SIGMA, Q, N)).unwrap();
        values(&dp.noisy_gradient(&m, loss, None::<Batch>).unwrap())
    };
    assert_ne!(noise(), noise());
}

#[test]
fn should_account_every_step_and_agree_with_the_accountant() {
    use burn_vmap::privacy::accounting::{PoissonGaussian, RdpAccountant};
    let mut dp = sgd(DpSgdConfig::new(C, SIGMA, Q, N).with_delta(1e-5), 2);
    let mut m = model();
    for i in 0..5 {
        let b = (i % 2 == 0).then(|| batch(3));
        m = dp.step(0.05, m, loss, b).unwrap();
    }
    let mut rdp = RdpAccountant::new();
    rdp.compose(PoissonGaussian::new(Q, SIGMA).unwrap(), 5)
        .unwrap();
    assert_eq!(dp.steps(), 5);
    assert!((dp.epsilon().unwrap() - rdp.epsilon(1e-5).unwrap()).abs() < 1e-12);
    assert!(dp.epsilon_pld().unwrap() <= dp.epsilon().unwrap() + 1e-9);
    let text = dp.statement().unwrap().to_string();
    assert!(text.contains("Poisson"), "{text}");
    let text = dp.statement_rdp().unwrap().to_string();
    assert!(text.contains("Poisson"), "{text}");
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
    let err = |c: DpSgdConfig| match DpSgd::new(SgdConfig::new().init(), c) {
        Err(PrivacyError::Argument { argument, .. }) => argument,
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("accepted"),
    };
    assert_eq!(err(DpSgdConfig::new(0.0, SIGMA, Q, N)), "clip_norm");
    assert_eq!(err(DpSgdConfig::new(f64::NAN, SIGMA, Q, N)), "clip_norm");
    assert_eq!(err(DpSgdConfig::new(C, -1.0, Q, N)), "noise_multiplier");
    assert_eq!(err(DpSgdConfig::new(C, SIGMA, 1.5, N)), "sampling_rate");
    assert_eq!(err(DpSgdConfig::new(C, SIGMA, 0.0, N)), "sampling_rate");
    assert_eq!(err(DpSgdConfig::new(C, SIGMA, Q, 0)), "dataset_size");
    assert_eq!(
        err(DpSgdConfig::new(C, SIGMA, Q, N).with_delta(1.0)),
        "delta"
    );
    assert_eq!(
        err(DpSgdConfig::new(C, SIGMA, Q, N).with_microbatch_size(0)),
        "microbatch_size"
    );
}

#[test]
fn should_refuse_mismatched_batches_unaccounted() {
    let mut dp = sgd(DpSgdConfig::new(C, SIGMA, Q, N), 1);
    let (x, _) = batch(4);
    let (_, y) = batch(5);
    let err = dp.noisy_gradient(&model(), loss, Some((x, y))).unwrap_err();
    assert!(matches!(err, PrivacyError::Vmap(_)), "{err}");
    assert_eq!(dp.steps(), 0);
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
    let mut dp = DpSgd::new(SgdConfig::new().init(), DpSgdConfig::new(C, SIGMA, Q, N)).unwrap();
    let loss = |m: &Normed, (x, _y): Batch| {
        let h: Tensor<3> = m.bn.forward(m.fc.forward(x).unsqueeze_dim(2));
        h.sum()
    };
    for b in [Some(batch(4)), None] {
        let err = dp.step(0.1, m.clone(), loss, b).map(|_| ()).unwrap_err();
        match &err {
            PrivacyError::Vmap(VmapError::MixesExamples { path, .. }) => assert_eq!(path, "bn"),
            other => panic!("{other}"),
        }
        assert!(err.to_string().contains("GroupNorm"));
    }
    assert_eq!(dp.steps(), 0, "a refused step is not accounted");
}

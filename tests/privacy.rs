//! The DP-SGD optimizer: one step equals clip + sum + noise + divide by hand, the noise has the
//! calibrated standard deviation and comes from the operating system unless seeded, empty
//! batches take noise-only steps, ragged microbatches give the same sum, BatchNorm is refused.

use burn::backend::Autodiff;
use burn::module::Module;
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig};
use burn::optim::SgdConfig;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use burn_vmap::privacy::{DpSgd, DpSgdConfig, PrivacyError, PrivacyRng, add_gaussian_noise};
use burn_vmap::testing::TestBackend;
use burn_vmap::transform::grad::init_params;
use burn_vmap::{ParamGrads, Vmap, VmapError, clip_by_global_norm, micro_grad_module};

type I = Vmap<TestBackend>;
type AD = Autodiff<I>;
type Batch = (Tensor<AD, 2>, Tensor<AD, 2>);

fn dev() -> burn::tensor::Device<TestBackend> {
    Default::default()
}

fn model() -> Linear<AD> {
    let m = LinearConfig::new(3, 2).init(&dev());
    init_params(&m);
    m
}

fn loss(m: &Linear<AD>, (x, y): Batch) -> Tensor<AD, 1> {
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

fn values(g: &ParamGrads<I>) -> Vec<f32> {
    let w: Tensor<I, 2> = g.get("weight").unwrap();
    let b: Tensor<I, 1> = g.get("bias").unwrap();
    let mut v = w.into_data().to_vec::<f32>().unwrap();
    v.extend(b.into_data().to_vec::<f32>().unwrap());
    v
}

fn assert_close(a: &[f32], b: &[f32], tol: f32) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{a:?} vs {b:?}");
    }
}

const C: f64 = 1.0;
const SIGMA: f64 = 1.3;
const Q: f64 = 0.05;
const N: usize = 200;

#[test]
fn should_equal_clip_sum_noise_divide_by_hand() {
    let m = model();
    let config = DpSgdConfig::new(C, SIGMA, Q, N);
    let mut dp = DpSgd::with_rng(
        SgdConfig::new().init::<AD, Linear<AD>>(),
        config,
        PrivacyRng::seeded(5),
    )
    .unwrap();
    let ours = dp.noisy_gradient(&m, loss, Some(batch(7))).unwrap();

    let (sum, _) = micro_grad_module(loss)
        .transform_fn(|g| clip_by_global_norm(g, C))
        .call(&m, batch(7))
        .unwrap();
    let noisy = add_gaussian_noise(sum, SIGMA * C, &mut PrivacyRng::seeded(5)).unwrap();
    let by_hand = noisy.map_flat(|t| t / (Q * N as f64));
    assert_close(&values(&ours), &values(&by_hand), 1e-5);
    assert_eq!(dp.steps(), 1);
}

#[test]
fn should_give_the_same_sum_with_a_ragged_last_microbatch() {
    let m = model();
    let config = |mb: Option<usize>| DpSgdConfig::new(C, 0.0, Q, N).with_microbatch_size(mb);
    let whole = DpSgd::with_rng(
        SgdConfig::new().init::<AD, Linear<AD>>(),
        config(None),
        PrivacyRng::seeded(1),
    )
    .unwrap()
    .noisy_gradient(&m, loss, Some(batch(7)))
    .unwrap();
    for mb in [1, 2, 3, 4, 7, 9] {
        let ragged = DpSgd::with_rng(
            SgdConfig::new().init::<AD, Linear<AD>>(),
            config(Some(mb)),
            PrivacyRng::seeded(1),
        )
        .unwrap()
        .noisy_gradient(&m, loss, Some(batch(7)))
        .unwrap();
        assert_close(&values(&ragged), &values(&whole), 1e-5);
    }
}

#[test]
fn should_draw_noise_with_the_calibrated_std() {
    // An empty batch: the noisy gradient is the noise alone, divided by q·N.
    let m = LinearConfig::new(40, 50).init::<AD>(&dev());
    init_params(&m);
    let mut dp = DpSgd::with_rng(
        SgdConfig::new().init::<AD, Linear<AD>>(),
        DpSgdConfig::new(C, SIGMA, Q, N),
        PrivacyRng::seeded(11),
    )
    .unwrap();
    let g = dp
        .noisy_gradient(
            &m,
            |m: &Linear<AD>, x: Tensor<AD, 2>| m.forward(x).sum(),
            None,
        )
        .unwrap();
    let w: Tensor<I, 2> = g.get("weight").unwrap();
    let v: Vec<f64> = w
        .into_data()
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|x| *x as f64 * Q * N as f64)
        .collect();
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let std = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    // 2000 draws: the sample std is within 5% of σC with overwhelming probability.
    assert!((std - SIGMA * C).abs() < 0.05 * SIGMA * C, "std {std}");
    assert!(mean.abs() < 4.0 * SIGMA * C / n.sqrt(), "mean {mean}");
    assert_eq!(dp.steps(), 1, "an empty batch is a step of the mechanism");
}

#[test]
fn should_take_noise_only_steps_on_empty_batches() {
    let m = model();
    let before = m.weight.val().into_data();
    let mut dp = DpSgd::new(
        SgdConfig::new().init::<AD, Linear<AD>>(),
        DpSgdConfig::new(C, SIGMA, Q, N),
    )
    .unwrap();
    let m = dp.step(0.1, m, loss, None::<Batch>).unwrap();
    assert_ne!(m.weight.val().into_data(), before);
    assert!(dp.epsilon().unwrap() > 0.0);
}

#[test]
fn should_draw_different_noise_without_a_seed() {
    let m = model();
    let noise = || {
        let mut dp = DpSgd::new(
            SgdConfig::new().init::<AD, Linear<AD>>(),
            DpSgdConfig::new(C, SIGMA, Q, N),
        )
        .unwrap();
        values(&dp.noisy_gradient(&m, loss, None::<Batch>).unwrap())
    };
    assert_ne!(noise(), noise());
}

#[test]
fn should_account_every_step_and_agree_with_the_accountant() {
    use burn_vmap::privacy::accounting::{PoissonGaussian, RdpAccountant};
    let mut dp = DpSgd::with_rng(
        SgdConfig::new().init::<AD, Linear<AD>>(),
        DpSgdConfig::new(C, SIGMA, Q, N).with_delta(1e-5),
        PrivacyRng::seeded(2),
    )
    .unwrap();
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
}

#[test]
fn should_refuse_bad_settings_naming_them() {
    let err = |c: DpSgdConfig| match DpSgd::new(SgdConfig::new().init::<AD, Linear<AD>>(), c) {
        Err(PrivacyError::Argument { argument, .. }) => argument,
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("accepted"),
    };
    assert_eq!(err(DpSgdConfig::new(0.0, SIGMA, Q, N)), "clip_norm");
    assert_eq!(err(DpSgdConfig::new(C, -1.0, Q, N)), "noise_multiplier");
    assert_eq!(err(DpSgdConfig::new(C, SIGMA, 1.5, N)), "sampling_rate");
    assert_eq!(err(DpSgdConfig::new(C, SIGMA, Q, 0)), "dataset_size");
    assert_eq!(
        err(DpSgdConfig::new(C, SIGMA, Q, N).with_delta(1.0)),
        "delta"
    );
}

#[derive(Module, Debug)]
struct Normed<B: Backend> {
    fc: Linear<B>,
    bn: BatchNorm<B>,
}

#[test]
fn should_refuse_batch_norm_naming_its_path() {
    let m = Normed::<AD> {
        fc: LinearConfig::new(3, 2).init(&dev()),
        bn: BatchNormConfig::new(2).init(&dev()),
    };
    let mut dp = DpSgd::new(
        SgdConfig::new().init::<AD, Normed<AD>>(),
        DpSgdConfig::new(C, SIGMA, Q, N),
    )
    .unwrap();
    let loss = |m: &Normed<AD>, (x, _y): Batch| {
        let h: Tensor<AD, 3> = m.bn.forward(m.fc.forward(x).unsqueeze_dim(2));
        h.sum()
    };
    let err = dp
        .step(0.1, m, loss, Some(batch(4)))
        .map(|_| ())
        .unwrap_err();
    match &err {
        PrivacyError::Vmap(VmapError::MixesExamples { path, .. }) => assert_eq!(path, "bn"),
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("GroupNorm"));
    assert_eq!(dp.steps(), 0, "a refused step is not accounted");
}

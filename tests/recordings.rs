//! A kept recording never goes stale: a kept `micro_grad_module` builder, and a DP mechanism
//! across steps, give after a change of a field that is not a parameter (a temperature, a
//! dropout probability, a `#[module(skip)]` value, an `Ignored<T>`) exactly what a fresh
//! builder or a fresh mechanism gives, for the four burn-nn model families (an MLP, a CNN, a
//! TransformerEncoder with an Embedding, an Lstm), and after a change of the values of a tensor
//! that is not a float parameter (a tensor field, an integer parameter, burn-nn's
//! `RotaryEncoding` rebuilt with another `theta`, a tensor in a `Vec` or an `Option` field).
//! Each case also checks that the change matters (the gradient before it differs), so no case
//! passes by comparing equal things. A tensor that does not move with its module (a
//! `#[module(skip)]` or `Ignored<T>` field) is refused by every transform.

#![allow(deprecated)] // `Ignored<T>`, still what models written for Burn 0.20 hold.

use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::InMemDataset;
use burn::module::{Ignored, Module, Param, ParamId};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{
    Dropout, DropoutConfig, Embedding, EmbeddingConfig, Linear, LinearConfig, Lstm, LstmConfig,
    RotaryEncoding, RotaryEncodingConfig,
};
use burn::tensor::activation::{log_softmax, relu, softmax};
use burn::tensor::{Device, Distribution, Int, Tensor};
use burn_vmap::Tree;
use burn_vmap::privacy::{DpConfig, DpMechanism, Neighbouring};
use burn_vmap::{ParamGrads, VmapError, clip_by_global_norm, micro_grad_module, per_example_grads};

fn dev() -> Device {
    Device::default()
}

/// Mean cross-entropy of logits `[1, K]` against the class `[1, 1]`.
fn cross_entropy(logits: Tensor<2>, y: Tensor<2, Int>) -> Tensor<1> {
    log_softmax(logits, 1).gather(1, y).mean().neg()
}

/// Every gradient's values, in the tree's order.
fn values(g: &ParamGrads) -> Vec<Vec<f32>> {
    g.iter()
        .map(|(_, _, t)| t.to_data().convert::<f32>().try_to_vec::<f32>().unwrap())
        .collect()
}

/// The clipped sum of `loss`'s per-example gradients by a kept builder, called on `before` and
/// then on `after` (the same parameters, another non-parameter field), equals a fresh
/// builder's on `after` bit for bit; and differs from the sum on `before` (the field matters).
fn check_kept_builder<M, A>(before: &M, after: &M, batch: A, loss: fn(&M, A) -> Tensor<1>)
where
    M: Module + burn::module::ModuleDisplay,
    A: Tree + Clone,
{
    let clipped = || {
        micro_grad_module(move |m: &M, (a,): (A,)| loss(m, a))
            .transform_fn(|g: ParamGrads| clip_by_global_norm(g, 1.0))
    };
    let kept = clipped();
    let (first, _) = kept.call(before, (batch.clone(),)).unwrap();
    let (kept_after, _) = kept.call(after, (batch.clone(),)).unwrap();
    let (fresh_after, _) = clipped().call(after, (batch,)).unwrap();
    assert_eq!(
        values(&kept_after),
        values(&fresh_after),
        "the kept builder replayed a stale recording"
    );
    assert_ne!(
        values(&first),
        values(&fresh_after),
        "the field's change must change the gradient"
    );
}

/// A batch of examples `[B, ..]` and their classes `[B, 1]`.
type Batch<const D: usize, K> = (Tensor<D, K>, Tensor<2, Int>);

/// Batches of the rows `indices` of `(x, y)`.
#[derive(Clone)]
struct Select<const D: usize, K: burn::tensor::kind::Numeric> {
    x: Tensor<D, K>,
    y: Tensor<2, Int>,
}

impl<const D: usize, K: burn::tensor::kind::Numeric> Batcher<usize, (Tensor<D, K>, Tensor<2, Int>)>
    for Select<D, K>
where
    Tensor<D, K>: Clone,
{
    fn batch(&self, indices: Vec<usize>, device: &Device) -> (Tensor<D, K>, Tensor<2, Int>) {
        let idx: Vec<i64> = indices.iter().map(|&i| i as i64).collect();
        let idx = Tensor::<1, Int>::from_ints(idx.as_slice(), device);
        (
            self.x.clone().select(0, idx.clone()),
            self.y.clone().select(0, idx),
        )
    }
}

/// A DP mechanism without noise (σ = 0, every example sampled: q = 1) for `n` examples.
fn noiseless(n: usize) -> DpMechanism {
    let config = DpConfig::new(
        1.0,
        0.0,
        1.0,
        Neighbouring::AddRemove {
            expected_batch_size: n as f64,
        },
    );
    DpMechanism::seeded(config, 1).unwrap()
}

/// One step of `dp` on `model` over every example of `data`: the released gradient.
fn release<M, const D: usize, K>(
    dp: &mut DpMechanism,
    model: &M,
    data: &Select<D, K>,
    loss: fn(&M, Batch<D, K>) -> Tensor<1>,
) -> ParamGrads
where
    M: Module + burn::module::ModuleDisplay + 'static,
    K: burn::tensor::kind::Numeric + 'static,
    Tensor<D, K>: Tree + Clone,
{
    let n = data.x.dims()[0];
    let mut loader = dp
        .loader(
            Arc::new(InMemDataset::new((0..n).collect())),
            Arc::new(data.clone()),
            dev(),
        )
        .unwrap();
    let batch = loader.next_batch().unwrap();
    dp.noisy_gradient(model, loss, batch).unwrap().0
}

/// A [`noiseless`] mechanism kept across a step on `before` and a step on `after` releases on
/// the second step exactly what a fresh mechanism's first step on `after` releases.
fn check_kept_mechanism<M, const D: usize, K>(
    before: &M,
    after: &M,
    data: Select<D, K>,
    loss: fn(&M, Batch<D, K>) -> Tensor<1>,
) where
    M: Module + burn::module::ModuleDisplay + 'static,
    K: burn::tensor::kind::Numeric + 'static,
    Tensor<D, K>: Tree + Clone,
{
    let n = data.x.dims()[0];
    let mut kept = noiseless(n);
    let first = values(&release(&mut kept, before, &data, loss));
    let second = values(&release(&mut kept, after, &data, loss));
    let fresh = values(&release(&mut noiseless(n), after, &data, loss));
    assert_eq!(second, fresh, "the mechanism replayed a stale recording");
    assert_ne!(first, fresh, "the field's change must change the gradient");
}

// --- an MLP whose loss reads a temperature, a plain f64 field ---------------------------------

#[derive(Module, Debug)]
struct Mlp {
    l1: Linear,
    l2: Linear,
    l3: Linear,
    temperature: f64,
}

fn mlp_loss(m: &Mlp, (x, y): (Tensor<2>, Tensor<2, Int>)) -> Tensor<1> {
    let h = relu(m.l2.forward(relu(m.l1.forward(x))));
    cross_entropy(m.l3.forward(h) / m.temperature, y)
}

fn mlp() -> (Mlp, Select<2, burn::tensor::Float>) {
    let model = Mlp {
        l1: LinearConfig::new(12, 16).init(&dev()),
        l2: LinearConfig::new(16, 16).init(&dev()),
        l3: LinearConfig::new(16, 4).init(&dev()),
        temperature: 1.0,
    };
    let x = Tensor::<2>::random([6, 12], Distribution::Normal(0.0, 1.0), &dev());
    let y = Tensor::<2, Int>::from_ints([[0], [1], [2], [3], [1], [2]], &dev());
    (model, Select { x, y })
}

#[test]
fn should_record_an_mlp_again_when_its_temperature_changes() {
    let (model, data) = mlp();
    let hotter = Mlp {
        temperature: 4.0,
        ..model.clone()
    };
    check_kept_builder(&model, &hotter, (data.x.clone(), data.y.clone()), mlp_loss);
    check_kept_mechanism(&model.clone().train(), &hotter.train(), data, mlp_loss);
}

// --- a CNN whose loss reads a #[module(skip)] value --------------------------------------------

/// A logit scale (an inverse temperature) the model carries outside its parameters. (A weight
/// of the whole loss would not do: clipping removes a common scale of an example's gradient.)
#[derive(Debug, Clone)]
struct LogitScale(f32);

#[derive(Module, Debug)]
struct Cnn {
    conv1: Conv2d,
    conv2: Conv2d,
    pool: MaxPool2d,
    head: Linear,
    #[module(skip)]
    scale: LogitScale,
}

fn cnn_loss(m: &Cnn, (x, y): (Tensor<4>, Tensor<2, Int>)) -> Tensor<1> {
    let h = m.pool.forward(relu(m.conv1.forward(x)));
    let h = relu(m.conv2.forward(h));
    let logits = m.head.forward(h.flatten(1, 3));
    cross_entropy(logits * m.scale.0, y)
}

fn cnn() -> (Cnn, Select<4, burn::tensor::Float>) {
    let model = Cnn {
        conv1: Conv2dConfig::new([1, 4], [3, 3]).init(&dev()),
        conv2: Conv2dConfig::new([4, 6], [3, 3]).init(&dev()),
        pool: MaxPool2dConfig::new([2, 2]).init(),
        head: LinearConfig::new(6 * 2 * 2, 3).init(&dev()),
        scale: LogitScale(1.0),
    };
    let x = Tensor::<4>::random([5, 1, 10, 10], Distribution::Normal(0.0, 1.0), &dev());
    let y = Tensor::<2, Int>::from_ints([[0], [1], [2], [1], [0]], &dev());
    (model, Select { x, y })
}

#[test]
fn should_record_a_cnn_again_when_a_skipped_field_changes() {
    let (model, data) = cnn();
    let sharper = Cnn {
        scale: LogitScale(4.0),
        ..model.clone()
    };
    check_kept_builder(&model, &sharper, (data.x.clone(), data.y.clone()), cnn_loss);
    check_kept_mechanism(&model.clone().train(), &sharper.train(), data, cnn_loss);
}

// --- a transformer whose dropout is switched off by a new probability ---------------------------

#[derive(Module, Debug)]
struct Classifier {
    embedding: Embedding,
    dropout: Dropout,
    encoder: TransformerEncoder,
    head: Linear,
}

fn classifier_loss(m: &Classifier, (tokens, y): (Tensor<2, Int>, Tensor<2, Int>)) -> Tensor<1> {
    let x = m.dropout.forward(m.embedding.forward(tokens)); // [1, T, d]
    let h = m.encoder.forward(TransformerEncoderInput::new(x));
    cross_entropy(m.head.forward(h.mean_dim(1).flatten(1, 2)), y)
}

fn classifier() -> (Classifier, Select<2, Int>) {
    let (vocab, d, t) = (13, 8, 6);
    let model = Classifier {
        embedding: EmbeddingConfig::new(vocab, d).init(&dev()),
        dropout: DropoutConfig::new(0.5).init(),
        encoder: TransformerEncoderConfig::new(d, 16, 2, 2)
            .with_dropout(0.0)
            .init(&dev()),
        head: LinearConfig::new(d, 3).init(&dev()),
    };
    let x = Tensor::<2, Int>::random([4, t], Distribution::Uniform(0.0, vocab as f64), &dev());
    let y = Tensor::<2, Int>::from_ints([[0], [2], [1], [2]], &dev());
    (model, Select { x, y })
}

#[test]
fn should_record_a_transformer_again_when_its_dropout_probability_changes() {
    let (model, data) = classifier();
    // A dropout schedule that ends: the same parameters and layer, its probability set to 0
    // (a layer rebuilt with p = 0 has a new training flag, which was keyed before).
    let mut without = model.clone();
    without.dropout.prob = 0.0;
    // In training mode (dropout active): the mask of p = 0.5 is random, so the comparison is
    // made after the change only, where the gradient is deterministic.
    let (model, without) = (model.train(), without.train());
    check_kept_builder(
        &model,
        &without,
        (data.x.clone(), data.y.clone()),
        classifier_loss,
    );
    check_kept_mechanism(&model, &without, data, classifier_loss);
}

// --- an LSTM whose loss reads an Ignored<T> value ----------------------------------------------

#[derive(Module, Debug)]
struct Recurrent {
    embedding: Embedding,
    lstm: Lstm,
    head: Linear,
    smoothing: Ignored<f32>,
}

fn recurrent_loss(m: &Recurrent, (tokens, y): (Tensor<2, Int>, Tensor<2, Int>)) -> Tensor<1> {
    let (h, _) = m.lstm.forward(m.embedding.forward(tokens), None); // [1, T, h]
    let [_, t, d] = h.dims();
    let logits = m.head.forward(h.narrow(1, t - 1, 1).reshape([1, d]));
    // Label smoothing: (1 - s) · cross-entropy + s · the mean negative log-likelihood.
    let s = m.smoothing.0;
    let uniform = log_softmax(logits.clone(), 1).mean().neg();
    cross_entropy(logits, y) * (1.0 - s) + uniform * s
}

fn recurrent() -> (Recurrent, Select<2, Int>) {
    let (vocab, d, hidden, t) = (11, 6, 5, 7);
    let model = Recurrent {
        embedding: EmbeddingConfig::new(vocab, d).init(&dev()),
        lstm: LstmConfig::new(d, hidden, true).init(&dev()),
        head: LinearConfig::new(hidden, 3).init(&dev()),
        smoothing: Ignored(0.0),
    };
    let x = Tensor::<2, Int>::random([4, t], Distribution::Uniform(0.0, vocab as f64), &dev());
    let y = Tensor::<2, Int>::from_ints([[2], [0], [1], [1]], &dev());
    (model, Select { x, y })
}

#[test]
fn should_record_an_lstm_again_when_an_ignored_field_changes() {
    let (model, data) = recurrent();
    let smoothed = Recurrent {
        smoothing: Ignored(0.4),
        ..model.clone()
    };
    check_kept_builder(
        &model,
        &smoothed,
        (data.x.clone(), data.y.clone()),
        recurrent_loss,
    );
    check_kept_mechanism(
        &model.clone().train(),
        &smoothed.train(),
        data,
        recurrent_loss,
    );
}

// --- tensors that are not float parameters: their values, not only their shapes ---------------

/// An MLP whose logits are shifted by a prior the model holds as a plain tensor (a class prior
/// re-estimated during training, say), and whose classes are relabelled by an integer
/// parameter (a lookup that is not trained).
#[derive(Module, Debug)]
struct Shifted {
    l1: Linear,
    l2: Linear,
    prior: Tensor<2>,
    relabel: Param<Tensor<1, Int>>,
}

fn shifted_loss(m: &Shifted, (x, y): (Tensor<2>, Tensor<2, Int>)) -> Tensor<1> {
    let logits = m.l2.forward(relu(m.l1.forward(x))) + m.prior.clone();
    let logits = logits.select(1, m.relabel.val());
    cross_entropy(logits, y)
}

fn shifted() -> (Shifted, Select<2, burn::tensor::Float>) {
    let model = Shifted {
        l1: LinearConfig::new(7, 9).init(&dev()),
        l2: LinearConfig::new(9, 4).init(&dev()),
        prior: Tensor::zeros([1, 4], &dev()),
        relabel: Param::initialized(ParamId::new(), Tensor::arange(0..4, &dev())),
    };
    let x = Tensor::<2>::random([5, 7], Distribution::Normal(0.0, 1.0), &dev());
    let y = Tensor::<2, Int>::from_ints([[0], [1], [3], [2], [1]], &dev());
    (model, Select { x, y })
}

#[test]
fn should_record_again_when_a_tensor_field_changes_its_values() {
    let (model, data) = shifted();
    // The same shape and the same parameters: only the prior's values differ.
    let informed = Shifted {
        prior: Tensor::from_floats([[2.0, -1.0, 0.5, -3.0]], &dev()),
        ..model.clone()
    };
    check_kept_builder(
        &model,
        &informed,
        (data.x.clone(), data.y.clone()),
        shifted_loss,
    );
    check_kept_mechanism(
        &model.clone().train(),
        &informed.train(),
        data,
        shifted_loss,
    );
}

#[test]
fn should_record_again_when_an_integer_parameter_changes_its_values() {
    let (model, data) = shifted();
    // The same parameter (its id kept), other values.
    let relabelled = Shifted {
        relabel: Param::initialized(model.relabel.id, Tensor::from_ints([3, 2, 0, 1], &dev())),
        ..model.clone()
    };
    check_kept_builder(
        &model,
        &relabelled,
        (data.x.clone(), data.y.clone()),
        shifted_loss,
    );
    check_kept_mechanism(
        &model.clone().train(),
        &relabelled.train(),
        data,
        shifted_loss,
    );
}

/// burn-nn's `RotaryEncoding` holds its frequencies as tensors that are not parameters: a model
/// whose encoding is rebuilt with another `theta` (the same shapes) is recorded again.
#[derive(Module, Debug)]
struct Rotary {
    embedding: Embedding,
    rope: RotaryEncoding,
    attend: Linear,
    head: Linear,
}

fn rotary_loss(m: &Rotary, (tokens, y): (Tensor<2, Int>, Tensor<2, Int>)) -> Tensor<1> {
    let x = m.embedding.forward(tokens); // [1, T, d]
    let q = m.rope.forward(m.attend.forward(x.clone()));
    let k = m.rope.forward(x.clone());
    let scores = q.matmul(k.swap_dims(1, 2)); // [1, T, T]
    let h = softmax(scores, 2).matmul(x); // [1, T, d]
    cross_entropy(m.head.forward(h.mean_dim(1).flatten(1, 2)), y)
}

fn rotary(theta: f32) -> RotaryEncoding {
    RotaryEncodingConfig::new(8, 6)
        .with_theta(theta)
        .init(&dev())
}

#[test]
fn should_record_again_when_a_rotary_encoding_is_rebuilt_with_another_theta() {
    let (vocab, d, t) = (10, 6, 5);
    let model = Rotary {
        embedding: EmbeddingConfig::new(vocab, d).init(&dev()),
        rope: rotary(10_000.0),
        attend: LinearConfig::new(d, d).init(&dev()),
        head: LinearConfig::new(d, 3).init(&dev()),
    };
    let x = Tensor::<2, Int>::random([4, t], Distribution::Uniform(0.0, vocab as f64), &dev());
    let y = Tensor::<2, Int>::from_ints([[0], [2], [1], [2]], &dev());
    let data = Select { x, y };
    let faster = Rotary {
        rope: rotary(3.0),
        ..model.clone()
    };
    check_kept_builder(
        &model,
        &faster,
        (data.x.clone(), data.y.clone()),
        rotary_loss,
    );
    check_kept_mechanism(&model.clone().train(), &faster.train(), data, rotary_loss);
}

/// Tensors a model holds in a `Vec` or an `Option` field are tensor fields too: their values
/// are part of what a kept recording is reused for.
#[derive(Module, Debug)]
struct Held {
    l: Linear,
    priors: Vec<Tensor<2>>,
    bias: Option<Tensor<2>>,
}

fn held_loss(m: &Held, (x, y): (Tensor<2>, Tensor<2, Int>)) -> Tensor<1> {
    let mut logits = m.l.forward(x) + m.priors[1].clone();
    if let Some(bias) = &m.bias {
        logits = logits + bias.clone();
    }
    cross_entropy(logits, y)
}

#[test]
fn should_record_again_when_a_tensor_in_a_vec_or_an_option_changes() {
    let (_, data) = shifted();
    let zeros = || Tensor::<2>::zeros([1, 4], &dev());
    let model = Held {
        l: LinearConfig::new(7, 4).init(&dev()),
        priors: vec![zeros(), zeros()],
        bias: Some(zeros()),
    };
    let shift = || Tensor::<2>::from_floats([[2.0, -1.0, 0.5, -3.0]], &dev());
    let in_vec = Held {
        priors: vec![zeros(), shift()],
        ..model.clone()
    };
    let in_option = Held {
        bias: Some(shift()),
        ..model.clone()
    };
    for after in [in_vec, in_option] {
        check_kept_builder(&model, &after, (data.x.clone(), data.y.clone()), held_loss);
        check_kept_mechanism(
            &model.clone().train(),
            &after.train(),
            data.clone(),
            held_loss,
        );
    }
}

/// A tensor in a `#[module(skip)]` or `Ignored<T>` field does not move with its module (Burn's
/// `to_device` leaves it on the user's device), so a recording cannot take it: every transform
/// refuses it with an error that names such fields, never a stale or wrong gradient.
#[derive(Module, Debug)]
struct Skipped {
    l: Linear,
    #[module(skip)]
    prior: Tensor<2>,
    held: Ignored<Tensor<2>>,
}

fn skipped_loss(m: &Skipped, (x, y): (Tensor<2>, Tensor<2, Int>)) -> Tensor<1> {
    cross_entropy(m.l.forward(x) + m.prior.clone(), y)
}

fn ignored_loss(m: &Skipped, (x, y): (Tensor<2>, Tensor<2, Int>)) -> Tensor<1> {
    cross_entropy(m.l.forward(x) + m.held.0.clone(), y)
}

#[test]
fn should_refuse_a_tensor_that_does_not_move_with_its_module() {
    let (_, data) = shifted();
    let model = Skipped {
        l: LinearConfig::new(7, 4).init(&dev()),
        prior: Tensor::zeros([1, 4], &dev()),
        held: Ignored(Tensor::zeros([1, 4], &dev())),
    };
    let refused = |err: VmapError| {
        assert!(matches!(err, VmapError::ForeignTensor { .. }), "{err}");
        assert!(err.to_string().contains("#[module(skip)]"), "{err}");
    };
    for loss in [skipped_loss, ignored_loss] {
        let batch = (data.x.clone(), data.y.clone());
        let err = micro_grad_module(move |m: &Skipped, (b,): (Batch<2, burn::tensor::Float>,)| {
            loss(m, b)
        })
        .call(&model, (batch.clone(),))
        .unwrap_err();
        refused(err);
        let err = per_example_grads(
            &model,
            batch,
            move |m: &Skipped, (x, y): (Tensor<1>, Tensor<1, Int>)| {
                loss(m, (x.unsqueeze(), y.unsqueeze()))
            },
        )
        .unwrap_err();
        refused(err);
    }
}

/// Switching back and forth reuses the recordings kept for each value: equal to a fresh builder
/// every time (the cache keeps several recordings, the least recently used dropped first).
#[test]
fn should_switch_between_kept_recordings() {
    let (model, data) = mlp();
    let batch = (data.x.clone(), data.y.clone());
    let at = |t: f64| Mlp {
        temperature: t,
        ..model.clone()
    };
    let clipped = || {
        micro_grad_module(|m: &Mlp, (a,): ((Tensor<2>, Tensor<2, Int>),)| mlp_loss(m, a))
            .transform_fn(|g: ParamGrads| clip_by_global_norm(g, 1.0))
    };
    let kept = clipped();
    // Twenty values: more than the cache keeps, so the first ones are recorded again.
    let temperatures: Vec<f64> = (0..20).map(|i| 0.5 + 0.25 * f64::from(i % 10)).collect();
    for t in temperatures.iter().chain(temperatures.iter().rev()) {
        let (g, _) = kept.call(&at(*t), (batch.clone(),)).unwrap();
        let (fresh, _) = clipped().call(&at(*t), (batch.clone(),)).unwrap();
        assert_eq!(values(&g), values(&fresh), "temperature {t}");
    }
}

/// What a module transform reads of the model is compared at every call (above); what a
/// function closes over is not: a number it reads through an atomic (or a `Mutex`) is a
/// constant of the recording, as under `jax.jit` (the README, "What a recording implies"). As an
/// argument, it is read at every call.
#[test]
fn should_read_a_closed_over_number_when_recording_and_an_argument_at_every_call() {
    use std::sync::atomic::{AtomicU32, Ordering};
    static SCALE: AtomicU32 = AtomicU32::new(0);
    let set = |s: f32| SCALE.store(s.to_bits(), Ordering::Relaxed);
    let read = |t: Tensor<2>| t.into_data().to_vec::<f32>().unwrap();
    let xs = Tensor::<2>::ones([3, 2], &dev());

    set(2.0);
    let closed =
        burn_vmap::vmap(|x: Tensor<1>| x.mul_scalar(f32::from_bits(SCALE.load(Ordering::Relaxed))));
    assert_eq!(read(closed.call(xs.clone()).unwrap()), vec![2.0; 6]);
    set(5.0);
    // Read once, when `f` was recorded: a fresh transform records it again.
    assert_eq!(read(closed.call(xs.clone()).unwrap()), vec![2.0; 6]);
    let fresh =
        burn_vmap::vmap(|x: Tensor<1>| x.mul_scalar(f32::from_bits(SCALE.load(Ordering::Relaxed))));
    assert_eq!(read(fresh.call(xs.clone()).unwrap()), vec![5.0; 6]);

    let passed = burn_vmap::vmap(|(x, s): (Tensor<1>, Tensor<1>)| x * s).in_axes([Some(0), None]);
    for s in [2.0, 5.0] {
        let scale = Tensor::<1>::from_floats([s], &dev());
        assert_eq!(read(passed.call((xs.clone(), scale)).unwrap()), vec![s; 6]);
    }
}

// --- another instance of the same model -------------------------------------------------------

fn ids(g: &ParamGrads) -> Vec<ParamId> {
    g.iter().map(|(_, id, _)| id).collect()
}

/// Two instances of one model (the same paths and shapes, other `ParamId`s: an ensemble, a
/// seed sweep, a re-initialised model): a kept builder returns each call's gradients under that
/// call's model's ids, so an optimizer step moves the model it is given. With the first
/// model's ids the optimizer would find no gradient for the second and leave it unchanged.
#[test]
fn should_give_each_model_instance_its_own_parameter_ids() {
    use burn::optim::{GradientsParams, SgdConfig};
    let (a, data) = mlp();
    let (b, _) = mlp();
    let batch = (data.x.clone(), data.y.clone());
    let clipped = || {
        micro_grad_module(|m: &Mlp, (a,): ((Tensor<2>, Tensor<2, Int>),)| mlp_loss(m, a))
            .transform_fn(|g: ParamGrads| clip_by_global_norm(g, 1.0))
    };
    let kept = clipped();
    let (on_a, _) = kept.call(&a, (batch.clone(),)).unwrap();
    let (on_b, _) = kept.call(&b, (batch.clone(),)).unwrap();
    let (fresh, _) = clipped().call(&b, (batch.clone(),)).unwrap();
    assert_ne!(ids(&on_a), ids(&on_b), "two instances have their own ids");
    assert_eq!(
        ids(&on_b),
        ids(&fresh),
        "the kept builder returned another model's ids"
    );
    assert_eq!(values(&on_b), values(&fresh));

    let grads: GradientsParams = on_b.into_gradients_params();
    let moved = SgdConfig::new().init().step(1.0, b.clone().train(), grads);
    let weights = |m: &Mlp| m.l1.weight.val().into_data().to_vec::<f32>().unwrap();
    assert_ne!(
        weights(&moved),
        weights(&b),
        "the step must move the model it was given"
    );
}

/// The same through a kept DP mechanism (no noise: σ = 0, q = 1): its release for a second
/// model instance carries that model's ids and is cast back to the parameters' dtype (f32), as
/// a fresh mechanism's is.
#[test]
fn should_release_under_each_model_instances_own_ids() {
    let (a, data) = mlp();
    let (b, _) = mlp();
    let n = data.x.dims()[0];
    let mut kept = noiseless(n);
    release(&mut kept, &a, &data, mlp_loss);
    let second = release(&mut kept, &b, &data, mlp_loss);
    let fresh = release(&mut noiseless(n), &b, &data, mlp_loss);
    assert_eq!(ids(&second), ids(&fresh), "a stale model's ids");
    assert!(
        second
            .iter()
            .all(|(_, _, g)| g.dtype() == burn::tensor::DType::F32)
    );
    assert_eq!(values(&second), values(&fresh));
}

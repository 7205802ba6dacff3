//! Unmodified burn-nn 0.22 models: per-example gradients equal the loop of Burn's own backward,
//! one example at a time (1e-5; on CUDA TF32's 5e-3, `tests/shared/tolerance.rs`), for an MLP,
//! a CNN (Conv2d + pooling), a TransformerEncoder with an Embedding, and an Lstm; an attention
//! block with burn-nn's positional encodings (tensors that are not parameters) in training mode;
//! and dropout drawn per example.

#[path = "shared/tied.rs"]
mod tied;
#[path = "shared/tolerance.rs"]
mod tolerance;

use burn::module::{Module, ParamId};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{
    Dropout, DropoutConfig, Embedding, EmbeddingConfig, Linear, LinearConfig, Lstm, LstmConfig,
    PositionalEncoding, PositionalEncodingConfig, RotaryEncoding, RotaryEncodingConfig,
};
use burn::optim::GradientsParams;
use burn::tensor::activation::{log_softmax, relu, softmax};
use burn::tensor::{Device, Distribution, Int, Tensor, TensorData};
use burn_vmap::{ParamGrads, Tree, per_example_grads};
use tied::Tied;

/// Gradient of parameter `id` (of rank `rank`) in Burn's own `GradientsParams`, as flat values.
fn burn_grad(grads: &GradientsParams, id: ParamId, rank: usize) -> Vec<f32> {
    let data = match rank {
        1 => grads.get::<1>(id).map(|g| g.into_data()),
        2 => grads.get::<2>(id).map(|g| g.into_data()),
        3 => grads.get::<3>(id).map(|g| g.into_data()),
        4 => grads.get::<4>(id).map(|g| g.into_data()),
        r => panic!("rank {r}"),
    };
    data.expect("Burn gives every parameter a gradient")
        .convert::<f32>()
        .try_into_vec::<f32>()
        .unwrap()
}

fn values(data: TensorData) -> Vec<f32> {
    data.convert::<f32>().try_into_vec::<f32>().unwrap()
}

/// Checks `per_example_grads` against the loop: for every example `i`, Burn's own backward of
/// `loss(model, example(i))` on the model in training mode.
fn check_against_loop<M, I, A>(
    model: &M,
    inputs: I,
    example: impl Fn(usize) -> A,
    loss: impl Fn(&M, A) -> Tensor<1> + Copy,
) -> ParamGrads
where
    M: Module,
    I: Tree,
    A: Tree,
{
    let grads = per_example_grads(model, inputs, loss).unwrap();
    let batch = grads.iter().next().unwrap().2.shape()[0];
    let ours: Vec<(ParamId, usize, Vec<f32>)> = grads
        .iter()
        .map(|(_, id, g)| (id, g.shape().num_dims() - 1, values(g.to_data())))
        .collect();
    for i in 0..batch {
        let trained = model.clone().train();
        let theirs = GradientsParams::from_grads(loss(&trained, example(i)).backward(), &trained);
        for (id, rank, all) in &ours {
            let per = all.len() / batch;
            let mine = &all[i * per..(i + 1) * per];
            let expected = burn_grad(&theirs, *id, *rank);
            assert_eq!(mine.len(), expected.len());
            let scale = expected.iter().fold(1f32, |m, v| m.max(v.abs()));
            for (a, b) in mine.iter().zip(&expected) {
                assert!(
                    (a - b).abs() <= tolerance::device_tol(1e-5) * scale,
                    "example {i}, parameter {id}: {a} vs {b}"
                );
            }
        }
    }
    grads
}

fn row<const D: usize, const E: usize>(t: &Tensor<D>, i: usize) -> Tensor<E> {
    let mut dims = t.dims().to_vec();
    let rest = dims.split_off(1);
    let rest: [usize; E] = rest.try_into().unwrap();
    t.clone().narrow(0, i, 1).reshape(rest)
}

fn int_row(t: &Tensor<2, Int>, i: usize) -> Tensor<1, Int> {
    let n = t.dims()[1];
    t.clone().narrow(0, i, 1).reshape([n])
}

/// Cross-entropy of one example's logits `[C]` against its class.
fn cross_entropy(logits: Tensor<1>, class: Tensor<1, Int>) -> Tensor<1> {
    log_softmax(logits, 0).gather(0, class).neg()
}

#[derive(Module, Debug)]
struct Mlp {
    l1: Linear,
    l2: Linear,
    l3: Linear,
}

impl Mlp {
    fn loss(&self, (x, y): (Tensor<1>, Tensor<1, Int>)) -> Tensor<1> {
        let h = relu(self.l1.forward(x));
        let h = relu(self.l2.forward(h));
        cross_entropy(self.l3.forward(h), y)
    }
}

#[test]
fn should_give_an_mlps_per_example_gradients_as_the_loop() {
    let device = Device::default();
    let model = Mlp {
        l1: LinearConfig::new(12, 16).init(&device),
        l2: LinearConfig::new(16, 16).init(&device),
        l3: LinearConfig::new(16, 4).init(&device),
    };
    let xs = Tensor::<2>::random([6, 12], Distribution::Normal(0.0, 1.0), &device);
    let ys = Tensor::<2, Int>::from_ints([[0], [1], [2], [3], [1], [2]], &device);
    let grads = check_against_loop(
        &model,
        (xs.clone(), ys.clone()),
        |i| (row::<2, 1>(&xs, i), int_row(&ys, i)),
        |m: &Mlp, ex| m.loss(ex),
    );
    assert_eq!(grads.len(), 6);
    assert_eq!(grads.get::<3>("l1.weight").unwrap().dims(), [6, 12, 16]);
}

#[derive(Module, Debug)]
struct Cnn {
    conv1: Conv2d,
    conv2: Conv2d,
    pool: MaxPool2d,
    head: Linear,
}

impl Cnn {
    fn loss(&self, (x, y): (Tensor<3>, Tensor<1, Int>)) -> Tensor<1> {
        let x = x.unsqueeze::<4>(); // [1, C, H, W]: one example as a batch of one
        let h = self.pool.forward(relu(self.conv1.forward(x)));
        let h = relu(self.conv2.forward(h));
        let [_, c, hh, ww] = h.dims();
        let logits = self.head.forward(h.reshape([c * hh * ww]));
        cross_entropy(logits, y)
    }
}

#[test]
fn should_give_a_cnns_per_example_gradients_as_the_loop() {
    let device = Device::default();
    let model = Cnn {
        conv1: Conv2dConfig::new([1, 4], [3, 3]).init(&device),
        conv2: Conv2dConfig::new([4, 6], [3, 3]).init(&device),
        pool: MaxPool2dConfig::new([2, 2]).init(),
        head: LinearConfig::new(6 * 2 * 2, 3).init(&device),
    };
    let xs = Tensor::<4>::random([5, 1, 10, 10], Distribution::Normal(0.0, 1.0), &device);
    let ys = Tensor::<2, Int>::from_ints([[0], [1], [2], [1], [0]], &device);
    check_against_loop(
        &model,
        (xs.clone(), ys.clone()),
        |i| (row::<4, 3>(&xs, i), int_row(&ys, i)),
        |m: &Cnn, ex| m.loss(ex),
    );
}

#[derive(Module, Debug)]
struct Classifier {
    embedding: Embedding,
    encoder: TransformerEncoder,
    head: Linear,
}

impl Classifier {
    fn loss(&self, (tokens, y): (Tensor<1, Int>, Tensor<1, Int>)) -> Tensor<1> {
        let x = self.embedding.forward(tokens.unsqueeze::<2>()); // [1, T, d]
        let h = self.encoder.forward(TransformerEncoderInput::new(x));
        let [_, t, d] = h.dims();
        let pooled = h.reshape([t, d]).mean_dim(0).reshape([d]);
        cross_entropy(self.head.forward(pooled), y)
    }
}

#[test]
fn should_give_a_transformers_per_example_gradients_as_the_loop() {
    let device = Device::default();
    let (vocab, d, t) = (13, 8, 6);
    let model = Classifier {
        embedding: EmbeddingConfig::new(vocab, d).init(&device),
        encoder: TransformerEncoderConfig::new(d, 16, 2, 2)
            .with_dropout(0.0)
            .init(&device),
        head: LinearConfig::new(d, 3).init(&device),
    };
    let tokens =
        Tensor::<2, Int>::random([4, t], Distribution::Uniform(0.0, vocab as f64), &device);
    let ys = Tensor::<2, Int>::from_ints([[0], [2], [1], [2]], &device);
    check_against_loop(
        &model,
        (tokens.clone(), ys.clone()),
        |i| (int_row(&tokens, i), int_row(&ys, i)),
        |m: &Classifier, ex| m.loss(ex),
    );
}

/// An attention block with burn-nn's sinusoidal `PositionalEncoding` and `RotaryEncoding`, whose
/// tables are tensors that are not parameters.
#[derive(Module, Debug)]
struct Positional {
    embedding: Embedding,
    positions: PositionalEncoding,
    rope: RotaryEncoding,
    query: Linear,
    head: Linear,
}

impl Positional {
    fn loss(&self, (tokens, y): (Tensor<1, Int>, Tensor<1, Int>)) -> Tensor<1> {
        let x = self
            .positions
            .forward(self.embedding.forward(tokens.unsqueeze::<2>())); // [1, T, d]
        let q = self.rope.forward(self.query.forward(x.clone()));
        let k = self.rope.forward(x.clone());
        let h = softmax(q.matmul(k.swap_dims(1, 2)), 2).matmul(x);
        let [_, _, d] = h.dims();
        cross_entropy(self.head.forward(h.mean_dim(1).reshape([d])), y)
    }
}

/// In training mode (on an autodiff device, as an optimizer holds it) the tables are on the
/// autodiff device too, which Burn's capture device refuses: they are recorded off autodiff.
#[test]
fn should_give_positional_encodings_per_example_gradients_as_the_loop_in_training_mode() {
    let device = Device::default();
    let (vocab, d, t) = (11, 8, 5);
    let model = Positional {
        embedding: EmbeddingConfig::new(vocab, d).init(&device),
        positions: PositionalEncodingConfig::new(d)
            .with_max_sequence_size(t)
            .init(&device),
        rope: RotaryEncodingConfig::new(t, d).init(&device),
        query: LinearConfig::new(d, d).init(&device),
        head: LinearConfig::new(d, 3).init(&device),
    }
    .train();
    let tokens =
        Tensor::<2, Int>::random([4, t], Distribution::Uniform(0.0, vocab as f64), &device);
    let ys = Tensor::<2, Int>::from_ints([[1], [0], [2], [2]], &device);
    check_against_loop(
        &model,
        (tokens.clone(), ys.clone()),
        |i| (int_row(&tokens, i), int_row(&ys, i)),
        |m: &Positional, ex| m.loss(ex),
    );
}

#[derive(Module, Debug)]
struct Recurrent {
    embedding: Embedding,
    lstm: Lstm,
    head: Linear,
}

impl Recurrent {
    fn loss(&self, (tokens, y): (Tensor<1, Int>, Tensor<1, Int>)) -> Tensor<1> {
        let x = self.embedding.forward(tokens.unsqueeze::<2>()); // [1, T, d]
        let (h, _) = self.lstm.forward(x, None);
        let [_, t, d] = h.dims();
        let last = h.narrow(1, t - 1, 1).reshape([d]);
        cross_entropy(self.head.forward(last), y)
    }
}

#[test]
fn should_give_an_lstms_per_example_gradients_as_the_loop() {
    let device = Device::default();
    let (vocab, d, hidden, t) = (11, 6, 5, 7);
    let model = Recurrent {
        embedding: EmbeddingConfig::new(vocab, d).init(&device),
        lstm: LstmConfig::new(d, hidden, true).init(&device),
        head: LinearConfig::new(hidden, 3).init(&device),
    };
    let tokens =
        Tensor::<2, Int>::random([4, t], Distribution::Uniform(0.0, vocab as f64), &device);
    let ys = Tensor::<2, Int>::from_ints([[2], [0], [1], [1]], &device);
    check_against_loop(
        &model,
        (tokens.clone(), ys.clone()),
        |i| (int_row(&tokens, i), int_row(&ys, i)),
        |m: &Recurrent, ex| m.loss(ex),
    );
}

#[derive(Module, Debug)]
struct Dropped {
    l1: Linear,
    dropout: Dropout,
    l2: Linear,
}

/// Dropout in training mode draws an independent mask per example, and the per-example
/// gradient is the loop's under the same mask: the mask is read back from the hidden layer's
/// values (returned alongside the loss by a second, value-only function) and applied by hand in
/// the loop.
#[test]
fn should_draw_dropout_per_example_and_match_the_loop_under_the_same_masks() {
    let device = Device::default();
    let (n, d_in, d_h) = (8, 5, 64);
    let model = Dropped {
        l1: LinearConfig::new(d_in, d_h).init(&device),
        dropout: DropoutConfig::new(0.5).init(),
        l2: LinearConfig::new(d_h, 1).init(&device),
    };
    let xs = Tensor::<2>::random([n, d_in], Distribution::Normal(0.0, 1.0), &device);
    // The loss is l2(dropout(relu(l1(x)))) summed; its gradient with respect to l2.weight is the
    // dropped hidden layer itself, so the mask of each example shows in its gradient.
    let loss = |m: &Dropped, x: Tensor<1>| {
        let h = relu(m.l1.forward(x)) + 1.0; // strictly positive: a zero means dropped
        m.l2.forward(m.dropout.forward(h)).sum()
    };
    let grads = per_example_grads(&model, xs.clone(), loss).unwrap();
    let w2 = values(grads.get::<3>("l2.weight").unwrap().into_data()); // [n, d_h, 1]
    let masks: Vec<Vec<bool>> = (0..n)
        .map(|i| {
            w2[i * d_h..(i + 1) * d_h]
                .iter()
                .map(|v| *v != 0.0)
                .collect()
        })
        .collect();
    // Independent masks: every example keeps about half of the units, and no two masks agree.
    for (i, m) in masks.iter().enumerate() {
        let kept = m.iter().filter(|k| **k).count();
        assert!(
            (10..=54).contains(&kept),
            "example {i} kept {kept} of {d_h}"
        );
        for other in &masks[..i] {
            assert_ne!(m, other, "two examples drew the same mask");
        }
    }
    // The loop under the same masks: dropout replaced by multiplying with the mask / keep.
    let l1_w = values(grads.get::<3>("l1.weight").unwrap().into_data());
    for (i, mask) in masks.iter().enumerate() {
        let trained = model.clone().train();
        let mask = Tensor::<1>::from_floats(
            mask.iter()
                .map(|k| if *k { 2.0 } else { 0.0 })
                .collect::<Vec<f32>>()
                .as_slice(),
            &device,
        );
        let x = row::<2, 1>(&xs, i);
        let h = relu(trained.l1.forward(x)) + 1.0;
        let out = trained.l2.forward(h * mask).sum();
        let theirs = GradientsParams::from_grads(out.backward(), &trained);
        let expected = burn_grad(&theirs, trained.l1.weight.id, 2);
        let per = d_in * d_h;
        for (a, b) in l1_w[i * per..(i + 1) * per].iter().zip(&expected) {
            assert!(
                (a - b).abs() <= tolerance::device_tol(1e-5) * b.abs().max(1.0),
                "example {i}: {a} vs {b}"
            );
        }
    }
}

#[derive(Module, Debug)]
struct Normalized {
    l1: Linear,
    norm: burn::nn::BatchNorm,
}

/// One parameter at two paths: Burn's backward sums its uses into one gradient, which the
/// per-example transforms do not form; they refuse the module naming both paths (taking the
/// uses apart returned two partial gradients under one id, clipped by their joint norm).
#[test]
fn should_refuse_a_parameter_tied_across_two_layers_naming_both_paths() {
    let device = Device::default();
    let model = Tied::new(&device);
    let xs = Tensor::<2>::random([4, 3], Distribution::Default, &device);
    let loss = |m: &Tied, x: Tensor<1>| m.b.forward(m.a.forward(x)).powi_scalar(2).sum();
    let refused = |err: burn_vmap::VmapError| {
        assert!(
            matches!(&err, burn_vmap::VmapError::SharedParameter { first, second, .. }
                if first == "a.weight" && second == "b.weight"),
            "{err}"
        );
        assert!(err.to_string().contains("a new ParamId"), "{err}");
    };
    refused(per_example_grads(&model, xs.clone(), loss).unwrap_err());
    let err =
        burn_vmap::micro_grad_module(move |m: &Tied, (x,): (Tensor<2>,)| loss(m, x.squeeze_dim(0)))
            .call(&model, (xs.clone(),))
            .unwrap_err();
    refused(err);
    // Untied (each layer a parameter of its own), the same model runs.
    let untied = Tied {
        b: LinearConfig::new(3, 3).init(&device),
        ..model
    };
    let grads = per_example_grads(&untied, xs, loss).unwrap();
    assert_eq!(grads.get::<3>("b.weight").unwrap().dims(), [4, 3, 3]);
}

/// Why refusing loses nothing a Burn user has (README, "Tied weights"): Burn 0.22.1's own
/// training does not keep a tie by clone. Its backward sums both uses into the one id, and its
/// optimizer step updates the parameter at the first path only; the clone at the second keeps
/// its initial value. A Burn release that changes this makes the README's sentence stale.
#[test]
fn should_pin_that_burns_own_step_breaks_a_tie_by_clone() {
    use burn::optim::SgdConfig;
    let device = Device::default().autodiff();
    let mut model = Tied::new(&device);
    let initial = model.a.weight.val().into_data();
    let mut optim = SgdConfig::new().init();
    let x = Tensor::<2>::random([4, 3], Distribution::Default, &device);
    for _ in 0..2 {
        let loss = model
            .b
            .forward(model.a.forward(x.clone()))
            .powi_scalar(2)
            .sum();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(0.1, model, grads);
    }
    assert_eq!(model.a.weight.id, model.b.weight.id);
    assert_ne!(
        model.a.weight.val().into_data(),
        initial,
        "the first path trains"
    );
    assert_eq!(
        model.b.weight.val().into_data(),
        initial,
        "the second does not"
    );
}

/// BatchNorm in training mode mixes the examples of a batch and writes its running statistics:
/// refused with its path before anything runs; in eval mode (running statistics) it is
/// per-example and allowed.
#[test]
fn should_refuse_batch_norm_in_training_mode_and_allow_it_in_eval_mode() {
    let device = Device::default();
    let model = Normalized {
        l1: LinearConfig::new(3, 4).init(&device),
        norm: burn::nn::BatchNormConfig::new(4).init(&device),
    };
    let xs = Tensor::<2>::random([5, 3], Distribution::Default, &device);
    let loss = |m: &Normalized, x: Tensor<1>| {
        let h = m.l1.forward(x).unsqueeze::<2>(); // [1, 4]
        m.norm.forward(h).sin().sum()
    };
    let err = per_example_grads(&model, xs.clone(), loss).unwrap_err();
    assert!(
        matches!(&err, burn_vmap::VmapError::MixesExamples { path, layer: "BatchNorm", .. } if path == "norm"),
        "{err}"
    );
    // Running statistics away from their initial values: one training-mode forward of Burn's.
    let warm = model.train();
    drop(warm.norm.forward(warm.l1.forward(xs.clone() * 3.0 + 1.0)));
    let eval = warm.valid();
    let stats = |m: &Normalized| {
        let (mean, var) = (m.norm.running_mean.value(), m.norm.running_var.value());
        (values(mean.into_data()), values(var.into_data()))
    };
    let before = stats(&eval);
    assert_ne!(before.0, vec![0.0; 4], "warmed up");
    let grads = per_example_grads(&eval, xs.clone(), loss).unwrap();
    assert_eq!(grads.get::<3>("l1.weight").unwrap().dims(), [5, 3, 4]);
    assert_eq!(
        stats(&eval),
        before,
        "the transform leaves the statistics alone"
    );
    // Each example's gradient is Burn's own backward in eval mode: on an autodiff device, the
    // training flag off (the running statistics normalize).
    for i in 0..5 {
        let mut trained = eval.clone().train();
        trained.norm.training = eval.norm.training.clone();
        let theirs = GradientsParams::from_grads(loss(&trained, row(&xs, i)).backward(), &trained);
        for (path, id, g) in grads.iter() {
            let all = values(g.to_data());
            let per = all.len() / 5;
            let want = burn_grad(&theirs, id, g.shape().num_dims() - 1);
            for (a, b) in all[i * per..(i + 1) * per].iter().zip(&want) {
                let tol = tolerance::device_tol(1e-5) * b.abs().max(1.0);
                assert!((a - b).abs() <= tol, "{path}, example {i}: {a} vs {b}");
            }
        }
    }
    assert_eq!(stats(&eval), before, "nor does Burn in eval mode");
}

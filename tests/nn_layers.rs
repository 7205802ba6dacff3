//! Unmodified burn-nn 0.22 layers against the loop: forward values (`vmap` of the layer's
//! `forward`, the layer moved into the recording, equals stacking `forward(x_i)`) and
//! per-example gradients (`per_example_grads` equals Burn's own backward of each example
//! alone), for every parameter. Strict mode is on: an op that fell back to a per-example loop
//! would panic.

#[path = "shared/gated.rs"]
mod gated;
#[path = "shared/strict.rs"]
mod strict;
#[path = "shared/tolerance.rs"]
mod tolerance;

use burn::module::{Module, ParamId};
use burn::nn::attention::{CrossAttention, CrossAttentionConfig, generate_autoregressive_mask};
use burn::nn::attention::{MhaInput, MultiHeadAttention, MultiHeadAttentionConfig};
use burn::nn::conv::{
    Conv1d, Conv1dConfig, Conv2d, Conv2dConfig, ConvTranspose2d, ConvTranspose2dConfig,
};
use burn::nn::conv::{
    Conv3d, Conv3dConfig, ConvTranspose1d, ConvTranspose1dConfig, ConvTranspose3d,
    ConvTranspose3dConfig, DeformConv2d, DeformConv2dConfig,
};
use burn::nn::pool::{
    AdaptiveAvgPool1d, AdaptiveAvgPool1dConfig, AvgPool1d, AvgPool1dConfig, MaxPool1d,
    MaxPool1dConfig,
};
use burn::nn::pool::{
    AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig, AvgPool2d, AvgPool2dConfig, MaxPool2d,
    MaxPool2dConfig,
};
use burn::nn::transformer::{
    TransformerDecoder, TransformerDecoderConfig, TransformerDecoderInput,
};
use burn::nn::{
    BatchNormConfig, BiGru, BiGruConfig, BiLstm, BiLstmConfig, BiRnn, BiRnnConfig, Embedding,
    EmbeddingConfig, GaussianNoise, GaussianNoiseConfig, Gelu, GroupNorm, GroupNormConfig, Gru,
    GruConfig, InstanceNorm, InstanceNormConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig,
    LocalResponseNorm, LocalResponseNormConfig, Lstm, LstmConfig, PaddingConfig2d, PixelShuffle,
    PixelShuffleConfig, Relu, Rnn, RnnConfig, Sigmoid, Tanh, Unfold4d, Unfold4dConfig,
};
use burn::optim::GradientsParams;
use burn::tensor::activation::{log_softmax, softmax};
use burn::tensor::{Bool, Int, Tensor, TensorData};
use burn_vmap::{Tree, per_example_grads, vmap};
use gated::Gated;
use strict::{dev, normal};

const E: usize = 3;

fn values<const D: usize, K: burn::tensor::kind::Basic + burn::tensor::kind::TensorKind>(
    t: Tensor<D, K>,
) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

/// Example `i` of a batch (axis 0 removed).
fn example<const DB: usize, const D: usize, K>(xs: &Tensor<DB, K>, i: usize) -> Tensor<D, K>
where
    K: burn::tensor::kind::Basic + burn::tensor::kind::TensorKind,
{
    let shape: [usize; D] = xs.dims()[1..].try_into().unwrap();
    xs.clone().narrow(0, i, 1).reshape(shape)
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: sizes");
    let scale = want.iter().fold(1f32, |m, v| m.max(v.abs()));
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= tolerance::device_tol(1e-4) * scale,
            "{what}: at {k}: {a} vs {b}"
        );
    }
}

/// Forward oracle: `vmap(f)(xs) == stack_i f(xs[i])`, the layer moved into the recording (a
/// `valid()` copy: a clone shares BatchNorm's running statistics, which `to_device` would move
/// off the user's device).
fn forward_oracle<M: Module, const D: usize, const DB: usize, const O: usize, const OB: usize>(
    m: &M,
    xs: Tensor<DB>,
    f: impl Fn(&M, Tensor<D>) -> Tensor<O>,
    what: &str,
) {
    let got: Tensor<OB> = vmap(|x: Tensor<D>| f(&m.valid().to_device(&x.device()), x))
        .call_as(xs.clone())
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let want: Vec<Tensor<O>> = (0..xs.dims()[0]).map(|i| f(m, example(&xs, i))).collect();
    assert_close(&values(got), &values(Tensor::stack::<OB>(want, 0)), what);
}

/// A parameter's gradient in Burn's own `GradientsParams`, as flat values.
fn burn_grad(grads: &GradientsParams, id: ParamId, rank: usize) -> Vec<f32> {
    let data = match rank {
        1 => grads.get::<1>(id).map(values),
        2 => grads.get::<2>(id).map(values),
        3 => grads.get::<3>(id).map(values),
        4 => grads.get::<4>(id).map(values),
        5 => grads.get::<5>(id).map(values),
        r => panic!("rank {r}"),
    };
    data.expect("Burn gives the parameter a gradient")
}

/// Gradient oracle: per-example gradients of every parameter equal the loop of Burn's own
/// backward passes, one example at a time, on the model in training mode.
fn grads_oracle<M: Module, I: Tree, A: Tree>(
    model: &M,
    inputs: I,
    example: impl Fn(usize) -> A,
    loss: impl Fn(&M, A) -> Tensor<1> + Copy,
    what: &str,
) {
    let grads = per_example_grads(model, inputs, loss).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(!grads.is_empty(), "{what}: no parameter gradient");
    let batch = grads.iter().next().unwrap().2.shape()[0];
    for i in 0..batch {
        let trained = model.clone().train();
        let theirs = GradientsParams::from_grads(loss(&trained, example(i)).backward(), &trained);
        for (path, id, g) in grads.iter() {
            let all: Vec<f32> = g.to_data().convert::<f32>().try_to_vec().unwrap();
            let per = all.len() / batch;
            let want = burn_grad(&theirs, id, g.shape().num_dims() - 1);
            assert_close(
                &all[i * per..(i + 1) * per],
                &want,
                &format!("{what}: {path}, example {i}"),
            );
        }
    }
}

/// A smooth scalar loss of any output.
fn smooth<const D: usize>(y: Tensor<D>) -> Tensor<1> {
    (y.clone() * y.sin()).sum()
}

/// Both oracles for a layer of one float input.
fn both<M: Module, const D: usize, const DB: usize, const O: usize, const OB: usize>(
    m: &M,
    xs: Tensor<DB>,
    f: fn(&M, Tensor<D>) -> Tensor<O>,
    what: &str,
) {
    forward_oracle::<M, D, DB, O, OB>(m, xs.clone(), f, what);
    let ex = xs.clone();
    grads_oracle(
        m,
        xs,
        move |i| example::<DB, D, _>(&ex, i),
        move |m: &M, x| smooth(f(m, x)),
        what,
    );
}

#[test]
fn should_batch_linear() {
    let m: Linear = LinearConfig::new(5, 4).init(&dev());
    both::<_, 2, 3, 2, 3>(&m, normal([E, 2, 5]), |m, x| m.forward(x), "linear");
}

#[test]
fn should_batch_conv1d_conv2d_and_conv_transpose2d() {
    let c1: Conv1d = Conv1dConfig::new(2, 4, 3).with_stride(2).init(&dev());
    both::<_, 3, 4, 3, 4>(&c1, normal([E, 2, 2, 9]), |m, x| m.forward(x), "conv1d");
    let c2: Conv2d = Conv2dConfig::new([4, 6], [3, 2])
        .with_groups(2)
        .with_padding(PaddingConfig2d::Explicit(1, 0, 1, 0))
        .init(&dev());
    both::<_, 4, 5, 4, 5>(&c2, normal([E, 2, 4, 6, 5]), |m, x| m.forward(x), "conv2d");
    let ct: ConvTranspose2d = ConvTranspose2dConfig::new([3, 4], [3, 2])
        .with_stride([2, 1])
        .init(&dev());
    both::<_, 4, 5, 4, 5>(
        &ct,
        normal([E, 2, 3, 4, 5]),
        |m, x| m.forward(x),
        "conv_transpose2d",
    );
}

/// A convolution followed by a parameter-free layer, so that the layer's backward op is on the
/// path of a parameter's gradient.
#[derive(Module, Debug)]
struct ConvThen<L> {
    conv: Conv2d,
    layer: L,
}

#[test]
fn should_batch_pools_after_a_convolution() {
    let conv = || Conv2dConfig::new([2, 3], [3, 3]).init(&dev());
    let xs = normal([E, 2, 2, 9, 8]);
    let max = ConvThen::<MaxPool2d> {
        conv: conv(),
        layer: MaxPool2dConfig::new([2, 3]).with_strides([2, 2]).init(),
    };
    both::<_, 4, 5, 4, 5>(
        &max,
        xs.clone(),
        |m, x| m.layer.forward(m.conv.forward(x)),
        "max_pool2d",
    );
    let avg = ConvThen::<AvgPool2d> {
        conv: conv(),
        layer: AvgPool2dConfig::new([3, 2])
            .with_strides([2, 1])
            .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
            .init(),
    };
    both::<_, 4, 5, 4, 5>(
        &avg,
        xs.clone(),
        |m, x| m.layer.forward(m.conv.forward(x)),
        "avg_pool2d",
    );
    let ada = ConvThen::<AdaptiveAvgPool2d> {
        conv: conv(),
        layer: AdaptiveAvgPool2dConfig::new([3, 2]).init(),
    };
    both::<_, 4, 5, 4, 5>(
        &ada,
        xs,
        |m, x| m.layer.forward(m.conv.forward(x)),
        "adaptive_avg_pool2d",
    );
}

#[test]
fn should_batch_embedding() {
    let m: Embedding = EmbeddingConfig::new(7, 4).init(&dev());
    let idx = Tensor::<3, Int>::from_ints(
        [
            [[0, 3, 3], [6, 1, 0]],
            [[2, 2, 2], [5, 4, 3]],
            [[6, 6, 0], [1, 1, 1]],
        ],
        &dev(),
    );
    let got: Tensor<4> = vmap(|i: Tensor<2, Int>| m.clone().to_device(&i.device()).forward(i))
        .call(idx.clone())
        .unwrap();
    let want: Vec<Tensor<3>> = (0..E).map(|i| m.forward(example(&idx, i))).collect();
    assert_close(
        &values(got),
        &values(Tensor::stack::<4>(want, 0)),
        "embedding",
    );
    // Per-example gradients of the table (embedding's backward), with a weight per position
    // created inside the loss.
    let loss = |m: &Embedding, i: Tensor<2, Int>| {
        let y = m.forward(i);
        let c = Tensor::<3>::from_data(
            TensorData::new(
                (0..24).map(|v| (v as f32 * 0.3).sin()).collect::<Vec<_>>(),
                [2, 3, 4],
            ),
            &y.device(),
        );
        (y * c).sum()
    };
    grads_oracle(
        &m,
        idx.clone(),
        |i| example::<3, 2, Int>(&idx, i),
        loss,
        "embedding",
    );
}

#[test]
fn should_batch_layer_group_and_instance_norm() {
    let ln: LayerNorm = LayerNormConfig::new(5).init(&dev());
    let gn: GroupNorm = GroupNormConfig::new(2, 4).init(&dev());
    let inn: InstanceNorm = InstanceNormConfig::new(4).with_affine(true).init(&dev());
    let xs = normal([E, 2, 4, 5]);
    // The input is scaled per element first so the affine parameters get nontrivial gradients.
    both::<_, 3, 4, 3, 4>(
        &ln,
        xs.clone(),
        |m, x| m.forward(x.clone() * x.tanh()),
        "layer_norm",
    );
    both::<_, 3, 4, 3, 4>(
        &gn,
        xs.clone(),
        |m, x| m.forward(x.clone() * x.tanh()),
        "group_norm",
    );
    both::<_, 3, 4, 3, 4>(
        &inn,
        xs,
        |m, x| m.forward(x.clone() * x.tanh()),
        "instance_norm",
    );
}

#[derive(Module, Debug)]
struct Act {
    fc: Linear,
    relu: Relu,
    gelu: Gelu,
    sigmoid: Sigmoid,
    tanh: Tanh,
}

#[test]
fn should_batch_activations() {
    let m = Act {
        fc: LinearConfig::new(4, 6).init(&dev()),
        relu: Relu::new(),
        gelu: Gelu::new(),
        sigmoid: Sigmoid::new(),
        tanh: Tanh::new(),
    };
    let xs = normal([E, 2, 4]);
    type F = fn(&Act, Tensor<2>) -> Tensor<2>;
    let cases: [(&str, F); 6] = [
        ("relu", |m, x| m.relu.forward(m.fc.forward(x))),
        ("gelu", |m, x| m.gelu.forward(m.fc.forward(x))),
        ("sigmoid", |m, x| m.sigmoid.forward(m.fc.forward(x))),
        ("tanh", |m, x| m.tanh.forward(m.fc.forward(x))),
        ("softmax", |m, x| softmax(m.fc.forward(x), 1)),
        ("log_softmax", |m, x| log_softmax(m.fc.forward(x), 1)),
    ];
    for (name, f) in cases {
        both::<_, 2, 3, 2, 3>(&m, xs.clone(), f, name);
    }
}

#[test]
fn should_batch_lstm() {
    let m: Lstm = LstmConfig::new(3, 4, true).init(&dev());
    let xs = normal([E, 2, 5, 3]);
    forward_oracle::<_, 3, 4, 3, 4>(&m, xs.clone(), |m, x| m.forward(x, None).0, "lstm");
    let ex = xs.clone();
    grads_oracle(
        &m,
        xs,
        |i| example::<4, 3, _>(&ex, i),
        |m: &Lstm, x: Tensor<3>| {
            let (out, state) = m.forward(x, None);
            smooth(out) + state.cell.sum()
        },
        "lstm",
    );
}

#[test]
fn should_batch_multi_head_attention_with_a_mask_per_example() {
    let m: MultiHeadAttention = MultiHeadAttentionConfig::new(8, 2)
        .with_dropout(0.0)
        .init(&dev());
    let xs = normal([E, 2, 4, 8]);
    let mask = Tensor::<3, Bool>::from_bool(
        TensorData::new(
            (0..E * 2 * 4)
                .map(|k| (k % 4) >= 4 - (k / 4) % 3)
                .collect::<Vec<bool>>(),
            [E, 2, 4],
        ),
        &dev(),
    );
    let f = |m: &MultiHeadAttention, (x, k): (Tensor<3>, Tensor<2, Bool>)| {
        m.forward(MhaInput::self_attn(x).mask_pad(k)).context
    };
    let got: Tensor<4> =
        vmap(|(x, k): (Tensor<3>, Tensor<2, Bool>)| f(&m.clone().to_device(&x.device()), (x, k)))
            .call((xs.clone(), mask.clone()))
            .unwrap();
    let example_i = |i| (example::<4, 3, _>(&xs, i), example::<3, 2, Bool>(&mask, i));
    let want: Vec<Tensor<3>> = (0..E).map(|i| f(&m, example_i(i))).collect();
    assert_close(&values(got), &values(Tensor::stack::<4>(want, 0)), "mha");
    grads_oracle(
        &m,
        (xs.clone(), mask.clone()),
        example_i,
        |m, ex| smooth(f(m, ex)),
        "mha",
    );
}

/// BatchNorm off an autodiff device (its running statistics) is per-example: the loop's values.
/// (In training mode it mixes the examples: `models.rs` has `per_example_grads` refuse it.)
#[test]
fn should_batch_batch_norm_in_eval_mode() {
    let bn = BatchNormConfig::new(3).init(&dev());
    forward_oracle::<_, 3, 4, 3, 4>(&bn, normal([E, 4, 3, 5]), |m, x| m.forward(x), "batch_norm");
}

/// A GRU (gates computed apart from the LSTM's, the reset gate after the product).
#[test]
fn should_batch_gru() {
    let gru: Gru = GruConfig::new(3, 4, true).init(&dev());
    both::<_, 3, 4, 3, 4>(&gru, normal([E, 2, 3, 3]), |m, x| m.forward(x, None), "gru");
}

#[test]
fn should_batch_conv3d_and_conv_transpose1d() {
    let c3: Conv3d = Conv3dConfig::new([2, 3], [2, 3, 2])
        .with_stride([1, 2, 1])
        .init(&dev());
    both::<_, 5, 6, 5, 6>(
        &c3,
        normal([E, 2, 2, 3, 5, 4]),
        |m, x| m.forward(x),
        "conv3d",
    );
    let ct: ConvTranspose1d = ConvTranspose1dConfig::new([2, 3], 3)
        .with_stride(2)
        .init(&dev());
    both::<_, 3, 4, 3, 4>(
        &ct,
        normal([E, 2, 2, 5]),
        |m, x| m.forward(x),
        "conv_transpose1d",
    );
}

#[test]
fn should_batch_rms_norm_prelu_swiglu_and_the_feed_forward_block() {
    let m = Gated::new(&dev());
    both::<_, 2, 3, 2, 3>(&m, normal([E, 3, 5]), |m, x| m.forward(x), "gated");
}

/// Example `i` of two float batches: the arguments of a layer of two inputs.
fn two_inputs<'a>(
    a: &'a Tensor<4>,
    b: &'a Tensor<4>,
) -> impl Fn(usize) -> (Tensor<3>, Tensor<3>) + 'a {
    move |i| (example::<4, 3, _>(a, i), example::<4, 3, _>(b, i))
}

#[test]
fn should_batch_a_transformer_decoder_with_a_causal_mask() {
    let dec: TransformerDecoder = TransformerDecoderConfig::new(8, 16, 2, 1)
        .with_dropout(0.0)
        .init(&dev());
    let target = normal([E, 1, 4, 8]);
    let memory = normal([E, 1, 3, 8]);
    let f = |m: &TransformerDecoder, (t, mem): (Tensor<3>, Tensor<3>)| {
        let mask = generate_autoregressive_mask(1, 4, &t.device());
        m.forward(TransformerDecoderInput::new(t, mem).target_mask_attn(mask))
    };
    grads_oracle(
        &dec,
        (target.clone(), memory.clone()),
        two_inputs(&target, &memory),
        |m, ex| smooth(f(m, ex)),
        "decoder",
    );
}

#[test]
fn should_batch_cross_attention() {
    let target = normal([E, 1, 4, 8]);
    let cross: CrossAttention = CrossAttentionConfig::new(8, 6, 2, 1, 4)
        .with_dropout(0.0)
        .init(&dev());
    let context = normal([E, 1, 3, 6]);
    let g = |m: &CrossAttention, (q, c): (Tensor<3>, Tensor<3>)| m.forward(q, c, None);
    grads_oracle(
        &cross,
        (target.clone(), context.clone()),
        two_inputs(&target, &context),
        |m, ex| smooth(g(m, ex)),
        "cross_attention",
    );
}

#[derive(Module, Debug)]
struct Conv1dThen<L> {
    conv: Conv1d,
    layer: L,
}

#[test]
fn should_batch_one_dimensional_pools_and_reshaping_layers_after_a_convolution() {
    let conv = || Conv1dConfig::new(2, 4, 2).init(&dev());
    let xs = normal([E, 2, 2, 9]);
    let max = Conv1dThen::<MaxPool1d> {
        conv: conv(),
        layer: MaxPool1dConfig::new(3).with_stride(2).init(),
    };
    both::<_, 3, 4, 3, 4>(
        &max,
        xs.clone(),
        |m, x| m.layer.forward(m.conv.forward(x)),
        "max_pool1d",
    );
    let avg = Conv1dThen::<AvgPool1d> {
        conv: conv(),
        layer: AvgPool1dConfig::new(2).init(),
    };
    both::<_, 3, 4, 3, 4>(
        &avg,
        xs.clone(),
        |m, x| m.layer.forward(m.conv.forward(x)),
        "avg_pool1d",
    );
    let ada = Conv1dThen::<AdaptiveAvgPool1d> {
        conv: conv(),
        layer: AdaptiveAvgPool1dConfig::new(3).init(),
    };
    both::<_, 3, 4, 3, 4>(
        &ada,
        xs,
        |m, x| m.layer.forward(m.conv.forward(x)),
        "adaptive_avg_pool1d",
    );
    let lrn = ConvThen::<LocalResponseNorm> {
        conv: Conv2dConfig::new([2, 4], [2, 2]).init(&dev()),
        layer: LocalResponseNormConfig::new(3).init(),
    };
    let xs2 = normal([E, 2, 2, 5, 4]);
    both::<_, 4, 5, 4, 5>(
        &lrn,
        xs2.clone(),
        |m, x| m.layer.forward(m.conv.forward(x)),
        "local_response_norm",
    );
    let shuffle = ConvThen::<PixelShuffle> {
        conv: Conv2dConfig::new([2, 4], [2, 2]).init(&dev()),
        layer: PixelShuffleConfig::new(2).init(),
    };
    both::<_, 4, 5, 4, 5>(
        &shuffle,
        xs2.clone(),
        |m, x| m.layer.forward(m.conv.forward(x)),
        "pixel_shuffle",
    );
    let unfold = ConvThen::<Unfold4d> {
        conv: Conv2dConfig::new([2, 3], [2, 2]).init(&dev()),
        layer: Unfold4dConfig::new([2, 2]).init(),
    };
    both::<_, 4, 5, 3, 4>(
        &unfold,
        xs2,
        |m, x| m.layer.forward(m.conv.forward(x)),
        "unfold4d",
    );
}

#[derive(Module, Debug)]
struct Noisy {
    l1: Linear,
    noise: GaussianNoise,
    l2: Linear,
}

/// `GaussianNoise` in training mode draws as `Dropout` does: independently per example and per
/// call, at its std (the gradient of `l2.weight` is the noised hidden layer, so each example's
/// noise shows in it); in eval mode it adds nothing.
#[test]
fn should_draw_gaussian_noise_per_example_and_per_call_and_none_in_eval_mode() {
    let (n, d_in, d_h) = (4, 3, 400);
    let model = Noisy {
        l1: LinearConfig::new(d_in, d_h).init(&dev()),
        noise: GaussianNoiseConfig::new(0.5).init(),
        l2: LinearConfig::new(d_h, 1).init(&dev()),
    };
    let xs = Tensor::<2>::ones([n, d_in], &dev());
    let h = values(model.l1.forward(Tensor::<2>::ones([1, d_in], &dev())));
    let loss = |m: &Noisy, x: Tensor<1>| m.l2.forward(m.noise.forward(m.l1.forward(x))).sum();
    // Each example's noise: its l2.weight gradient less the noiseless hidden layer.
    let noises = |model: &Noisy| -> Vec<Vec<f32>> {
        let grads = per_example_grads(model, xs.clone(), loss).unwrap();
        let w2 = values(grads.get::<3>("l2.weight").unwrap()); // [n, d_h, 1]
        (0..n)
            .map(|i| (0..d_h).map(|k| w2[i * d_h + k] - h[k]).collect())
            .collect()
    };
    let first = noises(&model);
    for (i, z) in first.iter().enumerate() {
        let std = (z.iter().map(|v| v * v).sum::<f32>() / d_h as f32).sqrt();
        assert!((0.4..0.6).contains(&std), "example {i}: noise std {std}");
        for other in &first[..i] {
            assert_ne!(z, other, "two examples drew the same noise");
        }
    }
    assert_ne!(noises(&model), first, "a second call drew the same noise");
    let eval = noises(&model.valid());
    assert!(
        eval.iter().flatten().all(|v| *v == 0.0),
        "noise in eval mode"
    );
}

#[derive(Module, Debug)]
struct Recurrent {
    rnn: Rnn,
    birnn: BiRnn,
    bilstm: BiLstm,
    bigru: BiGru,
}

/// The bidirectional and plain RNNs (reversed, with a clipped state). Flex only in CI: their
/// ops are the LSTM's and GRU's, which run on wgpu above.
#[test]
#[cfg_attr(
    feature = "wgpu",
    ignore = "CI time on lavapipe; the LSTM's and GRU's ops run on wgpu"
)]
fn should_batch_plain_and_bidirectional_recurrent_layers() {
    let m = Recurrent {
        rnn: RnnConfig::new(3, 4, true)
            .with_reverse(true)
            .with_clip(Some(2.0))
            .init(&dev()),
        birnn: BiRnnConfig::new(3, 4, true).init(&dev()),
        bilstm: BiLstmConfig::new(3, 4, true).init(&dev()),
        bigru: BiGruConfig::new(3, 4, true).init(&dev()),
    };
    both::<_, 3, 4, 3, 4>(
        &m,
        normal([E, 2, 3, 3]),
        |m, x| {
            let (a, _) = m.rnn.forward(x.clone(), None);
            let (b, _) = m.birnn.forward(x.clone(), None);
            let (c, state) = m.bilstm.forward(x.clone(), None);
            let (d, _) = m.bigru.forward(x, None);
            Tensor::cat(vec![a, b, c, d], 2) + state.cell.sum().unsqueeze::<3>()
        },
        "recurrent",
    );
}

/// A 3-d transposed convolution and a deformable one (offsets and a mask per example). Flex
/// only in CI: Burn's own deformable convolution fails on cubecl (`CUBECL_SKIPS`).
#[test]
#[cfg_attr(
    feature = "wgpu",
    ignore = "Burn's deform_conv2d fails on cubecl; CI time on lavapipe"
)]
fn should_batch_conv_transpose3d_and_a_deformable_convolution() {
    let ct: ConvTranspose3d = ConvTranspose3dConfig::new([2, 3], [2, 2, 3])
        .with_stride([2, 1, 1])
        .init(&dev());
    both::<_, 5, 6, 5, 6>(
        &ct,
        normal([E, 2, 2, 2, 3, 3]),
        |m, x| m.forward(x),
        "conv_transpose3d",
    );
    let dc: DeformConv2d = DeformConv2dConfig::new([2, 3], [3, 3]).init(&dev());
    let xs = normal([E, 2, 2, 5, 5]);
    let offsets = normal([E, 2, 18, 3, 3]) * 0.5;
    let masks = burn::tensor::activation::sigmoid(normal([E, 2, 9, 3, 3]));
    let f =
        |m: &DeformConv2d, (x, o, k): (Tensor<4>, Tensor<4>, Tensor<4>)| m.forward(x, o, Some(k));
    let example_i = |i| {
        (
            example::<5, 4, _>(&xs, i),
            example::<5, 4, _>(&offsets, i),
            example::<5, 4, _>(&masks, i),
        )
    };
    let got: Tensor<5> =
        vmap(|ex: (Tensor<4>, Tensor<4>, Tensor<4>)| f(&dc.clone().to_device(&ex.0.device()), ex))
            .call((xs.clone(), offsets.clone(), masks.clone()))
            .unwrap();
    let want: Vec<Tensor<4>> = (0..E).map(|i| f(&dc, example_i(i))).collect();
    assert_close(
        &values(got),
        &values(Tensor::stack::<5>(want, 0)),
        "deform_conv2d",
    );
    grads_oracle(
        &dc,
        (xs.clone(), offsets.clone(), masks.clone()),
        example_i,
        |m, ex| smooth(f(m, ex)),
        "deform_conv2d",
    );
}

//! More burn-nn layers against the loop (`oracle::check`): 3-d and transposed convolutions, a
//! GRU, gated and normalized layers, a transformer decoder and cross-attention, a layer applied
//! twice and an embedding tied to the output projection; clipped sums (in f32 and in f64)
//! microbatched and not.

use burn::module::Module;
use burn::nn::attention::{CrossAttention, CrossAttentionConfig, generate_autoregressive_mask};
use burn::nn::conv::{
    Conv3d, Conv3dConfig, ConvTranspose1d, ConvTranspose1dConfig, ConvTranspose2d,
    ConvTranspose2dConfig,
};
use burn::nn::transformer::{
    TransformerDecoder, TransformerDecoderConfig, TransformerDecoderInput,
};
use burn::nn::{Embedding, EmbeddingConfig, Gru, GruConfig, Linear, LinearConfig};
use burn::tensor::activation::log_softmax;
use burn::tensor::{Distribution, Int, Tensor, TensorData};

use super::alloc::shared;
use super::gated::Gated;
use super::oracle::{check, dev, ready};

/// The batch, and the microbatchings each case runs.
const B: usize = 6;
const MBS: [Option<usize>; 2] = [None, Some(3)];

fn normal<const D: usize>(shape: [usize; D]) -> Tensor<D> {
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), &dev())
}

#[test]
fn should_clip_3d_and_transposed_convolutions_like_the_loop() {
    let _shared = shared();
    let c3: Conv3d = ready(
        Conv3dConfig::new([2, 3], [2, 3, 2])
            .with_stride([1, 2, 1])
            .init(&dev()),
    );
    let xs = normal([B, 2, 3, 5, 4]);
    let example = |i| (xs.clone().narrow(0, i, 1),);
    let loss = |m: &Conv3d, (x,): (Tensor<5>,)| m.forward(x).sin().sum();
    check("conv3d", &c3, (xs.clone(),), B, example, loss, 0.3, &MBS);

    let t1: ConvTranspose1d = ready(
        ConvTranspose1dConfig::new([2, 3], 3)
            .with_stride(2)
            .init(&dev()),
    );
    let xs = normal([B, 2, 5]);
    let example = |i| (xs.clone().narrow(0, i, 1),);
    let loss = |m: &ConvTranspose1d, (x,): (Tensor<3>,)| m.forward(x).sin().sum();
    check(
        "conv_transpose1d",
        &t1,
        (xs.clone(),),
        B,
        example,
        loss,
        0.3,
        &MBS,
    );

    let t2: ConvTranspose2d = ready(
        ConvTranspose2dConfig::new([2, 4], [3, 2])
            .with_stride([2, 1])
            .with_groups(2)
            .init(&dev()),
    );
    let xs = normal([B, 2, 4, 3]);
    let example = |i| (xs.clone().narrow(0, i, 1),);
    let loss = |m: &ConvTranspose2d, (x,): (Tensor<4>,)| m.forward(x).sin().sum();
    check(
        "conv_transpose2d",
        &t2,
        (xs.clone(),),
        B,
        example,
        loss,
        0.3,
        &MBS,
    );
}

#[test]
fn should_clip_a_gru_like_the_loop() {
    let _shared = shared();
    let gru: Gru = ready(GruConfig::new(3, 4, true).init(&dev()));
    let xs = normal([B, 4, 3]);
    let example = |i| (xs.clone().narrow(0, i, 1),);
    let loss = |m: &Gru, (x,): (Tensor<3>,)| m.forward(x, None).sin().sum();
    check("gru", &gru, (xs.clone(),), B, example, loss, 0.3, &MBS);
}

#[test]
fn should_clip_gated_and_normalized_layers_like_the_loop() {
    let _shared = shared();
    let model = ready(Gated::new(&dev()));
    let xs = normal([B, 5]);
    let example = |i| (xs.clone().narrow(0, i, 1),);
    let loss = |m: &Gated, (x,): (Tensor<2>,)| m.forward(x).sin().sum();
    check("gated", &model, (xs.clone(),), B, example, loss, 0.3, &MBS);
}

/// Attention whose keys come from another sequence. Flex only in CI: the encoder's attention
/// is clipped on wgpu by `should_clip_a_transformer_like_the_loop`, and this case's kernels
/// take 19 s to compile on lavapipe.
#[test]
#[cfg_attr(
    feature = "wgpu",
    ignore = "19 s of kernel compilation on lavapipe; the encoder's attention runs on wgpu"
)]
fn should_clip_a_transformer_decoder_and_cross_attention_like_the_loop() {
    let _shared = shared();
    let decoder: TransformerDecoder = ready(
        TransformerDecoderConfig::new(8, 16, 2, 1)
            .with_dropout(0.0)
            .init(&dev()),
    );
    let target = normal([B, 4, 8]);
    let memory = normal([B, 3, 8]);
    let example = |i| {
        (
            target.clone().narrow(0, i, 1),
            memory.clone().narrow(0, i, 1),
        )
    };
    let loss = |m: &TransformerDecoder, (t, mem): (Tensor<3>, Tensor<3>)| {
        let [b, l, _] = t.dims();
        let mask = generate_autoregressive_mask(b, l, &t.device());
        let input = TransformerDecoderInput::new(t, mem).target_mask_attn(mask);
        m.forward(input).sin().sum()
    };
    let args = (target.clone(), memory.clone());
    check("decoder", &decoder, args, B, example, loss, 0.3, &MBS);

    // One key/value head shared by two query heads.
    let cross: CrossAttention = ready(
        CrossAttentionConfig::new(8, 6, 2, 1, 4)
            .with_dropout(0.0)
            .init(&dev()),
    );
    let context = normal([B, 3, 6]);
    let example = |i| {
        (
            target.clone().narrow(0, i, 1),
            context.clone().narrow(0, i, 1),
        )
    };
    let loss =
        |m: &CrossAttention, (q, c): (Tensor<3>, Tensor<3>)| m.forward(q, c, None).sin().sum();
    let args = (target.clone(), context.clone());
    check("cross_attention", &cross, args, B, example, loss, 0.3, &MBS);
}

/// A layer applied twice in one forward (a shared block, a Siamese tower): one parameter with two
/// factored contributions per example, whose norm takes their cross term.
#[derive(Module, Debug)]
struct Twice {
    fc: Linear,
}

#[test]
fn should_clip_a_layer_applied_twice_like_the_loop() {
    let _shared = shared();
    let m = ready(Twice {
        fc: LinearConfig::new(4, 4).init(&dev()),
    });
    // One row an example, and a sequence of three.
    let xs = normal([B, 4]);
    let example = |i| (xs.clone().narrow(0, i, 1),);
    let loss = |m: &Twice, (x,): (Tensor<2>,)| m.fc.forward(m.fc.forward(x).tanh()).sin().sum();
    check("twice", &m, (xs.clone(),), B, example, loss, 0.3, &MBS);
    let xs = normal([B, 3, 4]);
    let example = |i| (xs.clone().narrow(0, i, 1),);
    let loss = |m: &Twice, (x,): (Tensor<3>,)| m.fc.forward(m.fc.forward(x).tanh()).sin().sum();
    check(
        "twice over a sequence",
        &m,
        (xs.clone(),),
        B,
        example,
        loss,
        0.3,
        &MBS,
    );
}

/// A language model whose output projection is its embedding's weight (GPT-2's tying, one
/// `Param` read twice: a lookup and a matrix product), tokens repeated within an example.
#[derive(Module, Debug)]
struct TiedLm {
    embed: Embedding,
    fc: Linear,
}

#[test]
fn should_clip_an_embedding_tied_to_the_output_projection_like_the_loop() {
    let _shared = shared();
    let m = ready(TiedLm {
        embed: EmbeddingConfig::new(7, 4).init(&dev()),
        fc: LinearConfig::new(4, 4).init(&dev()),
    });
    let tokens: Vec<i64> = (0..B * 5).map(|k| ((k * 3) % 7) as i64).collect();
    let tokens = Tensor::<2, Int>::from_data(TensorData::new(tokens, [B, 5]), &dev());
    let example = |i| (tokens.clone().narrow(0, i, 1),);
    let loss = |m: &TiedLm, (t,): (Tensor<2, Int>,)| {
        let h = m.fc.forward(m.embed.forward(t)).tanh(); // [1, 5, 4]
        let logits = h.matmul(m.embed.weight.val().transpose().unsqueeze::<3>()); // [1, 5, 7]
        log_softmax(logits, 2).sin().sum()
    };
    check(
        "tied lm",
        &m,
        (tokens.clone(),),
        B,
        example,
        loss,
        0.3,
        &MBS,
    );
}

/// A small vision transformer: patches by a strided convolution, a class token and position
/// embeddings as raw parameters (the class token concatenated to each example's patches,
/// broadcast; the positions added), Burn's encoder, the class token's output classified.
#[derive(Module, Debug)]
struct Vit {
    patch: burn::nn::conv::Conv2d,
    cls: burn::module::Param<Tensor<3>>,
    pos: burn::module::Param<Tensor<3>>,
    encoder: burn::nn::transformer::TransformerEncoder,
    norm: burn::nn::LayerNorm,
    head: Linear,
}

#[test]
fn should_clip_a_vision_transformer_with_a_class_token_like_the_loop() {
    use burn::nn::transformer::{TransformerEncoderConfig, TransformerEncoderInput};
    let _shared = shared();
    let d = 8;
    let model = ready(Vit {
        patch: burn::nn::conv::Conv2dConfig::new([2, d], [2, 2])
            .with_stride([2, 2])
            .init(&dev()),
        cls: burn::module::Param::from_tensor(normal([1, 1, d])),
        pos: burn::module::Param::from_tensor(normal([1, 5, d])),
        encoder: TransformerEncoderConfig::new(d, 16, 2, 1)
            .with_dropout(0.0)
            .init(&dev()),
        norm: burn::nn::LayerNormConfig::new(d).init(&dev()),
        head: LinearConfig::new(d, 3).init(&dev()),
    });
    let xs = normal([B, 2, 4, 4]);
    let example = |i| (xs.clone().narrow(0, i, 1),);
    let loss = |m: &Vit, (x,): (Tensor<4>,)| {
        let [n, _, _, _] = x.dims();
        let p = m.patch.forward(x).flatten::<3>(2, 3).swap_dims(1, 2); // [n, 4, d]
        let cls = m.cls.val().expand([n as i64, 1, -1]);
        let h = Tensor::cat(vec![cls, p], 1) + m.pos.val(); // [n, 5, d]
        let h = m.encoder.forward(TransformerEncoderInput::new(h));
        let first = m.norm.forward(h.narrow(1, 0, 1)).squeeze_dim::<2>(1);
        log_softmax(m.head.forward(first), 1).sin().sum()
    };
    check("vit", &model, (xs.clone(),), B, example, loss, 0.02, &MBS);
}

/// A LoRA adapter (DP fine-tuning's usual set-up): a frozen base `Linear` and a trainable
/// low-rank pair beside it. The frozen weight has no gradient and no part in the norm.
#[derive(Module, Debug)]
struct Lora {
    base: Linear,
    down: Linear,
    up: Linear,
}

#[test]
fn should_clip_a_low_rank_adapter_beside_a_frozen_layer_like_the_loop() {
    let _shared = shared();
    let model = ready(Lora {
        base: LinearConfig::new(6, 5).init(&dev()).no_grad(),
        down: LinearConfig::new(6, 2).with_bias(false).init(&dev()),
        up: LinearConfig::new(2, 5).with_bias(false).init(&dev()),
    });
    let xs = normal([B, 3, 6]);
    let example = |i| (xs.clone().narrow(0, i, 1),);
    let loss = |m: &Lora, (x,): (Tensor<3>,)| {
        (m.base.forward(x.clone()) + m.up.forward(m.down.forward(x)))
            .sin()
            .sum()
    };
    check("lora", &model, (xs.clone(),), B, example, loss, 0.3, &MBS);
    let (sum, _) = burn_vmap::micro_grad_module(loss)
        .call(&model, (xs.clone(),))
        .unwrap();
    let paths: Vec<String> = sum.iter().map(|(path, _, _)| path.to_string()).collect();
    assert_eq!(paths, ["down.weight", "up.weight"]);
}

//! The layers and models, each against the loop (`oracle::check`): clipped sums and moments,
//! microbatched and not.

use burn::module::Module;
use burn::nn::conv::{Conv1d, Conv1dConfig, Conv2d, Conv2dConfig};
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{
    Embedding, EmbeddingConfig, Linear, LinearConfig, Lstm, LstmConfig, PaddingConfig1d,
    PaddingConfig2d,
};
use burn::tensor::{Distribution, Int, Tensor};
use proptest::prelude::*;

use super::alloc::shared;
use super::oracle::{check, dev, ready};

fn normal<const D: usize>(shape: [usize; D]) -> Tensor<D> {
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), &dev())
}

/// `b` examples of `t` tokens below `vocab`, some repeated (their rows add up).
fn tokens(b: usize, t: usize, vocab: usize) -> Tensor<2, Int> {
    let ids: Vec<i64> = (0..b * t)
        .map(|i| ((i * 7 + i / 3) % vocab) as i64)
        .collect();
    Tensor::<1, Int>::from_ints(ids.as_slice(), &dev()).reshape([b, t])
}

/// A `Linear` over a sequence `[t, d_in]` per example (a batch of one: `[1, t, d_in]`).
fn linear_seq(b: usize, t: usize, d_in: usize, d_out: usize, mbs: &[Option<usize>]) {
    let layer: Linear = ready(LinearConfig::new(d_in, d_out).init(&dev()));
    let xs = normal([b, t, d_in]);
    let loss = |m: &Linear, (x,): (Tensor<3>,)| m.forward(x).sin().sum();
    let example = |i| (xs.clone().narrow(0, i, 1),);
    check(
        "linear over a sequence",
        &layer,
        (xs.clone(),),
        b,
        example,
        loss,
        0.5,
        mbs,
    );
}

/// An `Embedding` of `t` tokens per example.
fn embedding(b: usize, t: usize, vocab: usize, d: usize, mbs: &[Option<usize>]) {
    let layer: Embedding = ready(EmbeddingConfig::new(vocab, d).init(&dev()));
    let xs = tokens(b, t, vocab);
    let loss = |m: &Embedding, (x,): (Tensor<2, Int>,)| m.forward(x).sin().sum();
    let example = |i| (xs.clone().narrow(0, i, 1),);
    check(
        "embedding",
        &layer,
        (xs.clone(),),
        b,
        example,
        loss,
        0.5,
        mbs,
    );
}

/// The settings of a test convolution.
#[derive(Debug, Clone, Copy)]
struct ConvCase {
    c_in: usize,
    c_out: usize,
    kernel: usize,
    stride: usize,
    padding: usize,
    dilation: usize,
    groups: usize,
    size: usize,
}

const BASE: ConvCase = ConvCase {
    c_in: 2,
    c_out: 3,
    kernel: 2,
    stride: 1,
    padding: 0,
    dilation: 1,
    groups: 1,
    size: 5,
};

fn conv1d(b: usize, c: ConvCase, mbs: &[Option<usize>]) {
    let layer: Conv1d = ready(
        Conv1dConfig::new(c.c_in * c.groups, c.c_out * c.groups, c.kernel)
            .with_stride(c.stride)
            .with_padding(PaddingConfig1d::Explicit(c.padding, c.padding))
            .with_dilation(c.dilation)
            .with_groups(c.groups)
            .init(&dev()),
    );
    let xs = normal([b, c.c_in * c.groups, c.size]);
    let loss = |m: &Conv1d, (x,): (Tensor<3>,)| m.forward(x).sin().sum();
    let example = |i| (xs.clone().narrow(0, i, 1),);
    check(
        &format!("conv1d {c:?}"),
        &layer,
        (xs.clone(),),
        b,
        example,
        loss,
        0.5,
        mbs,
    );
}

fn conv2d(b: usize, c: ConvCase, mbs: &[Option<usize>]) {
    let layer: Conv2d = ready(
        Conv2dConfig::new(
            [c.c_in * c.groups, c.c_out * c.groups],
            [c.kernel, c.kernel],
        )
        .with_stride([c.stride, c.stride])
        .with_padding(PaddingConfig2d::Explicit(
            c.padding, c.padding, c.padding, c.padding,
        ))
        .with_dilation([c.dilation, c.dilation])
        .with_groups(c.groups)
        .init(&dev()),
    );
    let xs = normal([b, c.c_in * c.groups, c.size, c.size + 1]);
    let loss = |m: &Conv2d, (x,): (Tensor<4>,)| m.forward(x).sin().sum();
    let example = |i| (xs.clone().narrow(0, i, 1),);
    check(
        &format!("conv2d {c:?}"),
        &layer,
        (xs.clone(),),
        b,
        example,
        loss,
        0.5,
        mbs,
    );
}

/// An `Lstm` over `[t, d_in]` per example: one outer product per time step, summed.
fn lstm(b: usize, t: usize, d_in: usize, hidden: usize, mbs: &[Option<usize>]) {
    let layer: Lstm = ready(LstmConfig::new(d_in, hidden, true).init(&dev()));
    let xs = normal([b, t, d_in]);
    let loss = |m: &Lstm, (x,): (Tensor<3>,)| m.forward(x, None).0.sin().sum();
    let example = |i| (xs.clone().narrow(0, i, 1),);
    check("lstm", &layer, (xs.clone(),), b, example, loss, 0.5, mbs);
}

#[test]
fn should_clip_a_linear_over_sequences_like_the_loop() {
    let _shared = shared();
    // 3 rows of width 8 + 8: factors smaller than the 8 x 8 product.
    linear_seq(4, 3, 8, 8, &[None, Some(1), Some(2)]);
    // Many rows, small weights: multiplied out at once (mixed ghost clipping).
    linear_seq(3, 20, 3, 2, &[None, Some(3)]);
}

#[test]
fn should_clip_an_embedding_like_the_loop() {
    let _shared = shared();
    embedding(6, 5, 40, 6, &[None, Some(2), Some(3)]);
}

#[test]
fn should_clip_every_convolution_setting_like_the_loop() {
    let _shared = shared();
    let cases = [
        BASE,
        ConvCase { stride: 2, ..BASE },
        ConvCase { padding: 1, ..BASE },
        ConvCase {
            dilation: 2,
            ..BASE
        },
        ConvCase { groups: 2, ..BASE },
        ConvCase {
            kernel: 3,
            stride: 2,
            padding: 1,
            dilation: 2,
            groups: 2,
            size: 7,
            ..BASE
        },
        // 2 output positions against a 6 x 2 x 3 x 3 weight: held factored.
        ConvCase {
            c_out: 6,
            kernel: 3,
            size: 3,
            ..BASE
        },
    ];
    for c in cases {
        conv1d(4, c, &[None, Some(2)]);
        conv2d(4, c, &[None, Some(2)]);
    }
}

#[test]
fn should_clip_an_lstm_like_the_loop() {
    let _shared = shared();
    lstm(4, 4, 10, 12, &[None, Some(2)]);
}

// ---------------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------------

#[derive(Module, Debug)]
struct SeqModel {
    embed: Embedding,
    proj: Linear,
    conv: Conv1d,
    rnn: Lstm,
    head: Linear,
}

impl SeqModel {
    fn new() -> Self {
        Self {
            embed: EmbeddingConfig::new(30, 6).init(&dev()),
            proj: LinearConfig::new(6, 8).init(&dev()),
            conv: Conv1dConfig::new(8, 8, 2).init(&dev()),
            rnn: LstmConfig::new(8, 5, true).init(&dev()),
            head: LinearConfig::new(5, 3).init(&dev()),
        }
    }

    /// `[n, t]` tokens to a scalar.
    fn loss(&self, (tokens,): (Tensor<2, Int>,)) -> Tensor<1> {
        let h = self.proj.forward(self.embed.forward(tokens)).tanh(); // [n, t, 8]
        let h = self.conv.forward(h.swap_dims(1, 2)).swap_dims(1, 2); // [n, t-1, 8]
        let (h, _) = self.rnn.forward(h, None); // [n, t-1, 5]
        self.head.forward(h.mean_dim(1)).sin().sum()
    }
}

#[test]
fn should_clip_every_layer_of_a_sequence_model_like_the_loop() {
    let _shared = shared();
    let model = ready(SeqModel::new());
    let (b, t) = (6, 4);
    let xs = tokens(b, t, 30);
    let example = |i| (xs.clone().narrow(0, i, 1),);
    let mbs = [None, Some(1), Some(2), Some(3)];
    check(
        "sequence model",
        &model,
        (xs.clone(),),
        b,
        example,
        SeqModel::loss,
        0.05,
        &mbs,
    );
}

/// A small text classifier on Burn's transformer encoder.
#[derive(Module, Debug)]
struct Encoder {
    tokens: Embedding,
    encoder: TransformerEncoder,
    head: Linear,
}

impl Encoder {
    fn new() -> Self {
        Self {
            tokens: EmbeddingConfig::new(20, 8).init(&dev()),
            encoder: TransformerEncoderConfig::new(8, 16, 2, 1)
                .with_dropout(0.0)
                .init(&dev()),
            head: LinearConfig::new(8, 3).init(&dev()),
        }
    }

    fn loss(&self, (tokens,): (Tensor<2, Int>,)) -> Tensor<1> {
        let h = self
            .encoder
            .forward(TransformerEncoderInput::new(self.tokens.forward(tokens)));
        self.head
            .forward(h.mean_dim(1).squeeze_dim::<2>(1))
            .sin()
            .sum()
    }
}

#[test]
fn should_clip_a_transformer_like_the_loop() {
    let _shared = shared();
    let model = ready(Encoder::new());
    let (b, t) = (6, 3);
    let xs = tokens(b, t, 20);
    let example = |i| (xs.clone().narrow(0, i, 1),);
    check(
        "transformer",
        &model,
        (xs.clone(),),
        b,
        example,
        Encoder::loss,
        0.1,
        &[None, Some(2)],
    );
}

// ---------------------------------------------------------------------------------------------
// Random shapes
// ---------------------------------------------------------------------------------------------

/// A microbatch size dividing `b`: none, or one of its divisors.
fn microbatch(b: usize, pick: usize) -> Option<usize> {
    let divisors: Vec<usize> = (1..=b).filter(|m| b.is_multiple_of(*m)).collect();
    (pick > 0).then(|| divisors[pick % divisors.len()])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(6))]

    #[test]
    fn should_clip_random_sequence_layers_like_the_loop(
        b in 1usize..5, t in 1usize..4, d_in in 2usize..9, d_out in 2usize..9, pick in 0usize..4,
    ) {
        let _shared = shared();
        linear_seq(b, t, d_in, d_out, &[microbatch(b, pick)]);
    }

    #[test]
    fn should_clip_random_embeddings_like_the_loop(
        b in 1usize..5, t in 1usize..5, vocab in 3usize..16, d in 1usize..6, pick in 0usize..4,
    ) {
        let _shared = shared();
        embedding(b, t, vocab, d, &[microbatch(b, pick)]);
    }

    #[test]
    fn should_clip_random_convolutions_like_the_loop(
        b in 1usize..4, c_in in 1usize..4, c_out in 2usize..7, kernel in 2usize..4,
        stride in 1usize..3, extra in 0usize..3, pick in 0usize..3,
    ) {
        let _shared = shared();
        // `extra` more input positions than the kernel: one to three output positions.
        let c = ConvCase { c_in, c_out, kernel, stride, padding: 0, dilation: 1, groups: 1, size: kernel + extra };
        conv1d(b, c, &[microbatch(b, pick)]);
        conv2d(b, ConvCase { size: kernel, ..c }, &[microbatch(b, pick)]);
    }
}

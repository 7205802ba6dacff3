//! Factored per-example weight gradients beyond one row (`rules::factored`): a `Linear` over
//! sequences, 1-d and 2-d convolutions (strides, padding, dilation, groups), embeddings (one-hot
//! rows) and an LSTM (a sum of per-time-step products). Each against the loop oracle (the
//! per-example gradient from a single-example backward pass, stacked), then random chains of the
//! ops that have factored forms against the same chain on the loop's tensor, over random shapes,
//! batch axes, nested levels and microbatching.

use burn::backend::Autodiff;
use burn::module::AutodiffModule;
use burn::module::Module;
use burn::nn::conv::{Conv1d, Conv1dConfig, Conv2d, Conv2dConfig};
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{
    Embedding, EmbeddingConfig, Linear, LinearConfig, Lstm, LstmConfig, PaddingConfig1d,
    PaddingConfig2d,
};
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensorOps;
use burn::tensor::{
    BasicOps, Distribution, Int, Tensor, TensorKind, TensorMetadata, TensorPrimitive, Tolerance,
};
use burn_vmap::accumulate::{Concat, Sum};
use burn_vmap::testing::TestBackend;
use burn_vmap::transform::grad::init_params;
use burn_vmap::tree::Tree;
use burn_vmap::{MicroAux, ParamGrads, Vmap, clip_by_global_norm, micro_grad_module, vmap};
use proptest::prelude::*;

type V = Vmap<TestBackend>;
type AD = Autodiff<V>;

fn device() -> burn::tensor::Device<V> {
    Default::default()
}

/// `m` with its parameters drawn (Burn draws them lazily: clones would differ).
fn ready<M: AutodiffModule<AD>>(m: M) -> M {
    init_params(&m);
    m
}

fn is_factored<const D: usize>(t: &Tensor<V, D>) -> bool {
    t.clone().into_primitive().tensor().is_factored()
}

fn close<const D: usize>(got: Tensor<V, D>, want: Tensor<V, D>, what: &str) {
    assert_eq!(got.dims(), want.dims(), "{what}: dims");
    let (g, w) = (got.into_data(), want.into_data());
    let scale = w.iter::<f32>().fold(1.0f32, |a, v| a.max(v.abs()));
    g.assert_approx_eq::<f32>(&w, Tolerance::rel_abs(2e-3, 2e-4 * scale));
}

/// The per-example gradient of parameter `path` by one vmap (moved to `axis`), and by the loop
/// (one backward pass per example, stacked at `axis`).
fn grads_of<M, K, const E: usize, const F: usize, const W: usize, const D: usize>(
    m: &M,
    xs: Tensor<AD, E, K>,
    loss: impl Fn(&M, Tensor<AD, F, K>) -> Tensor<AD, 1> + Copy,
    path: &str,
    axis: isize,
) -> (Tensor<V, D>, Tensor<V, D>)
where
    M: AutodiffModule<AD>,
    K: TensorKind<AD> + BasicOps<AD> + TensorKind<V> + BasicOps<V>,
    Tensor<AD, E, K>: Tree<AD>,
    Tensor<AD, F, K>: Tree<AD>,
{
    let b = xs.dims()[0];
    let got: Tensor<V, D> = vmap(|x: Tensor<AD, F, K>| {
        let mut g = loss(m, x).backward();
        ParamGrads::<V>::from_module(&mut g, m)
            .get::<W>(path)
            .expect("the parameter has a gradient")
    })
    .out_axes(axis)
    .call_as(xs.clone())
    .unwrap();
    let rows: Vec<Tensor<V, W>> = (0..b)
        .map(|i| {
            let x = xs.clone().narrow(0, i, 1).squeeze_dim::<F>(0);
            let mut g = loss(m, x).backward();
            ParamGrads::<V>::from_module(&mut g, m)
                .get::<W>(path)
                .unwrap()
        })
        .collect();
    let at = axis.rem_euclid(D as isize) as usize;
    if rows.is_empty() {
        let want = Tensor::zeros(got.shape(), &device());
        return (got, want);
    }
    (got, Tensor::stack(rows, at))
}

// ---------------------------------------------------------------------------------------------
// The layers, each against the loop
// ---------------------------------------------------------------------------------------------

/// `Linear` on a sequence `[t, d_in]` per example.
fn linear_seq(
    b: usize,
    t: usize,
    d_in: usize,
    d_out: usize,
    axis: isize,
) -> (Tensor<V, 3>, Tensor<V, 3>) {
    let layer: Linear<AD> = ready(LinearConfig::new(d_in, d_out).init(&device()));
    let xs = Tensor::<AD, 3>::random([b, t, d_in], Distribution::Normal(0.0, 1.0), &device());
    grads_of::<_, _, 3, 2, 2, 3>(
        &layer,
        xs,
        |m: &Linear<AD>, x: Tensor<AD, 2>| m.forward(x).sin().sum(),
        "weight",
        axis,
    )
}

/// `Embedding` of `[1, t]` tokens per example.
fn embedding(
    b: usize,
    t: usize,
    vocab: usize,
    d: usize,
    axis: isize,
) -> (Tensor<V, 3>, Tensor<V, 3>) {
    let layer: Embedding<AD> = ready(EmbeddingConfig::new(vocab, d).init(&device()));
    // Repeated tokens (a small vocabulary): their rows add up.
    let tokens: Vec<i64> = (0..b * t)
        .map(|i| ((i * 7 + i / 3) % vocab) as i64)
        .collect();
    let xs = Tensor::<AD, 1, Int>::from_ints(tokens.as_slice(), &device()).reshape([b, 1, t]);
    grads_of::<_, _, 3, 2, 2, 3>(
        &layer,
        xs,
        |m: &Embedding<AD>, x: Tensor<AD, 2, Int>| m.forward(x).sin().sum(),
        "weight",
        axis,
    )
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

fn conv1d(b: usize, c: ConvCase, axis: isize) -> (Tensor<V, 4>, Tensor<V, 4>) {
    let layer: Conv1d<AD> = ready(
        Conv1dConfig::new(c.c_in * c.groups, c.c_out * c.groups, c.kernel)
            .with_stride(c.stride)
            .with_padding(PaddingConfig1d::Explicit(c.padding, c.padding))
            .with_dilation(c.dilation)
            .with_groups(c.groups)
            .init(&device()),
    );
    let xs = Tensor::<AD, 4>::random(
        [b, 1, c.c_in * c.groups, c.size],
        Distribution::Normal(0.0, 1.0),
        &device(),
    );
    grads_of::<_, _, 4, 3, 3, 4>(
        &layer,
        xs,
        |m: &Conv1d<AD>, x: Tensor<AD, 3>| m.forward(x).sin().sum(),
        "weight",
        axis,
    )
}

fn conv2d(b: usize, c: ConvCase, axis: isize) -> (Tensor<V, 5>, Tensor<V, 5>) {
    let layer: Conv2d<AD> = ready(
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
        .init(&device()),
    );
    let xs = Tensor::<AD, 5>::random(
        [b, 1, c.c_in * c.groups, c.size, c.size + 1],
        Distribution::Normal(0.0, 1.0),
        &device(),
    );
    grads_of::<_, _, 5, 4, 4, 5>(
        &layer,
        xs,
        |m: &Conv2d<AD>, x: Tensor<AD, 4>| m.forward(x).sin().sum(),
        "weight",
        axis,
    )
}

/// The input gate's input weight of an LSTM over `[1, t, d_in]` per example: one outer product
/// per time step, summed.
fn lstm(
    b: usize,
    t: usize,
    d_in: usize,
    hidden: usize,
    axis: isize,
) -> (Tensor<V, 3>, Tensor<V, 3>) {
    let layer: Lstm<AD> = ready(LstmConfig::new(d_in, hidden, true).init(&device()));
    let xs = Tensor::<AD, 4>::random([b, 1, t, d_in], Distribution::Normal(0.0, 1.0), &device());
    grads_of::<_, _, 4, 3, 2, 3>(
        &layer,
        xs,
        |m: &Lstm<AD>, x: Tensor<AD, 3>| m.forward(x, None).0.sin().sum(),
        "input_gate.input_transform.weight",
        axis,
    )
}

#[test]
fn should_hold_a_sequence_layers_gradient_factored_with_the_loop_values() {
    // 3 rows of width 8 + 8: factors smaller than the 8 x 8 product.
    let (g, want) = linear_seq(4, 3, 8, 8, 0);
    assert!(is_factored(&g), "3 rows per example, 8 x 8 weights");
    close(g, want, "linear over a sequence");
    // Many rows, small weights: multiplied out at once (mixed ghost clipping).
    let (g, want) = linear_seq(3, 20, 3, 2, 0);
    assert!(!is_factored(&g));
    close(g, want, "linear over a long sequence");
}

#[test]
fn should_hold_an_embeddings_gradient_as_one_hot_rows() {
    let (g, want) = embedding(3, 5, 40, 6, 0);
    assert!(is_factored(&g), "5 tokens in a 40 x 6 table");
    close(g.clone(), want.clone(), "embedding");
    close(
        (g.clone() * g.clone()).sum(),
        (want.clone() * want.clone()).sum(),
        "squared norm",
    );
    close(
        g.clone().sum_dim(0),
        want.clone().sum_dim(0),
        "sum over examples",
    );
}

#[test]
fn should_match_the_loop_for_every_convolution_setting() {
    let base = ConvCase {
        c_in: 2,
        c_out: 3,
        kernel: 2,
        stride: 1,
        padding: 0,
        dilation: 1,
        groups: 1,
        size: 5,
    };
    let cases = [
        base,
        ConvCase { stride: 2, ..base },
        ConvCase { padding: 1, ..base },
        ConvCase {
            dilation: 2,
            ..base
        },
        ConvCase { groups: 2, ..base },
        ConvCase {
            kernel: 3,
            stride: 2,
            padding: 1,
            dilation: 2,
            groups: 2,
            size: 7,
            ..base
        },
    ];
    for c in cases {
        for axis in [0, 1, -1] {
            let (g, want) = conv1d(3, c, axis);
            close(g, want, &format!("conv1d {c:?} axis {axis}"));
            let (g, want) = conv2d(3, c, axis);
            close(g, want, &format!("conv2d {c:?} axis {axis}"));
        }
    }
}

#[test]
fn should_hold_a_convolutions_gradient_factored_when_it_has_few_positions() {
    // 2 output positions against a 6 x 2 x 3 x 3 weight.
    let c = ConvCase {
        c_in: 2,
        c_out: 6,
        kernel: 3,
        stride: 1,
        padding: 0,
        dilation: 1,
        groups: 1,
        size: 3,
    };
    let (g, want) = conv2d(4, c, 0);
    assert!(is_factored(&g), "2 positions");
    close(
        (g.clone() * g.clone()).sum(),
        (want.clone() * want.clone()).sum(),
        "squared norm",
    );
    close(
        g.clone().sum_dim(0),
        want.clone().sum_dim(0),
        "sum over examples",
    );
    close(g, want, "conv2d");
    // Many positions: multiplied out at once.
    let (g, want) = conv2d(2, ConvCase { size: 12, ..c }, 0);
    assert!(!is_factored(&g));
    close(g, want, "conv2d, many positions");
}

#[test]
fn should_multiply_out_a_large_convolutions_gradient_a_slice_of_examples_at_a_time() {
    // 39 x 40 positions x 72 patch values per example: the patches of the 40 examples are
    // computed in two slices (37 + 3); every example against the loop.
    let c = ConvCase {
        c_in: 8,
        c_out: 2,
        kernel: 3,
        stride: 1,
        padding: 0,
        dilation: 1,
        groups: 1,
        size: 41,
    };
    let (g, want) = conv2d(40, c, 0);
    assert!(!is_factored(&g));
    close(g, want, "conv2d in slices");
}

#[test]
fn should_sum_an_lstms_time_steps_factored() {
    let (g, want) = lstm(3, 4, 10, 12, 0);
    assert!(is_factored(&g), "4 outer products of 10 x 12");
    close(
        (g.clone() * g.clone()).sum(),
        (want.clone() * want.clone()).sum(),
        "squared norm",
    );
    close(
        g.clone().sum_dim(0),
        want.clone().sum_dim(0),
        "sum over examples",
    );
    close(g, want, "lstm");
}

#[test]
fn should_give_empty_results_for_an_empty_batch() {
    let (g, _) = linear_seq(0, 3, 8, 8, 0);
    assert_eq!(g.dims(), [0, 8, 8]);
    assert_eq!(
        g.clone()
            .sum_dim(0)
            .into_data()
            .iter::<f32>()
            .filter(|v| *v != 0.0)
            .count(),
        0
    );
    let (g, _) = embedding(0, 3, 10, 4, 0);
    assert_eq!(g.dims(), [0, 10, 4]);
    let (g, _) = lstm(0, 3, 4, 5, 0);
    assert_eq!(g.clone().sum_dim(0).dims(), [1, 4, 5]);
}

// ---------------------------------------------------------------------------------------------
// Clipping through micro_grad_module, microbatched, against the loop
// ---------------------------------------------------------------------------------------------

#[derive(Module, Debug)]
struct SeqModel<B: Backend> {
    embed: Embedding<B>,
    proj: Linear<B>,
    conv: Conv1d<B>,
    rnn: Lstm<B>,
    head: Linear<B>,
}

impl<B: Backend> SeqModel<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            embed: EmbeddingConfig::new(30, 6).init(device),
            proj: LinearConfig::new(6, 8).init(device),
            conv: Conv1dConfig::new(8, 8, 2).init(device),
            rnn: LstmConfig::new(8, 5, true).init(device),
            head: LinearConfig::new(5, 3).init(device),
        }
    }

    /// `[n, t]` tokens to a scalar.
    fn loss(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 1> {
        let h = self.proj.forward(self.embed.forward(tokens)).tanh(); // [n, t, 8]
        let h = self.conv.forward(h.swap_dims(1, 2)).swap_dims(1, 2); // [n, t-1, 8]
        let (h, _) = self.rnn.forward(h, None); // [n, t-1, 5]
        self.head.forward(h.mean_dim(1)).sin().sum()
    }
}

#[test]
fn should_clip_and_sum_every_layer_like_the_loop_microbatched() {
    let model: SeqModel<AD> = ready(SeqModel::new(&device()));
    let (b, t) = (6, 4);
    let tokens: Vec<i64> = (0..b * t).map(|i| ((i * 5 + i / 4) % 30) as i64).collect();
    let xs = Tensor::<AD, 1, Int>::from_ints(tokens.as_slice(), &device()).reshape([b, t]);
    let c = 0.05;
    let want = clipped_sum_by_loop(&model, &xs, c, SeqModel::loss);
    for mb in [None, Some(1), Some(2), Some(3)] {
        let (got, _): (ParamGrads<V>, MicroAux<V>) =
            micro_grad_module(|m: &SeqModel<AD>, (x,): (Tensor<AD, 2, Int>,)| m.loss(x))
                .microbatch_size(mb)
                .transform_fn(|g: ParamGrads<V>| clip_by_global_norm(g, c))
                .accumulator(Sum)
                .call(&model, (xs.clone(),))
                .unwrap();
        close_all(&got, &want, &format!("microbatch {mb:?}"));
    }
    // Per-example gradients (Concat), multiplied out, against the loop.
    let (per, _): (ParamGrads<V>, MicroAux<V>) =
        micro_grad_module(|m: &SeqModel<AD>, (x,): (Tensor<AD, 2, Int>,)| m.loss(x))
            .microbatch_size(2)
            .accumulator(Concat)
            .call(&model, (xs.clone(),))
            .unwrap();
    let g: Tensor<V, 3> = per.get("embed.weight").unwrap();
    let x = xs.narrow(0, 4, 1);
    let mut one = model.loss(x).backward();
    let one: Tensor<V, 2> = ParamGrads::<V>::from_module(&mut one, &model)
        .get("embed.weight")
        .unwrap();
    close(
        g.narrow(0, 4, 1).squeeze_dim::<2>(0),
        one,
        "embed.weight of example 4",
    );
}

/// A small text classifier on Burn's transformer encoder.
#[derive(Module, Debug)]
struct Encoder<B: Backend> {
    tokens: Embedding<B>,
    encoder: TransformerEncoder<B>,
    head: Linear<B>,
}

impl<B: Backend> Encoder<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            tokens: EmbeddingConfig::new(20, 8).init(device),
            encoder: TransformerEncoderConfig::new(8, 16, 2, 1)
                .with_dropout(0.0)
                .init(device),
            head: LinearConfig::new(8, 3).init(device),
        }
    }

    fn loss(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 1> {
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
fn should_clip_and_sum_a_transformer_like_the_loop() {
    let model: Encoder<AD> = ready(Encoder::new(&device()));
    let (b, t) = (6, 3);
    let tokens: Vec<i64> = (0..b * t).map(|i| ((i * 7 + i / 2) % 20) as i64).collect();
    let xs = Tensor::<AD, 1, Int>::from_ints(tokens.as_slice(), &device()).reshape([b, t]);
    let c = 0.1;
    let want = clipped_sum_by_loop(&model, &xs, c, Encoder::loss);
    for mb in [None, Some(2)] {
        let (got, _): (ParamGrads<V>, MicroAux<V>) =
            micro_grad_module(|m: &Encoder<AD>, (x,): (Tensor<AD, 2, Int>,)| m.loss(x))
                .microbatch_size(mb)
                .transform_fn(|g: ParamGrads<V>| clip_by_global_norm(g, c))
                .accumulator(Sum)
                .call(&model, (xs.clone(),))
                .unwrap();
        close_all(&got, &want, &format!("microbatch {mb:?}"));
    }
}

/// The loop oracle of a clipped sum: each example's whole gradient (`loss` on row `i` of
/// `xs`) clipped to norm `c`, summed; flattened with its paths.
fn clipped_sum_by_loop<M: AutodiffModule<AD>>(
    model: &M,
    xs: &Tensor<AD, 2, Int>,
    c: f64,
    loss: impl Fn(&M, Tensor<AD, 2, Int>) -> Tensor<AD, 1>,
) -> Vec<(String, Tensor<V, 1>)> {
    let mut want: Vec<(String, Tensor<V, 1>)> = Vec::new();
    for i in 0..xs.dims()[0] {
        let mut g = loss(model, xs.clone().narrow(0, i, 1)).backward();
        let g = flat(&clip_by_global_norm(
            ParamGrads::<V>::from_module(&mut g, model),
            c,
        ));
        want = if want.is_empty() {
            g
        } else {
            want.into_iter()
                .zip(g)
                .map(|((p, a), (_, b))| (p, a + b))
                .collect()
        };
    }
    want
}

/// Every gradient of `got` close to the flattened `want`, path by path.
fn close_all(got: &ParamGrads<V>, want: &[(String, Tensor<V, 1>)], what: &str) {
    let got = flat(got);
    assert_eq!(got.len(), want.len(), "{what}: number of gradients");
    for ((path, g), (_, w)) in got.into_iter().zip(want.iter()) {
        close(g, w.clone(), &format!("{path}, {what}"));
    }
}

/// Every gradient of `g`, flattened, with its path.
fn flat(g: &ParamGrads<V>) -> Vec<(String, Tensor<V, 1>)> {
    let mut out = Vec::new();
    let _ = g.clone().map(|path, t| {
        let n = t.clone().tensor().shape().num_elements();
        let v = V::float_reshape(t.clone().tensor(), [n].into());
        out.push((
            path.to_string(),
            Tensor::from_primitive(TensorPrimitive::Float(v)),
        ));
        t
    });
    out
}

// ---------------------------------------------------------------------------------------------
// Random chains of factored ops against the loop's tensor
// ---------------------------------------------------------------------------------------------

/// One op applied to the factored gradient and to the loop's tensor.
#[derive(Debug, Clone)]
enum Op {
    Square,
    SquaredNorm,
    PerExample,
    Scalar(f32),
    SumDim(usize),
    MeanDim(usize),
    DivPerExample,
    AddSelf,
    CatSelf,
    Select(Vec<i64>),
    /// A per-example factor of 3 rows against a tensor of one row (summed over the examples):
    /// the tensor broadcasts.
    Broadcast,
}

/// An `out_axes` for a rank `rank` gradient, mostly 0: the examples in front keep the product
/// factored, an axis among the matrix dims multiplies it out.
fn axis_strategy(rank: isize) -> impl Strategy<Value = isize> {
    prop_oneof![3 => Just(0isize), 2 => -rank..rank]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Square),
        Just(Op::SquaredNorm),
        Just(Op::PerExample),
        (-2.0f32..2.0).prop_map(Op::Scalar),
        (0usize..5).prop_map(Op::SumDim),
        (0usize..5).prop_map(Op::MeanDim),
        Just(Op::DivPerExample),
        Just(Op::AddSelf),
        Just(Op::CatSelf),
        prop::collection::vec(0i64..64, 1..5).prop_map(Op::Select),
        Just(Op::Broadcast),
    ]
}

fn apply<const D: usize>(op: &Op, t: Tensor<V, D>, c: &Tensor<V, D>) -> Tensor<V, D> {
    let rows = t.dims()[0];
    let per_example = || c.clone().slice(0..rows.min(c.dims()[0]));
    match op {
        Op::Square => t.clone() * t,
        Op::SquaredNorm => (t.clone() * t).sum().reshape([1; D]),
        Op::PerExample if rows <= c.dims()[0] => t * per_example(),
        Op::DivPerExample if rows <= c.dims()[0] => t / per_example(),
        Op::PerExample | Op::DivPerExample => t,
        Op::Broadcast if rows == 1 => t * c.clone().slice(0..3),
        Op::Broadcast => t,
        Op::Scalar(s) => t * *s,
        Op::SumDim(d) => t.sum_dim(d % D),
        Op::MeanDim(d) => t.mean_dim(d % D),
        Op::AddSelf => t.clone() + t * 0.5,
        Op::CatSelf => Tensor::cat(vec![t.clone(), t * 2.0], 0),
        Op::Select(idx) => {
            let idx: Vec<i64> = idx.iter().map(|i| i % rows as i64).collect();
            t.select(0, Tensor::<V, 1, Int>::from_ints(idx.as_slice(), &device()))
        }
    }
}

fn chain<const D: usize>((mut g, mut d): (Tensor<V, D>, Tensor<V, D>), ops: &[Op]) {
    close(g.clone(), d.clone(), "the gradients");
    let c = Tensor::<V, D>::random(
        core::array::from_fn::<usize, D, _>(|i| if i == 0 { 64 } else { 1 }),
        Distribution::Uniform(0.5, 2.0),
        &device(),
    );
    for op in ops {
        g = apply(op, g, &c);
        d = apply(op, d, &c);
        close(g.clone(), d.clone(), &format!("after {op:?}"));
    }
}

// The shapes lean towards products kept factored (few rows, wide factors); the rest are
// multiplied out at once, which the chains cover too.
proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn should_match_the_loop_along_random_chains_for_sequences(
        b in 1usize..4, t in 1usize..4, d_in in 2usize..9, d_out in 2usize..9, axis in axis_strategy(3),
        ops in prop::collection::vec(op_strategy(), 1..4),
    ) {
        chain(linear_seq(b, t, d_in, d_out, axis), &ops);
    }

    #[test]
    fn should_match_the_loop_along_random_chains_for_embeddings(
        b in 1usize..4, t in 1usize..4, vocab in 3usize..16, d in 1usize..6, axis in axis_strategy(3),
        ops in prop::collection::vec(op_strategy(), 1..4),
    ) {
        chain(embedding(b, t, vocab, d, axis), &ops);
    }

    #[test]
    fn should_match_the_loop_along_random_chains_for_convolutions(
        b in 1usize..4, c_in in 1usize..4, c_out in 2usize..7, kernel in 2usize..4,
        stride in 1usize..3, extra in 0usize..3, axis in axis_strategy(4),
        ops in prop::collection::vec(op_strategy(), 1..4),
    ) {
        // `extra` more input positions than the kernel: one to three output positions.
        let c = ConvCase { c_in, c_out, kernel, stride, padding: 0, dilation: 1, groups: 1, size: kernel + extra };
        chain(conv1d(b, c, axis), &ops);
        let c2 = ConvCase { size: kernel, ..c };
        chain(conv2d(b, c2, axis.clamp(-5, 4)), &ops);
    }

    #[test]
    fn should_match_the_loop_along_random_chains_for_lstms(
        b in 1usize..3, t in 1usize..4, d_in in 3usize..8, hidden in 3usize..8, axis in axis_strategy(3),
        ops in prop::collection::vec(op_strategy(), 1..3),
    ) {
        chain(lstm(b, t, d_in, hidden, axis), &ops);
    }
}

#[test]
fn should_take_nested_levels_factored() {
    // vmap of vmap: per-example gradients of a sequence layer for a [2, 3] grid of examples.
    let layer: Linear<AD> = ready(LinearConfig::new(6, 5).init(&device()));
    let xs = Tensor::<AD, 4>::random([2, 3, 2, 6], Distribution::Normal(0.0, 1.0), &device());
    let per_example = |x: Tensor<AD, 2>| {
        let mut g = layer.forward(x).sin().sum().backward();
        ParamGrads::<V>::from_module(&mut g, &layer)
            .get::<2>("weight")
            .unwrap()
    };
    let got: Tensor<V, 4> = vmap(|row: Tensor<AD, 3>| {
        let inner: Tensor<V, 3> = vmap(per_example).call_as(row).unwrap();
        inner
    })
    .call_as(xs.clone())
    .unwrap();
    assert!(is_factored(&got), "two levels, 2 rows of 6 x 5");
    for i in 0..2 {
        for j in 0..3 {
            let x = xs.clone().narrow(0, i, 1).narrow(1, j, 1).reshape([2, 6]);
            let want = per_example(x);
            let g = got.clone().narrow(0, i, 1).narrow(1, j, 1).reshape([6, 5]);
            close(g, want, &format!("example ({i}, {j})"));
        }
    }
    close(
        (got.clone() * got.clone()).sum_dim(3).sum_dim(2),
        {
            let d = got.clone().add_scalar(0.0);
            (d.clone() * d).sum_dim(3).sum_dim(2)
        },
        "per-example squared norms",
    );
}

#[test]
fn should_broadcast_a_summed_product_against_a_per_example_factor() {
    // A shared input (one left factor for every example) against per-example output gradients,
    // summed over the examples (the right factor reduced: one product, leading size 1), then
    // scaled by a per-example factor: the product's leading dim broadcasts to the factor's.
    let layer: Linear<AD> = ready(LinearConfig::new(6, 5).init(&device()));
    let x = Tensor::<AD, 2>::random([2, 6], Distribution::Normal(0.0, 1.0), &device());
    let ts = Tensor::<AD, 2>::random([4, 5], Distribution::Default, &device());
    let g: Tensor<V, 3> = vmap(|(x, t): (Tensor<AD, 2>, Tensor<AD, 1>)| {
        let mut g = (layer.forward(x) * t.unsqueeze::<2>()).sum().backward();
        ParamGrads::<V>::from_module(&mut g, &layer)
            .get::<2>("weight")
            .unwrap()
    })
    .in_axes([None, Some(0)])
    .call_as((x, ts))
    .unwrap();
    let d = g.clone().add_scalar(0.0);
    let c = Tensor::<V, 3>::random([4, 1, 1], Distribution::Uniform(0.5, 2.0), &device());
    let total = g.sum_dim(0);
    assert!(
        is_factored(&total),
        "a shared left factor against the summed right ones"
    );
    let want = d.sum_dim(0);
    close(total.clone(), want.clone(), "summed");
    close(total * c.clone(), want * c, "scaled per example");
}

//! The clipped-sum gradient of DP-SGD and the per-example moments `(E[g], E[g²])` of sequence
//! models and a CNN, each as a ratio to the standard gradient on the same inner backend, in one
//! criterion run (`cargo bench --bench clipping`), with peak memory above the inputs.
//!
//! Models (`Autodiff<TestBackend>` for the standard gradient, `Autodiff<Vmap<TestBackend>>` for
//! the per-example work; ndarray by default, `--features flex` for Flex):
//!
//! - `transformer_B{B}_T{T}_d{d}`: a Burn `TransformerEncoder` (2 layers, 4 heads, `d_ff = 4d`,
//!   no dropout) over token and position embeddings (vocabulary 1000), a `LayerNorm`, the mean
//!   over time and a `Linear` head to 10 classes, softmax cross-entropy; at (B, T, d) =
//!   (64, 16, 64), (32, 64, 128), (16, 128, 128);
//! - `cnn_B256`: the CNN bench model (`common::Cnn`) at B = 256;
//! - `lstm_B64_T32`: `Embedding` (1000 x 64) then a Burn `Lstm` (64 -> 128) then a `Linear`
//!   head on the last hidden state, at B = 64, T = 32.
//!
//! Each group holds `standard` (the gradient of the mean loss), `clipped_sum` (every example's
//! gradient clipped to norm 1, summed: `micro_grad_module` with `clip_by_global_norm` and `Sum`,
//! no microbatching) and `moments` (`Mean` of `(g, g²)`).
//!
//! Environment: `BURN_VMAP_BENCH_QUICK=1` for a shorter run; `BURN_VMAP_BENCH_ONLY=lstm` (or any
//! part of a group's name) for some groups only.

mod common;

use std::time::Duration;

use burn::backend::Autodiff;
use burn::module::{AutodiffModule, Module};
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{
    Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig, Lstm, LstmConfig,
};
use burn::tensor::activation::log_softmax;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::ops::FloatTensorOps;
use burn::tensor::{Distribution, Int, Tensor, TensorPrimitive};
use burn_vmap::accumulate::{Mean, Sum};
use burn_vmap::testing::TestBackend;
use burn_vmap::transform::grad::init_params;
use burn_vmap::{ParamGrads, Vmap, clip_by_global_norm, micro_grad_module};
use criterion::{Criterion, SamplingMode};

use common::{Cnn, mean_ns, peak_of};

#[global_allocator]
static ALLOC: common::Counting = common::Counting;

type I = Vmap<TestBackend>;
type AD = Autodiff<I>;
type AB = Autodiff<TestBackend>;

const VOCAB: usize = 1000;
const CLASSES: usize = 10;

/// A text classifier on Burn's transformer encoder.
#[derive(Module, Debug)]
struct Transformer<B: Backend> {
    tokens: Embedding<B>,
    positions: Embedding<B>,
    encoder: TransformerEncoder<B>,
    norm: LayerNorm<B>,
    head: Linear<B>,
}

impl<B: Backend> Transformer<B> {
    fn new(t: usize, d: usize, device: &B::Device) -> Self {
        Self {
            tokens: EmbeddingConfig::new(VOCAB, d).init(device),
            positions: EmbeddingConfig::new(t, d).init(device),
            encoder: TransformerEncoderConfig::new(d, 4 * d, 4, 2)
                .with_dropout(0.0)
                .init(device),
            norm: LayerNormConfig::new(d).init(device),
            head: LinearConfig::new(d, CLASSES).init(device),
        }
    }

    fn logits(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 2> {
        let [n, t] = tokens.dims();
        let device = tokens.device();
        let positions = Tensor::<B, 1, Int>::arange(0..t as i64, &device)
            .reshape([1, t])
            .expand([n, t]);
        let h = self.tokens.forward(tokens) + self.positions.forward(positions);
        let h = self.encoder.forward(TransformerEncoderInput::new(h));
        self.head
            .forward(self.norm.forward(h).mean_dim(1).squeeze_dim(1))
    }
}

/// `Embedding -> Lstm -> Linear` on the last hidden state.
#[derive(Module, Debug)]
struct Recurrent<B: Backend> {
    tokens: Embedding<B>,
    lstm: Lstm<B>,
    head: Linear<B>,
}

impl<B: Backend> Recurrent<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            tokens: EmbeddingConfig::new(VOCAB, 64).init(device),
            lstm: LstmConfig::new(64, 128, true).init(device),
            head: LinearConfig::new(128, CLASSES).init(device),
        }
    }

    fn logits(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 2> {
        let (_, state) = self.lstm.forward(self.tokens.forward(tokens), None);
        self.head.forward(state.hidden)
    }
}

/// Mean softmax cross-entropy.
fn cross_entropy<B: Backend>(logits: Tensor<B, 2>, labels: Tensor<B, 1, Int>) -> Tensor<B, 1> {
    log_softmax(logits, 1)
        .gather(1, labels.unsqueeze_dim(1))
        .mean()
        .neg()
}

/// A model the bench knows how to build and score.
trait Bench<B: AutodiffBackend>: AutodiffModule<B> + Sized {
    type Input: Clone;
    fn loss(&self, x: Self::Input, y: Tensor<B, 1, Int>) -> Tensor<B, 1>;
}

impl<B: AutodiffBackend> Bench<B> for Transformer<B> {
    type Input = Tensor<B, 2, Int>;
    fn loss(&self, x: Self::Input, y: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        cross_entropy(self.logits(x), y)
    }
}

impl<B: AutodiffBackend> Bench<B> for Recurrent<B> {
    type Input = Tensor<B, 2, Int>;
    fn loss(&self, x: Self::Input, y: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        cross_entropy(self.logits(x), y)
    }
}

impl<B: AutodiffBackend> Bench<B> for Cnn<B> {
    type Input = Tensor<B, 4>;
    fn loss(&self, x: Self::Input, y: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        Cnn::loss(self, x, y)
    }
}

fn labels<B: Backend>(n: usize, device: &B::Device) -> Tensor<B, 1, Int> {
    let v: Vec<i64> = (0..n as i64).map(|i| i % CLASSES as i64).collect();
    Tensor::from_ints(v.as_slice(), device)
}

fn tokens<B: Backend>(n: usize, t: usize, device: &B::Device) -> Tensor<B, 2, Int> {
    let v: Vec<i64> = (0..(n * t) as i64)
        .map(|i| (i * 7919) % VOCAB as i64)
        .collect();
    Tensor::<B, 1, Int>::from_ints(v.as_slice(), device).reshape([n, t])
}

fn images<B: Backend>(n: usize, device: &B::Device) -> Tensor<B, 4> {
    Tensor::random([n, 1, 28, 28], Distribution::Normal(0.0, 1.0), device)
}

fn square(g: ParamGrads<I>) -> ParamGrads<I> {
    g.map(|_, t| {
        let t = t.tensor();
        TensorPrimitive::Float(I::float_mul(t.clone(), t))
    })
}

/// What is measured in one group.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Work {
    Standard,
    ClippedSum,
    Moments,
}

impl Work {
    const ALL: [Work; 3] = [Work::Standard, Work::ClippedSum, Work::Moments];

    fn name(self) -> &'static str {
        match self {
            Work::Standard => "standard",
            Work::ClippedSum => "clipped_sum",
            Work::Moments => "moments",
        }
    }
}

/// One model at one size: runs a [`Work`] once and returns a count from its result (kept alive
/// until then).
struct Case {
    name: String,
    run: Box<dyn Fn(Work) -> usize>,
}

/// A [`Case`] for model type `$model` built by `$new(device)` on inputs `$x(batch, device)`.
macro_rules! case {
    ($name:expr, $model:ident, $new:expr, $x:ident($($arg:expr),*), $batch:expr) => {{
        let device = Default::default();
        let standard: $model<AB> = $new(&device);
        let per_example: $model<AD> = $new(&device);
        init_params(&standard);
        init_params(&per_example);
        let (xs, ys) = ($x::<AB>($($arg,)* &device), labels::<AB>($batch, &device));
        let (xp, yp) = ($x::<AD>($($arg,)* &device), labels::<AD>($batch, &device));
        Case {
            name: $name,
            run: Box::new(move |work| {
                let n = match work {
                    Work::Standard => {
                        let mut grads = standard.loss(xs.clone(), ys.clone()).backward();
                        ParamGrads::<TestBackend>::from_module(&mut grads, &standard).len()
                    }
                    Work::ClippedSum => {
                        let (g, _) = micro_grad_module(|m: &$model<AD>, (x, y)| m.loss(x, y))
                            .transform_fn(|g: ParamGrads<I>| clip_by_global_norm(g, 1.0))
                            .accumulator(Sum)
                            .call(&per_example, (xp.clone(), yp.clone()))
                            .unwrap();
                        g.len()
                    }
                    Work::Moments => {
                        let ((g, g2), _) = micro_grad_module(|m: &$model<AD>, (x, y)| m.loss(x, y))
                            .transform_fn(|g: ParamGrads<I>| (g.clone(), square(g)))
                            .accumulator(Mean)
                            .call(&per_example, (xp.clone(), yp.clone()))
                            .unwrap();
                        g.len() + g2.len()
                    }
                };
                TestBackend::sync(&Default::default()).unwrap();
                n
            }),
        }
    }};
}

fn quick() -> bool {
    std::env::var("BURN_VMAP_BENCH_QUICK").is_ok_and(|v| v == "1")
}

fn cases() -> Vec<Case> {
    let only = std::env::var("BURN_VMAP_BENCH_ONLY").unwrap_or_default();
    let mut out = Vec::new();
    for (b, t, d) in [(64, 16, 64), (32, 64, 128), (16, 128, 128)] {
        let name = format!("transformer_B{b}_T{t}_d{d}");
        if name.contains(&only) {
            out.push(case!(
                name,
                Transformer,
                |device| Transformer::new(t, d, device),
                tokens(b, t),
                b
            ));
        }
    }
    let name = "cnn_B256".to_string();
    if name.contains(&only) {
        out.push(case!(name, Cnn, Cnn::new, images(256), 256));
    }
    let name = "lstm_B64_T32".to_string();
    if name.contains(&only) {
        out.push(case!(name, Recurrent, Recurrent::new, tokens(64, 32), 64));
    }
    out
}

fn clipping(c: &mut Criterion, cases: &[Case]) {
    for case in cases {
        let mut g = c.benchmark_group(&case.name);
        g.sampling_mode(SamplingMode::Flat);
        for work in Work::ALL {
            g.bench_function(work.name(), |b| b.iter(|| (case.run)(work)));
        }
        g.finish();
    }
}

fn main() {
    let cases = cases();
    let (warm, time) = if quick() { (1, 3) } else { (2, 8) };
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(warm))
        .measurement_time(Duration::from_secs(time))
        .configure_from_args();
    clipping(&mut c, &cases);
    c.final_summary();

    println!(
        "\n== ratios to the standard gradient (same run; {}) ==",
        common::allocator_name()
    );
    println!(
        "| model | standard | clipped sum | (g, g²) | peak memory above inputs: standard / clipped sum |"
    );
    println!("|---|---|---|---|---|");
    for case in &cases {
        let ns = |w: Work| mean_ns(&case.name, w.name());
        let (Some(s), Some(cs), Some(mo)) =
            (ns(Work::Standard), ns(Work::ClippedSum), ns(Work::Moments))
        else {
            continue;
        };
        let (_, mem_s) = peak_of(|| (case.run)(Work::Standard));
        let (_, mem_c) = peak_of(|| (case.run)(Work::ClippedSum));
        let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
        println!(
            "| {} | {:.1} ms | **{:.2}x** ({:.1} ms) | {:.2}x ({:.1} ms) | {:.1} / {:.1} MiB ({:.2}x) |",
            case.name,
            s / 1e6,
            cs / s,
            cs / 1e6,
            mo / s,
            mo / 1e6,
            mib(mem_s),
            mib(mem_c),
            mem_c as f64 / mem_s.max(1) as f64
        );
    }
}

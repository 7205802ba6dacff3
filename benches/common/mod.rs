//! What the benches share: the MLP, CNN, transformer and LSTM bench models, and criterion's estimates read back
//! for the ratios printed at the end of a run.

// Each bench uses part of this module.
#![allow(dead_code)]

pub mod alloc;
pub mod paired;

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{
    Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig, Lstm, LstmConfig,
    Relu,
};
use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, Int, Tensor};
use std::sync::OnceLock;
use std::time::SystemTime;

/// When this bench's run started (`start_run`): criterion's estimates written before it are an
/// earlier run's.
static STARTED: OnceLock<SystemTime> = OnceLock::new();

/// Marks the start of this run; a bench's `main` calls it first, so that `mean_ns` reads only
/// what this run measured (a run filtered to some models prints those, never an earlier run's
/// figures left on disk).
pub fn start_run() {
    STARTED.get_or_init(SystemTime::now);
}

/// Reads criterion's mean estimate (ns) of `group/id` from this run's JSON (criterion stores a
/// function id `a/b` of `bench_function` as `a_b`, a `BenchmarkId` as `a/b`); `None` where this
/// run (since `start_run`) wrote none.
pub fn mean_ns(group: &str, id: &str) -> Option<f64> {
    let since = *STARTED.get_or_init(SystemTime::now);
    // Criterion writes under the workspace's target directory; a bench runs in its package's.
    let dirs = [
        std::env::var("CARGO_TARGET_DIR").ok(),
        Some("target".into()),
        Some("../target".into()),
    ];
    dirs.into_iter().flatten().find_map(|dir| {
        let path = format!("{dir}/criterion/{group}/{id}/new/estimates.json");
        if std::fs::metadata(&path).ok()?.modified().ok()? < since {
            return None;
        }
        let text = std::fs::read_to_string(path).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        v["mean"]["point_estimate"].as_f64()
    })
}

/// The MLP bench model: 784-512-512-10 with softmax cross-entropy.
pub const MLP_SIZES: [usize; 4] = [784, 512, 512, 10];

/// The MLP bench model.
#[derive(Module, Debug)]
pub struct Mlp {
    fc1: Linear,
    fc2: Linear,
    fc3: Linear,
    act: Relu,
}

impl Mlp {
    /// A fresh model.
    pub fn new(device: &Device) -> Self {
        Self {
            fc1: LinearConfig::new(MLP_SIZES[0], MLP_SIZES[1]).init(device),
            fc2: LinearConfig::new(MLP_SIZES[1], MLP_SIZES[2]).init(device),
            fc3: LinearConfig::new(MLP_SIZES[2], MLP_SIZES[3]).init(device),
            act: Relu::new(),
        }
    }

    /// Logits of a batch `[n, 784]`.
    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let h = self.act.forward(self.fc1.forward(x));
        let h = self.act.forward(self.fc2.forward(h));
        self.fc3.forward(h)
    }

    /// Mean softmax cross-entropy of a batch `[n, 784]` with labels `[n]`: shape `[1]`.
    pub fn loss(&self, x: Tensor<2>, y: Tensor<1, Int>) -> Tensor<1> {
        let logp = burn::tensor::activation::log_softmax(self.forward(x), 1);
        logp.gather(1, y.unsqueeze_dim(1)).mean().neg()
    }
}

/// The CNN bench model: conv 3×3 1→16 on 28×28, relu, conv 3×3 16→32, relu, mean over the
/// spatial dims, linear 32→10, softmax cross-entropy.
#[derive(Module, Debug)]
pub struct Cnn {
    /// The first convolution.
    pub conv1: Conv2d,
    /// The second convolution.
    pub conv2: Conv2d,
    /// The head.
    pub fc: Linear,
    act: Relu,
}

impl Cnn {
    /// A fresh model.
    pub fn new(device: &Device) -> Self {
        Self {
            conv1: Conv2dConfig::new([1, 16], [3, 3]).init(device),
            conv2: Conv2dConfig::new([16, 32], [3, 3]).init(device),
            fc: LinearConfig::new(32, 10).init(device),
            act: Relu::new(),
        }
    }

    /// Mean softmax cross-entropy of a batch `[n, 1, 28, 28]`.
    pub fn loss(&self, x: Tensor<4>, y: Tensor<1, Int>) -> Tensor<1> {
        let h = self.act.forward(self.conv1.forward(x));
        let h = self.act.forward(self.conv2.forward(h));
        let [n, c, hh, ww] = h.dims();
        let pooled = h.reshape([n, c, hh * ww]).mean_dim(2).reshape([n, c]);
        let logp = burn::tensor::activation::log_softmax(self.fc.forward(pooled), 1);
        logp.gather(1, y.unsqueeze_dim(1)).mean().neg()
    }
}

pub const VOCAB: usize = 1000;
pub const CLASSES: usize = 10;

/// Mean softmax cross-entropy.
pub fn cross_entropy(logits: Tensor<2>, labels: Tensor<1, Int>) -> Tensor<1> {
    log_softmax(logits, 1)
        .gather(1, labels.unsqueeze_dim(1))
        .mean()
        .neg()
}

/// A text classifier on Burn's transformer encoder.
#[derive(Module, Debug)]
pub struct Transformer {
    pub tokens: Embedding,
    pub positions: Embedding,
    pub encoder: TransformerEncoder,
    pub norm: LayerNorm,
    pub head: Linear,
}

impl Transformer {
    pub fn new(t: usize, d: usize, device: &Device) -> Self {
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

    pub fn loss(&self, tokens: Tensor<2, Int>, labels: Tensor<1, Int>) -> Tensor<1> {
        let [n, t] = tokens.dims();
        let device = tokens.device();
        let positions = Tensor::<1, Int>::arange(0..t as i64, &device)
            .reshape([1, t])
            .expand([n, t]);
        let h = self.tokens.forward(tokens) + self.positions.forward(positions);
        let h = self.encoder.forward(TransformerEncoderInput::new(h));
        let pooled = self.norm.forward(h).mean_dim(1).squeeze_dim(1);
        cross_entropy(self.head.forward(pooled), labels)
    }
}

pub fn labels(n: usize, device: &Device) -> Tensor<1, Int> {
    let v: Vec<i64> = (0..n as i64).map(|i| i % CLASSES as i64).collect();
    Tensor::from_ints(v.as_slice(), device)
}

pub fn tokens(n: usize, t: usize, device: &Device) -> Tensor<2, Int> {
    let v: Vec<i64> = (0..(n * t) as i64)
        .map(|i| (i * 7919) % VOCAB as i64)
        .collect();
    Tensor::<1, Int>::from_ints(v.as_slice(), device).reshape([n, t])
}

/// `Embedding -> Lstm -> Linear` on the last hidden state.
#[derive(Module, Debug)]
pub struct Recurrent {
    tokens: Embedding,
    lstm: Lstm,
    head: Linear,
}

impl Recurrent {
    pub fn new(device: &Device) -> Self {
        Self {
            tokens: EmbeddingConfig::new(VOCAB, 64).init(device),
            lstm: LstmConfig::new(64, 128, true).init(device),
            head: LinearConfig::new(128, CLASSES).init(device),
        }
    }

    pub fn loss(&self, tokens: Tensor<2, Int>, labels: Tensor<1, Int>) -> Tensor<1> {
        let (_, state) = self.lstm.forward(self.tokens.forward(tokens), None);
        cross_entropy(self.head.forward(state.hidden), labels)
    }
}

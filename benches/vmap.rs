//! Criterion benches; each is compared with its baseline in the same run, and the ratios are
//! printed at the end (`cargo bench --bench vmap`).
//!
//! - `mlp_forward`: `vmap` of a single-example MLP forward vs the hand-batched forward.
//! - `passthrough`: `Autodiff<Vmap<B>>` vs `Autodiff<B>` on an MLP forward+backward with only
//!   unbatched tensors (the decorator's overhead).
//! - `per_example_grads/B`: per-example gradients (`vmap` of `backward`) of a 784-512-512-10
//!   MLP with softmax cross-entropy vs the standard batch gradient, at B = 64 and 256.
//!   `write_floor/B` writes the same number of floats (B x 669,706) into fresh tensors: the
//!   least any implementation returning materialized per-example gradients pays for memory.

mod common;

use common::mean_ns;

use std::time::Duration;

use burn::backend::Autodiff;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Int, Tensor, TensorMetadata};
use burn_vmap::testing::TestBackend;
use burn_vmap::{ParamGrads, Vmap, per_example_grads, vmap};
use criterion::{BenchmarkId, Criterion, criterion_group};

type V = Vmap<TestBackend>;

#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    fc1: Linear<B>,
    fc2: Linear<B>,
    fc3: Linear<B>,
    act: Relu,
}

impl<B: Backend> Mlp<B> {
    fn new(sizes: [usize; 4], device: &B::Device) -> Self {
        Self {
            fc1: LinearConfig::new(sizes[0], sizes[1]).init(device),
            fc2: LinearConfig::new(sizes[1], sizes[2]).init(device),
            fc3: LinearConfig::new(sizes[2], sizes[3]).init(device),
            act: Relu::new(),
        }
    }

    fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let h = self.act.forward(self.fc1.forward(x));
        let h = self.act.forward(self.fc2.forward(h));
        self.fc3.forward(h)
    }

    /// Mean softmax cross-entropy of a batch `[n, in]`.
    fn loss(&self, x: Tensor<B, 2>, y: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        let logp = burn::tensor::activation::log_softmax(self.forward(x), 1);
        logp.gather(1, y.unsqueeze_dim(1)).mean().neg()
    }
}

fn sync<B: Backend>(device: &B::Device) {
    B::sync(device).unwrap();
}

fn mlp_forward(c: &mut Criterion) {
    let device = Default::default();
    let model = Mlp::<V>::new([784, 512, 512, 10], &device);
    let x = Tensor::<V, 2>::random([256, 784], Distribution::Normal(0.0, 1.0), &device);
    let mut g = c.benchmark_group("mlp_forward");
    g.bench_function("hand_batched", |b| {
        b.iter(|| {
            let y = model.forward(x.clone());
            sync::<V>(&device);
            y
        })
    });
    g.bench_function("vmap", |b| {
        b.iter(|| {
            let y: Tensor<V, 2> = vmap(|xi: Tensor<V, 1>| model.forward(xi))
                .call(x.clone())
                .unwrap();
            sync::<V>(&device);
            y
        })
    });
    g.finish();
}

fn passthrough(c: &mut Criterion) {
    let device = Default::default();
    let mut g = c.benchmark_group("passthrough");
    let labels: Vec<i64> = (0..64).map(|i| i % 10).collect();
    {
        type AB = Autodiff<TestBackend>;
        let model = Mlp::<AB>::new([784, 512, 512, 10], &device);
        let x = Tensor::<AB, 2>::random([64, 784], Distribution::Normal(0.0, 1.0), &device);
        let y = Tensor::<AB, 1, Int>::from_ints(labels.as_slice(), &device);
        g.bench_function("autodiff_inner", |b| {
            b.iter(|| {
                let mut grads = model.loss(x.clone(), y.clone()).backward();
                ParamGrads::from_module(&mut grads, &model)
            })
        });
    }
    {
        type AB = Autodiff<V>;
        let model = Mlp::<AB>::new([784, 512, 512, 10], &device);
        let x = Tensor::<AB, 2>::random([64, 784], Distribution::Normal(0.0, 1.0), &device);
        let y = Tensor::<AB, 1, Int>::from_ints(labels.as_slice(), &device);
        g.bench_function("autodiff_vmap", |b| {
            b.iter(|| {
                let mut grads = model.loss(x.clone(), y.clone()).backward();
                ParamGrads::from_module(&mut grads, &model)
            })
        });
    }
    g.finish();
}

fn per_example(c: &mut Criterion) {
    type AB = Autodiff<V>;
    let device = Default::default();
    let model = Mlp::<AB>::new([784, 512, 512, 10], &device);
    let mut g = c.benchmark_group("per_example_grads");
    for batch in [64usize, 256] {
        let x = Tensor::<AB, 2>::random([batch, 784], Distribution::Normal(0.0, 1.0), &device);
        let labels: Vec<i64> = (0..batch as i64).map(|i| i % 10).collect();
        let y = Tensor::<AB, 1, Int>::from_ints(labels.as_slice(), &device);
        g.bench_with_input(BenchmarkId::new("batch_gradient", batch), &batch, |b, _| {
            b.iter(|| {
                let mut grads = model.loss(x.clone(), y.clone()).backward();
                ParamGrads::from_module(&mut grads, &model)
            })
        });
        let mut numels = Vec::new();
        let _ = ParamGrads::from_module(&mut model.loss(x.clone(), y.clone()).backward(), &model)
            .map(|_, g| {
                numels.push(batch * g.clone().tensor().shape().num_elements());
                g
            });
        g.bench_with_input(BenchmarkId::new("write_floor", batch), &batch, |b, _| {
            b.iter(|| {
                numels
                    .iter()
                    .map(|&n| Tensor::<TestBackend, 1>::ones([n], &device))
                    .collect::<Vec<_>>()
            })
        });
        g.bench_with_input(BenchmarkId::new("per_example", batch), &batch, |b, _| {
            b.iter(|| {
                per_example_grads(
                    &model,
                    (x.clone(), y.clone()),
                    |m: &Mlp<AB>, (xi, yi): (Tensor<AB, 1>, Tensor<AB, 0, Int>)| {
                        m.loss(xi.unsqueeze(), yi.reshape([1]))
                    },
                )
                .unwrap()
            })
        });
    }
    g.finish();
}

fn ratios() {
    println!(
        "\n== ratios (same run; allocator: {}) ==",
        common::allocator_name()
    );
    let pairs = [
        ("mlp_forward", "vmap", "hand_batched"),
        ("passthrough", "autodiff_vmap", "autodiff_inner"),
        ("per_example_grads", "per_example/64", "batch_gradient/64"),
        ("per_example_grads", "per_example/256", "batch_gradient/256"),
        ("per_example_grads", "write_floor/64", "batch_gradient/64"),
        ("per_example_grads", "write_floor/256", "batch_gradient/256"),
        ("per_example_grads", "per_example/64", "write_floor/64"),
        ("per_example_grads", "per_example/256", "write_floor/256"),
    ];
    for (group, a, b) in pairs {
        if let (Some(x), Some(y)) = (mean_ns(group, a), mean_ns(group, b)) {
            println!(
                "{group}: {a} / {b} = {:.2}x  ({:.2} ms / {:.2} ms)",
                x / y,
                x / 1e6,
                y / 1e6
            );
        }
    }
}

#[cfg(feature = "bench-jemalloc")]
#[global_allocator]
static ALLOC: common::Inner = common::INNER;

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
    targets = mlp_forward, passthrough, per_example
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    ratios();
}

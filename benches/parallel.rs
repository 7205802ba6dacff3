//! Data-parallel clipped-sum step on Burn's collective (`cargo bench --features collective
//! --bench parallel`): one peer on the whole batch against two local peers (threads) on half
//! each, whose clipped sums one all-reduce adds. The ratio is printed at the end.
//!
//! The model: an MLP 784–256–10 with softmax cross-entropy, per-example clipping to norm 1,
//! `Sum`, B = 256 examples per step in total.

mod common;

use std::time::{Duration, Instant};

use burn::backend::Autodiff;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Int, Tensor};
use burn_vmap::parallel::{Peer, Topology};
use burn_vmap::testing::TestBackend;
use burn_vmap::transform::grad::init_params;
use burn_vmap::{ParamGrads, Vmap, clip_by_global_norm, micro_grad_module};
use criterion::{BenchmarkId, Criterion, criterion_group};

use common::mean_ns;

type I = Vmap<TestBackend>;
type AD = Autodiff<I>;

const BATCH: usize = 256;

#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    fc1: Linear<B>,
    fc2: Linear<B>,
    act: Relu,
}

impl<B: Backend> Mlp<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            fc1: LinearConfig::new(784, 256).init(device),
            fc2: LinearConfig::new(256, 10).init(device),
            act: Relu::new(),
        }
    }

    fn loss(&self, x: Tensor<B, 2>, y: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        let logits = self.fc2.forward(self.act.forward(self.fc1.forward(x)));
        let logp = burn::tensor::activation::log_softmax(logits, 1);
        logp.gather(1, y.unsqueeze_dim(1)).mean().neg()
    }
}

type Batch = (Tensor<AD, 2>, Tensor<AD, 1, Int>);

fn batch(n: usize) -> Batch {
    let device = Default::default();
    (
        Tensor::random([n, 784], Distribution::Default, &device),
        Tensor::<AD, 1>::random([n], Distribution::Uniform(0.0, 10.0), &device).int(),
    )
}

/// One clipped-sum step's gradient on `batch`, summed over the peers when there are several.
fn clipped_sum(model: &Mlp<AD>, batch: Batch, peer: Option<&Peer<I>>) -> ParamGrads<I> {
    let (sum, _) = micro_grad_module(|m: &Mlp<AD>, (x, y): Batch| m.loss(x, y))
        .transform_fn(|g| clip_by_global_norm(g, 1.0))
        .call(model, batch)
        .unwrap();
    match peer {
        Some(p) => p.all_reduce_sum(sum).unwrap(),
        None => sum,
    }
}

/// `iters` steps on `peers` local peers (threads), each on `BATCH / peers` examples.
fn run(model: &Mlp<AD>, peers: usize, iters: u64) -> Duration {
    if peers == 1 {
        let data = batch(BATCH);
        let start = Instant::now();
        for _ in 0..iters {
            let g = clipped_sum(model, data.clone(), None);
            std::hint::black_box(g);
        }
        return start.elapsed();
    }
    let topology = Topology::Local { peers };
    let handles: Vec<_> = (0..peers)
        .map(|i| {
            let (model, topology) = (model.clone(), topology.clone());
            std::thread::spawn(move || {
                let data = batch(BATCH / peers);
                let peer =
                    Peer::<I>::register(i, Default::default(), &topology, Duration::from_secs(120))
                        .unwrap();
                let start = Instant::now();
                for _ in 0..iters {
                    let g = clipped_sum(&model, data.clone(), Some(&peer));
                    std::hint::black_box(g);
                }
                let elapsed = start.elapsed();
                peer.finish().unwrap();
                elapsed
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .max()
        .unwrap()
}

fn parallel(c: &mut Criterion) {
    let model = Mlp::<AD>::new(&Default::default());
    init_params(&model);
    let mut group = c.benchmark_group("parallel_step");
    for peers in [1, 2] {
        group.bench_with_input(BenchmarkId::new("peers", peers), &peers, |b, &peers| {
            b.iter_custom(|iters| run(&model, peers, iters))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5));
    targets = parallel
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    if let (Some(two), Some(one)) = (
        mean_ns("parallel_step", "peers/2"),
        mean_ns("parallel_step", "peers/1"),
    ) {
        println!(
            "\n== ratio (same run) ==\nparallel_step: 2 local peers / 1 peer, B = {BATCH} in total = {:.2}x  ({:.2} ms / {:.2} ms)",
            two / one,
            two / 1e6,
            one / 1e6
        );
    }
}

//! The per-example weight gradients stay factored through `transform_fn` and the accumulators:
//! the peak memory of a clipped sum (and of the moments of a one-row layer) stays far below the
//! `batch × d_in × d_out` tensor of the per-example gradients, which `Concat` does build (the
//! control that shows the measure sees it).

use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig, Lstm, LstmConfig};
use burn::tensor::{Distribution, Int, Tensor};
use burn_vmap::accumulate::{Concat, Mean};
use burn_vmap::tree::Tree;
use burn_vmap::{ParamGrads, clip_by_global_norm, micro_grad_module};

use super::alloc::{MIB, exclusive, peak_of};
use super::oracle::{dev, ready, square};

/// The peak memory of a clipped sum, of the `(g, g²)` means and of the per-example gradients
/// (`Concat`) of `loss` on `args`, each measured on its second call (the first records).
fn peaks<M, I, A>(
    model: &M,
    args: I,
    loss: impl Fn(&M, A) -> Tensor<1> + Copy,
    mb: Option<usize>,
) -> [usize; 3]
where
    M: burn::module::Module + burn::module::ModuleDisplay,
    I: Tree + Clone,
    A: Tree,
{
    let clipped = micro_grad_module(loss)
        .microbatch_size(mb)
        .transform_fn(|g| clip_by_global_norm(g, 1.0));
    let moments = micro_grad_module(loss)
        .microbatch_size(mb)
        .accumulator(Mean)
        .transform_fn(|g: ParamGrads| (g.clone(), square(g)));
    let per_example = micro_grad_module(loss)
        .microbatch_size(mb)
        .accumulator(Concat);
    let _ = clipped.call(model, args.clone()).unwrap();
    let (_, clip) = peak_of(|| clipped.call(model, args.clone()).unwrap());
    let _ = moments.call(model, args.clone()).unwrap();
    let (_, second) = peak_of(|| moments.call(model, args.clone()).unwrap());
    let _ = per_example.call(model, args.clone()).unwrap();
    let (_, concat) = peak_of(|| per_example.call(model, args.clone()).unwrap());
    [clip, second, concat]
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / MIB as f64
}

#[test]
#[cfg_attr(
    any(feature = "wgpu", feature = "cuda"),
    ignore = "measures the host heap of a CPU backend: on wgpu/cuda the tensors live in device memory"
)]
fn should_clip_and_sum_a_dense_layer_without_building_its_per_example_gradients() {
    let _alone = exclusive();
    let (b, d) = (64, 512);
    let model: Linear = ready(LinearConfig::new(d, d).init(&dev()));
    let xs = Tensor::<2>::random([b, d], Distribution::Normal(0.0, 1.0), &dev());
    let loss = |m: &Linear, (x,): (Tensor<2>,)| m.forward(x).sin().sum();
    let dense = b * d * d * 4; // 64 MiB
    for mb in [None, Some(16)] {
        let [clip, second, concat] = peaks(&model, (xs.clone(),), loss, mb);
        let msg = format!(
            "microbatch {mb:?}: clipped sum {:.1} MiB, moments {:.1} MiB, per-example {:.1} MiB, dense {:.1} MiB",
            mib(clip),
            mib(second),
            mib(concat),
            mib(dense)
        );
        println!("{msg}");
        assert!(concat >= dense, "{msg}");
        assert!(clip < dense / 8, "{msg}");
        // One row per example: g² is (x²)ᵀ(g²), factored too.
        assert!(second < dense / 8, "{msg}");
    }
}

#[test]
#[cfg_attr(
    any(feature = "wgpu", feature = "cuda"),
    ignore = "measures the host heap of a CPU backend: on wgpu/cuda the tensors live in device memory"
)]
fn should_clip_and_sum_an_embedding_without_building_its_per_example_gradients() {
    let _alone = exclusive();
    let (b, t, vocab, d) = (64, 4, 4096, 64);
    let model: Embedding = ready(EmbeddingConfig::new(vocab, d).init(&dev()));
    let ids: Vec<i64> = (0..b * t).map(|i| ((i * 37) % vocab) as i64).collect();
    let xs = Tensor::<1, Int>::from_ints(ids.as_slice(), &dev()).reshape([b, t]);
    let loss = |m: &Embedding, (x,): (Tensor<2, Int>,)| m.forward(x).sin().sum();
    let dense = b * vocab * d * 4; // 64 MiB
    let [clip, _, concat] = peaks(&model, (xs,), loss, None);
    let msg = format!(
        "clipped sum {:.1} MiB, per-example {:.1} MiB, dense {:.1} MiB",
        mib(clip),
        mib(concat),
        mib(dense)
    );
    println!("{msg}");
    assert!(concat >= dense, "{msg}");
    assert!(clip < dense / 8, "{msg}");
}

#[test]
#[cfg_attr(
    any(feature = "wgpu", feature = "cuda"),
    ignore = "measures the host heap of a CPU backend: on wgpu/cuda the tensors live in device memory"
)]
fn should_clip_and_sum_an_lstm_without_building_its_per_example_gradients() {
    let _alone = exclusive();
    let (b, t, d) = (32, 3, 256);
    let model: Lstm = ready(LstmConfig::new(d, d, true).init(&dev()));
    let xs = Tensor::<3>::random([b, t, d], Distribution::Normal(0.0, 1.0), &dev());
    let loss = |m: &Lstm, (x,): (Tensor<3>,)| m.forward(x, None).0.sin().sum();
    // 8 weight matrices of d x d per example.
    let dense = 8 * b * d * d * 4; // 64 MiB
    let [clip, _, concat] = peaks(&model, (xs,), loss, None);
    let msg = format!(
        "clipped sum {:.1} MiB, per-example {:.1} MiB, dense {:.1} MiB",
        mib(clip),
        mib(concat),
        mib(dense)
    );
    println!("{msg}");
    assert!(concat >= dense, "{msg}");
    assert!(clip < dense / 8, "{msg}");
}

//! The loop oracle: every example's gradient by Burn's own backward on the module in training
//! mode; clipped sums and moments of those; and the check of `micro_grad_module` against them.
#![allow(dead_code)]

#[path = "../shared/tolerance.rs"]
mod tolerance;

use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor};
use burn_vmap::accumulate::Mean;
use burn_vmap::tree::{Leaf, TensorMapper};
use burn_vmap::{ParamGrads, Tree, clip_by_global_norm, micro_grad_module};

pub fn dev() -> Device {
    Device::default()
}

/// Reads every parameter once (Burn initializes them lazily; clones of a never-read
/// parameter would draw their own values).
struct ReadAll;
impl ModuleVisitor for ReadAll {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let _ = param.val();
    }
}

/// `m` with its parameters drawn.
pub fn ready<M: Module>(m: M) -> M {
    m.visit(&mut ReadAll);
    m
}

/// One example's (or a reduced) gradient: per parameter, in `ParamGrads` order, flat values.
pub type Flat = Vec<Vec<f32>>;

pub fn leaf_values(leaf: &Leaf) -> Vec<f32> {
    leaf.to_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .unwrap()
}

fn values<const D: usize>(t: Option<Tensor<D>>, len: usize) -> Vec<f32> {
    match t {
        Some(t) => t
            .into_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .unwrap(),
        // Not reached by this example's loss.
        None => vec![0.0; len],
    }
}

/// Burn's gradient of parameter `id` (of shape `shape`).
fn grad_of(g: &GradientsParams, id: ParamId, shape: &[usize]) -> Vec<f32> {
    let len = shape.iter().product();
    match shape.len() {
        1 => values(g.get::<1>(id), len),
        2 => values(g.get::<2>(id), len),
        3 => values(g.get::<3>(id), len),
        4 => values(g.get::<4>(id), len),
        5 => values(g.get::<5>(id), len),
        r => panic!("rank {r}"),
    }
}

/// Every example's gradient of every parameter `params` (id, shape), by Burn's own backward of
/// `loss(model, example(i))` on the model in training mode.
pub fn loop_grads<M: Module, A>(
    model: &M,
    n: usize,
    params: &[(ParamId, Vec<usize>)],
    example: impl Fn(usize) -> A,
    loss: impl Fn(&M, A) -> Tensor<1>,
) -> Vec<Flat> {
    (0..n)
        .map(|i| {
            let trained = model.clone().train();
            let g = GradientsParams::from_grads(loss(&trained, example(i)).backward(), &trained);
            params.iter().map(|(id, s)| grad_of(&g, *id, s)).collect()
        })
        .collect()
}

/// The global norm of one example's gradient.
fn norm(g: &Flat) -> f32 {
    g.iter().flatten().map(|v| v * v).sum::<f32>().sqrt()
}

/// Each example's whole gradient clipped to global norm `c`, summed.
pub fn clipped_sum(per: &[Flat], c: f32) -> Flat {
    let mut out: Flat = per[0].iter().map(|g| vec![0.0; g.len()]).collect();
    for g in per {
        let s = c / norm(g).max(c);
        for (acc, leaf) in out.iter_mut().zip(g) {
            for (a, v) in acc.iter_mut().zip(leaf) {
                *a += v * s;
            }
        }
    }
    out
}

/// The means of `g` and `g²` over the examples.
pub fn moments(per: &[Flat]) -> (Flat, Flat) {
    let n = per.len() as f32;
    let mut m1: Flat = per[0].iter().map(|g| vec![0.0; g.len()]).collect();
    let mut m2 = m1.clone();
    for g in per {
        for ((a, b), leaf) in m1.iter_mut().zip(m2.iter_mut()).zip(g) {
            for ((x, y), v) in a.iter_mut().zip(b.iter_mut()).zip(leaf) {
                *x += v / n;
                *y += v * v / n;
            }
        }
    }
    (m1, m2)
}

/// Every gradient of `got` within `1e-5 · (1 + max |want|)` of `want`, parameter by
/// parameter.
pub fn close_all(got: &ParamGrads, want: &Flat, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: number of gradients");
    for ((path, _, g), w) in got.iter().zip(want) {
        let g = leaf_values(g);
        assert_eq!(g.len(), w.len(), "{what}: {path}: sizes");
        let scale = w.iter().fold(1.0f32, |m, v| m.max(v.abs()));
        for (i, (a, b)) in g.iter().zip(w).enumerate() {
            assert!(
                (a - b).abs() <= tolerance::device_tol(1e-5) * scale,
                "{what}: {path}[{i}]: {a} vs {b} (scale {scale})"
            );
        }
    }
}

/// Squares every tensor of a tree.
struct Square;
impl TensorMapper for Square {
    fn map_float<const D: usize>(&mut self, _: &str, t: Tensor<D>) -> Tensor<D> {
        t.clone() * t
    }
}

/// `g²`, leafwise (user code, recorded in `transform_fn`).
pub fn square(g: ParamGrads) -> ParamGrads {
    g.map_tensors(&mut Square).expect("ranks <= 8")
}

/// `micro_grad_module` against the loop for the batched arguments `args` (`example(i)`: the
/// arguments of example `i`, a batch of one): the sum of gradients clipped to `c` (to half the
/// largest example's norm where `c` would clip none), and the `(g, g²)` means, for each
/// microbatch size of `mbs`.
#[allow(clippy::too_many_arguments)]
pub fn check<M, I, A>(
    what: &str,
    model: &M,
    args: I,
    n: usize,
    example: impl Fn(usize) -> A,
    loss: impl Fn(&M, A) -> Tensor<1> + Copy,
    c: f64,
    mbs: &[Option<usize>],
) where
    M: Module + burn::module::ModuleDisplay,
    I: Tree + Clone,
    A: Tree,
{
    let mut per: Option<Vec<Flat>> = None;
    let mut c = c;
    for &mb in mbs {
        let clip = |c: f64| {
            micro_grad_module(loss)
                .microbatch_size(mb)
                .transform_fn(move |g| clip_by_global_norm(g, c))
                .call(model, args.clone())
                .unwrap()
        };
        let (mut clipped, aux) = clip(c);
        assert_eq!(aux.values.dims(), [n]);
        if per.is_none() {
            let params: Vec<_> = clipped
                .iter()
                .map(|(_, id, g)| (id, g.shape().to_vec()))
                .collect();
            let loop_per = loop_grads(model, n, &params, &example, loss);
            // The clip factor at work: where `c` clips no example (a random case's small
            // gradients), the case runs at half the largest example's norm instead, so the
            // per-example norms are checked in every case that has a nonzero gradient.
            let largest = loop_per.iter().map(norm).fold(0.0f32, f32::max);
            if largest > 0.0 && largest <= c as f32 {
                c = f64::from(largest) / 2.0;
                clipped = clip(c).0;
            }
            per = Some(loop_per);
        }
        let per = per.as_ref().expect("computed above");
        let at = format!("{what}, microbatch {mb:?}");
        close_all(
            &clipped,
            &clipped_sum(per, c as f32),
            &format!("clipped sum, {at}"),
        );
        // Summed in f64 as the DP mechanism sums (`WideSum`: factors and clip factors cast,
        // equal values cast once).
        let (wide, _) = micro_grad_module(loss)
            .microbatch_size(mb)
            .accumulator(burn_vmap::accumulate::WideSum)
            .transform_fn(|g| clip_by_global_norm(g, c))
            .call(model, args.clone())
            .unwrap();
        close_all(
            &wide,
            &clipped_sum(per, c as f32),
            &format!("clipped sum in f64, {at}"),
        );
        let ((m1, m2), _) = micro_grad_module(loss)
            .microbatch_size(mb)
            .accumulator(Mean)
            .transform_fn(|g: ParamGrads| (g.clone(), square(g)))
            .call(model, args.clone())
            .unwrap();
        let (w1, w2) = moments(per);
        close_all(&m1, &w1, &format!("mean of g, {at}"));
        close_all(&m2, &w2, &format!("mean of g², {at}"));
    }
}

//! A chunk's backward pass: its recomputation from its checkpoint, recording a graph, and that
//! graph's backward pass.

use std::sync::Arc;
use std::sync::mpsc;

use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_backend::backend::AutodiffBackend;
use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{DType, TensorMetadata};

use super::chunk::{Ad, AdBackend, ChunkBody, Input, ad_of, leaf_of, plain_leaf, plain_prim};
use super::tape::{Recompute, Sink, Tap, zeros1};
use crate::batching::record;
use crate::transform::draws::seeded;
use crate::tree::{Leaf, Tree};

/// `(target, cotangent)` links of a recomputed chunk's root chain.
type Sinks<U, CS> = Vec<(FloatTensor<Ad<U, CS>>, FloatTensor<U>)>;

/// The backward of one chunk: rebuilds its inputs as fresh leaves (tapped where the user's input
/// is tracked), reruns it recording a graph, gives every float output its cotangent through a
/// chain of [`Sink`]s, runs that graph's backward pass on a helper thread and collects the
/// inputs' gradients from the [`Tap`]s.
pub(super) fn recompute_chunk<U, CS, F, C, X, Y>(
    body: Arc<ChunkBody<F>>,
    carry_inner: Vec<Leaf>,
    slab_inner: Vec<Leaf>,
    inputs: Vec<Input>,
    float_outputs: Vec<(bool, usize)>,
    (device, dtype): (U::Device, DType),
    seed: Option<(burn::tensor::Device, u64)>,
) -> Recompute<U>
where
    U: AdBackend<CS>,
    CS: CheckpointStrategy,
    C: Tree + 'static,
    X: Tree + 'static,
    Y: Tree + 'static,
    F: Fn(C, X) -> (C, Y) + Send + Sync + 'static,
{
    Box::new(move |cotangents: Vec<Option<FloatTensor<U>>>| {
        let (sender, receiver) = mpsc::channel::<(usize, FloatTensor<U>)>();
        // (input, step) of every tap, by tap id.
        let mut taps: Vec<(Input, usize)> = Vec::new();
        let mut sinks: Sinks<U, CS> = Vec::new();
        let mut fresh = |leaf: Leaf, input: Input, step: usize| -> Leaf {
            if !leaf.dtype().is_float() {
                return leaf;
            }
            let p = plain_prim::<U>(leaf);
            let report = inputs.contains(&input);
            let zeros = U::float_zeros(p.shape(), &p.device(), p.dtype().into());
            let leaf_ad = Ad::<U, CS>::from_inner(p.clone());
            let leaf_ad = Ad::<U, CS>::float_set_require_grad(leaf_ad, true);
            let report_to = report.then(|| (taps.len(), sender.clone()));
            let tapped = record::<U, CS, _, 1>(Tap, [&leaf_ad], report_to, p);
            if report {
                taps.push((input, step));
            }
            // A zero cotangent makes every tap part of the backward pass, so that each reports.
            sinks.push((tapped.clone(), zeros));
            leaf_of::<U, CS>(tapped)
        };
        let carry: Vec<Leaf> = carry_inner
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, l)| fresh(l, Input::Carry(i), 0))
            .collect();
        let mut rows: Vec<Option<Vec<Leaf>>> = body
            .steps
            .iter()
            .map(|&t| {
                let row = body
                    .row(&slab_inner, t)
                    .into_iter()
                    .enumerate()
                    .map(|(j, l)| fresh(l, Input::Xs(j), t))
                    .collect();
                Some(row)
            })
            .collect();
        let position = |t: usize| body.steps.iter().position(|&s| s == t).expect("a step");
        let rerun = || {
            body.run::<C, X, Y>(carry, |t| {
                rows[position(t)].take().expect("one read per row")
            })
        };
        // With the generator as the chunk found it forward: it draws the same values.
        let out = match &seed {
            Some((user, seed)) => seeded(user, Some(*seed), super::NAME, rerun).0,
            None => rerun(),
        }
        .unwrap_or_else(|e| panic!("vmap: checkpoint_chunked_scan: recomputing a chunk: {e}"));
        let mut cotangents = cotangents.into_iter();
        for (is_carry, i) in &float_outputs {
            let Some(cot) = cotangents.next().flatten() else {
                continue;
            };
            if *is_carry {
                if let Some(t) = ad_of::<U, CS>(&out.carry[*i]) {
                    sinks.push((t, cot));
                }
            } else {
                let cot = plain_leaf::<U>(cot);
                for (t, y) in &out.ys {
                    if let Some(y) = ad_of::<U, CS>(&y[*i]) {
                        sinks.push((y, plain_prim::<U>(cot.index(0, t - body.lo))));
                    }
                }
            }
        }
        let mut root = Ad::<U, CS>::from_inner(zeros1::<U>(&device, dtype));
        for (target, cot) in sinks {
            if target.is_tracked() {
                let link = zeros1::<U>(&device, dtype);
                root = record::<U, CS, _, 2>(Sink, [&root, &target], (cot, dtype), link);
            }
        }
        drop(sender);
        let n_taps = taps.len();
        // burn-autodiff holds the user's graph's lock during this backward step, and a
        // backward pass ends by visiting every graph: run this one on a thread that may finish
        // later. Burn's GPU backends queue work per thread ("stream"): the helper queues on
        // this thread's stream, so its kernels are ordered with the ones before and after this
        // step (on its own stream, tensors crossed between queues with no ordering).
        let stream = burn_std::id::StreamId::current();
        std::thread::Builder::new()
            .name("burn-vmap-chunk-backward".into())
            .spawn(move || {
                stream.executes(|| {
                    let _ = Ad::<U, CS>::backward(root);
                })
            })
            .expect("vmap: checkpoint_chunked_scan: cannot start the recomputation thread");
        let mut got: Vec<Option<FloatTensor<U>>> = vec![None; n_taps];
        for _ in 0..n_taps {
            let (id, g) = receiver.recv().unwrap_or_else(|_| {
                panic!(
                    "vmap: checkpoint_chunked_scan: the backward pass of a recomputed chunk \
                     failed (see the panic above)"
                )
            });
            got[id] = Some(g);
        }
        inputs
            .iter()
            .map(|input| {
                let mut rows: Vec<(usize, FloatTensor<U>)> = taps
                    .iter()
                    .zip(got.iter_mut())
                    .filter(|((r, _), _)| r == input)
                    .map(|((_, t), g)| (*t, g.take().expect("every tap reported")))
                    .collect();
                match input {
                    Input::Carry(_) => rows.pop().expect("one tap per carry leaf").1,
                    Input::Xs(_) => {
                        rows.sort_by_key(|(t, _)| *t);
                        let leaves = rows.into_iter().map(|(_, g)| plain_leaf::<U>(g)).collect();
                        plain_prim::<U>(Leaf::stack(leaves, 0))
                    }
                }
            })
            .collect()
    })
}

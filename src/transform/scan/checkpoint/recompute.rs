//! The backward pass of a checkpointed chunk: rerun it recording a graph, back-propagate the
//! cotangents of its outputs, collect the gradients of its inputs.

use std::sync::Arc;
use std::sync::mpsc;

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorPrimitive};
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_backend::backend::Backend;
use burn_backend::tensor::FloatTensor;
use burn_backend::{DType, TensorMetadata};

use super::chunk::{ChunkBody, Input};
use super::tape::{Recompute, Sink, Sinks, Tap, zeros1};
use super::{Ad, NAME, float_of, from_inner};
use crate::batching::record;
use crate::transform::scan::run::Step;
use crate::tree::{Leaf, Tree};

/// The backward of one chunk: rebuilds its inputs as fresh leaves (tapped where the outer
/// input is tracked), reruns it recording a graph, gives every float output its cotangent
/// through a chain of [`Sink`]s, runs that graph's backward pass on a helper thread and
/// collects the inputs' gradients from the [`Tap`]s.
pub(super) fn recompute_chunk<B, CS, C, X, Y, F>(
    body: Arc<ChunkBody<F>>,
    carry_inner: Vec<Leaf<B>>,
    slab_inner: Vec<Leaf<B>>,
    inputs: Vec<Input>,
    float_outputs: Vec<(bool, usize)>,
    (device, dtype): (B::Device, DType),
) -> Recompute<B>
where
    B: Backend,
    CS: CheckpointStrategy,
    C: Tree<Ad<B, CS>> + 'static,
    X: Tree<Ad<B, CS>> + 'static,
    Y: Tree<Ad<B, CS>> + 'static,
    F: Fn(C, X) -> (C, Y) + Send + Sync + 'static,
{
    Box::new(move |cotangents: Vec<Option<FloatTensor<B>>>| {
        let (sender, receiver) = mpsc::channel::<(usize, FloatTensor<B>)>();
        // (input, step) of every tap, by tap id.
        let mut taps: Vec<(Input, usize)> = Vec::new();
        let mut sinks: Sinks<B, CS> = Vec::new();
        let mut fresh = |leaf: Leaf<B>, input: Input, step: usize| -> Leaf<Ad<B, CS>> {
            let p = match &leaf {
                Leaf::Float(t) => t.clone().tensor(),
                _ => return from_inner(leaf),
            };
            let report = inputs.contains(&input);
            let zeros = B::float_zeros(p.shape(), &B::float_device(&p), p.dtype().into());
            let leaf_ad = <Ad<B, CS> as AutodiffBackend>::from_inner(p.clone());
            let leaf_ad =
                <Ad<B, CS> as burn_backend::ops::FloatTensorOps<Ad<B, CS>>>::float_set_require_grad(
                    leaf_ad, true,
                );
            let report_to = report.then(|| (taps.len(), sender.clone()));
            let tapped = record::<B, CS, _, 1>(Tap, [&leaf_ad], report_to, p);
            if report {
                taps.push((input, step));
            }
            // A zero cotangent makes every tap part of the backward pass, so that each reports.
            sinks.push((tapped.clone(), zeros));
            Leaf::Float(TensorPrimitive::Float(tapped))
        };
        let carry: Vec<Leaf<Ad<B, CS>>> = carry_inner
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, l)| fresh(l, Input::Carry(i), 0))
            .collect();
        let xs_steps: Vec<Vec<Leaf<Ad<B, CS>>>> = body
            .steps
            .iter()
            .map(|&t| {
                body.x_inner(&slab_inner, t)
                    .into_iter()
                    .enumerate()
                    .map(|(j, l)| fresh(l, Input::Xs(j), t))
                    .collect()
            })
            .collect();
        let out = Step::<Ad<B, CS>, C, X, Y, F>::new(NAME, &*body.f)
            .run_steps(&body.carry_def, carry, &body.steps, &body.x_def, xs_steps)
            .unwrap_or_else(|e| panic!("vmap: checkpoint_chunked_scan: recomputing a chunk: {e}"));
        let mut cotangents = cotangents.into_iter();
        for (is_carry, i) in &float_outputs {
            let Some(cot) = cotangents.next().flatten() else {
                continue;
            };
            if *is_carry {
                if let Some(t) = float_of(&out.carry[*i]) {
                    sinks.push((t, cot));
                }
            } else {
                let cot = Leaf::<B>::Float(TensorPrimitive::Float(cot));
                for (&t, y) in body.steps.iter().zip(&out.ys) {
                    if let (Some(y), Some(c)) =
                        (float_of(&y[*i]), float_of(&cot.index(t - body.lo)))
                    {
                        sinks.push((y, c));
                    }
                }
            }
        }
        let mut root = <Ad<B, CS> as AutodiffBackend>::from_inner(zeros1::<B>(&device, dtype));
        for (target, cot) in sinks {
            if target.is_tracked() {
                let link = zeros1::<B>(&device, dtype);
                root = record::<B, CS, _, 2>(Sink, [&root, &target], (cot, dtype), link);
            }
        }
        drop(sender);
        let n_taps = taps.len();
        let root = Tensor::<Ad<B, CS>, 1>::from_primitive(TensorPrimitive::Float(root));
        // burn-autodiff holds the outer graph's lock during this backward step, and a backward
        // pass ends by visiting every graph: run this one on a thread that may finish later.
        // Burn's GPU backends queue work per thread ("stream"): the helper queues on this
        // thread's stream, so its kernels are ordered with the ones before and after this step
        // (on its own stream, tensors crossed between queues with no ordering: wrong gradients).
        let stream = burn_std::id::StreamId::current();
        std::thread::Builder::new()
            .name("burn-vmap-chunk-backward".into())
            .spawn(move || {
                stream.executes(|| {
                    let _ = root.backward();
                })
            })
            .expect("vmap: checkpoint_chunked_scan: cannot start the recomputation thread");
        let mut got: Vec<Option<FloatTensor<B>>> = vec![None; n_taps];
        for _ in 0..n_taps {
            let (id, g) = receiver.recv().unwrap_or_else(|_| {
                panic!("vmap: checkpoint_chunked_scan: the backward pass of a recomputed chunk failed (see the panic above)")
            });
            got[id] = Some(g);
        }
        inputs
            .iter()
            .map(|input| {
                let mut rows: Vec<(usize, FloatTensor<B>)> = taps
                    .iter()
                    .zip(got.iter_mut())
                    .filter(|((r, _), _)| r == input)
                    .map(|((_, t), g)| (*t, g.take().expect("every tap reported")))
                    .collect();
                match input {
                    Input::Carry(_) => rows.pop().expect("one tap per carry leaf").1,
                    Input::Xs(_) => {
                        rows.sort_by_key(|(t, _)| *t);
                        let leaves = rows
                            .into_iter()
                            .map(|(_, g)| Leaf::Float(TensorPrimitive::Float(g)))
                            .collect();
                        match Leaf::<B>::stack(leaves) {
                            Leaf::Float(t) => t.tensor(),
                            _ => unreachable!("gradients are float leaves"),
                        }
                    }
                }
            })
            .collect()
    })
}

//! `jax.vmap` of a gradient program (`vmap(grad(loss, argnum))`, optionally nested): per-example
//! gradients through the library's `per_example_grads`.
//!
//! Burn 0.22.1's capture backend has no autodiff, so a function that calls `backward` cannot be
//! recorded (`vmap` of such a program fails with "Capture tensors do not support autodiff"),
//! and `per_example_grads` cannot run inside a recording either (it moves the module to a
//! capture device and puts it in training mode, which needs autodiff on the capture tensors).
//! So the runner computes `vmap(grad(loss, k))(args)` at the top level:
//!
//! 1. `vmap(identity)` with the case's `in_axes` (and `inner_in_axes`) and `out_axes` 0 stacks
//!    the examples: every leaf with the batch first (mapped axes moved there, unmapped arguments
//!    broadcast), and the library checks the axes and batch sizes as `vmap` does;
//! 2. argument `k` is differentiated through a module of zero offsets, one per leaf of one
//!    example of it (a parameter shared by the examples), added to the example's argument: the
//!    per-example gradient with respect to the offset is the gradient with respect to the
//!    argument at that example's value, whether the argument is mapped or not;
//! 3. the gradients, batch first, are placed at the case's `out_axes` by `vmap(identity)` again
//!    (in axis 0, out `out_axes`; nested for a nested case), so the library checks them.

use burn::module::{Module, Param};
use burn_vmap::per_example_grads;

use crate::*;

/// One zero offset per leaf of the differentiated argument (flattened, of one example's size).
#[derive(Module, Debug)]
pub(crate) struct Offsets {
    offsets: Vec<Param<Tensor<1>>>,
}

/// `dims` as an array of length `D`.
fn dims_of<const D: usize>(dims: &[usize]) -> [usize; D] {
    dims.try_into()
        .unwrap_or_else(|_| panic!("runner: {dims:?} is not of rank {D}"))
}

/// A leaf (of any kind) reshaped to `dims`.
fn reshaped(p: Pt, dims: &[usize]) -> Pt {
    fn of_kind<K: TensorKind + Basic>(p: Pt, dims: &[usize]) -> Pt {
        with_rank!(p.rank(), R => {
            let t = p.get::<R, K>();
            with_rank!(dims.len(), D => pt(t.reshape(dims_of::<D>(dims))))
        })
    }
    match p.leaf().kind_name() {
        "float" => of_kind::<Float>(p, dims),
        "int" => of_kind::<Int>(p, dims),
        _ => of_kind::<Bool>(p, dims),
    }
}

/// The examples of `args` stacked batch first (`[outer, inner, ...]` for a nested case), by
/// the library's `vmap` of the identity.
fn stack_examples(args: Pt, in_axes: Axes, inner: Option<Axes>) -> Result<Pt, VmapError> {
    match inner {
        None => vmap(|a: Pt| a)
            .in_axes(in_axes)
            .call_as::<Pt, Pt, Pt, Pt>(args),
        Some(inner_in) => vmap_run(
            |a: Vec<Pt>| Pt::Tuple(a),
            args,
            in_axes,
            Axes::from(0),
            Some((inner_in, Axes::from(0))),
        ),
    }
}

/// `vmap(grad(f.loss, f.argnum))` with `in_axes` / `out_axes` (nested with `inner` =
/// `(inner_in_axes, inner_out_axes)`).
pub(crate) fn vmap_grad_run(
    f: GradProgram,
    args: Pt,
    in_axes: Axes,
    out_axes: Axes,
    inner: Option<(Axes, Axes)>,
) -> Result<Result<Pt, VmapError>, String> {
    let (inner_in, inner_out) = match inner {
        Some((i, o)) => (Some(i), Some(o)),
        None => (None, None),
    };
    let levels = if inner_in.is_some() { 2 } else { 1 };
    let stacked = match stack_examples(args, in_axes, inner_in) {
        Ok(s) => s.into_args(),
        Err(e) => return Ok(Err(e)),
    };
    // Fold the batch dims into one (a nested case's `[outer, inner]` into `outer * inner`).
    let batch: Vec<usize> = stacked
        .first()
        .map(|a| {
            let (leaves, _) = a.clone().flatten();
            leaves[0].shape().to_vec()[..levels].to_vec()
        })
        .ok_or("runner: a gradient program without arguments")?;
    let rows: usize = batch.iter().product();
    let flat: Vec<Pt> = stacked
        .into_iter()
        .map(|a| {
            a.map_leaves(&mut |l: Pt| {
                let mut dims = vec![rows];
                dims.extend_from_slice(&l.dims()[levels..]);
                reshaped(l, &dims)
            })
        })
        .collect();
    let k = f.argnum;
    let wrt = flat
        .get(k)
        .ok_or_else(|| format!("runner: argnum {k} out of range"))?
        .clone();
    // One example's leaf shapes of the differentiated argument.
    let (wrt_leaves, _) = wrt.clone().flatten();
    let example_dims: Vec<Vec<usize>> = wrt_leaves
        .iter()
        .map(|l| l.shape().to_vec()[1..].to_vec())
        .collect();
    if let Some(l) = wrt_leaves.iter().find(|l| l.kind_name() != "float") {
        return Err(format!(
            "runner: cannot differentiate w.r.t. a {} tensor",
            l.kind_name()
        ));
    }
    let device = wrt_leaves[0].device();
    let module = Offsets {
        offsets: example_dims
            .iter()
            .map(|d| {
                let n = d.iter().product::<usize>();
                Param::from_tensor(Tensor::<1>::zeros([n], &device))
            })
            .collect(),
    };
    let loss = f.loss;
    let loss_fn = move |m: &Offsets, a: Pt| -> Tensor<1> {
        let mut args = a.into_args();
        let mut i = 0;
        args[k] = args[k].clone().map_leaves(&mut |l: Pt| {
            let offset = m.offsets[i].val();
            i += 1;
            let dims = l.dims();
            with_rank!(dims.len(), D => pt(l.f::<D>() + offset.reshape(dims_of::<D>(&dims))))
        });
        let out = loss(args);
        match out.rank() {
            0 => out.f::<0>().reshape([1]),
            1 => out.f::<1>(),
            r => panic!("runner: the loss of a gradient program has rank {r}"),
        }
    };
    let grads = match per_example_grads(&module, Pt::Tuple(flat), loss_fn) {
        Ok(g) => g,
        Err(e) => return Ok(Err(e)),
    };
    // `[rows, n]` per leaf -> `[batch.., example dims..]`, in the structure of the argument.
    let mut placed = grads
        .iter()
        .zip(&example_dims)
        .map(|((_, _, g), dims)| {
            let mut full = batch.clone();
            full.extend_from_slice(dims);
            reshaped(Pt::Leaf(g.clone()), &full)
        })
        .collect::<Vec<_>>()
        .into_iter();
    let grads = wrt.map_leaves(&mut |_| placed.next().expect("one gradient per offset"));
    // The batch axes to `out_axes` (and `inner_out_axes`), through the library.
    Ok(vmap_run(
        |mut a: Vec<Pt>| a.remove(0),
        Pt::Tuple(vec![grads]),
        Axes::from(0),
        out_axes,
        inner_out.map(|o| (Axes::from(0), o)),
    ))
}

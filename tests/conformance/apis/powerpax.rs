//! powerpax: `chunked_vmap`, `sliced_scan`, `checkpoint_chunked_scan`.
//!
//! What 0.22 changes here: a recorded function reads tensors only through its arguments, so a
//! `captured` input (`tanh_matmul_and_sqnorm`'s `w`) is passed as a trailing unmapped argument
//! (`in_axes` `None`) instead of being closed over; the derivatives of `checkpoint_chunked_scan`
//! are Burn's own backward on an autodiff device (`Device::default().autodiff()`).

use burn_vmap::transform::{checkpoint_chunked_scan, chunked_vmap, sliced_scan};

use crate::*;

/// The positional arguments followed by the `captured` inputs (in `captured`'s key order), and
/// the `in_axes` mapping the former on `axis`, the latter not at all.
pub(crate) fn args_with_captured(case: &Case, axis: isize) -> Result<(Pt, Axes), String> {
    let device = Device::default();
    let mut args = build_args(case)?;
    let mut axes = vec![Spec::Leaf(Some(axis)); args.len()];
    for input in case.captured.values() {
        args.push(Pt::Leaf(input_leaf(case.input(input)?, &device)));
        axes.push(Spec::Leaf(None));
    }
    Ok((Pt::Tuple(args), Spec::Seq(axes)))
}

/// A scan body `(carry, x) -> (carry, y)` registered for `id`.
pub(crate) type ScanBody = fn(Pt, Pt) -> (Pt, Pt);

pub(crate) fn scan_body(id: &str) -> Result<ScanBody, String> {
    match id {
        "cumsum_carry" => Ok(programs::cumsum_carry),
        "sincos_carry" => Ok(programs::sincos_carry),
        other => Err(format!("runner: unknown scan body {other:?}")),
    }
}

/// Per-step scalars are Burn's scalars, `[1]` tensors (see `programs::sum1`): stacked, they
/// give `(n, 1)` where JAX has `(n,)`. Reports such a `ys` leaf with JAX's shape.
pub(crate) fn jax_ys_shape(case: &Case, outputs: &mut Outputs) {
    let Expected::Outputs(expected) = &case.expected else {
        return;
    };
    if let (Some(Some(e)), Some(Some(g))) = (expected.get("ys"), outputs.get_mut("ys"))
        && g.shape.len() == e.shape.len() + 1
        && g.shape.last() == Some(&1)
    {
        g.shape.pop();
    }
}

pub(crate) fn param_isize(case: &Case, key: &str) -> Result<Option<isize>, String> {
    case.param(key)
        .map(|v| {
            v.as_i64()
                .map(|x| x as isize)
                .ok_or(format!("bad {key}: {v}"))
        })
        .transpose()
}

pub(crate) fn param_bool(case: &Case, key: &str) -> bool {
    case.param(key).and_then(Value::as_bool).unwrap_or(false)
}

/// `powerpax.chunked_vmap` (FORMAT 3.6): every positional argument mapped on axis 0 (the
/// `captured` inputs, passed after them, unmapped).
pub(crate) fn api_chunked_vmap(case: &Case) -> Result<Run, String> {
    let chunk = param_isize(case, "chunk_size")?.ok_or("chunked_vmap needs a chunk_size")?;
    let f = program(&case.program)
        .ok_or_else(|| format!("runner: unknown program {:?}", case.program))?;
    let chunked = match chunked_vmap(move |a: Pt| f(a.into_args()), chunk) {
        Ok(c) => c,
        Err(e) => return Ok(Run::Error(e)),
    };
    let (args, in_axes) = args_with_captured(case, 0)?;
    Ok(out_run(
        chunked.in_axes(in_axes).call_as::<Pt, Pt, Pt, Pt>(args),
    ))
}

/// `powerpax.sliced_scan` (FORMAT 3.7), `args = [init, xs]`.
pub(crate) fn api_sliced_scan(case: &Case) -> Result<Run, String> {
    let body = scan_body(&case.program)?;
    let [init, xs] = take(build_args(case)?);
    let result = sliced_scan(body, init, xs)
        .slice(
            param_isize(case, "start")?,
            param_isize(case, "stop")?,
            param_isize(case, "step")?,
        )
        .reverse(param_bool(case, "reverse"))
        .call_as::<Pt, Pt, Pt>();
    Ok(match result {
        Ok((carry, ys)) => {
            let mut outputs = Outputs::new();
            collect_outputs("carry", carry, &mut outputs);
            collect_outputs("ys", ys, &mut outputs);
            jax_ys_shape(case, &mut outputs);
            Run::Outputs(outputs)
        }
        Err(e) => Run::Error(e),
    })
}

/// `powerpax.checkpoint_chunked_scan` (FORMAT 3.8) on an autodiff device: values, and
/// derivatives through the checkpointed scan (each from a fresh forward pass: a backward pass
/// consumes the graph).
pub(crate) fn api_checkpoint_chunked_scan(case: &Case) -> Result<Run, String> {
    let body = scan_body(&case.program)?;
    let chunk = param_isize(case, "chunk_size")?;
    let reverse = param_bool(case, "reverse");
    let device = Device::default().autodiff();
    /// `(init, xs, carry, ys)` of one forward pass.
    type Pass = (Pt, Pt, Pt, Pt);
    let run = |grad_init: bool, grad_xs: bool| -> Result<Pass, VmapError> {
        let [init, xs] = take(build_args_on(case, &device).expect("inputs"));
        let init = if grad_init { require_grad(init) } else { init };
        let xs = if grad_xs { require_grad(xs) } else { xs };
        let (carry, ys) = checkpoint_chunked_scan(body, init.clone(), xs.clone())
            .chunk_size(chunk)
            .reverse(reverse)
            .call_as::<Pt, Pt, Pt>()?;
        Ok((init, xs, carry, ys))
    };
    /// Backward from `sum(t)` (a rank-0 tensor is its own sum).
    fn backward_sum(t: Pt) -> Gradients {
        match t.rank() {
            0 => t.f::<0>().backward(),
            r => with_rank!(r, D => t.f::<D>().sum().backward()),
        }
    }

    let (_, _, carry, ys) = match run(false, false) {
        Ok(r) => r,
        Err(e) => return Ok(Run::Error(e)),
    };
    let carry_shape = carry.dims();
    let mut outputs = Outputs::new();
    collect_outputs("carry", without_autodiff(carry), &mut outputs);
    collect_outputs("ys", without_autodiff(ys), &mut outputs);
    jax_ys_shape(case, &mut outputs);

    // d sum(carry) / d init
    let (init, _, carry, _) = run(true, false).map_err(|e| e.to_string())?;
    let g = grads_of(&init, &backward_sum(carry));
    collect_outputs("grad_sum_carry_wrt_init", g, &mut outputs);

    // d sum(ys) / d xs
    let (_, xs, _, ys) = run(false, true).map_err(|e| e.to_string())?;
    let g = grads_of(&xs, &backward_sum(ys));
    collect_outputs("grad_sum_ys_wrt_xs", g, &mut outputs);

    // Jacobian [i][j] = d carry_i / d init_j: one backward pass per carry element.
    let jac = match carry_shape.len() {
        0 => {
            let (init, _, carry, _) = run(true, false).map_err(|e| e.to_string())?;
            grads_of(&init, &backward_sum(carry))
        }
        1 => {
            let d = carry_shape[0];
            let rows: Vec<Tensor<1>> = (0..d)
                .map(|i| {
                    let (init, _, carry, _) = run(true, false).map_err(|e| e.to_string())?;
                    let ci = carry.f::<1>().narrow(0, i, 1).sum();
                    Ok(grads_of(&init, &ci.backward()).f::<1>())
                })
                .collect::<Result<_, String>>()?;
            pt(Tensor::stack::<2>(rows, 0))
        }
        r => return Err(format!("runner: jacobian of a rank-{r} carry")),
    };
    collect_outputs("jacobian_carry_wrt_init", jac, &mut outputs);
    Ok(Run::Outputs(outputs))
}

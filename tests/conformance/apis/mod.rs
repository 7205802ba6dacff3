//! Apis: one function per transform named by a case's `api`, registered in [`run_api`].
//!
//! - `mod.rs`: `vmap` and `value_and_grad`;
//! - `vmap_grad.rs`: `vmap` of a gradient program, through `per_example_grads`;
//! - `micro.rs`: optax.microbatching (`micro_vmap`, `micro_grad`);
//! - `auto.rs`: jax_autovmap's `auto_vmap`;
//! - `powerpax.rs`: `chunked_vmap`, `sliced_scan`, `checkpoint_chunked_scan`.

mod auto;
mod micro;
mod powerpax;
mod vmap_grad;

use std::sync::{Arc, Mutex};

pub(crate) use vmap_grad::*;

use crate::*;

/// Result of one case.
pub(crate) enum Outcome {
    Pass,
    Fail(String),
    Skip(String),
}

/// Runs the api of `case`: `None` when the runner does not implement it yet.
pub(crate) fn run_api(case: &Case) -> Option<Result<Run, String>> {
    Some(match case.api.as_str() {
        "jax.vmap" => api_vmap(case),
        "jax.value_and_grad" => api_value_and_grad(case),
        "optax.microbatching.micro_vmap" => micro::api_micro_vmap(case),
        "optax.microbatching.micro_grad" => micro::api_micro_grad(case),
        "jax_autovmap.auto_vmap" => auto::api_auto_vmap(case),
        "powerpax.chunked_vmap" => powerpax::api_chunked_vmap(case),
        "powerpax.sliced_scan" => powerpax::api_sliced_scan(case),
        "powerpax.checkpoint_chunked_scan" => powerpax::api_checkpoint_chunked_scan(case),
        _ => return None,
    })
}

/// `in_axes` / `out_axes` from JSON: int, null, list (per position), object (per field).
pub(crate) fn parse_axes(v: &Value) -> Result<Axes, String> {
    match v {
        Value::Null => Ok(Spec::Leaf(None)),
        Value::Number(n) => Ok(Spec::Leaf(Some(
            n.as_i64().ok_or_else(|| format!("bad axis {n}"))? as isize,
        ))),
        Value::Array(items) => Ok(Spec::Seq(
            items.iter().map(parse_axes).collect::<Result<_, _>>()?,
        )),
        Value::Object(m) => Ok(Spec::fields(
            m.iter()
                .map(|(k, v)| Ok((k.clone(), parse_axes(v)?)))
                .collect::<Result<Vec<_>, String>>()?,
        )),
        other => Err(format!("bad axes {other}")),
    }
}

/// The outputs named `out`, or the library's error.
pub(crate) fn out_run(result: Result<Pt, VmapError>) -> Run {
    match result {
        Ok(out) => {
            let mut outputs = Outputs::new();
            collect_outputs("out", out, &mut outputs);
            Run::Outputs(outputs)
        }
        Err(e) => Run::Error(e),
    }
}

/// `jax.vmap` (FORMAT 3.1), optionally nested (`inner_in_axes`, `inner_out_axes`).
pub(crate) fn api_vmap(case: &Case) -> Result<Run, String> {
    let in_axes = parse_axes(case.param("in_axes").unwrap_or(&Value::from(0)))?;
    let out_axes = parse_axes(case.param("out_axes").unwrap_or(&Value::from(0)))?;
    let inner = match case.param("inner_in_axes") {
        Some(v) => Some((
            parse_axes(v)?,
            parse_axes(case.param("inner_out_axes").unwrap_or(&Value::from(0)))?,
        )),
        None => None,
    };
    let args = Pt::Tuple(build_args(case)?);
    if let Some(g) = grad_program(&case.program) {
        return Ok(out_run(vmap_grad_run(g, args, in_axes, out_axes, inner)?));
    }
    let f = program(&case.program)
        .ok_or_else(|| format!("runner: unknown program {:?}", case.program))?;
    Ok(out_run(vmap_run(f, args, in_axes, out_axes, inner)))
}

/// `vmap(f)` (or `vmap(vmap(f, inner axes))`) applied to the argument tuple `args`.
///
/// The inner `vmap` runs inside the outer one's recorded function (it records `f` on the capture
/// device of the next depth); an error of the inner call is carried out of the outer call
/// through a shared slot (the outer call sees the recorded function panic).
pub(crate) fn vmap_run(
    f: Program,
    args: Pt,
    in_axes: Axes,
    out_axes: Axes,
    inner: Option<(Axes, Axes)>,
) -> Result<Pt, VmapError> {
    let prog = move |a: Pt| f(a.into_args());
    match inner {
        None => vmap(prog)
            .in_axes(in_axes)
            .out_axes(out_axes)
            .call_as::<Pt, Pt, Pt, Pt>(args),
        Some((inner_in, inner_out)) => {
            let inner_error: Arc<Mutex<Option<VmapError>>> = Arc::default();
            let slot = inner_error.clone();
            let inner_vmap = vmap(prog).in_axes(inner_in).out_axes(inner_out);
            let outer = move |a: Pt| -> Pt {
                inner_vmap.call_as::<Pt, Pt, Pt, Pt>(a).unwrap_or_else(|e| {
                    let msg = e.to_string();
                    *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    panic!("runner: the inner vmap failed: {msg}")
                })
            };
            let result = vmap(outer)
                .in_axes(in_axes)
                .out_axes(out_axes)
                .call_as::<Pt, Pt, Pt, Pt>(args);
            let inner_error = inner_error.lock().unwrap_or_else(|p| p.into_inner()).take();
            match (result, inner_error) {
                (Err(_), Some(e)) => Err(e),
                (result, _) => result,
            }
        }
    }
}

/// `argnums` as a list of positions, and whether it was a single int.
pub(crate) fn parse_argnums(v: Option<&Value>) -> Result<(Vec<usize>, bool), String> {
    match v {
        None => Ok((vec![0], true)),
        Some(Value::Number(n)) => Ok((vec![n.as_u64().ok_or("bad argnums")? as usize], true)),
        Some(Value::Array(a)) => Ok((
            a.iter()
                .map(|x| x.as_u64().map(|x| x as usize).ok_or("bad argnums"))
                .collect::<Result<_, _>>()?,
            false,
        )),
        Some(other) => Err(format!("bad argnums {other}")),
    }
}

/// Marks every float leaf as requiring a gradient (the leaves are on an autodiff device).
pub(crate) fn require_grad(p: Pt) -> Pt {
    p.map_leaves(&mut |l: Pt| {
        if !l.is_float() {
            panic!(
                "runner: cannot differentiate w.r.t. a non-float argument ({})",
                l.describe()
            );
        }
        with_rank!(l.rank(), D => pt(l.f::<D>().require_grad()))
    })
}

/// The gradient of every leaf of `p` (zeros where it does not contribute), without autodiff.
pub(crate) fn grads_of(p: &Pt, grads: &Gradients) -> Pt {
    p.clone().map_leaves(&mut |l: Pt| {
        with_rank!(l.rank(), D => {
            let t = l.f::<D>();
            let g = t.grad(grads).unwrap_or_else(|| t.inner().zeros_like());
            pt(g)
        })
    })
}

/// Every float leaf without its autodiff association (to read it back).
pub(crate) fn without_autodiff(p: Pt) -> Pt {
    p.map_leaves(&mut |l: Pt| {
        if l.is_float() {
            with_rank!(l.rank(), D => pt(l.f::<D>().inner()))
        } else {
            l
        }
    })
}

/// Backward from a scalar loss: JAX's `()`, or Burn's scalar `[1]`.
pub(crate) fn backward_scalar(loss: &Pt) -> Result<Gradients, String> {
    match loss.dims().as_slice() {
        [] => Ok(loss.clone().f::<0>().backward()),
        [1] => Ok(loss.clone().f::<1>().backward()),
        other => Err(format!("the loss must be a scalar, got shape {other:?}")),
    }
}

/// `jax.value_and_grad` (FORMAT 3.10), no batching: the program runs eagerly on an autodiff
/// device (Burn's own backward); outputs `loss` and `grads`.
pub(crate) fn api_value_and_grad(case: &Case) -> Result<Run, String> {
    let f = program(&case.program)
        .ok_or_else(|| format!("runner: unknown program {:?}", case.program))?;
    let (argnums, single) = parse_argnums(case.param("argnums"))?;
    let device = Device::default().autodiff();
    let mut args = build_args_on(case, &device)?;
    for &i in &argnums {
        let a = args
            .get(i)
            .ok_or_else(|| format!("argnums {i} out of range"))?
            .clone();
        args[i] = require_grad(a);
    }
    let loss = f(args.clone());
    let grads = backward_scalar(&loss).map_err(|e| format!("value_and_grad: {e}"))?;
    let g: Vec<_> = argnums
        .iter()
        .map(|&i| grads_of(&args[i], &grads))
        .collect();
    let g = if single {
        g.into_iter().next().expect("one argnum")
    } else {
        Pt::Tuple(g)
    };
    let mut outputs = Outputs::new();
    collect_outputs("loss", without_autodiff(loss), &mut outputs);
    // A `[1]` loss is Burn's scalar (see `programs::xent`): JAX's shape `()`.
    if let Some(Some(l)) = outputs.get_mut("loss")
        && l.shape == [1]
    {
        l.shape.clear();
    }
    collect_outputs("grads", g, &mut outputs);
    Ok(Run::Outputs(outputs))
}

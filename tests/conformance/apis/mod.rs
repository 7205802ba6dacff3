//! Apis: one function per transform named by a case's `api`, registered in [`run_api`].
//!
//! - `mod.rs`: `vmap` and `value_and_grad`;
//! - `micro.rs`: optax.microbatching (`micro_vmap`, `micro_grad`);
//! - `auto.rs`: jax_autovmap's `auto_vmap`;
//! - `powerpax.rs`: `chunked_vmap`, `sliced_scan`, `checkpoint_chunked_scan`.

mod auto;
mod micro;
mod powerpax;

pub(crate) use auto::*;
pub(crate) use micro::*;
pub(crate) use powerpax::*;

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
        "optax.microbatching.micro_vmap" => api_micro_vmap(case),
        "optax.microbatching.micro_grad" => api_micro_grad(case),
        "jax_autovmap.auto_vmap" => api_auto_vmap(case),
        "powerpax.chunked_vmap" => api_chunked_vmap(case),
        "powerpax.sliced_scan" => api_sliced_scan(case),
        "powerpax.checkpoint_chunked_scan" => api_checkpoint_chunked_scan(case),
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

/// An error of an inner `vmap` (nested cases), carried out of the outer call by a panic.
pub(crate) struct InnerVmapError(pub(crate) VmapError);

/// `jax.vmap` (FORMAT 3.1), optionally nested (`inner_in_axes`).
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
    if let Some(f) = ad_program::<AD>(&case.program) {
        vmap_run::<AD, V>(case, f, in_axes, out_axes, inner)
    } else if let Some(f) = program::<V>(&case.program) {
        vmap_run::<V, V>(case, f, in_axes, out_axes, inner)
    } else {
        Err(format!("runner: unknown program {:?}", case.program))
    }
}

pub(crate) fn vmap_run<BI: BatchOps, BO: BatchOps>(
    case: &Case,
    f: fn(Vec<Pt<BI>>) -> Pt<BO>,
    in_axes: Axes,
    out_axes: Axes,
    inner: Option<(Axes, Axes)>,
) -> Result<Run, String> {
    let args = Pt::Tuple(build_args::<BI>(case)?);
    let prog = move |a: Pt<BI>| f(a.into_args());
    let result: Result<Pt<BO>, VmapError> = match inner {
        None => vmap(prog).in_axes(in_axes).out_axes(out_axes).call_as(args),
        Some((inner_in, inner_out)) => {
            let outer = move |a: Pt<BI>| -> Pt<BO> {
                vmap(prog)
                    .in_axes(inner_in.clone())
                    .out_axes(inner_out.clone())
                    .call_as(a)
                    .unwrap_or_else(|e| panic::panic_any(InnerVmapError(e)))
            };
            match panic::catch_unwind(AssertUnwindSafe(|| {
                vmap(outer)
                    .in_axes(in_axes)
                    .out_axes(out_axes)
                    .call_as(args)
            })) {
                Ok(r) => r,
                Err(payload) => match payload.downcast::<InnerVmapError>() {
                    Ok(e) => Err(e.0),
                    Err(payload) => panic::resume_unwind(payload),
                },
            }
        }
    };
    Ok(match result {
        Ok(out) => {
            let mut outputs = Outputs::new();
            collect_outputs("out", out, &mut outputs);
            Run::Outputs(outputs)
        }
        Err(e) => Run::Error(e),
    })
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

/// Marks every float leaf as requiring a gradient.
pub(crate) fn require_grad<B: AutodiffBackend>(p: Pt<B>) -> Pt<B> {
    p.map_leaves(&mut |l: Pt<B>| {
        if !l.is_float() {
            panic!(
                "runner: cannot differentiate w.r.t. a non-float argument ({})",
                l.describe()
            );
        }
        with_rank!(l.rank(), D => pt(l.f::<D>().require_grad()))
    })
}

/// The gradient of every leaf of `p` (zeros where it does not contribute).
pub(crate) fn grads_of<B: AutodiffBackend>(p: &Pt<B>, grads: &B::Gradients) -> Pt<B::InnerBackend> {
    p.clone().map_leaves(&mut |l: Pt<B>| {
        with_rank!(l.rank(), D => {
            let t = l.f::<D>();
            let g = t.grad(grads).unwrap_or_else(|| t.inner().zeros_like());
            pt(g)
        })
    })
}

/// `jax.value_and_grad` (FORMAT 3.10), no batching: outputs `loss` and `grads`.
pub(crate) fn api_value_and_grad(case: &Case) -> Result<Run, String> {
    let f = program::<ADPlain>(&case.program)
        .ok_or_else(|| format!("runner: unknown program {:?}", case.program))?;
    let (argnums, single) = parse_argnums(case.param("argnums"))?;
    let mut args = build_args::<ADPlain>(case)?;
    for &i in &argnums {
        let a = args
            .get(i)
            .ok_or_else(|| format!("argnums {i} out of range"))?
            .clone();
        args[i] = require_grad(a);
    }
    let loss = f(args.clone());
    let grads = match loss.leaf().shape().to_vec().as_slice() {
        [] => loss.clone().f::<0>().backward(),
        [1] => loss.clone().f::<1>().backward(),
        other => {
            return Err(format!(
                "value_and_grad: the loss must be a scalar, got shape {other:?}"
            ));
        }
    };
    let g: Vec<_> = argnums
        .iter()
        .map(|&i| grads_of(&args[i], &grads))
        .collect();
    let g = if single {
        g.into_iter().next().unwrap()
    } else {
        Pt::Tuple(g)
    };
    let mut outputs = Outputs::new();
    collect_outputs("loss", loss, &mut outputs);
    // A `[1]` loss is Burn's scalar (see `programs::xent`): JAX's shape `()`.
    if let Some(Some(l)) = outputs.get_mut("loss") {
        l.shape.clear();
    }
    collect_outputs("grads", g, &mut outputs);
    Ok(Run::Outputs(outputs))
}

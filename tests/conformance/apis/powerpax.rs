//! powerpax: `chunked_vmap`, `sliced_scan`, `checkpoint_chunked_scan` (scans branch).

use crate::*;

/// A program with its `captured` inputs bound (FORMAT: `captured` values are constants of the
/// closure, never batched): `tanh_matmul_and_sqnorm` captures `w`.
pub(crate) fn powerpax_program<B: Backend>(
    case: &Case,
) -> Result<impl Fn(Vec<Pt<B>>) -> Pt<B> + Clone + use<B>, String> {
    let device = Default::default();
    let captured: BTreeMap<String, Pt<B>> = case
        .captured
        .iter()
        .map(|(k, input)| Ok((k.clone(), Pt::Leaf(input_leaf(case.input(input)?, &device)))))
        .collect::<Result<_, String>>()?;
    let plain = program::<B>(&case.program);
    let id = case.program.clone();
    match (id.as_str(), plain) {
        ("identity" | "tanh_matmul_and_sqnorm", _) | (_, Some(_)) => {}
        _ => return Err(format!("runner: unknown program {id:?}")),
    }
    Ok(move |args: Vec<Pt<B>>| match id.as_str() {
        "identity" => programs::identity(args),
        "tanh_matmul_and_sqnorm" => programs::tanh_matmul_and_sqnorm(args, captured["w"].clone()),
        _ => plain.expect("checked above")(args),
    })
}

/// A scan body `(carry, x) -> (carry, y)` registered for `id`.
pub(crate) type ScanBody<B> = fn(Pt<B>, Pt<B>) -> (Pt<B>, Pt<B>);

pub(crate) fn scan_body<B: Backend>(id: &str) -> Result<ScanBody<B>, String> {
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

/// `powerpax.chunked_vmap` (FORMAT 3.6): every positional argument mapped on axis 0.
pub(crate) fn api_chunked_vmap(case: &Case) -> Result<Run, String> {
    let chunk = param_isize(case, "chunk_size")?.ok_or("chunked_vmap needs a chunk_size")?;
    let f = powerpax_program::<V>(case)?;
    let chunked = match burn_vmap::transform::chunked_vmap(move |a: Pt<V>| f(a.into_args()), chunk)
    {
        Ok(c) => c,
        Err(e) => return Ok(Run::Error(e)),
    };
    let args = Pt::Tuple(build_args::<V>(case)?);
    Ok(match chunked.call_as::<V, V, _, _, _, Pt<V>>(args) {
        Ok(out) => {
            let mut outputs = Outputs::new();
            collect_outputs("out", out, &mut outputs);
            Run::Outputs(outputs)
        }
        Err(e) => Run::Error(e),
    })
}

/// `powerpax.sliced_scan` (FORMAT 3.7), `args = [init, xs]`.
pub(crate) fn api_sliced_scan(case: &Case) -> Result<Run, String> {
    type B = V;
    let body = scan_body::<B>(&case.program)?;
    let [init, xs] = take(build_args::<B>(case)?);
    let result = burn_vmap::transform::sliced_scan(body, init, xs)
        .slice(
            param_isize(case, "start")?,
            param_isize(case, "stop")?,
            param_isize(case, "step")?,
        )
        .reverse(param_bool(case, "reverse"))
        .call::<B, Pt<B>, Pt<B>, Pt<B>>();
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

/// `powerpax.checkpoint_chunked_scan` (FORMAT 3.8) on `Autodiff<_>`: values, and derivatives
/// through the checkpointed scan (each from a fresh forward pass: a backward pass consumes the
/// graph).
pub(crate) fn api_checkpoint_chunked_scan(case: &Case) -> Result<Run, String> {
    type A = ADPlain;
    let body = scan_body::<A>(&case.program)?;
    let chunk = param_isize(case, "chunk_size")?;
    let reverse = param_bool(case, "reverse");
    /// `(init, xs, carry, ys)` of one forward pass.
    type Pass = (Pt<A>, Pt<A>, Pt<A>, Pt<A>);
    let run = |grad_init: bool, grad_xs: bool| -> Result<Pass, VmapError> {
        let [init, xs] = take(build_args::<A>(case).expect("inputs"));
        let init = if grad_init { require_grad(init) } else { init };
        let xs = if grad_xs { require_grad(xs) } else { xs };
        let (carry, ys) =
            burn_vmap::transform::checkpoint_chunked_scan(body, init.clone(), xs.clone())
                .chunk_size(chunk)
                .reverse(reverse)
                .call::<V, _, Pt<A>, Pt<A>, Pt<A>>()?;
        Ok((init, xs, carry, ys))
    };
    /// Backward from `t` (a rank-0 tensor is its own sum: NdArray cannot reshape it).
    fn backward_sum(t: Pt<A>) -> <A as AutodiffBackend>::Gradients {
        match t.rank() {
            0 => t.f::<0>().backward(),
            r => with_rank!(r, D => t.f::<D>().sum().backward()),
        }
    }
    let inner =
        |p: Pt<A>| p.map_leaves(&mut |l: Pt<A>| with_rank!(l.rank(), D => pt(l.f::<D>().inner())));

    let (_, _, carry, ys) = match run(false, false) {
        Ok(r) => r,
        Err(e) => return Ok(Run::Error(e)),
    };
    let carry_shape = carry.leaf().shape().to_vec();
    let mut outputs = Outputs::new();
    collect_outputs("carry", inner(carry.clone()), &mut outputs);
    collect_outputs("ys", inner(ys), &mut outputs);
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
            let rows: Vec<Tensor<V, 1>> = (0..d)
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

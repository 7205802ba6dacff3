//! jax_autovmap's `auto_vmap`.

use crate::*;

/// Parameter names of the auto_vmap programs (FORMAT section 4), which `ranks` objects use.
pub(crate) fn auto_vmap_param_names(case: &Case) -> Vec<String> {
    let names: &[&str] = match case.program.as_str() {
        "foo_s_v_m" => &["s", "v", "m"],
        "alpha_times_norm" => &["v", "alpha"],
        "dot_a_x_plus_b" => &["p", "x"],
        "u_times_sum_w" => &["t"],
        _ => &[],
    };
    if names.len() == case.args.len() {
        return names.iter().map(|n| n.to_string()).collect();
    }
    // Otherwise the positional arguments' input names.
    case.args
        .iter()
        .enumerate()
        .map(|(i, a)| match a {
            ArgSpec::Input(n) => n.clone(),
            ArgSpec::Struct(_) => format!("arg{i}"),
        })
        .collect()
}

/// One rank entry: int, null, object per field, list per position.
pub(crate) fn parse_rank(v: &Value) -> Result<Ranks, String> {
    match v {
        Value::Null => Ok(Spec::Leaf(None)),
        Value::Number(n) => Ok(Spec::Leaf(Some(
            n.as_u64().ok_or_else(|| format!("bad rank {n}"))? as usize,
        ))),
        Value::Array(items) => Ok(Spec::Seq(
            items.iter().map(parse_rank).collect::<Result<_, _>>()?,
        )),
        Value::Object(m) => Ok(Spec::fields(
            m.iter()
                .map(|(k, v)| Ok((k.clone(), parse_rank(v)?)))
                .collect::<Result<Vec<_>, String>>()?,
        )),
        other => Err(format!("bad rank {other}")),
    }
}

/// `params.ranks` as one JSON rank per positional argument (null where absent).
pub(crate) fn auto_vmap_rank_values(case: &Case) -> Result<Vec<Value>, String> {
    let n = case.args.len();
    match case.param("ranks") {
        None => Ok(vec![Value::Null; n]),
        Some(Value::Array(items)) if items.len() == n => Ok(items.clone()),
        Some(Value::Array(items)) => Err(format!(
            "{} positional ranks for {n} arguments",
            items.len()
        )),
        Some(Value::Object(m)) => {
            let names = auto_vmap_param_names(case);
            if let Some(k) = m.keys().find(|k| !names.contains(k)) {
                return Err(format!("ranks name {k:?}, not a parameter of {names:?}"));
            }
            Ok(names
                .iter()
                .map(|n| m.get(n).cloned().unwrap_or(Value::Null))
                .collect())
        }
        Some(other) => Err(format!("bad ranks {other}")),
    }
}

/// Whether an argument has a leading batch dim beyond its rank somewhere.
pub(crate) fn has_batch_dims(case: &Case, arg: &ArgSpec, rank: &Value) -> bool {
    match (arg, rank) {
        (ArgSpec::Input(name), Value::Number(r)) => case
            .input(name)
            .is_ok_and(|a| a.shape.len() as u64 > r.as_u64().unwrap_or(u64::MAX)),
        (ArgSpec::Struct(fields), Value::Number(_)) => {
            fields.values().any(|f| has_batch_dims(case, f, rank))
        }
        (ArgSpec::Struct(fields), Value::Object(m)) => fields
            .iter()
            .any(|(k, f)| has_batch_dims(case, f, m.get(k).unwrap_or(&Value::Null))),
        _ => false,
    }
}

/// An argument built with an extra leading axis of size 1.
pub(crate) fn build_arg_lead1<B: Backend>(case: &Case, spec: &ArgSpec) -> Result<Pt<B>, String> {
    match spec {
        ArgSpec::Input(name) => {
            let mut a = case.input(name)?.clone();
            a.shape.insert(0, 1);
            Ok(Pt::Leaf(input_leaf(&a, &Default::default())))
        }
        ArgSpec::Struct(fields) => Ok(Pt::Dict(
            fields
                .iter()
                .map(|(k, s)| Ok((k.clone(), build_arg_lead1(case, s)?)))
                .collect::<Result<_, String>>()?,
        )),
    }
}

/// `jax_autovmap.auto_vmap` (FORMAT 3.9).
///
/// When no argument has a batch dim, the program runs unbatched and returns a rank-0 result,
/// which NdArray cannot make by a reshape: the call then runs inside a `vmap` of size 1 (every
/// input gets a leading axis of size 1, removed again from the outputs), which is the identity.
pub(crate) fn api_auto_vmap(case: &Case) -> Result<Run, String> {
    let f = auto_vmap_program::<V>(&case.program)
        .ok_or_else(|| format!("runner: unknown program {:?}", case.program))?;
    let rank_values = auto_vmap_rank_values(case)?;
    let ranks = Spec::Seq(
        rank_values
            .iter()
            .map(parse_rank)
            .collect::<Result<_, _>>()?,
    );
    let batched = case
        .args
        .iter()
        .zip(&rank_values)
        .any(|(a, r)| has_batch_dims(case, a, r));
    let prog = move |a: Pt<V>| f(a.into_args());
    let result: Result<Pt<V>, VmapError> = if batched {
        auto_vmap(prog)
            .ranks(ranks)
            .call(Pt::Tuple(build_args::<V>(case)?))
    } else {
        let args = case
            .args
            .iter()
            .map(|s| build_arg_lead1::<V>(case, s))
            .collect::<Result<Vec<_>, _>>()?;
        let outer = move |a: Pt<V>| -> Pt<V> {
            auto_vmap(prog)
                .ranks(ranks.clone())
                .call(a)
                .unwrap_or_else(|e| panic::panic_any(InnerVmapError(e)))
        };
        match panic::catch_unwind(AssertUnwindSafe(|| vmap(outer).call_as(Pt::Tuple(args)))) {
            Ok(r) => r,
            Err(payload) => match payload.downcast::<InnerVmapError>() {
                Ok(e) => Err(e.0),
                Err(payload) => panic::resume_unwind(payload),
            },
        }
    };
    Ok(match result {
        Ok(out) => {
            let mut outputs = Outputs::new();
            collect_outputs("out", out, &mut outputs);
            if !batched {
                for got in outputs.values_mut().flatten() {
                    if got.shape.first() != Some(&1) {
                        return Err(format!(
                            "runner: size-1 wrapper lost: shape {:?}",
                            got.shape
                        ));
                    }
                    got.shape.remove(0);
                }
            }
            Run::Outputs(outputs)
        }
        Err(e) => Run::Error(e),
    })
}

/// `rank_too_small` / `incompatible_batch_shapes`: the variant, its fields, and a message that
/// names the arguments (`args[i]`, i the parameter's position) and the sizes.
pub(crate) fn check_auto_vmap_error(
    case: &Case,
    kind: &str,
    details: &Value,
    e: &VmapError,
) -> Result<(), String> {
    let msg = e.to_string();
    let names = auto_vmap_param_names(case);
    let path_of = |name: &str| -> Result<String, String> {
        names
            .iter()
            .position(|n| n == name)
            .map(|i| format!("args[{i}]"))
            .ok_or_else(|| format!("runner: {name:?} is not a parameter of {names:?}"))
    };
    let numbers = integers_in(&msg);
    let mentions_all = |sizes: &[usize]| -> Result<(), String> {
        match sizes.iter().find(|&&n| !numbers.contains(&(n as u64))) {
            Some(n) => Err(format!("the message does not mention size {n}: {msg}")),
            None => Ok(()),
        }
    };
    match (kind, e) {
        (
            "rank_too_small",
            VmapError::RankTooSmall {
                argument,
                shape,
                min_rank,
            },
        ) => {
            let want_arg = path_of(details["argument"].as_str().unwrap_or_default())?;
            let want_shape = json_usizes(&details["shape"]);
            let want_rank = details["min_rank"].as_u64().unwrap_or(u64::MAX) as usize;
            if !argument.starts_with(&want_arg) || *shape != want_shape || *min_rank != want_rank {
                return Err(format!(
                    "expected {want_arg} of shape {want_shape:?} and min rank {want_rank}, got {e:?}"
                ));
            }
            if !msg.contains(&want_arg) {
                return Err(format!("the message does not name {want_arg}: {msg}"));
            }
            mentions_all(&want_shape)?;
            mentions_all(&[want_rank])
        }
        (
            "incompatible_batch_shapes",
            VmapError::IncompatibleBatchShapes {
                arguments,
                batch_shapes,
            },
        ) => {
            let want_args = details["arguments"].as_array().cloned().unwrap_or_default();
            let want_shapes = details["batch_shapes"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for (name, shape) in want_args.iter().zip(&want_shapes) {
                let path = path_of(name.as_str().unwrap_or_default())?;
                let shape = json_usizes(shape);
                let found = arguments
                    .iter()
                    .zip(batch_shapes)
                    .any(|(a, s)| a.starts_with(&path) && *s == shape);
                if !found {
                    return Err(format!(
                        "expected {path} with batch shape {shape:?} among {arguments:?} / {batch_shapes:?}"
                    ));
                }
                if !msg.contains(&path) {
                    return Err(format!("the message does not name {path}: {msg}"));
                }
                mentions_all(&shape)?;
            }
            Ok(())
        }
        _ => Err(format!("expected a {kind} error, got {e:?}")),
    }
}

/// The auto_vmap programs (FORMAT section 4), written for their base ranks.
pub(crate) fn auto_vmap_program<B: Backend>(id: &str) -> Option<Program<B>> {
    let f: Program<B> = match id {
        "foo_s_v_m" => foo_s_v_m,
        "alpha_times_norm" => alpha_times_norm,
        "dot_a_x_plus_b" => dot_a_x_plus_b,
        "u_times_sum_w" => u_times_sum_w,
        _ => return program::<B>(id),
    };
    Some(f)
}

mod auto_vmap_programs {
    use super::*;
    use crate::programs::{lift, np_matmul, scalar, sum1};

    /// `a * b` with numpy broadcasting.
    fn mul<B: Backend>(a: Pt<B>, b: Pt<B>) -> Pt<B> {
        with_rank!(a.rank().max(b.rank()), D => pt(lift::<B, D>(a) * lift::<B, D>(b)))
    }

    /// `a + b` with numpy broadcasting.
    fn add<B: Backend>(a: Pt<B>, b: Pt<B>) -> Pt<B> {
        with_rank!(a.rank().max(b.rank()), D => pt(lift::<B, D>(a) + lift::<B, D>(b)))
    }

    /// `v @ m @ v + s * size(v)`: s (), v (3,), m (3,3) -> ().
    pub fn foo_s_v_m<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [s, v, m] = take(args);
        let n = v.leaf().shape().num_elements() as f32;
        // `v·(m v)` kept as Burn's scalar `[1]` until the end: a rank-0 intermediate of
        // unbatched operands cannot be made on NdArray (see `programs::sum1`).
        let vmv = pt(sum1(mul(np_matmul(v.clone(), m), v)));
        let sn = with_rank!(s.rank(), D => pt(s.f::<D>().mul_scalar(n)));
        pt(scalar(add(vmv, sn).f::<1>()))
    }

    /// `alpha * sqrt(sum(v^2))`: v (4,), alpha (2,) -> (2,).
    pub fn alpha_times_norm<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [v, alpha] = take(args);
        let norm = pt(sum1(mul(v.clone(), v)).sqrt());
        mul(alpha, norm)
    }

    /// `dot(p.a, x) + p.b`: p {a (3,), b ()}, x (3,) -> ().
    pub fn dot_a_x_plus_b<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [p, x] = take(args);
        let dot = pt(sum1(mul(p.field("a"), x)));
        pt(scalar(add(dot, p.field("b")).f::<1>()))
    }

    /// `t.u * sum(t.w)`: t {u (3,), w (4,)} -> (3,).
    pub fn u_times_sum_w<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [t] = take(args);
        let s = pt(sum1(t.field("w")));
        mul(t.field("u"), s)
    }
}
use self::auto_vmap_programs::{alpha_times_norm, dot_a_x_plus_b, foo_s_v_m, u_times_sum_w};

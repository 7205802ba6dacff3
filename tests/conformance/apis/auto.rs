//! jax_autovmap's `auto_vmap`.
//!
//! What 0.22 changes here: the 0.21 runner wrapped a call with no batch dim in a `vmap` of size
//! 1, because NdArray could not make the rank-0 result; Flex holds rank 0, so the call is
//! direct (and an inner error could not travel out of a recorded function as a panic payload
//! anyway: a recording turns panics into messages).

use burn_vmap::transform::auto::Ranks;
use burn_vmap::transform::auto_vmap;

use crate::*;

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

/// `jax_autovmap.auto_vmap` (FORMAT 3.9).
pub(crate) fn api_auto_vmap(case: &Case) -> Result<Run, String> {
    let f = auto_vmap_program(&case.program)
        .ok_or_else(|| format!("runner: unknown program {:?}", case.program))?;
    let rank_values = auto_vmap_rank_values(case)?;
    let ranks: Ranks = Spec::Seq(
        rank_values
            .iter()
            .map(parse_rank)
            .collect::<Result<_, _>>()?,
    );
    let prog = move |a: Pt| f(a.into_args());
    let result = auto_vmap(prog)
        .ranks(ranks)
        .call::<Pt, Pt, Pt, Pt>(Pt::Tuple(build_args(case)?));
    Ok(out_run(result))
}

/// The auto_vmap programs (FORMAT section 4), written for their base ranks.
pub(crate) fn auto_vmap_program(id: &str) -> Option<Program> {
    let f: Program = match id {
        "foo_s_v_m" => foo_s_v_m,
        "alpha_times_norm" => alpha_times_norm,
        "dot_a_x_plus_b" => dot_a_x_plus_b,
        "u_times_sum_w" => u_times_sum_w,
        _ => return program(id),
    };
    Some(f)
}

mod auto_vmap_programs {
    use super::*;
    use crate::programs::{lift, np_matmul, scalar, sum1};

    /// `a * b` with numpy broadcasting.
    fn mul(a: Pt, b: Pt) -> Pt {
        with_rank!(a.rank().max(b.rank()), D => pt(lift::<D>(a) * lift::<D>(b)))
    }

    /// `a + b` with numpy broadcasting.
    fn add(a: Pt, b: Pt) -> Pt {
        with_rank!(a.rank().max(b.rank()), D => pt(lift::<D>(a) + lift::<D>(b)))
    }

    /// `v @ m @ v + s * size(v)`: s (), v (3,), m (3,3) -> ().
    pub fn foo_s_v_m(args: Vec<Pt>) -> Pt {
        let [s, v, m] = take(args);
        let n = v.leaf().shape().num_elements() as f32;
        // `v·(m v)` kept as Burn's scalar `[1]` until the end (see `programs::sum1`).
        let vmv = pt(sum1(mul(np_matmul(v.clone(), m), v)));
        let sn = with_rank!(s.rank(), D => pt(s.f::<D>().mul_scalar(n)));
        pt(scalar(add(vmv, sn).f::<1>()))
    }

    /// `alpha * sqrt(sum(v^2))`: v (4,), alpha (2,) -> (2,).
    pub fn alpha_times_norm(args: Vec<Pt>) -> Pt {
        let [v, alpha] = take(args);
        let norm = pt(sum1(mul(v.clone(), v)).sqrt());
        mul(alpha, norm)
    }

    /// `dot(p.a, x) + p.b`: p {a (3,), b ()}, x (3,) -> ().
    pub fn dot_a_x_plus_b(args: Vec<Pt>) -> Pt {
        let [p, x] = take(args);
        let dot = pt(sum1(mul(p.field("a"), x)));
        pt(scalar(add(dot, p.field("b")).f::<1>()))
    }

    /// `t.u * sum(t.w)`: t {u (3,), w (4,)} -> (3,).
    pub fn u_times_sum_w(args: Vec<Pt>) -> Pt {
        let [t] = take(args);
        let s = pt(sum1(t.field("w")));
        mul(t.field("u"), s)
    }
}
use self::auto_vmap_programs::{alpha_times_norm, dot_a_x_plus_b, foo_s_v_m, u_times_sum_w};

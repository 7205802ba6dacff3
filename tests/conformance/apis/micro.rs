//! optax.microbatching: `micro_vmap` and `micro_grad`.
//!
//! What 0.22 changes here: `transform_fn` and `metrics_fn` are recorded like the program (they
//! read tensors only through their argument, one example's gradients: `clip` is an `f32`, not
//! a tensor); the program's inputs are built on the default device (the transform records the
//! loss on an autodiff capture device itself).

use burn_vmap::accumulate::{
    Acc, AccContext, AccKind, Accumulator, Concat, Mean, RunningMean, Sum,
};
use burn_vmap::transform::micro::LossOutput;
use burn_vmap::{micro_grad, micro_vmap};

use crate::*;

/// The custom `max` accumulator of the vectors (FORMAT 3.4): a running maximum from `-inf`.
#[derive(Clone)]
pub(crate) struct MaxAcc;

impl Accumulator for MaxAcc {
    fn name(&self) -> String {
        "max".into()
    }
    fn aggregate<K: AccKind>(&self, rows: Tensor<2, K>) -> Tensor<2, K> {
        rows.max_dim(0)
    }
    fn init<K: AccKind>(&self, value: &Tensor<2, K>, _: &AccContext) -> Tensor<2, K> {
        Tensor::full(value.shape(), f32::NEG_INFINITY, &value.device())
    }
    fn update<K: AccKind>(
        &self,
        carry: Tensor<2, K>,
        value: Tensor<2, K>,
        _: usize,
        _: &AccContext,
    ) -> Tensor<2, K> {
        carry.max_pair(value)
    }
}

/// An accumulator id or a tree prefix of ids (FORMAT 3.4).
pub(crate) fn parse_accumulator(v: &Value) -> Result<Spec<Acc>, String> {
    match v {
        Value::String(s) => Ok(Spec::Leaf(match s.as_str() {
            "SUM" => Acc::new(Sum),
            "MEAN" => Acc::new(Mean),
            "RUNNING_MEAN" => Acc::new(RunningMean),
            "CONCAT" => Acc::new(Concat),
            "max" => Acc::new(MaxAcc),
            other => return Err(format!("runner: unknown accumulator {other}")),
        })),
        Value::Array(items) => Ok(Spec::Seq(
            items
                .iter()
                .map(parse_accumulator)
                .collect::<Result<_, _>>()?,
        )),
        Value::Object(m) => Ok(Spec::Fields(
            m.iter()
                .map(|(k, v)| Ok((k.clone(), parse_accumulator(v)?)))
                .collect::<Result<_, String>>()?,
        )),
        other => Err(format!("runner: bad accumulator {other}")),
    }
}

pub(crate) fn parse_usize_opt(v: Option<&Value>) -> Option<usize> {
    v.and_then(Value::as_u64).map(|x| x as usize)
}

/// `optax.microbatching.micro_vmap` (FORMAT 3.2). Keyword arguments follow the positional ones,
/// batched on axis 0.
pub(crate) fn api_micro_vmap(case: &Case) -> Result<Run, String> {
    let f = program(&case.program)
        .ok_or_else(|| format!("runner: unknown program {:?}", case.program))?;
    let n_pos = case.args.len();
    let in_axes = match case.param("in_axes").unwrap_or(&Value::from(0)) {
        Value::Array(_) => parse_axes(case.param("in_axes").unwrap())?,
        v => Spec::Seq(vec![parse_axes(v)?; n_pos]),
    };
    let mut args = build_args(case)?;
    let mut in_axes = match in_axes {
        Spec::Seq(s) => s,
        other => vec![other],
    };
    let device = Device::default();
    for (_, input) in case.kwargs.iter() {
        args.push(Pt::Leaf(input_leaf(case.input(input)?, &device)));
        in_axes.push(Spec::Leaf(Some(0)));
    }
    let acc = parse_accumulator(case.param("accumulator").unwrap_or(&Value::from("CONCAT")))?;
    let built = micro_vmap(move |a: Pt| f(a.into_args()))
        .in_axes(Spec::Seq(in_axes))
        .microbatch_size(parse_usize_opt(case.param("microbatch_size")))
        .num_real_microbatches(parse_usize_opt(case.param("num_real_microbatches")))
        .accumulator(acc);
    let out_axes = parse_axes(case.param("out_axes").unwrap_or(&Value::from(0)))?;
    let built = match built.out_axes(out_axes) {
        Ok(b) => b,
        Err(e) => return Ok(Run::Error(e)),
    };
    Ok(match built.call_as::<Pt, Pt, Pt, Pt>(Pt::Tuple(args)) {
        Ok(out) => {
            let mut outputs = Outputs::new();
            collect_outputs("out", out, &mut outputs);
            Run::Outputs(outputs)
        }
        Err(e) => Run::Error(e),
    })
}

/// A loss `Pt` as Burn's scalar `[1]`.
pub(crate) fn loss1(p: Pt) -> Tensor<1> {
    match p.rank() {
        0 => p.f::<0>().reshape([1]),
        1 => p.f::<1>(),
        r => panic!("runner: a loss of rank {r}"),
    }
}

/// `sqrt(sum of squares over every leaf)` of a gradient tree, as `[1]`.
pub(crate) fn global_norm(g: &Pt) -> Tensor<1> {
    let (leaves, def) = g.clone().flatten();
    let total = leaves
        .into_iter()
        .map(|l| {
            let p = Pt::Leaf(l);
            with_rank!(p.rank(), D => { let t = p.f::<D>(); (t.clone() * t).sum() })
        })
        .reduce(|a, b| a + b);
    let _ = def;
    total.expect("runner: a gradient with no leaf").sqrt()
}

/// Scales every leaf of `g` by the `[1]` factor `s`.
pub(crate) fn scale_tree(g: Pt, s: Tensor<1>) -> Pt {
    g.map_leaves(&mut |l: Pt| {
        with_rank!(l.rank(), D => {
            let t = l.f::<D>();
            pt(t * s.clone().reshape([1usize; D]))
        })
    })
}

/// `optax.microbatching.micro_grad` (FORMAT 3.3, 3.5).
pub(crate) fn api_micro_grad(case: &Case) -> Result<Run, String> {
    let f = program(&case.program)
        .ok_or_else(|| format!("runner: unknown program {:?}", case.program))?;
    if case
        .param("has_aux")
        .and_then(Value::as_bool)
        .unwrap_or(false)
    {
        micro_grad_run(case, move |a: Pt| {
            let Pt::Tuple(mut out) = f(a.into_args()) else {
                panic!("runner: a has_aux program returns (loss, aux)")
            };
            let aux = out.pop().expect("aux");
            (loss1(out.pop().expect("loss")), aux)
        })
    } else {
        micro_grad_run(case, move |a: Pt| loss1(f(a.into_args())))
    }
}

pub(crate) fn micro_grad_run<Out: LossOutput>(
    case: &Case,
    f: impl Fn(Pt) -> Out,
) -> Result<Run, String> {
    let (argnums, single) = parse_argnums(case.param("argnums"))?;
    let (batch_argnums, _) =
        parse_argnums(Some(case.param("batch_argnums").unwrap_or(&Value::from(1))))?;
    let transform = case
        .param("transform_fn")
        .and_then(Value::as_str)
        .unwrap_or("identity")
        .to_string();
    let clip = case
        .param("clip_norm")
        .and_then(Value::as_f64)
        .unwrap_or(1.0) as f32;
    let metrics = case
        .param("metrics_fn")
        .and_then(Value::as_str)
        .map(str::to_string);
    let acc = parse_accumulator(case.param("accumulator").unwrap_or(&Value::from("SUM")))?;
    let base = micro_grad(f)
        .batch_argnums(batch_argnums)
        .keep_batch_dim(
            case.param("keep_batch_dim")
                .and_then(Value::as_bool)
                .unwrap_or(true),
        )
        .microbatch_size(parse_usize_opt(case.param("microbatch_size")))
        .num_real_microbatches(parse_usize_opt(case.param("num_real_microbatches")))
        .accumulator(acc);
    let base = if single {
        base.argnums(argnums[0])
    } else {
        base.argnums(argnums)
    };
    let transform_kind = transform.clone();
    let built = base
        .transform_fn(move |g: Pt| -> Pt {
            match transform_kind.as_str() {
                "identity" => g,
                "grad_and_square" => {
                    let sq = g.clone().map_leaves(&mut |l: Pt| {
                        with_rank!(l.rank(), D => { let t = l.f::<D>(); pt(t.clone() * t) })
                    });
                    Pt::Tuple(vec![g, sq])
                }
                "clip_global_norm" => {
                    let norm = global_norm(&g);
                    let factor = norm.clamp_min(clip).recip() * clip;
                    scale_tree(g, factor)
                }
                other => panic!("runner: unknown transform_fn {other}"),
            }
        })
        .metrics_fn(move |g: Pt| -> Pt {
            match metrics.as_deref() {
                None => Pt::Tuple(vec![]),
                Some("global_l2_norm") => pt(programs::scalar(global_norm(&g))),
                Some(other) => panic!("runner: unknown metrics_fn {other}"),
            }
        });
    let args = Pt::Tuple(build_args(case)?);
    let (grads, aux) = match built.call_as::<Pt, Pt, Pt, Pt, Pt>(args) {
        Ok(r) => r,
        Err(e) => return Ok(Run::Error(e)),
    };
    let mut outputs = Outputs::new();
    let keys: Vec<&String> = match &case.expected {
        Expected::Outputs(e) => e.keys().collect(),
        Expected::Error { .. } => vec![],
    };
    let has = |prefix: &str| keys.iter().any(|k| k.starts_with(prefix));
    if transform == "grad_and_square" {
        let Pt::Tuple(mut pair) = grads else {
            return Err("grad_and_square gives a pair".into());
        };
        let g2 = pair.pop().expect("pair");
        let g = pair.pop().expect("pair");
        let (n1, n2) = if has("mean_g") {
            ("mean_g", "mean_g2")
        } else {
            ("grads", "squared_grads")
        };
        if has("variance") {
            let var = g2.clone().zip_with(&g, |m2, m| {
                with_rank!(m.rank(), D => { let m = m.f::<D>(); pt(m2.f::<D>() - m.clone() * m) })
            });
            collect_outputs("variance", var, &mut outputs);
        }
        collect_outputs(n1, g, &mut outputs);
        collect_outputs(n2, g2, &mut outputs);
    } else {
        let name = if has("per_example_grads") {
            "per_example_grads"
        } else {
            "grads"
        };
        collect_outputs(name, grads, &mut outputs);
    }
    collect_outputs("aux.values", pt(aux.values), &mut outputs);
    collect_outputs("aux.metrics", aux.metrics, &mut outputs);
    collect_outputs("aux.aux", aux.aux, &mut outputs);
    Ok(Run::Outputs(outputs))
}

//! Oracle cases for the rest of the numeric API, float and int: `gather_nd` / `scatter_nd`,
//! reductions with indices, `topk_with_indices`, `max_abs`, one-sided clamps, padding in every
//! mode, casts, `hypot`, `prelu`, `softmin`, and bool `gather` / `select` read as ints.

use burn::tensor::activation;
use burn::tensor::ops::PadMode;
use burn::tensor::{IndexingUpdateOp, IntDType};

use crate::harness::{Gen, P, T, bo, fl, idx, it, op};
use crate::kinds::{gather_params, select_params, with};
use crate::run::{OpCase, case};

/// `gather_nd` / `scatter_nd` parameters: data `[d0, d1, d2]`, `m` index tuples of length
/// `k` (1..=2), values `[m, d_k..]`.
fn nd(p: &P) -> (Vec<usize>, usize, usize, Vec<usize>) {
    let data = vec![p.d[0], p.d[1], p.d[2]];
    let k = 1 + p.pick(1, 2);
    let m = 1 + p.pick(2, 3);
    let vals = [vec![m], data[k..].to_vec()].concat();
    (data, k, m, vals)
}

/// Index tuples into `data`'s first `k` dims, `[m, k]`, drawn per column bound: the flat
/// operand is `[m * k]` in `0..min(bounds)`, which keeps every tuple in range.
fn nd_bound(data: &[usize], k: usize) -> usize {
    data[..k].iter().copied().min().expect("k >= 1")
}

/// Padding pairs and a mode drawn from `p` for a tensor of `shape` (reflect needs pads below
/// the dim size).
fn padding(p: &P, shape: &[usize]) -> (Vec<(usize, usize)>, PadMode) {
    let mode = p.pick(90, 3);
    let pads = shape
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let bound = if mode == 1 { n } else { 3 };
            (
                p.pick(91 + 2 * i as u64, bound),
                p.pick(92 + 2 * i as u64, bound),
            )
        })
        .collect();
    let mode = match mode {
        0 => PadMode::Constant(1.5),
        1 => PadMode::Reflect,
        _ => PadMode::Edge,
    };
    (pads, mode)
}

macro_rules! nd_cases {
    ($pfx:literal, $acc:ident, $gen:expr) => {
        vec![
            case(
                concat!($pfx, "_gather_nd"),
                3..=3,
                |p| {
                    let (data, k, m, _) = nd(p);
                    vec![op(&data, $gen), idx(&[m * k], nd_bound(&data, k))]
                },
                |p, a| {
                    let (_, k, m, _) = nd(p);
                    let i = a[1].i::<1>().reshape([m, k]);
                    let x = a[0].$acc::<3>();
                    match k {
                        1 => vec![T::from(x.gather_nd::<2, 3>(i))],
                        _ => vec![T::from(x.gather_nd::<2, 2>(i))],
                    }
                },
            ),
            case(
                concat!($pfx, "_scatter_nd"),
                3..=3,
                |p| {
                    let (data, k, m, vals) = nd(p);
                    vec![
                        op(&data, $gen),
                        idx(&[m * k], nd_bound(&data, k)),
                        op(&vals, $gen),
                    ]
                },
                |p, a| {
                    let (_, k, m, _) = nd(p);
                    let i = a[1].i::<1>().reshape([m, k]);
                    let x = a[0].$acc::<3>();
                    match k {
                        1 => vec![T::from(x.scatter_nd(
                            i,
                            a[2].$acc::<3>(),
                            IndexingUpdateOp::Add,
                        ))],
                        _ => vec![T::from(x.scatter_nd(
                            i,
                            a[2].$acc::<2>(),
                            IndexingUpdateOp::Add,
                        ))],
                    }
                },
            ),
        ]
    };
}

/// Cases of orderable kinds (float, int): indices of extremes, top-k, `max_abs`, clamps, pads.
macro_rules! orderable_cases {
    ($pfx:literal, $acc:ident, $distinct:expr, $gen:expr, $lo:expr, $hi:expr) => {
        vec![
            case(
                concat!($pfx, "_dim_with_indices"),
                1..=3,
                |p| vec![op(&p.shape(), $distinct)],
                |p, a| {
                    let d = p.dim(1);
                    let mut out = Vec::new();
                    for t in [a[0].clone()] {
                        match t.rank() {
                            1 => {
                                let (v, i) = t.$acc::<1>().max_dim_with_indices(d);
                                let (w, j) = t.$acc::<1>().min_dim_with_indices(d);
                                out.extend([T::from(v), T::from(i), T::from(w), T::from(j)]);
                            }
                            2 => {
                                let (v, i) = t.$acc::<2>().max_dim_with_indices(d);
                                let (w, j) = t.$acc::<2>().min_dim_with_indices(d);
                                out.extend([T::from(v), T::from(i), T::from(w), T::from(j)]);
                            }
                            _ => {
                                let (v, i) = t.$acc::<3>().max_dim_with_indices(d);
                                let (w, j) = t.$acc::<3>().min_dim_with_indices(d);
                                out.extend([T::from(v), T::from(i), T::from(w), T::from(j)]);
                            }
                        }
                    }
                    out.push(ranked!(a[0], $acc, |x| x.clone().max_dim(d)));
                    out.push(ranked!(a[0], $acc, |x| x.min_dim(d)));
                    out.push(ranked!(a[0], $acc, |x| x.clone().max()));
                    out.push(ranked!(a[0], $acc, |x| x.min()));
                    out
                },
            ),
            case(
                concat!($pfx, "_topk_with_indices"),
                1..=3,
                |p| {
                    let d = p.dim(1);
                    vec![op(&with(&p.shape(), d, p.d[d].max(2)), $distinct)]
                },
                |p, a| {
                    let d = p.dim(1);
                    let k = 1 + p.pick(2, p.d[d].max(2) - 1);
                    match a[0].rank() {
                        1 => {
                            let (v, i) = a[0].$acc::<1>().topk_with_indices(k, d);
                            vec![T::from(v), T::from(i)]
                        }
                        2 => {
                            let (v, i) = a[0].$acc::<2>().topk_with_indices(k, d);
                            vec![T::from(v), T::from(i)]
                        }
                        _ => {
                            let (v, i) = a[0].$acc::<3>().topk_with_indices(k, d);
                            vec![T::from(v), T::from(i)]
                        }
                    }
                },
            ),
            case(
                concat!($pfx, "_max_abs"),
                1..=3,
                |p| vec![op(&p.shape(), $gen)],
                |p, a| {
                    let d = p.dim(1);
                    vec![
                        ranked!(a[0], $acc, |x| x.clone().max_abs()),
                        ranked!(a[0], $acc, |x| x.max_abs_dim(d)),
                    ]
                },
            ),
            case(
                concat!($pfx, "_clamp_min_max"),
                0..=3,
                |p| vec![op(&p.shape(), $gen)],
                |_p, a| {
                    vec![
                        ranked!(a[0], $acc, |x| x.clone().clamp_min($lo)),
                        ranked!(a[0], $acc, |x| x.clamp_max($hi)),
                    ]
                },
            ),
            case(
                concat!($pfx, "_pad"),
                1..=3,
                |p| vec![op(&p.shape(), $gen)],
                |p, a| {
                    let (pads, mode) = padding(p, &p.shape());
                    vec![ranked!(a[0], $acc, |x| x.pad(pads.as_slice(), mode))]
                },
            ),
        ]
    };
}

pub fn cases() -> Vec<OpCase> {
    let mut v = nd_cases!("float", f, Gen::F(-2.0, 2.0));
    v.extend(nd_cases!("int", i, Gen::I(-4, 4)));
    v.extend(orderable_cases!(
        "float",
        f,
        Gen::FDistinct,
        Gen::F(-2.0, 2.0),
        -0.5,
        0.7
    ));
    v.extend(orderable_cases!(
        "int",
        i,
        Gen::IDistinct,
        Gen::I(-4, 4),
        -1,
        2
    ));
    v.extend(vec![
        unary!("float_prod_dim_sum_dims", Gen::F(0.5, 1.5), f, |x| {
            let r = x.dims().len();
            if r == 0 {
                x
            } else {
                x.clone().prod_dim(r - 1) + x.sum_dims(&[0])
            }
        }),
        binary!(
            "float_hypot",
            Gen::F(-2.0, 2.0),
            Gen::F(-2.0, 2.0),
            f,
            |x, y| x.hypot(y)
        ),
        // prelu's alpha: one weight per channel (dim 1 of a rank >= 2 input), or one.
        case(
            "activation_prelu_softmin",
            1..=3,
            |p| vec![fl(&p.shape()), fl(&[if p.rank >= 2 { p.d[1] } else { 1 }])],
            |p, a| {
                let d = p.dim(1);
                let alpha = a[1].f::<1>();
                vec![
                    ranked!(a[0], f, |x| activation::prelu(x, alpha.clone())),
                    ranked!(a[0], f, |x| activation::softmin(x, d)),
                ]
            },
        ),
        unary!("int_cast_i64", Gen::I(-4, 4), i, |x| x
            .cast(IntDType::I64)
            .mul_scalar(3)),
        unary!("int_neg_powi_scalar", Gen::I(-3, 3), i, |x| x.clone().neg()
            + x.powi_scalar(3)),
        case(
            "int_sum_dims_min",
            1..=3,
            |p| vec![it(&p.shape())],
            |p, a| {
                let d = p.dim(1);
                vec![
                    ranked!(a[0], i, |x| x.clone().sum_dims(&[d, 0])),
                    ranked!(a[0], i, |x| x.min()),
                ]
            },
        ),
        // Flex's bool gather / select results say `U8` (gaps.rs): read back as ints.
        case(
            "bool_gather_as_int",
            1..=3,
            |p| {
                let (_, is, bound) = gather_params(p);
                vec![bo(&p.shape()), idx(&is, bound)]
            },
            |p, a| {
                let (d, _, _) = gather_params(p);
                vec![ranked!(a[0], b, a[1], i, |x, i| x.gather(d, i).int())]
            },
        ),
        case(
            "bool_select_as_int",
            1..=3,
            |p| {
                let (_, k, bound) = select_params(p);
                vec![bo(&p.shape()), idx(&[k], bound)]
            },
            |p, a| {
                let (d, _, _) = select_params(p);
                let i = a[1].i::<1>();
                vec![ranked!(a[0], b, |x| x.select(d, i.clone()).int())]
            },
        ),
    ]);
    v
}

//! Oracle cases for Burn ops that are *not* required backend methods: defaults that Burn builds
//! from the required ones (or from host reads), and the few that `Vmap` overrides for speed.
//! They are not needed for coverage, but user code calls them inside `vmap`.

use burn::tensor::activation;
use burn::tensor::{Bool, Int, Tensor};

use crate::harness::{Gen, T, bo, fl, it, op};
use crate::kinds::with;
use crate::run::{OpCase, case};

/// `Tensor::stack` of two rank-`r` tensors along `dim` (output rank `r + 1`).
macro_rules! stack2 {
    ($a:expr, $b:expr, $acc:ident, $dim:expr) => {{
        let (a, b): (&T, &T) = (&$a, &$b);
        match a.rank() {
            0 => T::from(Tensor::stack::<1>(vec![a.$acc::<0>(), b.$acc::<0>()], $dim)),
            1 => T::from(Tensor::stack::<2>(vec![a.$acc::<1>(), b.$acc::<1>()], $dim)),
            2 => T::from(Tensor::stack::<3>(vec![a.$acc::<2>(), b.$acc::<2>()], $dim)),
            3 => T::from(Tensor::stack::<4>(vec![a.$acc::<3>(), b.$acc::<3>()], $dim)),
            r => panic!("stack2: rank {r}"),
        }
    }};
}

/// `cat` of three tensors of one kind along a drawn dim (sizes differ along it).
macro_rules! cat_case {
    ($name:literal, $acc:ident, $gen:expr) => {
        case(
            $name,
            1..=3,
            |p| {
                let d = p.dim(1);
                vec![
                    op(&p.shape(), $gen),
                    op(&with(&p.shape(), d, 1 + p.pick(2, 3)), $gen),
                    op(&p.shape(), $gen),
                ]
            },
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], $acc, a[1], $acc, a[2], $acc, |x, y, z| {
                    Tensor::cat(vec![x, y, z], d)
                })]
            },
        )
    };
}

/// `stack` of two tensors of one kind along a drawn dim.
macro_rules! stack_case {
    ($name:literal, $acc:ident, $gen:expr) => {
        case(
            $name,
            0..=3,
            |p| vec![op(&p.shape(), $gen), op(&p.shape(), $gen)],
            |p, a| {
                let d = p.pick(1, p.rank + 1);
                vec![stack2!(a[0], a[1], $acc, d)]
            },
        )
    };
}

pub fn cases() -> Vec<OpCase> {
    vec![
        // --- overridden by Vmap (speed) ----------------------------------------------------
        unary!("float_neg", Gen::F(-2.0, 2.0), f, |x| -x),
        cat_case!("float_cat", f, Gen::F(-2.0, 2.0)),
        cat_case!("int_cat", i, Gen::I(-4, 4)),
        cat_case!("bool_cat", b, Gen::B),
        // `linear` (rules fold a batched input into rows) at input ranks 1-3, with and without
        // bias: Burn inserts and removes a leading size-1 dim around a rank-1 input.
        case(
            "linear",
            1..=3,
            |p| {
                let k = 1 + p.pick(3, 4);
                let n = 1 + p.pick(4, 4);
                let mut x = p.shape();
                *x.last_mut().expect("rank >= 1") = k;
                vec![fl(&x), fl(&[k, n]), fl(&[n])]
            },
            |_p, a| {
                use burn::tensor::module::linear;
                let (w, b) = (a[1].f::<2>(), a[2].f::<1>());
                match a[0].rank() {
                    1 => vec![
                        T::from(linear(a[0].f::<1>(), w.clone(), Some(b))),
                        T::from(linear(a[0].f::<1>(), w, None)),
                    ],
                    2 => vec![
                        T::from(linear(a[0].f::<2>(), w.clone(), Some(b))),
                        T::from(linear(a[0].f::<2>(), w, None)),
                    ],
                    _ => vec![
                        T::from(linear(a[0].f::<3>(), w.clone(), Some(b))),
                        T::from(linear(a[0].f::<3>(), w, None)),
                    ],
                }
            },
        ),
        // Pending reshapes of batched tensors read by several consumers: the matmul fold (reads
        // them in place), a reduction, an elementwise op, another reshape.
        case(
            "reshape_pending_consumers",
            3..=3,
            |p| {
                let [m, k, n] = [p.d[0], p.d[1], p.d[2]];
                vec![fl(&[m * k]), fl(&[k, n])]
            },
            |p, a| {
                let [m, k, _] = [p.d[0], p.d[1], p.d[2]];
                let x = a[0].f::<1>().reshape([m as i32, k as i32]);
                let y = x.clone().matmul(a[1].f::<2>()); // [m, n]
                let flat = y.clone().reshape([-1]); // [m * n]
                let back = flat.clone().reshape([m as i32, -1]); // [m, n] again
                vec![
                    T::from(y),
                    T::from(x.clone().sum_dim(1)),
                    T::from(flat.exp()),
                    T::from(back + x.unsqueeze_dim::<3>(2).sum_dim(1).squeeze_dim::<2>(1)),
                ]
            },
        ),
        // --- views and shape ops built on required ones ------------------------------------
        stack_case!("float_stack", f, Gen::F(-2.0, 2.0)),
        stack_case!("int_stack", i, Gen::I(-4, 4)),
        stack_case!("bool_stack", b, Gen::B),
        case(
            "float_repeat",
            2..=2,
            |p| vec![fl(&p.shape())],
            |_p, a| vec![T::from(a[0].f::<2>().repeat(&[2, 3]))],
        ),
        case(
            "float_narrow_chunk",
            1..=3,
            |p| vec![fl(&p.shape())],
            |p, a| {
                let d = p.dim(1);
                let (s, e) = p.range(2, p.d[d]);
                let mut out = vec![ranked!(a[0], f, |x| x.narrow(d, s, e - s))];
                out.extend(match a[0].rank() {
                    1 => a[0]
                        .f::<1>()
                        .chunk(2, d)
                        .into_iter()
                        .map(T::from)
                        .collect::<Vec<_>>(),
                    2 => a[0].f::<2>().chunk(2, d).into_iter().map(T::from).collect(),
                    _ => a[0].f::<3>().chunk(2, d).into_iter().map(T::from).collect(),
                });
                out
            },
        ),
        case(
            "float_squeeze_unsqueeze_flatten",
            2..=2,
            |p| vec![fl(&[p.d[0], 1, p.d[1]])],
            |_p, a| {
                let x = a[0].f::<3>();
                vec![
                    T::from(x.clone().squeeze_dim::<2>(1)),
                    T::from(x.clone().unsqueeze_dim::<4>(0)),
                    T::from(x.clone().unsqueeze::<5>()),
                    T::from(x.clone().flatten::<2>(1, 2)),
                    T::from(x.transpose()),
                ]
            },
        ),
        case(
            "float_movedim_roll",
            3..=3,
            |p| vec![fl(&p.shape())],
            |p, a| {
                let x = a[0].f::<3>();
                vec![
                    T::from(x.clone().movedim(0, 2)),
                    T::from(x.roll_dim(1 + p.pick(1, 3) as isize, p.dim(2))),
                ]
            },
        ),
        case(
            "float_tril_triu",
            2..=3,
            |p| vec![fl(&p.shape())],
            |_p, a| {
                vec![
                    ranked!(a[0], f, |x| x.clone().tril(0)),
                    ranked!(a[0], f, |x| x.triu(1)),
                ]
            },
        ),
        case(
            "float_expand_broadcast_binary",
            2..=2,
            |p| vec![fl(&[p.d[0], 1]), fl(&[1, p.d[1]])],
            |_p, a| vec![T::from(a[0].f::<2>() * a[1].f::<2>())],
        ),
        // --- elementwise defaults ------------------------------------------------------------
        unary!("float_clamp", Gen::F(-2.0, 2.0), f, |x| x.clamp(-0.5, 0.7)),
        unary!("float_sign_square", Gen::FGrid, f, |x| x.clone().sign()
            + x.square()),
        unary!("float_powi_scalar", Gen::F(-2.0, 2.0), f, |x| x
            .powi_scalar(3)),
        binary!(
            "float_max_min_pair",
            Gen::F(-2.0, 2.0),
            Gen::F(-2.0, 2.0),
            f,
            |x, y| x.clone().max_pair(y.clone()) - y.min_pair(x)
        ),
        binary!("float_not_equal", Gen::FGrid, Gen::FGrid, f, |x, y| x
            .not_equal(y)),
        unary!("float_is_nan_inf", Gen::F(-2.0, 2.0), f, |x| x
            .clone()
            .log()
            .is_nan()
            .bool_or(x.recip().is_inf())),
        unary!("int_clamp_sign", Gen::I(-4, 4), i, |x| x
            .clone()
            .clamp(-2, 2)
            + x.sign()),
        binary!("int_powi", Gen::I(-3, 3), Gen::I(0, 3), i, |x, y| x.powi(y)),
        unary!("bool_xor_not_equal", Gen::B, b, |m| m
            .clone()
            .bool_xor(m.clone().bool_not())
            .bool_xor(m.not_equal_elem(true))),
        // --- activations (the inner backend's kernels, and Burn's defaults) -------------------
        unary!(
            "activation_relu_gelu_sigmoid",
            Gen::F(-3.0, 3.0),
            f,
            |x| activation::relu(x.clone())
                + activation::gelu(x.clone())
                + activation::sigmoid(x.clone())
                + activation::silu(x)
        ),
        unary!(
            "activation_log_sigmoid_leaky_hard",
            Gen::F(-3.0, 3.0),
            f,
            |x| activation::log_sigmoid(x.clone())
                + activation::leaky_relu(x.clone(), 0.2)
                + activation::hard_sigmoid(x, 0.2, 0.5)
        ),
        case(
            "activation_softmax",
            1..=3,
            |p| vec![fl(&p.shape())],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], f, |x| activation::softmax(x.clone(), d)
                    + activation::log_softmax(x, d))]
            },
        ),
        // --- reductions ----------------------------------------------------------------------
        unary!("float_mean_prod", Gen::F(0.5, 1.5), f, |x| x.clone().mean()
            + x.prod()),
        case(
            "float_max_min_dim",
            1..=3,
            |p| vec![op(&p.shape(), Gen::FDistinct)],
            |p, a| {
                let d = p.dim(1);
                let (m, i) = match a[0].rank() {
                    1 => {
                        let (m, i) = a[0].f::<1>().max_dim_with_indices(d);
                        (T::from(m), T::from(i))
                    }
                    2 => {
                        let (m, i) = a[0].f::<2>().max_dim_with_indices(d);
                        (T::from(m), T::from(i))
                    }
                    _ => {
                        let (m, i) = a[0].f::<3>().max_dim_with_indices(d);
                        (T::from(m), T::from(i))
                    }
                };
                vec![
                    m,
                    i,
                    ranked!(a[0], f, |x| x.clone().min_dim(d)),
                    ranked!(a[0], f, |x| x.max()),
                    ranked!(a[0], f, |x| x.min()),
                ]
            },
        ),
        case(
            "float_var_sum_dims",
            2..=3,
            |p| vec![fl(&p.shape())],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], f, |x| x.clone().var(d)
                    + x.clone().sum_dims(&[0, 1])
                    + x.mean_dims(&[1]))]
            },
        ),
        case(
            "int_max_min_dim",
            1..=3,
            |p| vec![op(&p.shape(), Gen::IDistinct)],
            |p, a| {
                let d = p.dim(1);
                vec![
                    ranked!(a[0], i, |x| x.clone().max_dim(d) - x.min_dim(d)),
                    ranked!(a[0], i, |x| x.clone().max() + x.mean()),
                ]
            },
        ),
        // --- sorting (Burn's default reads the data back to the host) -----------------------
        case(
            "float_sort",
            1..=3,
            |p| vec![op(&p.shape(), Gen::FDistinct)],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], f, |x| x.sort(d))]
            },
        ),
        case(
            "float_sort_with_indices",
            1..=3,
            |p| vec![op(&p.shape(), Gen::FDistinct)],
            |p, a| {
                let d = p.dim(1);
                match a[0].rank() {
                    1 => {
                        let (s, i) = a[0].f::<1>().sort_descending_with_indices(d);
                        vec![T::from(s), T::from(i)]
                    }
                    2 => {
                        let (s, i) = a[0].f::<2>().sort_descending_with_indices(d);
                        vec![T::from(s), T::from(i)]
                    }
                    _ => {
                        let (s, i) = a[0].f::<3>().sort_descending_with_indices(d);
                        vec![T::from(s), T::from(i)]
                    }
                }
            },
        ),
        case(
            "float_argsort",
            1..=3,
            |p| vec![op(&p.shape(), Gen::FDistinct)],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], f, |x| x.argsort(d))]
            },
        ),
        case(
            "float_topk",
            1..=3,
            |p| {
                let d = p.dim(1);
                vec![op(&with(&p.shape(), d, p.d[d].max(2)), Gen::FDistinct)]
            },
            |p, a| {
                let d = p.dim(1);
                let k = 1 + p.pick(2, p.d[d].max(2) - 1);
                vec![ranked!(a[0], f, |x| x.topk(k, d))]
            },
        ),
        case(
            "int_sort",
            1..=3,
            |p| vec![op(&p.shape(), Gen::IDistinct)],
            |p, a| {
                let d = p.dim(1);
                let mut out = vec![
                    ranked!(a[0], i, |x| x.clone().sort(d)),
                    ranked!(a[0], i, |x| x.argsort_descending(d)),
                ];
                out.extend(match a[0].rank() {
                    1 => {
                        let (s, i) = a[0].i::<1>().sort_with_indices(d);
                        vec![T::from(s), T::from(i)]
                    }
                    2 => {
                        let (s, i) = a[0].i::<2>().sort_with_indices(d);
                        vec![T::from(s), T::from(i)]
                    }
                    _ => {
                        let (s, i) = a[0].i::<3>().sort_with_indices(d);
                        vec![T::from(s), T::from(i)]
                    }
                });
                out
            },
        ),
        case(
            "int_topk",
            1..=3,
            |p| {
                let d = p.dim(1);
                vec![op(&with(&p.shape(), d, p.d[d].max(2)), Gen::IDistinct)]
            },
            |p, a| {
                let d = p.dim(1);
                let k = 1 + p.pick(2, p.d[d].max(2) - 1);
                vec![ranked!(a[0], i, |x| x.topk(k, d))]
            },
        ),
        // --- indexing defaults ---------------------------------------------------------------
        case(
            "int_arange_inside",
            1..=1,
            |p| vec![it(&p.shape())],
            |p, a| {
                vec![T::from(
                    a[0].i::<1>()
                        + Tensor::<1, Int>::arange(0..p.d[0] as i64, &a[0].i::<1>().device()),
                )]
            },
        ),
        case(
            "float_mask_where_broadcast_value",
            2..=2,
            |p| vec![fl(&p.shape()), bo(&p.shape()), fl(&p.shape())],
            |p, a| {
                vec![T::from(a[0].f::<2>().mask_where(
                    a[1].b::<2>(),
                    a[2].f::<2>().mean_dim(1).expand([p.d[0], p.d[1]]),
                ))]
            },
        ),
        case(
            "bool_mask_from_comparison",
            1..=3,
            |p| vec![fl(&p.shape()), fl(&p.shape())],
            |_p, a| {
                vec![ranked!(a[0], f, a[1], f, |x, y| x
                    .clone()
                    .mask_fill(x.greater(y), 0.0))]
            },
        ),
        case(
            "float_select_then_matmul",
            2..=2,
            |p| {
                vec![
                    fl(&[p.d[0], p.d[1]]),
                    op(&[p.d[2]], Gen::I(0, p.d[0] as i64 - 1)),
                    fl(&[p.d[1], p.d[3]]),
                ]
            },
            |_p, a| {
                vec![T::from(
                    a[0].f::<2>().select(0, a[1].i::<1>()).matmul(a[2].f::<2>()),
                )]
            },
        ),
        case(
            "bool_select_int_roundtrip",
            1..=2,
            |p| vec![bo(&p.shape())],
            |_p, a| vec![ranked!(a[0], b, |m| m.int().float().bool().int().bool())],
        ),
    ]
    .into_iter()
    .chain(std::iter::once(case(
        "float_empty_and_matmul_unbatched_rhs",
        2..=2,
        |p| vec![fl(&[p.d[0], p.d[1]])],
        |p, a| {
            let w = Tensor::<2>::ones([p.d[1], 3], &a[0].f::<2>().device());
            vec![T::from(a[0].f::<2>().matmul(w))]
        },
    )))
    .chain(std::iter::once(case(
        "bool_mask_where_unbatched_mask",
        1..=2,
        |p| vec![fl(&p.shape())],
        |_p, a| {
            vec![ranked!(a[0], f, |x| {
                let m = crate::harness::same(
                    &x.clone().lower_elem(0.0),
                    Tensor::<_, Bool>::zeros(x.dims(), &x.device()),
                );
                x.clone().mask_where(m, x.neg())
            })]
        },
    )))
    .collect()
}

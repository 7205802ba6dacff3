//! Oracle cases for `FloatTensorOps`.

use burn::tensor::{Bool, Distribution, FloatDType, Int, Slice, Tensor, TensorData};

use crate::harness::{Gen, OpCase, Operand, P, T, V, case, fl, op};

/// `s` with `s[dim] = v`.
pub fn with(s: &[usize], dim: usize, v: usize) -> Vec<usize> {
    let mut s = s.to_vec();
    s[dim] = v;
    s
}

/// Slices for `slice`/`slice_assign` drawn from `p` over `shape`, with steps in `steps`;
/// returns the slices and the shape of the sliced region.
pub fn draw_slices(p: &P, shape: &[usize], steps: &[isize]) -> (Vec<Slice>, Vec<usize>) {
    let mut slices = Vec::new();
    let mut out = Vec::new();
    for (d, &n) in shape.iter().enumerate() {
        let (a, b) = p.range(40 + 3 * d as u64, n);
        let step = steps[p.pick(41 + 3 * d as u64, steps.len())];
        let len = (b - a).div_ceil(step.unsigned_abs());
        slices.push(Slice::new(a as isize, Some(b as isize), step));
        out.push(len);
    }
    (slices, out)
}

/// Gather/scatter parameters: `(dim, index shape, bound)`.
pub fn gather_params(p: &P) -> (usize, Vec<usize>, usize) {
    let s = p.shape();
    let dim = p.dim(1);
    let k = 1 + p.pick(2, 4);
    (dim, with(&s, dim, k), s[dim])
}

/// Select parameters: `(dim, k, bound)`.
pub fn select_params(p: &P) -> (usize, usize, usize) {
    let dim = p.dim(1);
    (dim, 1 + p.pick(2, 4), p.d[dim])
}

/// Unfold parameters: `(dim, size, step)`.
pub fn unfold_params(p: &P) -> (usize, usize, usize) {
    let dim = p.dim(1);
    (dim, 1 + p.pick(2, p.d[dim]), 1 + p.pick(3, 2))
}

/// Unfold of any kind, rank 1..=3 (the output rank is one more).
macro_rules! unfold_any {
    ($t:expr, $acc:ident, $dim:expr, $size:expr, $step:expr) => {{
        let t: &T = &$t;
        match t.rank() {
            1 => T::from(t.$acc::<1>().unfold::<2, usize>($dim, $size, $step)),
            2 => T::from(t.$acc::<2>().unfold::<3, usize>($dim, $size, $step)),
            3 => T::from(t.$acc::<3>().unfold::<4, usize>($dim, $size, $step)),
            r => panic!("unfold: rank {r}"),
        }
    }};
}
pub(crate) use unfold_any;

/// Expand of any kind: per-example `[d0|1, d1]` to `[d0, d1]` and `[d2, d0, d1]`.
macro_rules! expand_any {
    ($p:expr, $t:expr, $acc:ident) => {{
        let p: &crate::harness::P = $p;
        let x = $t.$acc::<2>();
        vec![
            T::from(x.clone().expand([p.d[0], p.d[1]])),
            T::from(x.expand([p.d[2], p.d[0], p.d[1]])),
        ]
    }};
}
pub(crate) use expand_any;

/// Operands for `expand`: `[d0 or 1, d1 or 1]`.
pub fn expand_operand(p: &P, r#gen: Gen) -> Vec<Operand> {
    let a = if p.pick(1, 2) == 0 { 1 } else { p.d[0] };
    let b = if p.pick(2, 2) == 0 { 1 } else { p.d[1] };
    vec![op(&[a, b], r#gen)]
}

/// Cases shared by every kind: views, indexing, creation/transfer. `$acc` is the accessor
/// (`f`, `i`, `b`), `$K` the kind type, `$gen` the value generator and `$fill` a fill value.
macro_rules! kind_cases {
    ($pfx:literal, $acc:ident, $K:ty, $gen:expr, $fill:expr,
     scatter: $scatter:literal, select_add: $select_add:literal) => {{
        use crate::float_ops::{
            ShapeHint, draw_slices, expand_operand, gather_params, select_params, unfold_params,
            with,
        };
        use crate::harness::{OpCase, T, V, bo, case, idx, op};
        use burn::tensor::{Bool, IndexingUpdateOp, Tensor};
        let v: Vec<OpCase> = vec![
            case(
                concat!($pfx, "_reshape"),
                &[concat!($pfx, "_reshape")],
                1..=3,
                |p| vec![op(&p.shape(), $gen)],
                |p, a| {
                    let n: usize = p.shape().iter().product();
                    let flat = ranked!(a[0], $acc, |x| x.reshape([n]));
                    let rev = match p.rank {
                        1 => T::from(a[0].$acc::<1>().reshape([p.d[0]])),
                        2 => T::from(a[0].$acc::<2>().reshape([p.d[1], p.d[0]])),
                        _ => T::from(a[0].$acc::<3>().reshape([p.d[2] as i32, -1, p.d[0] as i32])),
                    };
                    vec![flat, rev]
                },
            ),
            case(
                concat!($pfx, "_swap_dims"),
                &[concat!($pfx, "_swap_dims")],
                1..=4,
                |p| vec![op(&p.shape(), $gen)],
                |p, a| {
                    let (d1, d2) = (p.dim(1), p.dim(2));
                    vec![ranked!(a[0], $acc, |x| x.swap_dims(d1, d2))]
                },
            ),
            case(
                concat!($pfx, "_permute"),
                &[concat!($pfx, "_permute")],
                1..=4,
                |p| vec![op(&p.shape(), $gen)],
                |p, a| {
                    let perm = p.perm(3, p.rank);
                    vec![ranked!(a[0], $acc, |x| x
                        .permute(core::array::from_fn(|i| perm[i] as isize)))]
                },
            ),
            case(
                concat!($pfx, "_flip"),
                &[concat!($pfx, "_flip")],
                1..=3,
                |p| vec![op(&p.shape(), $gen)],
                |p, a| {
                    let (d1, d2) = (p.dim(1) as isize, p.dim(2) as isize);
                    let one = ranked!(a[0], $acc, |x| x.flip([d1]));
                    let two = if d1 != d2 {
                        ranked!(a[0], $acc, |x| x.flip([d1, d2]))
                    } else {
                        one.clone()
                    };
                    vec![one, two]
                },
            ),
            case(
                concat!($pfx, "_expand"),
                &[concat!($pfx, "_expand")],
                2..=2,
                |p| expand_operand(p, $gen),
                |p, a| crate::float_ops::expand_any!(p, a[0], $acc),
            ),
            case(
                concat!($pfx, "_slice"),
                &[concat!($pfx, "_slice")],
                1..=3,
                |p| vec![op(&p.shape(), $gen)],
                |p, a| {
                    let (s1, _) = draw_slices(p, &p.shape(), &[1]);
                    let (s2, _) = draw_slices(p, &p.shape(), &[1, 2, -1]);
                    vec![
                        ranked!(a[0], $acc, |x| x.slice(s1.as_slice())),
                        ranked!(a[0], $acc, |x| x.slice(s2.as_slice())),
                    ]
                },
            ),
            case(
                concat!($pfx, "_slice_assign"),
                &[concat!($pfx, "_slice_assign")],
                1..=3,
                |p| {
                    let (_, vs) = draw_slices(p, &p.shape(), &[1, 2]);
                    vec![op(&p.shape(), $gen), op(&vs, $gen)]
                },
                |p, a| {
                    let (s, _) = draw_slices(p, &p.shape(), &[1, 2]);
                    vec![ranked!(a[0], $acc, a[1], $acc, |x, v| x
                        .slice_assign(s.as_slice(), v))]
                },
            ),
            case(
                concat!($pfx, "_unfold"),
                &[concat!($pfx, "_unfold")],
                1..=3,
                |p| vec![op(&p.shape(), $gen)],
                |p, a| {
                    let (d, size, step) = unfold_params(p);
                    vec![crate::float_ops::unfold_any!(a[0], $acc, d, size, step)]
                },
            ),
            case(
                concat!($pfx, "_gather"),
                &[concat!($pfx, "_gather")],
                1..=3,
                |p| {
                    let (_, is, bound) = gather_params(p);
                    vec![op(&p.shape(), $gen), idx(&is, bound)]
                },
                |p, a| {
                    let (d, _, _) = gather_params(p);
                    vec![ranked!(a[0], $acc, a[1], i, |x, i| x.gather(d, i))]
                },
            ),
            case(
                concat!($pfx, "_scatter"),
                &[$scatter],
                1..=3,
                |p| {
                    let (_, is, bound) = gather_params(p);
                    vec![op(&p.shape(), $gen), idx(&is, bound), op(&is, $gen)]
                },
                |p, a| {
                    let (d, _, _) = gather_params(p);
                    vec![ranked!(a[0], $acc, a[1], i, a[2], $acc, |x, i, v| x
                        .scatter(d, i, v, IndexingUpdateOp::Add))]
                },
            ),
            case(
                concat!($pfx, "_select"),
                &[concat!($pfx, "_select")],
                1..=3,
                |p| {
                    let (_, k, bound) = select_params(p);
                    vec![op(&p.shape(), $gen), idx(&[k], bound)]
                },
                |p, a| {
                    let (d, _, _) = select_params(p);
                    let i = a[1].i::<1>();
                    vec![ranked!(a[0], $acc, |x| x.select(d, i.clone()))]
                },
            ),
            case(
                concat!($pfx, "_select_assign"),
                &[$select_add],
                1..=3,
                |p| {
                    let (d, k, bound) = select_params(p);
                    vec![
                        op(&p.shape(), $gen),
                        idx(&[k], bound),
                        op(&with(&p.shape(), d, k), $gen),
                    ]
                },
                |p, a| {
                    let (d, _, _) = select_params(p);
                    let i = a[1].i::<1>();
                    vec![ranked!(a[0], $acc, a[2], $acc, |x, v| x.select_assign(
                        d,
                        i.clone(),
                        v,
                        IndexingUpdateOp::Add
                    ))]
                },
            ),
            case(
                concat!($pfx, "_mask_where"),
                &[concat!($pfx, "_mask_where")],
                1..=3,
                |p| vec![op(&p.shape(), $gen), bo(&p.shape()), op(&p.shape(), $gen)],
                |_p, a| {
                    vec![ranked!(a[0], $acc, a[1], b, a[2], $acc, |x, m, v| x
                        .mask_where(m, v))]
                },
            ),
            // Values (mask_where) and masks (mask_fill) with size-1 (broadcast) dims; burn-ndarray
            // does not broadcast the mask of mask_where.
            case(
                concat!($pfx, "_mask_where_broadcast"),
                &[concat!($pfx, "_mask_where")],
                1..=3,
                |p| {
                    vec![
                        op(&p.shape(), $gen),
                        bo(&p.shape()),
                        op(&p.bshape(12), $gen),
                    ]
                },
                |_p, a| {
                    vec![ranked!(a[0], $acc, a[1], b, a[2], $acc, |x, m, v| x
                        .mask_where(m, v))]
                },
            ),
            case(
                concat!($pfx, "_mask_fill_broadcast"),
                &[concat!($pfx, "_mask_fill")],
                1..=3,
                |p| vec![op(&p.shape(), $gen), bo(&p.bshape(11))],
                |_p, a| vec![ranked!(a[0], $acc, a[1], b, |x, m| x.mask_fill(m, $fill))],
            ),
            case(
                concat!($pfx, "_mask_fill"),
                &[concat!($pfx, "_mask_fill")],
                0..=3,
                |p| vec![op(&p.shape(), $gen), bo(&p.shape())],
                |_p, a| vec![ranked!(a[0], $acc, a[1], b, |x, m| x.mask_fill(m, $fill))],
            ),
            // Creation inside vmap gives unbatched tensors; they must combine with batched ones.
            case(
                concat!($pfx, "_from_data"),
                &[concat!($pfx, "_from_data"), concat!($pfx, "_device")],
                1..=3,
                |p| vec![op(&p.shape(), $gen), bo(&p.shape())],
                |_p, a| {
                    vec![ranked!(a[0], $acc, a[1], b, |x, m| {
                        let c = Tensor::<V, _, $K>::from_data(x.to_data_shape_hint(), &x.device());
                        c.mask_where(m, x)
                    })]
                },
            ),
            case(
                concat!($pfx, "_empty"),
                &[concat!($pfx, "_empty")],
                1..=3,
                |p| vec![op(&p.shape(), $gen)],
                |_p, a| {
                    vec![ranked!(a[0], $acc, |x| {
                        let e = Tensor::<V, _, $K>::empty(x.dims(), &x.device());
                        e.mask_where(Tensor::<V, _, Bool>::ones(x.dims(), &x.device()), x)
                    })]
                },
            ),
            case(
                concat!($pfx, "_into_data"),
                &[concat!($pfx, "_into_data")],
                1..=3,
                |p| vec![op(&p.shape(), $gen), bo(&p.shape())],
                |_p, a| {
                    vec![ranked!(a[0], $acc, a[1], b, |x, m| {
                        // Reading an unbatched tensor inside vmap is allowed.
                        let all = crate::harness::same(
                            &m,
                            Tensor::<V, _, Bool>::ones(x.dims(), &x.device()),
                        );
                        let c = crate::harness::same(
                            &x,
                            Tensor::<V, _, $K>::empty(x.dims(), &x.device()).mask_fill(all, $fill),
                        );
                        let data = c.into_data();
                        Tensor::<V, _, $K>::from_data(data, &x.device()).mask_where(m, x)
                    })]
                },
            ),
            case(
                concat!($pfx, "_to_device"),
                &[concat!($pfx, "_to_device"), concat!($pfx, "_device")],
                0..=3,
                |p| vec![op(&p.shape(), $gen)],
                |_p, a| {
                    vec![ranked!(a[0], $acc, |x| {
                        let d = x.device();
                        x.to_device(&d)
                    })]
                },
            ),
        ];
        v
    }};
}
pub(crate) use kind_cases;

/// Shape-hint trait: a tensor's dims as host data of its kind, used by `*_from_data`.
pub trait ShapeHint {
    fn to_data_shape_hint(&self) -> TensorData;
}
impl<const D: usize> ShapeHint for Tensor<V, D> {
    fn to_data_shape_hint(&self) -> TensorData {
        let dims = self.dims();
        let n: usize = dims.iter().product();
        TensorData::new(
            (0..n).map(|i| i as f32 * 0.5 - 1.0).collect::<Vec<f32>>(),
            dims,
        )
    }
}
impl<const D: usize> ShapeHint for Tensor<V, D, Int> {
    fn to_data_shape_hint(&self) -> TensorData {
        let dims = self.dims();
        let n: usize = dims.iter().product();
        TensorData::new((0..n as i64).map(|i| i - 2).collect::<Vec<i64>>(), dims)
    }
}
impl<const D: usize> ShapeHint for Tensor<V, D, Bool> {
    fn to_data_shape_hint(&self) -> TensorData {
        let dims = self.dims();
        let n: usize = dims.iter().product();
        TensorData::new((0..n).map(|i| i % 3 == 0).collect::<Vec<bool>>(), dims)
    }
}

/// A float dtype other than the default `F32` that the test backend supports (`F64` on
/// ndarray; wgpu shaders have no `f64`).
fn other_float() -> FloatDType {
    use burn::tensor::DType;
    use burn::tensor::backend::Backend;
    let device = Default::default();
    [
        (DType::F64, FloatDType::F64),
        (DType::F16, FloatDType::F16),
        (DType::BF16, FloatDType::BF16),
    ]
    .into_iter()
    .find(|(d, _)| V::supports_dtype(&device, *d))
    .map(|(_, f)| f)
    .unwrap_or(FloatDType::F32)
}

const POS: Gen = Gen::F(0.1, 3.0);
const NZ: Gen = Gen::FNonZero(0.5, 2.0);
const UNIT: Gen = Gen::F(-0.95, 0.95);
const ALL: Gen = Gen::F(-2.0, 2.0);

pub fn cases() -> Vec<OpCase> {
    let mut v = kind_cases!("float", f, burn::tensor::Float, Gen::F(-2.0, 2.0), 2.5f32,
        scatter: "float_scatter_add", select_add: "float_select_add");
    v.extend(vec![
        // --- creation, transfer, casts ---------------------------------------------------
        case(
            "float_random",
            &["float_random", "float_device", "float_greater_equal_elem"],
            0..=3,
            |p| vec![fl(&p.shape())],
            |_p, a| {
                let r = ranked!(a[0], f, |x| x.random_like(Distribution::Default));
                vec![
                    ranked!(a[0], f, r, f, |x, r| x + r.mul_scalar(0.0)),
                    ranked!(r, f, |r| r.greater_equal_elem(0.0)),
                ]
            },
        ),
        case(
            "float_zeros_ones_full",
            &[],
            1..=3,
            |p| vec![fl(&p.shape())],
            |_p, a| {
                vec![ranked!(a[0], f, |x| {
                    let d = x.device();
                    x.clone() * Tensor::<V, _>::ones(x.dims(), &d)
                        + Tensor::<V, _>::zeros(x.dims(), &d)
                        - Tensor::<V, _>::full(x.dims(), 0.25, &d)
                        + x.zeros_like()
                        + x.ones_like()
                })]
            },
        ),
        unary!(
            "float_into_int",
            ["float_into_int"],
            Gen::F(-5.0, 5.0),
            f,
            |x| x.int()
        ),
        unary!("float_cast", ["float_cast"], ALL, f, |x| x
            .cast(other_float())
            .exp()
            .cast(FloatDType::F32)),
        case(
            "float_cast_other_dtype_out",
            &["float_cast"],
            0..=3,
            |p| vec![fl(&p.shape())],
            |_p, a| vec![ranked!(a[0], f, |x| x.cast(other_float()).mul_scalar(3.0))],
        ),
        // --- elementwise binary ------------------------------------------------------------
        binary!("float_add", ["float_add"], ALL, ALL, f, |x, y| x + y),
        binary!("float_sub", ["float_sub"], ALL, ALL, f, |x, y| x - y),
        binary!("float_mul", ["float_mul"], ALL, ALL, f, |x, y| x * y),
        binary!("float_div", ["float_div"], ALL, NZ, f, |x, y| x / y),
        binary_eq!(
            "float_remainder",
            ["float_remainder"],
            Gen::F(-5.0, 5.0),
            NZ,
            f,
            |x, y| x.remainder(y)
        ),
        binary!("float_powf", ["float_powf"], POS, ALL, f, |x, y| x.powf(y)),
        binary!("float_atan2", ["float_atan2"], ALL, ALL, f, |x, y| x
            .atan2(y)),
        // --- scalar --------------------------------------------------------------------------
        unary!("float_add_scalar", ["float_add_scalar"], ALL, f, |x| x
            .add_scalar(1.5)),
        unary!("float_sub_scalar", ["float_sub_scalar"], ALL, f, |x| x
            .sub_scalar(0.5)),
        unary!("float_mul_scalar", ["float_mul_scalar"], ALL, f, |x| x
            .mul_scalar(-2.0)),
        unary!("float_div_scalar", ["float_div_scalar"], ALL, f, |x| x
            .div_scalar(4.0)),
        unary!(
            "float_remainder_scalar",
            ["float_remainder_scalar"],
            Gen::F(-5.0, 5.0),
            f,
            |x| x.remainder_scalar(0.7)
        ),
        unary!(
            "float_powf_scalar",
            ["float_powf_scalar_impl"],
            POS,
            f,
            |x| x.powf_scalar(2.5)
        ),
        // --- unary -----------------------------------------------------------------------------
        unary!("float_recip", ["float_recip"], NZ, f, |x| x.recip()),
        unary!("float_exp", ["float_exp"], ALL, f, |x| x.exp()),
        unary!("float_log", ["float_log"], POS, f, |x| x.log()),
        unary!("float_log1p", ["float_log1p"], POS, f, |x| x.log1p()),
        unary!("float_sqrt", ["float_sqrt"], POS, f, |x| x.sqrt()),
        unary!("float_abs", ["float_abs"], ALL, f, |x| x.abs()),
        unary!("float_cos", ["float_cos"], ALL, f, |x| x.cos()),
        unary!("float_sin", ["float_sin"], ALL, f, |x| x.sin()),
        unary!("float_tan", ["float_tan"], Gen::F(-1.2, 1.2), f, |x| x
            .tan()),
        unary!("float_cosh", ["float_cosh"], ALL, f, |x| x.cosh()),
        unary!("float_sinh", ["float_sinh"], ALL, f, |x| x.sinh()),
        unary!("float_tanh", ["float_tanh"], ALL, f, |x| x.tanh()),
        unary!("float_acos", ["float_acos"], UNIT, f, |x| x.acos()),
        unary!("float_acosh", ["float_acosh"], Gen::F(1.0, 3.0), f, |x| x
            .acosh()),
        unary!("float_asin", ["float_asin"], UNIT, f, |x| x.asin()),
        unary!("float_asinh", ["float_asinh"], ALL, f, |x| x.asinh()),
        unary!("float_atan", ["float_atan"], ALL, f, |x| x.atan()),
        unary!("float_atanh", ["float_atanh"], UNIT, f, |x| x.atanh()),
        unary!("float_round", ["float_round"], Gen::F(-3.0, 3.0), f, |x| x
            .round()),
        unary!("float_floor", ["float_floor"], Gen::F(-3.0, 3.0), f, |x| x
            .floor()),
        unary!("float_ceil", ["float_ceil"], Gen::F(-3.0, 3.0), f, |x| x
            .ceil()),
        unary!("float_trunc", ["float_trunc"], Gen::F(-3.0, 3.0), f, |x| x
            .trunc()),
        unary!("float_erf", ["float_erf"], ALL, f, |x| x.erf()),
        // --- comparisons -----------------------------------------------------------------------
        binary!(
            "float_equal",
            ["float_equal"],
            Gen::FGrid,
            Gen::FGrid,
            f,
            |x, y| x.equal(y)
        ),
        binary!(
            "float_greater",
            ["float_greater"],
            Gen::FGrid,
            Gen::FGrid,
            f,
            |x, y| x.greater(y)
        ),
        binary!(
            "float_greater_equal",
            ["float_greater_equal"],
            Gen::FGrid,
            Gen::FGrid,
            f,
            |x, y| x.greater_equal(y)
        ),
        binary!(
            "float_lower",
            ["float_lower"],
            Gen::FGrid,
            Gen::FGrid,
            f,
            |x, y| x.lower(y)
        ),
        binary!(
            "float_lower_equal",
            ["float_lower_equal"],
            Gen::FGrid,
            Gen::FGrid,
            f,
            |x, y| x.lower_equal(y)
        ),
        unary!(
            "float_equal_elem",
            ["float_equal_elem"],
            Gen::FGrid,
            f,
            |x| x.equal_elem(0.5)
        ),
        unary!(
            "float_greater_elem",
            ["float_greater_elem"],
            Gen::FGrid,
            f,
            |x| x.greater_elem(0.0)
        ),
        unary!(
            "float_greater_equal_elem",
            ["float_greater_equal_elem"],
            Gen::FGrid,
            f,
            |x| x.greater_equal_elem(0.0)
        ),
        unary!(
            "float_lower_elem",
            ["float_lower_elem"],
            Gen::FGrid,
            f,
            |x| x.lower_elem(0.5)
        ),
        unary!(
            "float_lower_equal_elem",
            ["float_lower_equal_elem"],
            Gen::FGrid,
            f,
            |x| x.lower_equal_elem(-0.5)
        ),
        // --- linear algebra --------------------------------------------------------------------
        case(
            "float_matmul",
            &["float_matmul"],
            2..=2,
            |p| vec![fl(&[p.d[0], p.d[1]]), fl(&[p.d[1], p.d[2]])],
            |_p, a| vec![T::from(a[0].f::<2>().matmul(a[1].f::<2>()))],
        ),
        case(
            "float_matmul_r3_broadcast",
            &["float_matmul"],
            3..=3,
            |p| {
                // Leading dims: equal, or one side 1 (the unbatched-weight fold path when rhs is 1).
                let (la, lb) = match p.pick(5, 3) {
                    0 => (p.d[3], p.d[3]),
                    1 => (p.d[3], 1),
                    _ => (1, p.d[3]),
                };
                vec![fl(&[la, p.d[0], p.d[1]]), fl(&[lb, p.d[1], p.d[2]])]
            },
            |_p, a| vec![T::from(a[0].f::<3>().matmul(a[1].f::<3>()))],
        ),
        case(
            "float_matmul_r4",
            &["float_matmul"],
            2..=2,
            |p| {
                vec![
                    fl(&[p.d[3], 1, p.d[0], p.d[1]]),
                    fl(&[1, 2, p.d[1], p.d[2]]),
                ]
            },
            |_p, a| vec![T::from(a[0].f::<4>().matmul(a[1].f::<4>()))],
        ),
        case(
            "float_cross",
            &["float_cross"],
            1..=3,
            |p| {
                let d = p.dim(1);
                let s = with(&p.shape(), d, 3);
                vec![fl(&s), fl(&s)]
            },
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], f, a[1], f, |x, y| x.cross(y, d))]
            },
        ),
        // --- reductions and scans --------------------------------------------------------------
        unary!("float_sum", ["float_sum"], ALL, f, |x| x.sum()),
        case(
            "float_sum_dim",
            &["float_sum_dim"],
            1..=3,
            |p| vec![fl(&p.shape())],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], f, |x| x.sum_dim(d))]
            },
        ),
        case(
            "float_mean_dim",
            &["float_mean_dim"],
            1..=3,
            |p| vec![fl(&p.shape())],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], f, |x| x.mean_dim(d))]
            },
        ),
        case(
            "float_cumsum",
            &["float_cumsum"],
            1..=3,
            |p| vec![fl(&p.shape())],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], f, |x| x.cumsum(d))]
            },
        ),
        case(
            "float_cumprod",
            &["float_cumprod"],
            1..=3,
            |p| vec![fl(&p.shape())],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], f, |x| x.cumprod(d))]
            },
        ),
        case(
            "float_cummin",
            &["float_cummin"],
            1..=3,
            |p| vec![fl(&p.shape())],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], f, |x| x.cummin(d))]
            },
        ),
        case(
            "float_cummax",
            &["float_cummax"],
            1..=3,
            |p| vec![fl(&p.shape())],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], f, |x| x.cummax(d))]
            },
        ),
        case(
            "float_argmax",
            &["float_argmax"],
            1..=3,
            |p| vec![op(&p.shape(), Gen::FDistinct)],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], f, |x| x.argmax(d))]
            },
        ),
        case(
            "float_argmin",
            &["float_argmin"],
            1..=3,
            |p| vec![op(&p.shape(), Gen::FDistinct)],
            |p, a| {
                let d = p.dim(1);
                vec![ranked!(a[0], f, |x| x.argmin(d))]
            },
        ),
        // `Tensor::argtopk` asserts `k < size`: the dim gets size >= 2.
        case(
            "float_argtopk",
            &["float_argtopk"],
            1..=3,
            |p| {
                let d = p.dim(1);
                vec![op(&with(&p.shape(), d, p.d[d].max(2)), Gen::FDistinct)]
            },
            |p, a| {
                let d = p.dim(1);
                let k = 1 + p.pick(2, p.d[d].max(2) - 1);
                vec![ranked!(a[0], f, |x| x.argtopk(k, d))]
            },
        ),
    ]);
    v
}

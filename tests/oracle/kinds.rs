//! Cases shared by every kind (float, int, bool): views, indexing, masks and creation inside
//! the recorded function, with the helpers that draw their parameters.

use burn::tensor::{Bool, Int, Slice, Tensor, TensorData};

use crate::harness::{Gen, Operand, P, op};

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

/// Operands for `expand`: `[d0 or 1, d1 or 1]`.
pub fn expand_operand(p: &P, r#gen: Gen) -> Vec<Operand> {
    let a = if p.pick(1, 2) == 0 { 1 } else { p.d[0] };
    let b = if p.pick(2, 2) == 0 { 1 } else { p.d[1] };
    vec![op(&[a, b], r#gen)]
}

/// Values of a tensor's shape and kind, made on the host (a constant of the recording).
pub trait ShapeHint {
    fn hint(&self) -> TensorData;
}
impl<const D: usize> ShapeHint for Tensor<D> {
    fn hint(&self) -> TensorData {
        let dims = self.dims();
        let n: usize = dims.iter().product();
        TensorData::new(
            (0..n).map(|i| i as f32 * 0.5 - 1.0).collect::<Vec<f32>>(),
            dims,
        )
    }
}
impl<const D: usize> ShapeHint for Tensor<D, Int> {
    fn hint(&self) -> TensorData {
        let dims = self.dims();
        let n: usize = dims.iter().product();
        TensorData::new((0..n as i64).map(|i| i - 2).collect::<Vec<i64>>(), dims)
    }
}
impl<const D: usize> ShapeHint for Tensor<D, Bool> {
    fn hint(&self) -> TensorData {
        let dims = self.dims();
        let n: usize = dims.iter().product();
        TensorData::new((0..n).map(|i| i % 3 == 0).collect::<Vec<bool>>(), dims)
    }
}

/// Cases shared by every kind: views, indexing, creation. `$acc` is the accessor (`f`, `i`,
/// `b`), `$K` the kind type, `$gen` the value generator and `$fill` a fill value.
macro_rules! kind_cases {
    ($pfx:literal, $acc:ident, $K:ty, $gen:expr, $fill:expr) => {{
        use crate::harness::{T, bo, idx, op};
        use crate::kinds::{
            ShapeHint, draw_slices, expand_operand, gather_params, select_params, unfold_params,
            with,
        };
        use crate::run::{OpCase, case};
        use burn::tensor::{Bool, IndexingUpdateOp, Tensor};
        let v: Vec<OpCase> = vec![
            case(
                concat!($pfx, "_reshape"),
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
                1..=4,
                |p| vec![op(&p.shape(), $gen)],
                |p, a| {
                    let (d1, d2) = (p.dim(1), p.dim(2));
                    vec![ranked!(a[0], $acc, |x| x.swap_dims(d1, d2))]
                },
            ),
            case(
                concat!($pfx, "_permute"),
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
                2..=2,
                |p| expand_operand(p, $gen),
                |p, a| {
                    let x = a[0].$acc::<2>();
                    vec![
                        T::from(x.clone().expand([p.d[0], p.d[1]])),
                        T::from(x.expand([p.d[2], p.d[0], p.d[1]])),
                    ]
                },
            ),
            case(
                concat!($pfx, "_slice"),
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
                1..=3,
                |p| vec![op(&p.shape(), $gen)],
                |p, a| {
                    let (d, size, step) = unfold_params(p);
                    vec![crate::kinds::unfold_any!(a[0], $acc, d, size, step)]
                },
            ),
            case(
                concat!($pfx, "_gather"),
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
                1..=3,
                |p| vec![op(&p.shape(), $gen), bo(&p.shape()), op(&p.shape(), $gen)],
                |_p, a| {
                    vec![ranked!(a[0], $acc, a[1], b, a[2], $acc, |x, m, v| x
                        .mask_where(m, v))]
                },
            ),
            // Values (mask_where) and masks (mask_fill) with size-1 (broadcast) dims.
            case(
                concat!($pfx, "_mask_where_broadcast"),
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
                1..=3,
                |p| vec![op(&p.shape(), $gen), bo(&p.bshape(11))],
                |_p, a| vec![ranked!(a[0], $acc, a[1], b, |x, m| x.mask_fill(m, $fill))],
            ),
            case(
                concat!($pfx, "_mask_fill"),
                0..=3,
                |p| vec![op(&p.shape(), $gen), bo(&p.shape())],
                |_p, a| vec![ranked!(a[0], $acc, a[1], b, |x, m| x.mask_fill(m, $fill))],
            ),
            // Creation inside the recorded function: constants of the recording, combined with
            // batched arguments.
            case(
                concat!($pfx, "_from_data"),
                1..=3,
                |p| vec![op(&p.shape(), $gen), bo(&p.shape())],
                |_p, a| {
                    vec![ranked!(a[0], $acc, a[1], b, |x, m| {
                        let c = Tensor::<_, $K>::from_data(x.hint(), &x.device());
                        c.mask_where(m, x)
                    })]
                },
            ),
            case(
                concat!($pfx, "_empty_ones_zeros"),
                1..=3,
                |p| vec![op(&p.shape(), $gen)],
                |_p, a| {
                    vec![ranked!(a[0], $acc, |x| {
                        let d = x.device();
                        let e = Tensor::<_, $K>::empty(x.dims(), &d)
                            .mask_where(Tensor::<_, Bool>::ones(x.dims(), &d), x.clone());
                        let z = Tensor::<_, $K>::zeros(x.dims(), &d);
                        let o = Tensor::<_, $K>::ones(x.dims(), &d);
                        e.mask_where(x.clone().equal(z), o)
                    })]
                },
            ),
            case(
                concat!($pfx, "_to_device"),
                0..=3,
                |p| vec![op(&p.shape(), $gen)],
                |_p, a| {
                    vec![ranked!(a[0], $acc, |x| {
                        let d = x.device();
                        x.to_device(&d)
                    })]
                },
            ),
            case(
                concat!($pfx, "_equal_not_equal"),
                0..=3,
                |p| vec![op(&p.shape(), $gen), op(&p.shape(), $gen)],
                |_p, a| {
                    vec![
                        ranked!(a[0], $acc, a[1], $acc, |x, y| x.equal(y)),
                        ranked!(a[0], $acc, a[1], $acc, |x, y| x.not_equal(y)),
                        ranked!(a[0], $acc, |x| x.clone().equal_elem($fill)),
                        ranked!(a[0], $acc, |x| x.not_equal_elem($fill)),
                    ]
                },
            ),
            case(
                concat!($pfx, "_repeat_dim"),
                1..=3,
                |p| vec![op(&p.shape(), $gen)],
                |p, a| {
                    let d = p.dim(1);
                    vec![ranked!(a[0], $acc, |x| x.repeat_dim(d, 2))]
                },
            ),
            case(
                concat!($pfx, "_any_all"),
                1..=3,
                |p| vec![op(&p.shape(), $gen)],
                |p, a| {
                    let d = p.dim(1);
                    vec![
                        ranked!(a[0], $acc, |x| x.clone().any()),
                        ranked!(a[0], $acc, |x| x.clone().all()),
                        ranked!(a[0], $acc, |x| x.clone().any_dim(d)),
                        ranked!(a[0], $acc, |x| x.all_dim(d)),
                    ]
                },
            ),
        ];
        v
    }};
}
pub(crate) use kind_cases;

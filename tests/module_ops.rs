//! Module ops (conv, pool) under vmap against the loop oracle.

use burn::tensor::module::conv2d;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Distribution, Tensor, Tolerance};
use burn_vmap::testing::TestBackend;
use burn_vmap::{Vmap, vmap};

type V = Vmap<TestBackend>;

fn rand<const D: usize>(shape: [usize; D]) -> Tensor<V, D> {
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), &Default::default())
}

fn conv(x: Tensor<V, 4>, w: Tensor<V, 4>, b: Option<Tensor<V, 1>>, groups: usize) -> Tensor<V, 4> {
    conv2d(x, w, b, ConvOptions::new([1, 2], [1, 0], [1, 1], groups))
}

fn check_conv(xb: bool, wb: bool, bb: bool, groups: usize) {
    let e = 3;
    let (n, c, o) = (2, 4, 6);
    let x = if xb {
        rand([e, n, c, 5, 6])
    } else {
        rand([1, n, c, 5, 6])
    };
    let w = if wb {
        rand([e, o, c / groups, 3, 2])
    } else {
        rand([1, o, c / groups, 3, 2])
    };
    let b = if bb { rand([e, o]) } else { rand([1, o]) };
    let ax = |batched: bool| if batched { Some(0) } else { None };
    let axes = [ax(xb), ax(wb), ax(bb)];
    let f = |(x, w, b): (Tensor<V, 4>, Tensor<V, 4>, Tensor<V, 1>)| conv(x, w, Some(b), groups);
    // Unmapped operands are passed without the batch dim, so each mix has its own input type.
    macro_rules! arg {
        (true, $t:expr, $d:literal) => {
            $t.clone()
        };
        (false, $t:expr, $d:literal) => {
            $t.clone().squeeze_dim::<$d>(0)
        };
    }
    macro_rules! call {
        ($($x:tt $w:tt $b:tt),*) => {
            match (xb, wb, bb) {
                $(($x, $w, $b) => vmap(f).in_axes(axes).call((arg!($x, x, 4), arg!($w, w, 4), arg!($b, b, 1))).unwrap(),)*
            }
        };
    }
    let out: Tensor<V, 5> = call!(true true true, true true false, true false true, true false false,
        false true true, false true false, false false true, false false false);
    let pick = |t: &Tensor<V, 5>, batched: bool, i: usize| {
        t.clone()
            .narrow(0, if batched { i } else { 0 }, 1)
            .squeeze_dim::<4>(0)
    };
    let expected: Vec<Tensor<V, 4>> = (0..e)
        .map(|i| {
            let bi = b
                .clone()
                .narrow(0, if bb { i } else { 0 }, 1)
                .squeeze_dim::<1>(0);
            conv(pick(&x, xb, i), pick(&w, wb, i), Some(bi), groups)
        })
        .collect();
    let expected = Tensor::stack::<5>(expected, 0);
    out.into_data()
        .assert_approx_eq::<f32>(&expected.into_data(), Tolerance::default());
}

#[test]
fn should_batch_conv2d_for_every_operand_mix() {
    for groups in [1, 2] {
        for (xb, wb, bb) in [
            (true, false, false),
            (false, true, false),
            (true, true, false),
            (true, true, true),
            (false, false, true),
            (true, false, true),
            (false, true, true),
        ] {
            check_conv(xb, wb, bb, groups);
        }
    }
}

// ---- deformable convolution, embedding, pooling with indices, gather_nd/scatter_nd --------

use burn::backend::Autodiff;
use burn::tensor::module::{deform_conv2d, embedding, max_pool2d_with_indices};
use burn::tensor::ops::DeformConvOptions;
use burn::tensor::{IndexingUpdateOp, Int};

type AD = Autodiff<V>;

/// Example `i` of a batch (axis 0 removed).
fn ex<B: burn::tensor::backend::Backend, const DB: usize, const D: usize, K>(
    t: &Tensor<B, DB, K>,
    i: usize,
) -> Tensor<B, D, K>
where
    K: burn::tensor::BasicOps<B>,
{
    let dims = t.dims();
    let mut shape = [0usize; D];
    shape.copy_from_slice(&dims[1..]);
    t.clone().narrow(0, i, 1).reshape(shape)
}

fn close<B: burn::tensor::backend::Backend, const D: usize>(got: Tensor<B, D>, want: Tensor<B, D>) {
    assert_eq!(got.dims(), want.dims());
    got.into_data()
        .assert_approx_eq::<f32>(&want.into_data(), Tolerance::rel_abs(1e-4, 1e-5));
}

fn deform_options() -> DeformConvOptions<2> {
    DeformConvOptions::new([1, 1], [0, 0], [1, 1], 2, 2)
}

/// x `[N, 4, 6, 6]`, offset `[N, 2*2*9, 4, 4]`, weight `[4, 2, 3, 3]`, mask `[N, 2*9, 4, 4]`,
/// bias `[4]`, weight_groups = offset_groups = 2.
fn deform<B: burn::tensor::backend::Backend>(
    x: Tensor<B, 4>,
    offset: Tensor<B, 4>,
    w: Tensor<B, 4>,
    mask: Tensor<B, 4>,
    bias: Tensor<B, 1>,
) -> Tensor<B, 4> {
    deform_conv2d(x, offset, w, Some(mask), Some(bias), deform_options())
}

#[test]
fn should_batch_deform_conv2d_with_batched_inputs_and_weights() {
    burn_vmap::strict::set_strict(true);
    let e = 3;
    let x = rand([e, 2, 4, 6, 6]);
    let off = rand([e, 2, 36, 4, 4]).mul_scalar(0.7);
    let w = rand([e, 4, 2, 3, 3]);
    let mask = rand([e, 2, 18, 4, 4]).tanh().abs();
    let b = rand([e, 4]);
    let want = |wb: bool| {
        Tensor::stack::<5>(
            (0..e)
                .map(|i| {
                    let (wi, bi) = if wb {
                        (ex(&w, i), ex(&b, i))
                    } else {
                        (ex(&w, 0), ex(&b, 0))
                    };
                    deform(ex(&x, i), ex(&off, i), wi, ex(&mask, i), bi)
                })
                .collect(),
            0,
        )
    };
    // Everything batched: per-example kernels as grouped deformable convolution.
    let got: Tensor<V, 5> = vmap(|(x, o, w, m, b)| deform(x, o, w, m, b))
        .call((x.clone(), off.clone(), w.clone(), mask.clone(), b.clone()))
        .unwrap();
    close(got, want(true));
    // Shared weights: the batch folds into N.
    let got: Tensor<V, 5> = vmap(|(x, o, w, m, b)| deform(x, o, w, m, b))
        .in_axes([Some(0), Some(0), None, Some(0), None])
        .call((
            x.clone(),
            off.clone(),
            ex::<V, 5, 4, _>(&w, 0),
            mask.clone(),
            ex::<V, 2, 1, _>(&b, 0),
        ))
        .unwrap();
    close(got, want(false));
}

#[test]
fn should_give_per_example_gradients_of_deform_conv2d() {
    burn_vmap::strict::set_strict(true);
    let e = 3;
    let param = |t: Tensor<V, 4>| Tensor::<AD, 4>::from_inner(t).require_grad();
    let x0 = param(rand([2, 4, 6, 6]));
    let off = param(rand([2, 36, 4, 4]).mul_scalar(0.7));
    let w = param(rand([4, 2, 3, 3]));
    let mask = param(rand([2, 18, 4, 4]).tanh().abs());
    let b = Tensor::<AD, 1>::from_inner(rand([4])).require_grad();
    let xs = Tensor::<AD, 5>::from_inner(rand([e, 2, 4, 6, 6]));
    // Gradients of every operand of one example, as one tuple.
    let grads = |x: Tensor<AD, 4>| {
        let y = deform(
            x + x0.clone(),
            off.clone(),
            w.clone(),
            mask.clone(),
            b.clone(),
        );
        let g = (y.clone() * y.sin()).sum().backward();
        let lift = |t: Tensor<V, 4>| Tensor::<AD, 4>::from_inner(t);
        (
            lift(x0.grad(&g).unwrap()),
            lift(off.grad(&g).unwrap()),
            lift(w.grad(&g).unwrap()),
            lift(mask.grad(&g).unwrap()),
            Tensor::<AD, 1>::from_inner(b.grad(&g).unwrap()),
        )
    };
    #[allow(clippy::type_complexity)]
    let got: (
        Tensor<AD, 5>,
        Tensor<AD, 5>,
        Tensor<AD, 5>,
        Tensor<AD, 5>,
        Tensor<AD, 2>,
    ) = vmap(grads).call(xs.clone()).unwrap();
    let loop_: Vec<_> = (0..e).map(|i| grads(ex(&xs, i))).collect();
    type Grads = (
        Tensor<AD, 4>,
        Tensor<AD, 4>,
        Tensor<AD, 4>,
        Tensor<AD, 4>,
        Tensor<AD, 1>,
    );
    let stack4 =
        |k: fn(&Grads) -> Tensor<AD, 4>| Tensor::stack::<5>(loop_.iter().map(k).collect(), 0);
    close(got.0, stack4(|t| t.0.clone()));
    close(got.1, stack4(|t| t.1.clone()));
    close(got.2, stack4(|t| t.2.clone()));
    close(got.3, stack4(|t| t.3.clone()));
    close(
        got.4,
        Tensor::stack::<2>(loop_.iter().map(|t| t.4.clone()).collect(), 0),
    );
}

#[test]
fn should_batch_embedding_with_per_example_tables() {
    burn_vmap::strict::set_strict(true);
    let e = 3;
    let device = Default::default();
    let tables = rand([e, 6, 4]);
    let idx = Tensor::<V, 3, Int>::from_ints([[[0, 5, 2]], [[1, 1, 4]], [[3, 0, 5]]], &device);
    let got: Tensor<V, 4> = vmap(|(w, i)| embedding(w, i))
        .call((tables.clone(), idx.clone()))
        .unwrap();
    let want: Vec<Tensor<V, 3>> = (0..e)
        .map(|i| embedding(ex(&tables, i), ex(&idx, i)))
        .collect();
    close(got, Tensor::stack::<4>(want, 0));
    // Batched tables, shared indices.
    let shared: Tensor<V, 2, Int> = ex(&idx, 1);
    let got: Tensor<V, 4> = vmap(|w| embedding(w, shared.clone()))
        .call(tables.clone())
        .unwrap();
    let want: Vec<Tensor<V, 3>> = (0..e)
        .map(|i| embedding(ex(&tables, i), shared.clone()))
        .collect();
    close(got, Tensor::stack::<4>(want, 0));
}

#[test]
fn should_batch_max_pool2d_with_indices() {
    burn_vmap::strict::set_strict(true);
    let e = 3;
    let x = rand([e, 2, 3, 7, 6]);
    let f = |x: Tensor<V, 4>| max_pool2d_with_indices(x, [3, 2], [2, 2], [1, 0], [1, 1], false);
    let (out, idx): (Tensor<V, 5>, Tensor<V, 5, Int>) = vmap(f).call(x.clone()).unwrap();
    let (outs, idxs): (Vec<_>, Vec<_>) = (0..e).map(|i| f(ex(&x, i))).unzip();
    close(out, Tensor::stack::<5>(outs, 0));
    assert_eq!(
        idx.into_data().convert::<i64>(),
        Tensor::stack::<5>(idxs, 0).into_data().convert::<i64>()
    );
}

#[test]
fn should_batch_gather_nd_and_scatter_nd_for_every_operand_mix() {
    burn_vmap::strict::set_strict(true);
    let e = 3;
    let device = Default::default();
    let data = rand([e, 4, 5]);
    // Index tuples of length 1 (rows) and 2 (elements). Example 1 adds to one row twice; Burn
    // 0.21's cubecl `scatter_nd` adds repeated tuples without atomics (an update is lost at
    // random, batched or not), so on those backends its tuples are distinct.
    let twice = if cfg!(any(feature = "wgpu", feature = "cuda")) {
        2
    } else {
        1
    };
    let rows = Tensor::<V, 3, Int>::from_ints([[[3], [0]], [[1], [twice]], [[2], [0]]], &device);
    let elems = Tensor::<V, 3, Int>::from_ints(
        [[[3, 4], [0, 1]], [[1, 0], [2, 2]], [[0, 0], [3, 3]]],
        &device,
    );
    let values = rand([e, 2, 5]);
    let g = |d: Tensor<V, 2>, i: Tensor<V, 2, Int>| -> Tensor<V, 1> { d.gather_nd(i) };
    let s = |d: Tensor<V, 2>, i: Tensor<V, 2, Int>, v: Tensor<V, 2>| -> Tensor<V, 2> {
        d.scatter_nd(i, v, IndexingUpdateOp::Add)
    };
    for (db, ib) in [(true, true), (true, false), (false, true)] {
        let pick_d = |i: usize| ex::<V, 3, 2, _>(&data, if db { i } else { 0 });
        let pick_i = |i: usize| ex::<V, 3, 2, Int>(&elems, if ib { i } else { 0 });
        let want = Tensor::stack::<2>((0..e).map(|i| g(pick_d(i), pick_i(i))).collect(), 0);
        let got: Tensor<V, 2> = match (db, ib) {
            (true, true) => vmap(|(d, i)| g(d, i)).call((data.clone(), elems.clone())),
            (true, false) => vmap(|(d, i)| g(d, i))
                .in_axes([Some(0), None])
                .call((data.clone(), pick_i(0))),
            _ => vmap(|(d, i)| g(d, i))
                .in_axes([None, Some(0)])
                .call((pick_d(0), elems.clone())),
        }
        .unwrap();
        close(got, want);
    }
    for (db, ib, vb) in [
        (true, true, true),
        (true, false, false),
        (false, true, false),
        (false, false, true),
        (false, true, true),
    ] {
        let pick_d = |i: usize| ex::<V, 3, 2, _>(&data, if db { i } else { 0 });
        let pick_i = |i: usize| ex::<V, 3, 2, Int>(&rows, if ib { i } else { 0 });
        let pick_v = |i: usize| ex::<V, 3, 2, _>(&values, if vb { i } else { 0 });
        let want = Tensor::stack::<3>(
            (0..e).map(|i| s(pick_d(i), pick_i(i), pick_v(i))).collect(),
            0,
        );
        let ax = |b: bool| if b { Some(0) } else { None };
        let axes = [ax(db), ax(ib), ax(vb)];
        let f = |(d, i, v)| s(d, i, v);
        let (d, i, v) = (data.clone(), rows.clone(), values.clone());
        let got: Tensor<V, 3> = match (db, ib, vb) {
            (true, true, true) => vmap(f).in_axes(axes).call((d, i, v)),
            (true, false, false) => vmap(f).in_axes(axes).call((d, pick_i(0), pick_v(0))),
            (false, true, false) => vmap(f).in_axes(axes).call((pick_d(0), i, pick_v(0))),
            (false, false, true) => vmap(f).in_axes(axes).call((pick_d(0), pick_i(0), v)),
            _ => vmap(f).in_axes(axes).call((pick_d(0), i, v)),
        }
        .unwrap();
        close(got, want);
    }
}

/// `scatter_nd` with index tuples spanning several dims (`[2, 2, K]`) equals the same tuples in
/// one dim: Burn 0.21's cubecl backends pair multi-dim tuples with the wrong value rows, so
/// `Vmap` always hands the inner op one flat dim of tuples.
#[test]
fn should_scatter_nd_tuples_spanning_several_dims() {
    let device = Default::default();
    let data = Tensor::<V, 1>::from_floats(
        (0..24).map(|i| i as f32).collect::<Vec<_>>().as_slice(),
        &device,
    )
    .reshape([2, 3, 4]);
    let values = Tensor::<V, 1>::from_floats(
        (0..16)
            .map(|i| 100.0 + i as f32)
            .collect::<Vec<_>>()
            .as_slice(),
        &device,
    );
    let grid = Tensor::<V, 3, Int>::from_ints([[[0, 2], [1, 0]], [[0, 0], [1, 2]]], &device);
    let flat = grid.clone().reshape([4, 2]);
    let got = data.clone().scatter_nd(
        grid,
        values.clone().reshape([2, 2, 4]),
        IndexingUpdateOp::Add,
    );
    let want = data
        .clone()
        .scatter_nd(flat, values.clone().reshape([4, 4]), IndexingUpdateOp::Add);
    close(got.clone(), want);
    // Row (0, 2) got values[0..4], row (1, 0) values[4..8], ...
    let rows = got.into_data().to_vec::<f32>().unwrap();
    assert_eq!(&rows[8..12], &[108.0, 110.0, 112.0, 114.0]);
    assert_eq!(&rows[12..16], &[116.0, 118.0, 120.0, 122.0]);
}

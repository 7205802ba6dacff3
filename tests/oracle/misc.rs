//! Edge cases of the law: batch size 0, the recording's trace semantics (value reads),
//! nestings written out, typed errors, dtypes of results, reductions of batched layouts, empty
//! dims, short unfold windows and `scatter_nd` at repeated index tuples, each against the loop
//! (or, where Burn's own op is wrong on a backend, against a loop on the host).

use burn::tensor::{Bool, Device, IndexingUpdateOp, Int, Tensor, TensorData};
use burn_vmap::{VmapError, vmap};

use crate::harness::{Gen, Operand, Rng, T, fl, it, op, quietly};
use crate::host::{Host, TOL};
use crate::run::{LevelCfg, check_levels};

fn dev() -> Device {
    Device::default()
}

fn floats<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

/// Batch size 0: the output has a 0-sized batch axis and the per-example shape.
fn check_empty_batch(
    name: &str,
    operands: &[Operand],
    in_axes: Vec<Option<isize>>,
    f: &dyn Fn(Vec<T>) -> Vec<T>,
) -> Result<(), String> {
    let mut rng = Rng::new(7);
    let example: Vec<Host> = operands
        .iter()
        .map(|o| Host::r#gen(&o.shape, &o.r#gen, &mut rng))
        .collect();
    let out_example: Vec<Host> = f(example.iter().map(Host::to_t).collect())
        .into_iter()
        .map(Host::from_t)
        .collect();
    let levels = [LevelCfg {
        size: 0,
        in_axes,
        out_axes: vec![0; out_example.len()],
    }];
    check_levels(name, f, operands, &levels, &out_example, &mut rng, TOL)
}

/// Runs every case at batch size 0 ([`check_empty_batch`]), and fails with the list of the
/// cases that erred or panicked, under `title`.
fn check_empty_batches(title: &str, cases: Vec<ZeroCase>) {
    let mut failures = Vec::new();
    for (name, operands, in_axes, f) in cases {
        match quietly(|| check_empty_batch(name, &operands, in_axes.clone(), &*f)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(e),
            Err(msg) => failures.push(format!("{name}: panicked: {msg}")),
        }
    }
    assert!(failures.is_empty(), "{title}:\n{}", failures.join("\n"));
}

/// A batch-size-0 case: name, operands, in_axes and the function.
type ZeroCase = (
    &'static str,
    Vec<Operand>,
    Vec<Option<isize>>,
    Box<dyn Fn(Vec<T>) -> Vec<T>>,
);

#[test]
fn batch_size_zero() {
    let cases: Vec<ZeroCase> = vec![
        (
            "exp",
            vec![fl(&[3])],
            vec![Some(0)],
            Box::new(|a| vec![T::from(a[0].f::<1>().exp())]),
        ),
        (
            "exp_axis1",
            vec![fl(&[2, 3])],
            vec![Some(1)],
            Box::new(|a| vec![T::from(a[0].f::<2>().exp())]),
        ),
        (
            "add_batched_unbatched",
            vec![fl(&[3]), fl(&[3])],
            vec![Some(0), None],
            Box::new(|a| vec![T::from(a[0].f::<1>() + a[1].f::<1>())]),
        ),
        (
            "add_both_batched",
            vec![fl(&[3]), fl(&[3])],
            vec![Some(0), Some(-1)],
            Box::new(|a| vec![T::from(a[0].f::<1>() + a[1].f::<1>())]),
        ),
        (
            "int_mul",
            vec![it(&[2, 2]), it(&[2, 2])],
            vec![Some(0), None],
            Box::new(|a| vec![T::from(a[0].i::<2>() * a[1].i::<2>())]),
        ),
        (
            "sum_dim",
            vec![fl(&[2, 3])],
            vec![Some(0)],
            Box::new(|a| vec![T::from(a[0].f::<2>().sum_dim(1))]),
        ),
        (
            "sum",
            vec![fl(&[2, 3])],
            vec![Some(0)],
            Box::new(|a| vec![T::from(a[0].f::<2>().sum())]),
        ),
        (
            "matmul_batched_lhs",
            vec![fl(&[2, 3]), fl(&[3, 4])],
            vec![Some(0), None],
            Box::new(|a| vec![T::from(a[0].f::<2>().matmul(a[1].f::<2>()))]),
        ),
        (
            "gather_batched_indices",
            vec![fl(&[2, 3]), op(&[2, 2], Gen::I(0, 2))],
            vec![None, Some(0)],
            Box::new(|a| vec![T::from(a[0].f::<2>().gather(1, a[1].i::<2>()))]),
        ),
        (
            "comparison",
            vec![fl(&[3])],
            vec![Some(0)],
            Box::new(|a| vec![T::from(a[0].f::<1>().greater_elem(0.0))]),
        ),
    ];
    check_empty_batches("batch size 0 failures", cases);
}

/// Module ops fold the vmap batch into their `N` (`[b.., N, ..] -> [b*N, ..]`); with no
/// example the folded dim is 0 whatever `N`, so the per-example `N` is carried beside it
/// (`rules::module::Fold`), never divided back out.
#[test]
fn module_ops_at_batch_size_zero() {
    use burn::tensor::module::{
        adaptive_avg_pool2d, attention, conv_transpose2d, conv2d, deform_conv2d, max_pool2d,
    };
    use burn::tensor::ops::{
        AttentionModuleOptions, ConvOptions, ConvTransposeOptions, DeformConvOptions,
        MaxPoolOptions,
    };
    let cases: Vec<ZeroCase> = vec![
        (
            "conv2d",
            vec![fl(&[1, 2, 4, 4]), fl(&[3, 2, 2, 2])],
            vec![Some(0), None],
            Box::new(|a| {
                let o = ConvOptions::new([1, 1], [0, 0], [1, 1], 1);
                vec![T::from(conv2d(a[0].f::<4>(), a[1].f::<4>(), None, o))]
            }),
        ),
        (
            "conv2d, per-example weights",
            vec![fl(&[1, 2, 4, 4]), fl(&[3, 2, 2, 2])],
            vec![Some(0), Some(0)],
            Box::new(|a| {
                let o = ConvOptions::new([1, 1], [0, 0], [1, 1], 1);
                vec![T::from(conv2d(a[0].f::<4>(), a[1].f::<4>(), None, o))]
            }),
        ),
        (
            "conv2d, shared input, per-example weights and bias",
            vec![fl(&[1, 2, 4, 4]), fl(&[4, 1, 2, 2]), fl(&[4])],
            vec![None, Some(0), Some(0)],
            Box::new(|a| {
                let o = ConvOptions::new([1, 1], [0, 0], [1, 1], 2);
                let bias = Some(a[2].f::<1>());
                vec![T::from(conv2d(a[0].f::<4>(), a[1].f::<4>(), bias, o))]
            }),
        ),
        (
            "conv_transpose2d, per-example weights",
            vec![fl(&[1, 2, 3, 3]), fl(&[2, 3, 2, 2])],
            vec![Some(0), Some(0)],
            Box::new(|a| {
                let o = ConvTransposeOptions::new([2, 2], [0, 0], [0, 0], [1, 1], 1);
                vec![T::from(conv_transpose2d(
                    a[0].f::<4>(),
                    a[1].f::<4>(),
                    None,
                    o,
                ))]
            }),
        ),
        (
            "deform_conv2d, per-example weights",
            vec![fl(&[1, 2, 4, 4]), fl(&[1, 8, 3, 3]), fl(&[3, 2, 2, 2])],
            vec![Some(0), None, Some(0)],
            Box::new(|a| {
                let o = DeformConvOptions::new([1, 1], [0, 0], [1, 1], 1, 1);
                let (x, offset, w) = (a[0].f::<4>(), a[1].f::<4>(), a[2].f::<4>());
                vec![T::from(deform_conv2d(x, offset, w, None, None, o))]
            }),
        ),
        (
            "adaptive_avg_pool2d",
            vec![fl(&[2, 3, 4, 4])],
            vec![Some(0)],
            Box::new(|a| vec![T::from(adaptive_avg_pool2d(a[0].f::<4>(), [2, 2]))]),
        ),
        (
            "max_pool2d",
            vec![fl(&[2, 3, 4, 4])],
            vec![Some(0)],
            Box::new(|a| {
                vec![T::from(max_pool2d(
                    a[0].f::<4>(),
                    MaxPoolOptions::new([2, 2]),
                ))]
            }),
        ),
        (
            "attention",
            vec![fl(&[2, 2, 3, 4]), fl(&[2, 2, 5, 4]), fl(&[2, 2, 5, 4])],
            vec![Some(0), None, Some(0)],
            Box::new(|a| {
                let o = AttentionModuleOptions::default();
                vec![T::from(attention(
                    a[0].f::<4>(),
                    a[1].f::<4>(),
                    a[2].f::<4>(),
                    None,
                    None,
                    o,
                ))]
            }),
        ),
    ];
    check_empty_batches("module ops at batch size 0", cases);
}

/// A recorded function cannot read values: reading a tensor it computed, of any kind, is
/// `VmapError::ValueRead`; so is `one_hot`, which validates its input on the host.
#[test]
fn reading_values_inside_the_recording_is_a_typed_error() {
    let xs = Tensor::<2>::from_floats([[1.0, 2.0], [3.0, 4.0]], &dev());
    let is = Tensor::<2, Int>::from_ints([[1, 2], [3, 0]], &dev());
    let errors: Vec<(&str, VmapError)> = vec![
        (
            "float",
            vmap(|x: Tensor<1>| {
                let _ = x.clone().exp().into_data();
                x
            })
            .call(xs.clone())
            .unwrap_err(),
        ),
        (
            "int",
            vmap(|i: Tensor<1, Int>| {
                let _ = (i.clone() + 1).into_data();
                i
            })
            .call(is.clone())
            .unwrap_err(),
        ),
        (
            "bool",
            vmap(|x: Tensor<1>| {
                let _ = x.clone().greater_elem(1.5).into_data();
                x
            })
            .call(xs)
            .unwrap_err(),
        ),
        (
            "one_hot",
            vmap(|i: Tensor<1, Int>| i.one_hot::<2>(4).float())
                .call(is)
                .unwrap_err(),
        ),
    ];
    for (what, err) in errors {
        assert!(matches!(err, VmapError::ValueRead { .. }), "{what}: {err}");
    }
}

/// Reading an argument itself (not a tensor computed from it) is `ValueRead` too: the function
/// gets views of the recorded inputs, which hold no value (were it the placeholders' data, the
/// read would silently see zeros, and `argwhere` of a mapped mask would return nothing).
#[test]
fn reading_an_argument_inside_the_recording_is_a_typed_error() {
    let xs = Tensor::<2>::from_floats([[1.0, 2.0], [3.0, 4.0]], &dev());
    let err = vmap(|x: Tensor<1>| {
        let seen: Vec<f32> = x.clone().into_data().try_to_vec().unwrap();
        x * seen[0]
    })
    .call(xs)
    .unwrap_err();
    assert!(matches!(err, VmapError::ValueRead { .. }), "{err}");
    // `argwhere` reads its argument to size its result: it sees the zeros and returns no row
    // for every example, where the loop finds [[0], [2]] and [[1], [2]].
    let ms = Tensor::<2, Bool>::from_data(
        TensorData::from([[true, false, true], [false, true, true]]),
        &dev(),
    );
    let err = vmap(|m: Tensor<1, Bool>| m.argwhere())
        .call_as::<_, _, _, Tensor<3, Int>>(ms)
        .unwrap_err();
    assert!(matches!(err, VmapError::ValueRead { .. }), "{err}");
}

/// The nestings written out: outer maps `a`, inner maps `b` (different levels); and both
/// levels on the same operand, the inner on axis -1, transposed by `out_axes`.
#[test]
fn explicit_nested_levels() {
    let a = Tensor::<2>::from_floats([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], &dev());
    let b = Tensor::<2>::from_floats(
        [
            [1.0, 0.0, -1.0],
            [0.5, 0.5, 0.5],
            [2.0, 2.0, 2.0],
            [0.0, 1.0, 0.0],
        ],
        &dev(),
    );
    let out: Tensor<3> = vmap(|(a, b): (Tensor<1>, Tensor<2>)| -> Tensor<2> {
        vmap(|(a, b): (Tensor<1>, Tensor<1>)| (a * b).sum())
            .in_axes([None, Some(0)])
            .call((a, b))
            .unwrap()
    })
    .in_axes([Some(0), None])
    .call((a.clone(), b.clone()))
    .unwrap();
    let expected = a.clone().matmul(b.transpose()).reshape([2, 4, 1]);
    let close = |x: Vec<f32>, y: Vec<f32>| x.iter().zip(&y).all(|(p, q)| (p - q).abs() < 1e-5);
    assert!(close(floats(out), floats(expected)));

    let out: Tensor<2> = vmap(|row: Tensor<1>| -> Tensor<1> {
        vmap(|x: Tensor<0>| x.exp())
            .in_axes(-1isize)
            .call(row)
            .unwrap()
    })
    .out_axes(1isize)
    .call(a.clone())
    .unwrap();
    assert!(close(floats(out), floats(a.exp().transpose())));
}

#[test]
fn errors_name_the_mistake() {
    let a = Tensor::<2>::zeros([2, 3], &dev());
    let err = vmap(|a: Tensor<2>| a)
        .in_axes(Option::<isize>::None)
        .call_as::<_, _, _, Tensor<2>>(a.clone())
        .unwrap_err();
    assert!(
        matches!(err, VmapError::NothingMapped { transform: "vmap" }),
        "{err}"
    );
    let err = vmap(|a: Tensor<1>| a)
        .out_axes(3)
        .call(a.clone())
        .unwrap_err();
    assert!(matches!(err, VmapError::AxisOutOfRange { .. }), "{err}");
    // The function's argument type does not fit the mapped arguments.
    let err = vmap(|a: Tensor<2>| a)
        .call_as::<_, _, _, Tensor<3>>(a)
        .unwrap_err();
    assert!(matches!(err, VmapError::LeafMismatch { .. }), "{err}");
}

/// Results have the dtypes the loop gives on the user's device: tensors the recorded
/// function creates (an `arange`, a mask, an `argmax`) take the device's default dtypes and
/// combine with the arguments.
#[test]
fn created_tensors_take_the_users_device_dtypes() {
    let xs = Tensor::<2>::from_floats([[1.0, 3.0, 2.0], [0.0, -1.0, 5.0]], &dev());
    let is = Tensor::<2, Int>::from_ints([[1, 2, 3], [4, 5, 6]], &dev());
    let ms = Tensor::<2, Bool>::from_data(TensorData::from([[true, false, true]; 2]), &dev());
    let f = |(x, i, m): (Tensor<1>, Tensor<1, Int>, Tensor<1, Bool>)| {
        let r = Tensor::<1, Int>::arange(0..3, &i.device());
        let mask = x.clone().greater_elem(0.5).bool_and(m);
        (x.argmax(0) + i.clone().narrow(0, 0, 1), r + i, mask)
    };
    let (a, r, mask): (Tensor<2, Int>, Tensor<2, Int>, Tensor<2, Bool>) =
        vmap(f).call((xs.clone(), is.clone(), ms.clone())).unwrap();
    let (la, lr, lm) = f((
        xs.narrow(0, 1, 1).reshape([3]),
        is.narrow(0, 1, 1).reshape([3]),
        ms.narrow(0, 1, 1).reshape([3]),
    ));
    assert_eq!(a.dtype(), la.dtype());
    assert_eq!(r.dtype(), lr.dtype());
    assert_eq!(mask.dtype(), lm.dtype());
    let ints = |t: Tensor<2, Int>| t.into_data().convert::<i64>().try_to_vec::<i64>().unwrap();
    assert_eq!(ints(a), vec![2, 6]);
    assert_eq!(ints(r), vec![1, 3, 5, 4, 6, 8]);
}

/// Every reduced dim of every mapped axis, of a batched view with two dims swapped, against
/// the loop.
#[test]
fn reductions_of_batched_permuted_layouts_match_the_loop() {
    let values: Vec<f32> = (0..72).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    let xs = Tensor::<1>::from_floats(values.as_slice(), &dev()).reshape([4, 6, 3]);
    for axis in 0..3usize {
        for dim in 0..3usize {
            let f = |x: Tensor<2>| {
                let y = x.swap_dims(0, 1).unsqueeze_dim::<3>(0);
                (y.clone().sum_dim(dim), y.max_dim(dim))
            };
            let (sums, maxes): (Tensor<4>, Tensor<4>) =
                vmap(f).in_axes(axis as i32).call(xs.clone()).unwrap();
            let (mut ls, mut lm) = (Vec::new(), Vec::new());
            for i in 0..xs.dims()[axis] {
                let (s, m) = f(xs.clone().narrow(axis, i, 1).squeeze_dim(axis));
                ls.push(s);
                lm.push(m);
            }
            assert_eq!(
                floats(sums),
                floats(Tensor::stack::<4>(ls, 0)),
                "sum: axis {axis}, dim {dim}"
            );
            assert_eq!(
                floats(maxes),
                floats(Tensor::stack::<4>(lm, 0)),
                "max: axis {axis}, dim {dim}"
            );
        }
    }
}

/// Sums, products and means over an empty dim have their identity (0, 1, NaN) under vmap too.
#[test]
fn reductions_over_empty_dims_have_their_identity() {
    let xs = Tensor::<3>::zeros([2, 0, 3], &dev());
    let (sums, totals, means): (Tensor<3>, Tensor<2>, Tensor<3>) =
        vmap(|x: Tensor<2>| (x.clone().sum_dim(0), x.clone().sum(), x.mean_dim(0)))
            .call(xs)
            .unwrap();
    assert_eq!(sums.dims(), [2, 1, 3]);
    assert_eq!(floats(sums), vec![0.0; 6]);
    assert_eq!(floats(totals), vec![0.0; 2]);
    assert!(floats(means).iter().all(|m| m.is_nan()));
    let ns = Tensor::<3, Int>::zeros([2, 3, 0], &dev());
    let prods: Tensor<3, Int> = vmap(|n: Tensor<2, Int>| n.prod_dim(1)).call(ns).unwrap();
    assert_eq!(
        prods
            .into_data()
            .convert::<i64>()
            .try_to_vec::<i64>()
            .unwrap(),
        vec![1; 6]
    );
}

/// `unfold` to a single window shorter than its dim, of every kind, batched, against the
/// windows read on the host.
#[test]
fn unfold_to_a_single_short_window() {
    let rows = [[1.0f32, 0.0, 3.0], [0.0, 0.0, 6.0]];
    let x = Tensor::<2>::from_data(TensorData::new(rows.concat(), [2, 3]), &dev());
    for (size, step) in [(2, 2), (2, 3), (1, 3)] {
        let want: Vec<f32> = rows.iter().flat_map(|r| r[..size].to_vec()).collect();
        let read = |t: Tensor<3>| floats(t);
        let mapped: Tensor<3> = vmap(|r: Tensor<1>| r.unfold::<2, usize>(0, size, step))
            .call(x.clone())
            .unwrap();
        assert_eq!(read(mapped), want, "float, size {size}, step {step}");
        let ints: Tensor<3, Int> = vmap(|r: Tensor<1, Int>| r.unfold::<2, usize>(0, size, step))
            .call(x.clone().int())
            .unwrap();
        assert_eq!(read(ints.float()), want, "int, size {size}, step {step}");
        let bools: Tensor<3, Bool> = vmap(|r: Tensor<1, Bool>| r.unfold::<2, usize>(0, size, step))
            .call(x.clone().bool())
            .unwrap();
        let nonzero: Vec<f32> = want.iter().map(|v| f32::from(*v != 0.0)).collect();
        assert_eq!(
            read(bools.float()),
            nonzero,
            "bool, size {size}, step {step}"
        );
    }
}

/// `scatter_nd` with `Add` at index tuples repeated many times adds every update of every
/// example, batched or not (the loop on the host). On cubecl this checks `compat::scatter_nd`:
/// Burn 0.22.1's own cubecl kernel loses updates at a repeated tuple, so the loop oracle's
/// reference is wrong there and skips these cases (`CUBECL_SKIPS`).
#[test]
fn scatter_nd_adds_every_update_at_a_repeated_tuple() {
    let (b, m, len) = (3usize, 48usize, 2usize);
    // Tuples into `[2, 3]`: three in four at `(1, 2)`, the others spread over row 0.
    let tuples: Vec<[usize; 2]> = (0..m)
        .map(|u| if u % 4 == 0 { [0, u % 3] } else { [1, 2] })
        .collect();
    let flat: Vec<i64> = tuples.iter().flatten().map(|&i| i as i64).collect();
    let values: Vec<f32> = (0..b * m * len).map(|i| (i % 7) as f32).collect();
    let mut want = vec![0f32; b * 2 * 3 * len];
    for e in 0..b {
        for (u, [r, c]) in tuples.iter().enumerate() {
            for l in 0..len {
                want[((e * 2 + r) * 3 + c) * len + l] += values[(e * m + u) * len + l];
            }
        }
    }
    let d = dev();
    let idx = Tensor::<2, Int>::from_data(TensorData::new(flat, [m, 2]), &d);
    let vals = Tensor::<3>::from_data(TensorData::new(values, [b, m, len]), &d);
    let zeros = Tensor::<3>::zeros([2, 3, len], &d);
    let batched: Tensor<4> = vmap(|(x, i, v): (Tensor<3>, Tensor<2, Int>, Tensor<2>)| {
        x.scatter_nd(i, v, IndexingUpdateOp::Add)
    })
    .in_axes([None, None, Some(0)])
    .call((zeros.clone(), idx.clone(), vals.clone()))
    .unwrap();
    assert_eq!(floats(batched), want, "float, batched values");
    let ints: Tensor<4, Int> = vmap(
        |(x, i, v): (Tensor<3, Int>, Tensor<2, Int>, Tensor<2, Int>)| {
            x.scatter_nd(i, v, IndexingUpdateOp::Add)
        },
    )
    .in_axes([None, None, Some(0)])
    .call((zeros.clone().int(), idx.clone(), vals.clone().int()))
    .unwrap();
    assert_eq!(floats(ints.float()), want, "int, batched values");
    // Unbatched operands inside a mapped function (the engine's unbatched path).
    let first = vals.narrow(0, 0, 1).squeeze_dim::<2>(0);
    let inner: Tensor<4> = vmap(
        |(x, z, i, v): (Tensor<3>, Tensor<3>, Tensor<2, Int>, Tensor<2>)| {
            x + z.scatter_nd(i, v, IndexingUpdateOp::Add)
        },
    )
    .in_axes([Some(0), None, None, None])
    .call((Tensor::<4>::zeros([b, 2, 3, len], &d), zeros, idx, first))
    .unwrap();
    let per_example = &want[..2 * 3 * len];
    assert_eq!(
        floats(inner),
        per_example.repeat(b),
        "float, unbatched operands"
    );
}

/// Reductions inside two nested `vmap`s, called from an outer `vmap` that does not map their
/// operand, against the same nesting called directly. The outer recording holds the inner
/// levels' physical ops (a permuted view, reduced along its last dim), recorded on the capture
/// backend, and replays them unbatched: on wgpu they once skipped the layout cubecl's
/// reductions need and took each row's last element (`rules::reduce::reduce_dim`).
#[test]
fn reductions_inside_nested_levels_under_an_outer_level() {
    let d = dev();
    // Row maxima away from the last column, so taking the last element shows.
    let values = vec![1.0f32, -1.0, 1.8, -0.4, 1.04, 0.09, 0.22, 0.83];
    let x = Tensor::<4>::from_data(TensorData::new(values, [2, 2, 2, 1]), &d);
    let other = Tensor::<2>::zeros([3, 2], &d);
    type Reduce = fn(Tensor<2>) -> Tensor<2>;
    let reductions: [(&str, Reduce); 3] = [
        ("max_dim", |x| x.max_dim(1)),
        ("sum_dim", |x| x.sum_dim(1)),
        ("sum", |x| x.sum().reshape([1, 1])),
    ];
    for (name, reduce) in reductions {
        // Levels 1 and 2 map `x` on its last axis (sizes 1 and 2).
        let nested = |x: Tensor<4>| -> Tensor<4> {
            vmap(|x: Tensor<3>| -> Tensor<3> { vmap(reduce).in_axes(-1isize).call(x).unwrap() })
                .in_axes(-1isize)
                .call(x)
                .unwrap()
        };
        let direct = floats(nested(x.clone()));
        if name == "max_dim" {
            assert_eq!(
                direct,
                vec![1.8, 1.04, -0.4, 0.83],
                "{name}, no outer level"
            );
        }
        let outer: Tensor<5> = vmap(|(x, _): (Tensor<4>, Tensor<1>)| nested(x))
            .in_axes([None, Some(0)])
            .call((x.clone(), other.clone()))
            .unwrap();
        assert_eq!(floats(outer), direct.repeat(3), "{name}");
    }
}

/// A convolution's input patches read through `unfold` views (the direct route of the factored
/// conv weight gradient, `rules::factored::layers::unfold`) with one window shorter than its dim
/// along both spatial dims: batched, unbatched inside a level (the route of a recording
/// replayed under a level that does not map it) and nested, against the patches read on the
/// host. On Burn 0.22.1's cubecl backends the raw composition reads the wrong rows (the second
/// window row from the contiguous offset); the engine's `unfold` rule goes through
/// `compat::unfold` on every route, batched or not.
#[test]
fn conv_patches_with_one_short_window_per_spatial_dim() {
    let (c, h, w, k, s) = (2usize, 4usize, 7usize, [3usize, 2usize], [2usize, 6usize]);
    let (b, width) = (3usize, c * k[0] * k[1]);
    let data: Vec<f32> = (0..b * c * h * w).map(|i| i as f32).collect();
    // One window per spatial dim: the patch is the top-left `k` window of every channel.
    let want: Vec<f32> = (0..b)
        .flat_map(|e| {
            let data = &data;
            (0..c).flat_map(move |ch| {
                (0..k[0]).flat_map(move |a| {
                    (0..k[1]).map(move |bb| data[((e * c + ch) * h + a) * w + bb])
                })
            })
        })
        .collect();
    let patches = move |x: Tensor<3>| -> Tensor<2> {
        let x: Tensor<4> = x.unsqueeze();
        let blocks = x
            .unfold::<5, usize>(2, k[0], s[0])
            .unfold::<6, usize>(3, k[1], s[1]);
        blocks.permute([0, 2, 3, 1, 4, 5]).reshape([1, width])
    };
    let d = dev();
    let xs = Tensor::<4>::from_data(TensorData::new(data.clone(), [b, c, h, w]), &d);
    let batched: Tensor<3> = vmap(patches).call(xs.clone()).unwrap();
    assert_eq!(floats(batched), want, "batched");
    let ones = Tensor::<1>::ones([b], &d);
    for e in 0..b {
        let x = xs.clone().narrow(0, e, 1).squeeze::<3>();
        let unbatched: Tensor<3> =
            vmap(|(x, one): (Tensor<3>, Tensor<1>)| patches(x) * one.unsqueeze())
                .in_axes([None, Some(0)])
                .call((x, ones.clone().unsqueeze_dim::<2>(1)))
                .unwrap();
        let row = &want[e * width..(e + 1) * width];
        assert_eq!(
            floats(unbatched),
            row.repeat(b),
            "unbatched in a level, example {e}"
        );
    }
    let nested: Tensor<4> = vmap(|x: Tensor<3>| {
        let ones = Tensor::<2>::ones([2, 1], &x.device());
        vmap(|(x, one): (Tensor<3>, Tensor<1>)| patches(x) * one.unsqueeze())
            .in_axes([None, Some(0)])
            .call((x, ones))
            .unwrap()
    })
    .call(xs)
    .unwrap();
    let twice: Vec<f32> = want.chunks(width).flat_map(|row| row.repeat(2)).collect();
    assert_eq!(
        floats(nested),
        twice,
        "nested, not mapped by the inner level"
    );
}

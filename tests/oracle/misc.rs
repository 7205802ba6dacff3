//! Edge cases of the oracle: batch size 0, reading data inside `vmap`, explicit nestings.

use burn::tensor::{Int, Tensor, TensorData};
use burn_vmap::{Vmap, VmapError, vmap};

use crate::harness::{Host, LevelCfg, Operand, Rng, T, TOL, V, check_levels, fl, it, quietly};

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

/// A batch-size-0 case: name, operands, in_axes and the function.
type ZeroCase = (
    &'static str,
    Vec<Operand>,
    Vec<Option<isize>>,
    Box<dyn Fn(Vec<T>) -> Vec<T>>,
);

#[test]
fn batch_size_zero() {
    let mut failures = Vec::new();
    let cases: Vec<ZeroCase> = vec![
        (
            "exp",
            vec![fl(&[3])],
            vec![Some(0)],
            Box::new(|a: Vec<T>| vec![T::from(a[0].f::<1>().exp())]),
        ),
        (
            "exp_axis1",
            vec![fl(&[2, 3])],
            vec![Some(1)],
            Box::new(|a: Vec<T>| vec![T::from(a[0].f::<2>().exp())]),
        ),
        (
            "add_batched_unbatched",
            vec![fl(&[3]), fl(&[3])],
            vec![Some(0), None],
            Box::new(|a: Vec<T>| vec![T::from(a[0].f::<1>() + a[1].f::<1>())]),
        ),
        (
            "add_both_batched",
            vec![fl(&[3]), fl(&[3])],
            vec![Some(0), Some(-1)],
            Box::new(|a: Vec<T>| vec![T::from(a[0].f::<1>() + a[1].f::<1>())]),
        ),
        (
            "int_mul",
            vec![it(&[2, 2]), it(&[2, 2])],
            vec![Some(0), None],
            Box::new(|a: Vec<T>| vec![T::from(a[0].i::<2>() * a[1].i::<2>())]),
        ),
        (
            "sum_dim",
            vec![fl(&[2, 3])],
            vec![Some(0)],
            Box::new(|a: Vec<T>| vec![T::from(a[0].f::<2>().sum_dim(1))]),
        ),
        (
            "sum",
            vec![fl(&[2, 3])],
            vec![Some(0)],
            Box::new(|a: Vec<T>| vec![T::from(a[0].f::<2>().sum())]),
        ),
        (
            "matmul_batched_lhs",
            vec![fl(&[2, 3]), fl(&[3, 4])],
            vec![Some(0), None],
            Box::new(|a: Vec<T>| vec![T::from(a[0].f::<2>().matmul(a[1].f::<2>()))]),
        ),
        (
            "matmul_outer_product",
            vec![fl(&[3, 1]), fl(&[1, 2])],
            vec![Some(0), None],
            Box::new(|a: Vec<T>| vec![T::from(a[0].f::<2>().matmul(a[1].f::<2>()))]),
        ),
        (
            "gather_batched_indices",
            vec![
                fl(&[2, 3]),
                Operand {
                    shape: vec![2, 2],
                    r#gen: crate::harness::Gen::I(0, 2),
                },
            ],
            vec![None, Some(0)],
            Box::new(|a: Vec<T>| vec![T::from(a[0].f::<2>().gather(1, a[1].i::<2>()))]),
        ),
        (
            "comparison",
            vec![fl(&[3])],
            vec![Some(0)],
            Box::new(|a: Vec<T>| vec![T::from(a[0].f::<1>().greater_elem(0.0))]),
        ),
    ];
    for (name, operands, in_axes, f) in cases {
        match quietly(|| check_empty_batch(name, &operands, in_axes.clone(), &*f)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(e),
            Err(msg) => failures.push(format!("{name}: panicked: {msg}")),
        }
    }
    assert!(
        failures.is_empty(),
        "batch size 0 failures:\n{}",
        failures.join("\n")
    );
}

#[test]
fn reading_a_batched_tensor_inside_vmap_panics_with_a_clear_message() {
    let device = Default::default();
    let xs = Tensor::<V, 2>::from_floats([[1.0, 2.0], [3.0, 4.0]], &device);
    let msg = quietly(|| {
        let _: Tensor<V, 2> = vmap(|v: Tensor<V, 1>| {
            let _ = v.clone().into_data();
            v
        })
        .call(xs)
        .unwrap();
    })
    .expect_err("reading a batched tensor inside vmap must panic");
    assert!(msg.contains("cannot read back a tensor batched"), "{msg}");

    // Int and bool too.
    let is = Tensor::<V, 2, Int>::from_ints([[1, 2], [3, 4]], &device);
    let msg = quietly(|| {
        let _: Tensor<V, 2, Int> = vmap(|v: Tensor<V, 1, Int>| {
            let _ = v.clone().greater_elem(2).into_data();
            v
        })
        .call(is)
        .unwrap();
    })
    .expect_err("reading a batched bool tensor inside vmap must panic");
    assert!(msg.contains("bool_into_data"), "{msg}");
}

#[test]
fn reading_an_unbatched_tensor_inside_vmap_works() {
    let device = Default::default();
    let xs = Tensor::<V, 2>::from_floats([[1.0, 2.0], [3.0, 4.0]], &device);
    let w = Tensor::<V, 1>::from_floats([10.0, 20.0], &device);
    let out: Tensor<V, 2> = vmap(|v: Tensor<V, 1>| {
        let data = (w.clone() * 2.0).into_data(); // unbatched: readable
        v + Tensor::<V, 1>::from_data(data, &Default::default())
    })
    .call(xs)
    .unwrap();
    out.into_data()
        .assert_eq(&TensorData::from([[21.0f32, 42.0], [23.0, 44.0]]), false);
}

/// The nestings of the brief, spelled out: outer maps `a`, inner maps `b` (different levels);
/// and both levels on the same operand.
#[test]
fn explicit_nested_levels() {
    let device = Default::default();
    let a = Tensor::<V, 2>::from_floats([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], &device); // [2, 3]
    let b = Tensor::<V, 2>::from_floats(
        [
            [1.0, 0.0, -1.0],
            [0.5, 0.5, 0.5],
            [2.0, 2.0, 2.0],
            [0.0, 1.0, 0.0],
        ],
        &device,
    ); // [4, 3]

    // out[i, j, 0] = sum(a[i] * b[j])
    let out: Tensor<V, 3> = vmap(|(a, b): (Tensor<V, 1>, Tensor<V, 2>)| -> Tensor<V, 2> {
        vmap(|(a, b): (Tensor<V, 1>, Tensor<V, 1>)| (a * b).sum())
            .in_axes([None, Some(0)])
            .call((a, b))
            .unwrap()
    })
    .in_axes([Some(0), None])
    .call((a.clone(), b.clone()))
    .unwrap();
    let expected = a.clone().matmul(b.clone().transpose()).reshape([2, 4, 1]);
    out.into_data()
        .assert_approx_eq::<f32>(&expected.into_data(), burn::tensor::Tolerance::default());

    // Both levels on the same operand, the inner on axis -1: out[i, j] = exp(a[i, j]), transposed by out_axes.
    let out: Tensor<V, 2> = vmap(|row: Tensor<V, 1>| -> Tensor<V, 1> {
        vmap(|x: Tensor<V, 0>| x.exp())
            .in_axes(-1isize)
            .call(row)
            .unwrap()
    })
    .out_axes(1isize)
    .call(a.clone())
    .unwrap();
    out.into_data().assert_approx_eq::<f32>(
        &a.exp().transpose().into_data(),
        burn::tensor::Tolerance::default(),
    );
}

#[test]
fn vmap_errors_name_the_argument() {
    let device = Default::default();
    let a = Tensor::<V, 2>::zeros([2, 3], &device);
    let b = Tensor::<V, 2>::zeros([3, 3], &device);
    let f = |(a, b): (Tensor<V, 1>, Tensor<V, 1>)| a + b;
    let err = vmap(f)
        .call_as::<_, _, _, _, _, Tensor<V, 2>>((a.clone(), b))
        .unwrap_err();
    assert!(
        matches!(err, VmapError::InconsistentBatchSizes { .. }),
        "{err}"
    );
    let err = vmap(|a: Tensor<V, 1>| a)
        .in_axes(2isize)
        .call_as::<_, _, _, _, _, Tensor<V, 2>>(a.clone())
        .unwrap_err();
    assert!(matches!(err, VmapError::AxisOutOfRange { .. }), "{err}");
    let err = vmap(|a: Tensor<V, 2>| a)
        .in_axes(Option::<isize>::None)
        .call_as::<_, _, _, _, _, Tensor<V, 2>>(a)
        .unwrap_err();
    assert!(matches!(err, VmapError::NothingMapped), "{err}");
    let _ = Vmap::<burn_vmap::testing::TestBackend>::default();
}

/// The oracle's loop runs on `Vmap<TestBackend>` with unbatched tensors (the pass-through path).
/// Check that path against `TestBackend` itself, so a forwarding bug cannot hide in both sides.
fn pass_through_sample<B: burn::tensor::backend::Backend>(device: &B::Device) -> Vec<TensorData> {
    use burn::tensor::{Bool, ElementConversion, IndexingUpdateOp};
    let x = Tensor::<B, 2>::from_floats([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], device);
    let y = Tensor::<B, 2>::from_floats([[1.0, 2.0, -3.0], [0.5, -0.5, 4.0]], device);
    let i = Tensor::<B, 2, Int>::from_ints([[2, 0, 1], [1, 1, 0]], device);
    let s = Tensor::<B, 1, Int>::from_ints([1, 0, 1], device);
    let m = Tensor::<B, 2, Bool>::from_bool(
        TensorData::from([[true, false, true], [false, false, true]]),
        device,
    );
    let xi = Tensor::<B, 2, Int>::from_ints([[5, -3, 7], [2, 0, -8]], device);
    vec![
        (x.clone() + y.clone() * 2.0 - y.clone() / 3.0).into_data(),
        x.clone()
            .remainder(y.clone())
            .powf(y.clone().abs())
            .into_data(),
        x.clone().matmul(y.clone().transpose()).into_data(),
        x.clone().gather(1, i.clone()).into_data(),
        x.clone().select(1, s.clone()).into_data(),
        x.clone()
            .scatter(1, i.clone(), y.clone(), IndexingUpdateOp::Add)
            .into_data(),
        x.clone()
            .select_assign(1, s.clone(), y.clone(), IndexingUpdateOp::Add)
            .into_data(),
        x.clone()
            .slice_assign([0..1, 1..3], y.clone().slice([1..2, 0..2]))
            .into_data(),
        x.clone()
            .mask_where(m.clone(), y.clone())
            .mask_fill(m.clone().bool_not(), 9.0)
            .into_data(),
        x.clone().cumsum(1).cummax(0).exp().log().sqrt().into_data(),
        x.clone().argmax(1).into_data(),
        x.clone().greater(y.clone()).bool_and(m.clone()).into_data(),
        x.clone()
            .swap_dims(0, 1)
            .flip([0])
            .reshape([3, 2])
            .sum_dim(1)
            .into_data(),
        x.clone().unfold::<3, usize>(1, 2, 1).into_data(),
        x.clone().expand([4, 2, 3]).into_data(),
        xi.clone()
            .bitwise_xor(i.clone())
            .bitwise_left_shift_scalar(1i32.elem())
            .into_data(),
        (xi.clone() / 3 + xi.clone().remainder_scalar(3))
            .prod_dim(1)
            .into_data(),
        xi.clone().matmul(i.clone().transpose()).into_data(),
        m.clone().int().float().into_data(),
        x.clone().int().into_data(),
        x.sort(1).into_data(),
    ]
}

#[test]
fn pass_through_matches_inner_backend() {
    let device = Default::default();
    let via_vmap = pass_through_sample::<V>(&device);
    let direct = pass_through_sample::<burn_vmap::testing::TestBackend>(&device);
    for (k, (a, b)) in via_vmap.iter().zip(&direct).enumerate() {
        assert_eq!(a.shape, b.shape, "sample {k}: shape");
        assert_eq!(a.dtype, b.dtype, "sample {k}: dtype");
        assert_eq!(
            a.as_bytes(),
            b.as_bytes(),
            "sample {k}: values differ between Vmap<B> (unbatched) and B"
        );
    }
}

/// Burn 0.21's cubecl backends (wgpu, CUDA) compute wrong strides when a non-contiguous tensor
/// ending in size-1 dims is reshaped to a higher rank (`burn_std::split_strides`); batching
/// rules make such tensors constantly. `Vmap` routes every inner reshape around it.
#[test]
fn reshapes_of_permuted_tensors_ending_in_unit_dims() {
    let device = Default::default();
    let x = || Tensor::<V, 1>::from_floats([1., 2., 3., 4., 5., 6.], &device).reshape([1, 1, 2, 3]);
    let expected = vec![1., 4., 2., 5., 3., 6.];
    // Inserting a unit dim, and a reshape that also splits a dim.
    let inserted: Tensor<V, 5> = x().permute([3, 2, 0, 1]).reshape([3, 2, 1, 1, 1]);
    assert_eq!(inserted.into_data().to_vec::<f32>().unwrap(), expected);
    let split: Tensor<V, 5> = x().permute([3, 2, 0, 1]).reshape([3, 1, 2, 1, 1]);
    assert_eq!(split.into_data().to_vec::<f32>().unwrap(), expected);
    let merged: Tensor<V, 3> = x().permute([3, 2, 0, 1]).reshape([6, 1, 1]);
    assert_eq!(merged.into_data().to_vec::<f32>().unwrap(), expected);
    // The same moves under vmap: the batch dim moved to the front, then a level aligned.
    let xs = Tensor::<V, 1>::from_floats([1., 2., 3., 4., 5., 6.], &device).reshape([2, 3, 1]);
    let ys: Tensor<V, 4> = vmap(|x: Tensor<V, 2>| x.reshape([1, 3, 1]))
        .in_axes(1)
        .call(xs.clone().swap_dims(0, 1))
        .unwrap();
    assert_eq!(
        ys.into_data().to_vec::<f32>().unwrap(),
        xs.into_data().to_vec::<f32>().unwrap()
    );
}

/// Burn 0.21's cubecl reductions misread some permuted layouts (summing over a unit dim of a
/// tensor with two dims swapped, for one); batched tensors are such views whenever a batch
/// axis is not the leading one. Every reduced dim of every mapped axis against the loop.
#[test]
fn reductions_of_batched_permuted_layouts_match_the_loop() {
    let device = Default::default();
    let values: Vec<f32> = (0..72).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    let xs = Tensor::<V, 1>::from_floats(values.as_slice(), &device).reshape([4, 6, 3]);
    for axis in 0..3usize {
        for dim in 0..3usize {
            let f = |x: Tensor<V, 2>| {
                let y = x.swap_dims(0, 1).unsqueeze_dim::<3>(0);
                (y.clone().sum_dim(dim), y.max_dim(dim))
            };
            let (sums, maxes): (Tensor<V, 4>, Tensor<V, 4>) =
                vmap(f).in_axes(axis as i32).call(xs.clone()).unwrap();
            let size = xs.dims()[axis];
            let (mut loop_sums, mut loop_maxes) = (Vec::new(), Vec::new());
            for i in 0..size {
                let x: Tensor<V, 2> = xs.clone().narrow(axis, i, 1).squeeze_dim(axis);
                let (s, m) = f(x);
                loop_sums.push(s);
                loop_maxes.push(m);
            }
            let what = format!("mapped axis {axis}, reduced dim {dim}");
            let values = |t: Tensor<V, 4>| t.into_data().to_vec::<f32>().unwrap();
            for (name, got, parts) in [("sum", sums, loop_sums), ("max", maxes, loop_maxes)] {
                assert_eq!(
                    values(got),
                    values(Tensor::stack(parts, 0)),
                    "{name}: {what}"
                );
            }
        }
    }
}

/// Sums, products and means over an empty dim have a value (0, 1, NaN), on every backend: NdArray
/// computes them, Burn 0.21's cubecl backends refuse a zero-length axis, `Vmap` answers itself.
#[test]
fn reductions_over_empty_dims_have_their_identity() {
    let device = Default::default();
    let x = Tensor::<V, 2>::zeros([0, 3], &device);
    assert_eq!(
        x.clone().sum_dim(0).into_data().to_vec::<f32>().unwrap(),
        vec![0.0; 3]
    );
    assert_eq!(
        x.clone().sum().into_data().to_vec::<f32>().unwrap(),
        vec![0.0]
    );
    let mean = x.clone().mean_dim(0).into_data().to_vec::<f32>().unwrap();
    assert!(
        mean.len() == 3 && mean.iter().all(|m| m.is_nan()),
        "{mean:?}"
    );
    let n = Tensor::<V, 2, Int>::zeros([3, 0], &device);
    let prod = n.clone().prod_dim(1).into_data().convert::<i64>();
    assert_eq!(prod.to_vec::<i64>().unwrap(), vec![1; 3]);
    let sum = n.sum_dim(1).into_data().convert::<i64>();
    assert_eq!(sum.to_vec::<i64>().unwrap(), vec![0; 3]);
    // Batched: every example's dim is empty.
    let xs = Tensor::<V, 3>::zeros([2, 0, 3], &device);
    let sums: Tensor<V, 3> = vmap(|x: Tensor<V, 2>| x.sum_dim(0))
        .call(xs.clone())
        .unwrap();
    assert_eq!(sums.dims(), [2, 1, 3]);
    assert_eq!(sums.into_data().to_vec::<f32>().unwrap(), vec![0.0; 6]);
    let totals: Tensor<V, 2> = vmap(|x: Tensor<V, 2>| x.sum()).call(xs).unwrap();
    assert_eq!(totals.into_data().to_vec::<f32>().unwrap(), vec![0.0; 2]);
}

/// `max_pair` masks its smaller operand: Burn 0.21's cubecl `mask_where` ran one unit per
/// element of that operand and left the rest of the broadcast output unwritten.
#[test]
fn mask_where_writes_the_whole_broadcast_output() {
    let device = Default::default();
    let x = Tensor::<V, 2>::from_floats([[0.5]], &device);
    let y = Tensor::<V, 2>::from_floats([[1.0, -1.0, 0.25]], &device);
    let max = x.clone().max_pair(y.clone());
    assert_eq!(
        max.into_data().to_vec::<f32>().unwrap(),
        vec![1.0, 0.5, 0.5]
    );
    let masked = x.mask_fill(y.lower_elem(0.0), 9.0);
    assert_eq!(
        masked.into_data().to_vec::<f32>().unwrap(),
        vec![0.5, 9.0, 0.5]
    );
}

/// `unfold` to a single window shorter than its dim, for every kind, batched and not, against
/// the windows read on the host (Burn 0.21's cubecl backends read that view as if it were
/// contiguous: `compat::unfold`).
#[test]
fn unfold_to_a_single_short_window() {
    let device = Default::default();
    let rows = [[1.0f32, 0.0, 3.0], [0.0, 0.0, 6.0]];
    let x = Tensor::<V, 2>::from_data(TensorData::new(rows.concat(), [2, 3]), &device);
    for (size, step) in [(2, 2), (2, 3), (1, 3)] {
        let want: Vec<f32> = rows.iter().flat_map(|r| r[..size].to_vec()).collect();
        // Unbatched, and batched along the rows: one window per row.
        let plain: Tensor<V, 3> = x.clone().unfold(1, size, step);
        let float = |t: Tensor<V, 3>| t.into_data().iter::<f32>().collect::<Vec<_>>();
        assert_eq!(float(plain), want, "float, size {size}, step {step}");
        let mapped: Tensor<V, 3> = vmap(|r: Tensor<V, 1>| r.unfold::<2, usize>(0, size, step))
            .call(x.clone())
            .unwrap();
        assert_eq!(
            float(mapped),
            want,
            "float under vmap, size {size}, step {step}"
        );
        let ints: Tensor<V, 3, Int> =
            vmap(|r: Tensor<V, 1, Int>| r.unfold::<2, usize>(0, size, step))
                .call(x.clone().int())
                .unwrap();
        assert_eq!(
            float(ints.float()),
            want,
            "int under vmap, size {size}, step {step}"
        );
        let bools: Tensor<V, 3, burn::tensor::Bool> =
            vmap(|r: Tensor<V, 1, burn::tensor::Bool>| r.unfold::<2, usize>(0, size, step))
                .call(x.clone().bool())
                .unwrap();
        let nonzero: Vec<f32> = want.iter().map(|v| f32::from(*v != 0.0)).collect();
        assert_eq!(
            float(bools.float()),
            nonzero,
            "bool under vmap, size {size}, step {step}"
        );
    }
}

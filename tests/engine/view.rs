//! Views and shape ops: reshape (pending or not, to rank 0 and back), permute, swap_dims,
//! flip, expand, slice, slice_assign, cat, pad, unfold, repeat; the level moves.

use burn_backend::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps, PadMode};
use burn_backend::{Slice, TensorMetadata};
use burn_vmap::BatchOps;

use crate::common::*;

#[test]
fn should_batch_reshape_permute_swap_flip() {
    let lv = Levels::new(&[3, 2]);
    for at in [&[][..], &[0], &[1], &[0, 1]] {
        let a = lv.floats(at, &[2, 3, 4], 1);
        check(
            &lv,
            [&a],
            |[a]| V::float_reshape(a, shape(&[6, 4])),
            |[a]| F::float_reshape(a, shape(&[6, 4])),
        );
        // A reshape after a permute (a strided source) and another reshape on top.
        check(
            &lv,
            [&a],
            |[a]| {
                let p = V::float_permute(a, &[2, 0, 1]);
                let r = V::float_reshape(p, shape(&[4, 6]));
                V::float_exp(V::float_reshape(r, shape(&[2, 12])))
            },
            |[a]| {
                let p = F::float_permute(a, &[2, 0, 1]);
                let r = F::float_reshape(p, shape(&[4, 6]));
                F::float_exp(F::float_reshape(r, shape(&[2, 12])))
            },
        );
        check(
            &lv,
            [&a],
            |[a]| V::float_swap_dims(a, 0, 2),
            |[a]| F::float_swap_dims(a, 0, 2),
        );
        check(
            &lv,
            [&a],
            |[a]| V::float_flip(a, &[0, 2]),
            |[a]| F::float_flip(a, &[0, 2]),
        );
        check(
            &lv,
            [&a],
            |[a]| V::float_repeat_dim(a, 1, 2),
            |[a]| F::float_repeat_dim(a, 1, 2),
        );
        check(
            &lv,
            [&a],
            |[a]| V::float_unfold(a, 2, 2, 1),
            |[a]| F::float_unfold(a, 2, 2, 1),
        );
    }
}

#[test]
fn should_hold_rank_zero_as_a_unit_dim() {
    let lv = Levels::new(&[3, 2]);
    for at in [&[][..], &[0], &[0, 1]] {
        let a = lv.floats(at, &[1], 1);
        // [1] -> [] -> [] * [] -> [1, 1]
        check(
            &lv,
            [&a],
            |[a]| {
                let s = V::float_reshape(a, shape(&[]));
                assert_eq!(s.shape().num_dims(), 0);
                let sq = V::float_mul(s.clone(), s);
                V::float_reshape(sq, shape(&[1, 1]))
            },
            |[a]| {
                let s = F::float_reshape(a, shape(&[]));
                F::float_reshape(F::float_mul(s.clone(), s), shape(&[1, 1]))
            },
        );
        // A rank-0 operand of a binary op against a batched one, and expand from rank 0.
        let b = lv.floats(&[0], &[], 2);
        check(
            &lv,
            [&b],
            |[b]| V::float_expand(b, shape(&[2, 3])),
            |[b]| F::float_expand(F::float_reshape(b, shape(&[1, 1])), shape(&[2, 3])),
        );
    }
}

#[test]
fn should_batch_expand_slice_and_pad() {
    let lv = Levels::new(&[2, 3]);
    for at in [&[][..], &[0], &[1], &[0, 1]] {
        let a = lv.floats(at, &[3, 1], 4);
        check(
            &lv,
            [&a],
            |[a]| V::float_expand(a, shape(&[2, 3, 4])),
            |[a]| F::float_expand(a, shape(&[2, 3, 4])),
        );
        let b = lv.floats(at, &[5, 6], 5);
        let slices = [Slice::new(1, Some(5), 2), Slice::new(0, Some(-1), 1)];
        check(
            &lv,
            [&b],
            |[b]| V::float_slice(b, &slices),
            |[b]| F::float_slice(b, &slices),
        );
        for mode in [PadMode::Constant(1.5), PadMode::Reflect, PadMode::Edge] {
            let p = [(1, 2), (2, 0)];
            check(
                &lv,
                [&b],
                |[b]| V::float_pad(b, &p, mode),
                |[b]| F::float_pad(b, &p, mode),
            );
        }
        let i = lv.ints(at, &[4], 0, 9, 6);
        check(
            &lv,
            [&i],
            |[i]| V::int_pad(i, &[(2, 1)], PadMode::Constant(7.0)),
            |[i]| F::int_pad(i, &[(2, 1)], PadMode::Constant(7.0)),
        );
    }
}

#[test]
fn should_batch_slice_assign_and_cat_over_every_mix() {
    let lv = Levels::new(&[3, 2]);
    for (seed, &(l, r)) in MIXES2.iter().enumerate() {
        let seed = seed as u64;
        let t = lv.floats(l, &[4, 5], seed);
        let v = lv.floats(r, &[2, 5], seed + 1);
        let s = [Slice::new(1, Some(3), 1), Slice::full()];
        check(
            &lv,
            [&t, &v],
            |[t, v]| V::float_slice_assign(t, &s, v),
            |[t, v]| F::float_slice_assign(t, &s, v),
        );
        check(
            &lv,
            [&t, &v],
            |[t, v]| V::float_cat(vec![t, v.clone(), v], 0),
            |[t, v]| F::float_cat(vec![t, v.clone(), v], 0),
        );
        let w = lv.floats(r, &[4, 2], seed + 2);
        check(
            &lv,
            [&t, &w],
            |[t, w]| V::float_cat(vec![w, t], 1),
            |[t, w]| F::float_cat(vec![w, t], 1),
        );
        let bt = lv.bools(l, &[3], seed);
        let bv = lv.bools(r, &[2], seed + 3);
        check(
            &lv,
            [&bt, &bv],
            |[a, b]| V::bool_into_float(V::bool_cat(vec![a, b], 0), burn_backend::FloatDType::F32),
            |[a, b]| F::bool_into_float(F::bool_cat(vec![a, b], 0), burn_backend::FloatDType::F32),
        );
    }
}

#[test]
fn should_move_tensors_in_and_out_of_levels() {
    let lv = Levels::new(&[3, 2]);
    let (l0, l1) = (lv.levels[0].0, lv.levels[1].0);
    let x = floats(&[4, 3, 2], 1);
    // Axis 1 to the outer level, then axis 1 (was 2) to the inner one.
    let b = V::float_batch(
        VmapTensor::from_physical(x.clone(), Default::default()),
        1,
        l0,
    );
    let b = V::float_batch(b, 1, l1);
    assert_eq!(dims(&b), vec![4]);
    assert_eq!(V::float_batch_dims(&b).size_at(l0), Some(3));
    check_result(&lv, &b, |idx| {
        let s = [
            Slice::full(),
            Slice::from(idx[0]..idx[0] + 1),
            Slice::from(idx[1]..idx[1] + 1),
        ];
        F::float_reshape(F::float_slice(x.clone(), &s), shape(&[4]))
    });
    // Out again, into other axes: the inner level to axis 0, the outer one to axis 2.
    let u = V::float_unbatch(V::float_unbatch(b, l1, 2, 0), l0, 3, 2);
    let (physical, bdims) = u.into_parts();
    assert!(bdims.is_empty());
    let want = F::float_permute(x, &[2, 0, 1]);
    assert_close(&read(physical), &read(want), "unbatched");
    // A tensor not batched at a level is broadcast when it leaves it.
    let one = VmapTensor::from_physical(floats(&[2], 3), Default::default());
    let out = V::float_unbatch(one.clone(), l0, 3, 0);
    assert_eq!(dims(&out), vec![3, 2]);
    let rows = read(out.into_parts().0);
    assert_eq!(rows[0..2], rows[4..6]);
    // An int and a bool tensor too.
    let i = V::int_batch(
        VmapTensor::from_physical(ints(&[3, 2], 0, 5, 1), Default::default()),
        0,
        l0,
    );
    assert_eq!(V::int_batch_dims(&i).len(), 1);
    let bo = V::bool_batch(
        VmapTensor::from_physical(bools(&[3], 1), Default::default()),
        0,
        l0,
    );
    assert_eq!(dims(&bo), Vec::<usize>::new());
    assert_eq!(dims(&V::bool_unbatch(bo, l0, 3, 0)), vec![3]);
}

use burn_vmap::tensor::VmapTensor;

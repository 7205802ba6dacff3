//! Indexing ops over batched/unbatched tensors, indices and values: gather, select, scatter,
//! select_assign (both update ops), masks, mask_select (the loop fallback).

use burn_backend::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps};
use burn_backend::tensor::IndexingUpdateOp;
use burn_backend::{FloatDType, read_sync};

use crate::common::*;

/// The batched mixes of three operands over one level.
const MIXES3: &[[&[usize]; 3]] = &[
    [&[0], &[], &[]],
    [&[], &[0], &[]],
    [&[], &[], &[0]],
    [&[0], &[0], &[]],
    [&[], &[0], &[0]],
    [&[0], &[1], &[0, 1]],
    [&[0, 1], &[0, 1], &[0, 1]],
];

#[test]
fn should_batch_gather_and_select() {
    let lv = Levels::new(&[3, 2]);
    for (seed, &(t, i)) in MIXES2.iter().enumerate() {
        let seed = seed as u64;
        let x = lv.floats(t, &[4, 5], seed);
        let idx = lv.ints(i, &[4, 3], 0, 5, seed + 1);
        check(
            &lv,
            [&x, &idx],
            |[x, i]| V::float_gather(1, x, i),
            |[x, i]| F::float_gather(1, x, i),
        );
        let rows = lv.ints(i, &[6], 0, 4, seed + 2);
        check(
            &lv,
            [&x, &rows],
            |[x, i]| V::float_select(x, 0, i),
            |[x, i]| F::float_select(x, 0, i),
        );
        let cols = lv.ints(i, &[2], 0, 5, seed + 3);
        check(
            &lv,
            [&x, &cols],
            |[x, i]| V::float_select(x, 1, i),
            |[x, i]| F::float_select(x, 1, i),
        );
        let ix = lv.ints(t, &[4, 5], -9, 9, seed + 4);
        check(
            &lv,
            [&ix, &cols],
            |[x, i]| V::int_select(x, 1, i),
            |[x, i]| F::int_select(x, 1, i),
        );
    }
}

#[test]
fn should_batch_scatter_and_select_assign() {
    let lv = Levels::new(&[3, 2]);
    for (seed, [t, i, v]) in MIXES3.iter().enumerate() {
        let seed = seed as u64;
        let x = lv.floats(t, &[4, 5], seed);
        // Distinct indices per row for `Assign` (a repeated index is unordered).
        let perm = lv.arg(i, &[4, 3], |shape| {
            let rows: usize = shape.iter().product::<usize>() / 3;
            let v: Vec<i32> = (0..rows)
                .flat_map(|r| [(r % 5) as i32, ((r + 1) % 5) as i32, ((r + 3) % 5) as i32])
                .collect();
            T::from_data(burn_backend::TensorData::new(v, shape.to_vec()))
        });
        let val = lv.floats(v, &[4, 3], seed + 2);
        for update in [IndexingUpdateOp::Add, IndexingUpdateOp::Assign] {
            check(
                &lv,
                [&x, &perm, &val],
                |[x, i, v]| V::float_scatter(1, x, i, v, update),
                |[x, i, v]| F::float_scatter(1, x, i, v, update),
            );
        }
        let rows = lv.arg(i, &[2], |shape| {
            let n: usize = shape.iter().product::<usize>() / 2;
            let v: Vec<i32> = (0..n)
                .flat_map(|r| [(r % 4) as i32, ((r + 2) % 4) as i32])
                .collect();
            T::from_data(burn_backend::TensorData::new(v, shape.to_vec()))
        });
        let vrows = lv.floats(v, &[2, 5], seed + 3);
        for update in [IndexingUpdateOp::Add, IndexingUpdateOp::Assign] {
            check(
                &lv,
                [&x, &rows, &vrows],
                |[x, i, v]| V::float_select_assign(x, 0, i, v, update),
                |[x, i, v]| F::float_select_assign(x, 0, i, v, update),
            );
        }
        let xi = lv.ints(t, &[4, 5], -5, 5, seed);
        let vi = lv.ints(v, &[2, 5], -5, 5, seed + 5);
        check(
            &lv,
            [&xi, &rows, &vi],
            |[x, i, v]| V::int_select_assign(x, 0, i, v, IndexingUpdateOp::Add),
            |[x, i, v]| F::int_select_assign(x, 0, i, v, IndexingUpdateOp::Add),
        );
    }
}

#[test]
fn should_batch_masks() {
    let lv = Levels::new(&[3, 2]);
    for (seed, [t, m, v]) in MIXES3.iter().enumerate() {
        let seed = seed as u64;
        let x = lv.floats(t, &[4, 5], seed);
        let mask = lv.bools(m, &[4, 5], seed + 1);
        let val = lv.floats(v, &[4, 5], seed + 2);
        check(
            &lv,
            [&x, &mask, &val],
            |[x, m, v]| V::float_mask_where(x, m, v),
            |[x, m, v]| F::float_mask_where(x, m, v),
        );
        check(
            &lv,
            [&x, &mask],
            |[x, m]| V::float_mask_fill(x, m, 2.5.into()),
            |[x, m]| F::float_mask_fill(x, m, 2.5.into()),
        );
        let b = lv.bools(v, &[4, 5], seed + 3);
        check(
            &lv,
            [&b, &mask],
            |[b, m]| V::bool_into_float(V::bool_and(b, m), FloatDType::F32),
            |[b, m]| F::bool_into_float(F::bool_and(b, m), FloatDType::F32),
        );
    }
}

#[test]
fn should_run_mask_select_once_per_example_when_the_counts_agree() {
    let lv = Levels::new(&[3]);
    let x = lv.floats(&[0], &[2, 3], 1);
    // Every example selects its first row.
    let mask = lv.arg(&[], &[2, 3], |shape| {
        T::from_data(burn_backend::TensorData::new(
            vec![true, true, true, false, false, false],
            shape.to_vec(),
        ))
    });
    burn_vmap::strict::with_strict(false, || {
        check(
            &lv,
            [&x, &mask],
            |[x, m]| read_sync(V::float_mask_select(x, m)),
            |[x, m]| read_sync(F::float_mask_select(x, m)),
        );
    });
}

#[test]
#[should_panic(expected = "vmap: float_mask_select: the result's shape depends on the values")]
fn should_refuse_mask_select_when_the_counts_differ() {
    let lv = Levels::new(&[2]);
    let x = lv.floats(&[0], &[3], 1);
    let mask = lv.arg(&[0], &[3], |shape| {
        T::from_data(burn_backend::TensorData::new(
            vec![true, false, false, true, true, false],
            shape.to_vec(),
        ))
    });
    burn_vmap::strict::with_strict(false, || {
        read_sync(V::float_mask_select(x.vt(&lv), mask.vt(&lv)))
    });
}

#[test]
#[should_panic(expected = "vmap: bool_argwhere: no batching rule for this op, and strict mode")]
fn should_refuse_the_loop_fallback_in_strict_mode() {
    let lv = Levels::new(&[2]);
    let mask = lv.bools(&[0], &[3], 1);
    burn_vmap::strict::with_strict(true, || {
        read_sync(V::bool_argwhere(mask.vt(&lv), burn_backend::IntDType::I32))
    });
}

#[test]
fn should_not_batch_unbatched_int_ops() {
    // The no-batched-operand fast path returns an unbatched result.
    let lv = Levels::new(&[2]);
    let a = lv.ints(&[], &[3], 0, 4, 1);
    let out = V::int_add(a.vt(&lv), a.vt(&lv));
    assert!(!out.is_batched());
}

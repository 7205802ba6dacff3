//! `chunked_vmap` against `vmap`, its errors, and inside a `vmap`.

use std::collections::BTreeMap;

use burn::tensor::Tensor;
use burn_vmap::transform::{chunked_vmap, vmap};
use burn_vmap::tree::Spec;
use burn_vmap::{Static, VmapError};

use super::{assert_close, dev, rank0, tensor, vec1};

// =================================================================================================

/// The `tanh_matmul_and_sqnorm` program of the reference vectors, its `w` passed unmapped.
fn tanh_matmul_and_sqnorm((x, w): (Tensor<1>, Tensor<2>)) -> BTreeMap<String, Tensor<1>> {
    let y = x
        .clone()
        .unsqueeze::<2>()
        .matmul(w)
        .squeeze_dim::<1>(0)
        .tanh();
    BTreeMap::from([("y".into(), y), ("n".into(), x.powi_scalar(2).sum())])
}

#[test]
fn should_equal_vmap_for_every_chunk_size() {
    let batch = 7;
    let w = tensor::<2>(41, [3, 2]);
    let xs = tensor::<2>(42, [batch, 3]);
    let want: BTreeMap<String, Tensor<2>> = vmap(tanh_matmul_and_sqnorm)
        .in_axes([Some(0), None])
        .call((xs.clone(), w.clone()))
        .unwrap();
    for chunk in 1..=(batch as isize + 1) {
        let got: BTreeMap<String, Tensor<2>> = chunked_vmap(tanh_matmul_and_sqnorm, chunk)
            .unwrap()
            .in_axes([Some(0), None])
            .call((xs.clone(), w.clone()))
            .unwrap();
        for (k, v) in &want {
            assert_eq!(got[k].dims(), v.dims(), "chunk {chunk}: {k}");
            assert_close(
                &vec1(got[k].clone()),
                &vec1(v.clone()),
                &format!("chunk {chunk}: {k}"),
            );
        }
    }
}

#[test]
fn should_chunk_with_in_axes_out_axes_and_statics() {
    let xs = tensor::<2>(51, [3, 5]); // mapped on axis 1: batch 5
    let b = tensor::<1>(52, [3]); // unmapped
    let f = |(x, b, s): (Tensor<1>, Tensor<1>, Static<f32>)| (x * b).mul_scalar(s.0);
    let axes = Spec::Seq(vec![
        Spec::Leaf(Some(1)),
        Spec::Leaf(None),
        Spec::Leaf(None),
    ]);
    let want: Tensor<2> = vmap(f)
        .in_axes(axes.clone())
        .out_axes(1)
        .call((xs.clone(), b.clone(), Static(2.0f32)))
        .unwrap();
    for chunk in [1, 2, 4, 5, 9] {
        let got: Tensor<2> = chunked_vmap(f, chunk)
            .unwrap()
            .in_axes(axes.clone())
            .out_axes(1)
            .call((xs.clone(), b.clone(), Static(2.0f32)))
            .unwrap();
        assert_eq!(got.dims(), [3, 5]);
        assert_close(&vec1(got), &vec1(want.clone()), &format!("chunk {chunk}"));
    }
}

#[test]
fn should_report_chunked_vmap_errors() {
    let f = |(a, b): (Tensor<1>, Tensor<1>)| a.sum() + b.sum();
    let Err(err) = chunked_vmap(f, 0) else {
        panic!("chunk size 0 accepted")
    };
    assert_eq!(
        err,
        VmapError::ChunkSizeNotPositive {
            transform: "chunked_vmap",
            chunk_size: 0
        }
    );
    assert!(chunked_vmap(f, -3).is_err());

    let g = chunked_vmap(f, 3).unwrap();
    let err = g
        .call((tensor::<2>(1, [10, 3]), tensor::<2>(2, [4, 3])))
        .unwrap_err();
    let VmapError::InconsistentBatchSizes { arguments, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        arguments.iter().map(|(_, s)| *s).collect::<Vec<_>>(),
        vec![10, 4]
    );
    let msg = err.to_string();
    assert!(msg.contains("args[0]") && msg.contains("args[1]"), "{msg}");

    // A zero-dimensional leaf cannot be mapped on axis 0: the argument is named.
    let h = |(a, b): (Tensor<1>, Tensor<1>)| a.sum() + b;
    let err = chunked_vmap(h, 2)
        .unwrap()
        .call((tensor::<2>(3, [4, 3]), rank0(1.0, &dev())))
        .unwrap_err();
    assert!(matches!(err, VmapError::AxisOutOfRange { .. }), "{err:?}");
    assert!(err.to_string().contains("args[1]"), "{err}");
}

#[test]
fn should_chunk_inside_vmap() {
    // vmap over a leading axis of 2; inside, chunked_vmap over 5 rows in chunks of 2.
    let xs = tensor::<3>(91, [2, 5, 3]);
    let w = tensor::<2>(92, [3, 2]);
    let inner = |(xs, w): (Tensor<2>, Tensor<2>)| -> BTreeMap<String, Tensor<2>> {
        chunked_vmap(tanh_matmul_and_sqnorm, 2)
            .unwrap()
            .in_axes([Some(0), None])
            .call((xs, w))
            .unwrap()
    };
    let got: BTreeMap<String, Tensor<3>> = vmap(inner)
        .in_axes([Some(0), None])
        .call((xs.clone(), w.clone()))
        .unwrap();
    let want: BTreeMap<String, Tensor<2>> = vmap(tanh_matmul_and_sqnorm)
        .in_axes([Some(0), None])
        .call((xs.reshape([10, 3]), w))
        .unwrap();
    assert_eq!(got["y"].dims(), [2, 5, 2]);
    assert_close(&vec1(got["y"].clone()), &vec1(want["y"].clone()), "y");
    assert_close(&vec1(got["n"].clone()), &vec1(want["n"].clone()), "n");
}

/// `Randomness::Same` shares one draw across the whole batch, its chunks included (as `vmap`'s
/// one draw); with `Different`, every example draws its own.
#[test]
fn should_share_one_draw_across_chunks_with_randomness_same() {
    use burn::tensor::Distribution;
    use burn_vmap::Randomness;
    let noisy = |x: Tensor<1>| x.clone() + x.random_like(Distribution::Default);
    let xs = Tensor::<2>::zeros([5, 3], &dev());
    for chunk in [1, 2, 5] {
        let same = chunked_vmap(noisy, chunk)
            .unwrap()
            .randomness(Randomness::Same)
            .call(xs.clone())
            .unwrap();
        let v = vec1(same);
        assert!(
            v.chunks(3).all(|row| row == &v[..3]),
            "chunk {chunk}: one draw for every example: {v:?}"
        );
    }
    let different = chunked_vmap(noisy, 2)
        .unwrap()
        .randomness(Randomness::Different)
        .call(xs)
        .unwrap();
    let v = vec1(different);
    assert!(v[..3] != v[3..6] && v[3..6] != v[6..9], "{v:?}");
}

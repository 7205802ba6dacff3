//! `auto_vmap` against a loop over the broadcast batch index, computed on plain `f32` data.

use std::cell::RefCell;
use std::collections::BTreeMap;

use burn::module::{Module, Param};
use burn::tensor::{Device, Tensor, TensorData};
use burn_backend::Shape;
use burn_backend::ops::FloatTensorOps;
use burn_dispatch::Dispatch;
use burn_vmap::transform::{auto_vmap, vmap};
use burn_vmap::tree::{DynTree, Spec};
use burn_vmap::{VmapError, per_example_grads};
use proptest::prelude::*;

// ---- helpers ------------------------------------------------------------------------------------

/// A float tensor of any rank (rank 0 included) as a one-leaf `DynTree`.
fn dyn_tensor(shape: &[usize], data: &[f32]) -> DynTree {
    let flat = Tensor::<1>::from_data(
        TensorData::new(data.to_vec(), [data.len()]),
        &Device::default(),
    );
    // `Tensor::from_data` wants rank >= 1; the backend reshapes to any rank.
    let t = Dispatch::float_reshape(flat.into_dispatch(), Shape::from(shape.to_vec()));
    macro_rules! wrap {
        ($($d:literal),*) => {
            match shape.len() {
                $($d => DynTree::new(Tensor::<$d>::from_dispatch(t)),)*
                r => panic!("rank {r}"),
            }
        };
    }
    wrap!(0, 1, 2, 3, 4, 5, 6)
}

/// Shape and values of a one-leaf float `DynTree`.
fn read(t: DynTree) -> (Vec<usize>, Vec<f32>) {
    let leaf = &t.leaves()[0];
    (
        leaf.shape().to_vec(),
        leaf.to_data().try_to_vec::<f32>().unwrap(),
    )
}

fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "lengths: {got:?} vs {want:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 + 1e-4 * w.abs(),
            "index {i}: got {g}, want {w} ({got:?} vs {want:?})"
        );
    }
}

/// Deterministic values.
fn values(n: usize, seed: u64) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let x = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed.wrapping_mul(31);
            ((x >> 40) % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// Broadcast shape of right-aligned batch shapes (numpy), `None` if they do not broadcast.
fn np_broadcast(shapes: &[Vec<usize>]) -> Option<Vec<usize>> {
    let n = shapes.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = vec![1; n];
    for s in shapes {
        for (j, &d) in s.iter().enumerate() {
            let o = &mut out[n - s.len() + j];
            if d != 1 {
                if *o != 1 && *o != d {
                    return None;
                }
                *o = d;
            }
        }
    }
    Some(out)
}

/// Row-major offset of the example of a leaf with batch shape `b` at broadcast index `idx`.
fn example_offset(idx: &[usize], b: &[usize]) -> usize {
    let n = idx.len();
    b.iter().enumerate().fold(0, |acc, (j, &d)| {
        let i = if d == 1 { 0 } else { idx[n - b.len() + j] };
        acc * d + i
    })
}

/// Every index of `shape`, row-major.
fn ndindex(shape: &[usize]) -> Vec<Vec<usize>> {
    let total: usize = shape.iter().product();
    (0..total)
        .map(|mut flat| {
            let mut idx = vec![0; shape.len()];
            for (k, &d) in shape.iter().enumerate().rev() {
                idx[k] = flat % d;
                flat /= d;
            }
            idx
        })
        .collect()
}

// ---- the README example -------------------------------------------------------------------------

/// `foo(s, v, m) = v·m·v + s·|v|`, written for one scalar, one vector, one matrix.
fn foo((s, v, m): (Tensor<0>, Tensor<1>, Tensor<2>)) -> Tensor<0> {
    let n = v.dims()[0] as f32;
    let mv = m
        .matmul(v.clone().unsqueeze_dim::<2>(1))
        .squeeze_dim::<1>(1);
    let vmv = (v * mv).sum();
    (vmv + s.reshape([1]).mul_scalar(n)).reshape([0usize; 0])
}

/// The loop: `foo` on plain data.
fn foo_ref(s: f32, v: &[f32], m: &[f32]) -> f32 {
    let d = v.len();
    let mut acc = 0.0;
    for i in 0..d {
        for j in 0..d {
            acc += v[i] * m[i * d + j] * v[j];
        }
    }
    acc + s * d as f32
}

/// Runs `auto_vmap(foo)` with ranks (0, 1, 2) on the given shapes and compares with the loop.
fn check_foo(s_shape: &[usize], v_shape: &[usize], m_shape: &[usize]) {
    let count = |s: &[usize]| s.iter().product::<usize>();
    let (sd, vd, md) = (
        values(count(s_shape), 1),
        values(count(v_shape), 2),
        values(count(m_shape), 3),
    );
    let inputs = (
        dyn_tensor(s_shape, &sd),
        dyn_tensor(v_shape, &vd),
        dyn_tensor(m_shape, &md),
    );
    let out: DynTree = auto_vmap(foo).ranks([0, 1, 2]).call(inputs).unwrap();
    let (shape, got) = read(out);

    let d = v_shape[v_shape.len() - 1];
    let batch = [
        s_shape.to_vec(),
        v_shape[..v_shape.len() - 1].to_vec(),
        m_shape[..m_shape.len() - 2].to_vec(),
    ];
    let target = np_broadcast(&batch).unwrap();
    assert_eq!(shape, target);
    let want: Vec<f32> = ndindex(&target)
        .iter()
        .map(|idx| {
            let (si, vi, mi) = (
                example_offset(idx, &batch[0]),
                example_offset(idx, &batch[1]),
                example_offset(idx, &batch[2]),
            );
            foo_ref(
                sd[si],
                &vd[vi * d..(vi + 1) * d],
                &md[mi * d * d..(mi + 1) * d * d],
            )
        })
        .collect();
    assert_close(&got, &want);
}

#[test]
fn should_run_the_readme_example() {
    // jax_autovmap's README: ones, s = 2 -> 15 for every one of the 5 pairs (v, m).
    let d = Device::default();
    let s = Tensor::<1>::from_floats([2.0], &d); // batch shape [1]: broadcasts
    let v = Tensor::<2>::ones([5, 3], &d);
    let m = Tensor::<3>::ones([5, 3, 3], &d);
    let out: Tensor<1> = auto_vmap(foo).ranks([0, 1, 2]).call((s, v, m)).unwrap();
    assert_eq!(out.into_data().try_to_vec::<f32>().unwrap(), vec![15.0; 5]);
}

#[test]
fn should_match_the_loop_for_the_vectors_batch_shapes() {
    check_foo(&[5], &[5, 3], &[5, 3, 3]);
    check_foo(&[4], &[3], &[3, 3]);
    check_foo(&[2, 1], &[5, 3], &[5, 3, 3]);
    check_foo(&[2, 1, 1], &[4, 3], &[3, 1, 3, 3]);
    check_foo(&[3], &[1, 3], &[4, 1, 3, 3]);
    check_foo(&[1], &[2, 1, 3], &[1, 4, 3, 3]);
    check_foo(&[1, 1], &[5, 3], &[3, 3]);
    check_foo(&[], &[5, 3], &[3, 3]);
    check_foo(&[], &[3], &[3, 3]);
}

#[test]
fn should_record_f_for_one_example_without_the_broadcast_dims() {
    // m has batch shape [1] against v's [4]: it enters `f` without a batch dim (shared, not
    // copied), and f is recorded once for one example.
    let seen = RefCell::new(Vec::new());
    let f = |(s, v, m): (Tensor<0>, Tensor<1>, Tensor<2>)| {
        seen.borrow_mut()
            .push((v.dims().to_vec(), m.dims().to_vec()));
        foo((s, v, m))
    };
    let d = Device::default();
    let s = Tensor::<1>::from_floats([1.0, 2.0, 3.0, 4.0], &d);
    let v = Tensor::<2>::ones([4, 3], &d);
    let m = Tensor::<3>::ones([1, 3, 3], &d);
    let g = auto_vmap(f).ranks([0, 1, 2]);
    let out: Tensor<1> = g.call((s.clone(), v.clone(), m.clone())).unwrap();
    assert_eq!(
        out.into_data().try_to_vec::<f32>().unwrap(),
        vec![12.0, 15.0, 18.0, 21.0]
    );
    let _: Tensor<1> = g.call((s, v, m)).unwrap();
    assert_eq!(*seen.borrow(), vec![(vec![3], vec![3, 3])]);
}

#[test]
fn should_call_f_directly_without_batch_dims() {
    let calls = std::cell::Cell::new(0);
    let f = |(v, w): (Tensor<1>, Tensor<1>)| {
        calls.set(calls.get() + 1);
        // The user's own tensors, not a recording.
        assert_eq!(v.device(), Device::default());
        v * w
    };
    let d = Device::default();
    let v = Tensor::<1>::from_floats([1.0, 2.0], &d);
    let w = Tensor::<1>::from_floats([3.0, 4.0], &d);
    let g = auto_vmap(f).ranks(1);
    let out: Tensor<1> = g.call((v.clone(), w.clone())).unwrap();
    assert_eq!(out.into_data().try_to_vec::<f32>().unwrap(), vec![3.0, 8.0]);
    let _: Tensor<1> = g.call((v, w)).unwrap();
    assert_eq!(calls.get(), 2);
}

// ---- random batch shapes ------------------------------------------------------------------------

/// `g(a, b, c) = tanh(a @ b) * c` for a (3,), b (3, 2), c (): output (2,).
fn g((a, b, c): (Tensor<1>, Tensor<2>, Tensor<0>)) -> Tensor<1> {
    let ab = a.unsqueeze::<2>().matmul(b).tanh().squeeze_dim::<1>(0);
    ab * c.reshape([1])
}

fn g_ref(a: &[f32], b: &[f32], c: f32) -> Vec<f32> {
    (0..2)
        .map(|j| (0..3).map(|k| a[k] * b[k * 2 + j]).sum::<f32>().tanh() * c)
        .collect()
}

/// A broadcast batch shape (0..=3 dims, sizes 1..=3) and, for each of the 3 arguments, a batch
/// shape that broadcasts to it: a suffix of it with some dims set to 1.
fn batch_shapes() -> impl Strategy<Value = [Vec<usize>; 3]> {
    prop::collection::vec(1usize..=3, 0..=3).prop_flat_map(|target| {
        let n = target.len();
        let one = move |t: Vec<usize>| {
            (0..=n, prop::collection::vec(any::<bool>(), n)).prop_map(move |(k, ones)| {
                (n - k..n)
                    .map(|p| if ones[p] { 1 } else { t[p] })
                    .collect::<Vec<_>>()
            })
        };
        (
            one(target.clone()),
            one(target.clone()),
            one(target.clone()),
        )
            .prop_map(|(a, b, c)| [a, b, c])
    })
}

fn run_g(batch: &[Vec<usize>; 3], seed: u64) -> Result<(), TestCaseError> {
    let cores: [&[usize]; 3] = [&[3], &[3, 2], &[]];
    let shapes: Vec<Vec<usize>> = batch
        .iter()
        .zip(cores)
        .map(|(b, c)| b.iter().chain(c).copied().collect())
        .collect();
    let data: Vec<Vec<f32>> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| values(s.iter().product(), seed + i as u64))
        .collect();
    let inputs = (
        dyn_tensor(&shapes[0], &data[0]),
        dyn_tensor(&shapes[1], &data[1]),
        dyn_tensor(&shapes[2], &data[2]),
    );
    let target = np_broadcast(batch).unwrap();
    let out: DynTree = auto_vmap(g).ranks([1, 2, 0]).call(inputs).unwrap();
    let (shape, got) = read(out);
    let mut want_shape = target.clone();
    want_shape.push(2);
    prop_assert_eq!(&shape, &want_shape);
    let want: Vec<f32> = ndindex(&target)
        .iter()
        .flat_map(|idx| {
            let (ai, bi, ci) = (
                example_offset(idx, &batch[0]),
                example_offset(idx, &batch[1]),
                example_offset(idx, &batch[2]),
            );
            g_ref(
                &data[0][ai * 3..ai * 3 + 3],
                &data[1][bi * 6..bi * 6 + 6],
                data[2][ci],
            )
        })
        .collect();
    assert_close(&got, &want);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn should_match_the_loop_over_random_broadcast_batch_shapes(
        batch in batch_shapes(), seed in 0u64..1000,
    ) {
        run_g(&batch, seed)?;
    }

    #[test]
    fn should_reject_batch_shapes_that_do_not_broadcast(
        lead in prop::collection::vec(1usize..=3, 0..=2), x in 2usize..=4, y in 2usize..=4,
    ) {
        prop_assume!(x != y);
        // a: lead + [x], b: [y] (right-aligned: the last batch dims conflict).
        let mut ab = lead.clone();
        ab.push(x);
        let a_shape: Vec<usize> = ab.iter().copied().chain([3]).collect();
        let b_shape = vec![y, 3, 2];
        let inputs = (
            dyn_tensor(&a_shape, &values(a_shape.iter().product(), 1)),
            dyn_tensor(&b_shape, &values(6 * y, 2)),
            dyn_tensor(&[], &[1.0]),
        );
        let err = auto_vmap(g).ranks([1, 2, 0]).call::<_, _, _, DynTree>(inputs).unwrap_err();
        prop_assert_eq!(&err, &VmapError::IncompatibleBatchShapes {
            arguments: vec!["args[0]".into(), "args[1]".into()],
            batch_shapes: vec![ab.clone(), vec![y]],
        });
        let msg = err.to_string();
        prop_assert!(msg.contains("args[0]") && msg.contains("args[1]"), "{}", msg);
        prop_assert!(msg.contains(&format!("{ab:?}")) && msg.contains(&format!("[{y}]")), "{}", msg);
    }
}

// ---- struct ranks -------------------------------------------------------------------------------

#[test]
fn should_apply_struct_ranks_per_field() {
    // dot(p.a, x) + p.b with ranks {p: {a: 1, b: 0}, x: 1}; p is a map (fields by name).
    let f = |(p, x): (BTreeMap<String, DynTree>, Tensor<1>)| -> Tensor<0> {
        let a: Tensor<1> = p["a"].clone().get().unwrap();
        let b: Tensor<0> = p["b"].clone().get().unwrap();
        let dot: Tensor<1> = (a * x).sum();
        (dot + b.reshape([1])).reshape([0usize; 0])
    };
    let ranks = Spec::Seq(vec![
        Spec::fields([("a", 1.into()), ("b", 0.into())]),
        1.into(),
    ]);
    let (ad, bd, xd) = (values(3, 1), values(2, 2), values(15, 3));
    let p = BTreeMap::from([
        ("a".to_string(), dyn_tensor(&[3], &ad)),
        ("b".to_string(), dyn_tensor(&[2, 1], &bd)),
    ]);
    let x = dyn_tensor(&[5, 3], &xd);
    let out: DynTree = auto_vmap(f).ranks(ranks).call((p, x)).unwrap();
    let (shape, got) = read(out);
    assert_eq!(shape, vec![2, 5]);
    let want: Vec<f32> = ndindex(&[2, 5])
        .iter()
        .map(|idx| (0..3).map(|k| ad[k] * xd[idx[1] * 3 + k]).sum::<f32>() + bd[idx[0]])
        .collect();
    assert_close(&got, &want);
}

#[test]
fn should_apply_one_rank_to_every_leaf_and_pass_none_whole() {
    // u * sum(w) with rank 1 for both leaves of t; alpha (rank None) is passed whole even though
    // it has more dims than any rank.
    let f = |((u, w), alpha): ((Tensor<1>, Tensor<1>), Tensor<2>)| u * w.sum() + alpha.sum();
    let (ud, wd) = (values(6, 1), values(8, 2));
    let t = (dyn_tensor(&[2, 3], &ud), dyn_tensor(&[2, 4], &wd));
    let alpha = dyn_tensor(&[2, 2], &[1.0, 1.0, 1.0, 1.0]);
    let ranks = Spec::Seq(vec![1.into(), Spec::Leaf(None)]);
    let out: DynTree = auto_vmap(f).ranks(ranks).call((t, alpha)).unwrap();
    let (shape, got) = read(out);
    assert_eq!(shape, vec![2, 3]);
    let want: Vec<f32> = (0..2)
        .flat_map(|i| {
            let s: f32 = wd[i * 4..i * 4 + 4].iter().sum();
            let ud = &ud;
            (0..3)
                .map(move |j| ud[i * 3 + j] * s + 4.0)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_close(&got, &want);
}

// ---- nesting and gradients ----------------------------------------------------------------------

#[test]
fn should_nest_inside_vmap() {
    // vmap over the rows of `b` (axis 1); inside, auto_vmap broadcasts g over a and c.
    let d = Device::default();
    let a = Tensor::<2>::from_data(TensorData::new(values(6, 1), [2, 3]), &d);
    let b = Tensor::<3>::from_data(TensorData::new(values(24, 2), [3, 4, 2]), &d);
    let c = Tensor::<1>::from_floats([0.5, -2.0], &d);
    let inner = |(a, b, c): (Tensor<2>, Tensor<2>, Tensor<1>)| -> Tensor<2> {
        auto_vmap(g).ranks([1, 2, 0]).call((a, b, c)).unwrap()
    };
    let out: Tensor<3> = vmap(inner)
        .in_axes([None, Some(1), None])
        .call((a.clone(), b.clone(), c.clone()))
        .unwrap();
    assert_eq!(out.dims(), [4, 2, 2]);
    let (ad, bd, cd) = (
        a.into_data().try_to_vec::<f32>().unwrap(),
        b.into_data().try_to_vec::<f32>().unwrap(),
        c.into_data().try_to_vec::<f32>().unwrap(),
    );
    let mut want = Vec::new();
    for r in 0..4 {
        let bj: Vec<f32> = (0..3)
            .flat_map(|k| bd[(k * 4 + r) * 2..(k * 4 + r) * 2 + 2].to_vec())
            .collect();
        for i in 0..2 {
            want.extend(g_ref(&ad[i * 3..i * 3 + 3], &bj, cd[i]));
        }
    }
    assert_close(&out.into_data().try_to_vec::<f32>().unwrap(), &want);
}

/// A shared matrix parameter of `foo`.
#[derive(Module, Debug)]
struct Matrix {
    m: Param<Tensor<2>>,
}

/// Per-example gradients of `sum(auto_vmap(foo)(s_i, v_i, m))` w.r.t. the shared `m`, inside a
/// recorded loss, against `dL/dm = sum over the broadcast batch of v v^T`.
fn check_foo_grads(s_batch: &[usize], v_batch: &[usize]) {
    const B: usize = 3;
    let shape = |lead: &[usize], core: &[usize]| -> Vec<usize> {
        [B].iter().chain(lead).chain(core).copied().collect()
    };
    let (s_shape, v_shape) = (shape(s_batch, &[]), shape(v_batch, &[3]));
    let count = |s: &[usize]| s.iter().product::<usize>();
    let (sd, vd, md) = (
        values(count(&s_shape), 4),
        values(count(&v_shape), 5),
        values(9, 6),
    );
    let model = Matrix {
        m: Param::from_tensor(Tensor::from_data(
            TensorData::new(md, [3, 3]),
            &Device::default(),
        )),
    };
    let (s, v) = (dyn_tensor(&s_shape, &sd), dyn_tensor(&v_shape, &vd));
    let loss = |m: &Matrix, (s, v): (DynTree, DynTree)| -> Tensor<1> {
        let out: DynTree = auto_vmap(foo)
            .ranks([0, 1, 2])
            .call((s, v, m.m.val()))
            .unwrap();
        let leaf = out.leaves()[0].clone();
        match leaf.shape().num_dims() {
            1 => leaf.into_tensor::<1, burn::tensor::Float>().unwrap().sum(),
            2 => leaf.into_tensor::<2, burn::tensor::Float>().unwrap().sum(),
            r => panic!("rank {r}"),
        }
    };
    let grads = per_example_grads(&model, (s, v), loss).unwrap();
    let got = grads.get::<3>("m").unwrap();
    let target = np_broadcast(&[s_batch.to_vec(), v_batch.to_vec()]).unwrap();
    let per_v = count(v_batch);
    let mut want = vec![0.0; B * 9];
    for i in 0..B {
        for idx in ndindex(&target) {
            let vi = i * per_v + example_offset(&idx, v_batch);
            let v = &vd[vi * 3..vi * 3 + 3];
            for p in 0..3 {
                for q in 0..3 {
                    want[i * 9 + p * 3 + q] += v[p] * v[q];
                }
            }
        }
    }
    assert_close(&got.into_data().try_to_vec::<f32>().unwrap(), &want);
}

#[test]
fn should_give_per_example_gradients_through_auto_vmap() {
    check_foo_grads(&[4], &[4]);
    check_foo_grads(&[2, 1], &[4]);
    check_foo_grads(&[], &[2, 3]);
}

// ---- errors -------------------------------------------------------------------------------------

#[test]
fn should_reject_a_rank_too_small() {
    let d = Device::default();
    let s = Tensor::<1>::from_floats([1.0], &d);
    let v = Tensor::<1>::ones([3], &d);
    let m = Tensor::<1>::ones([3], &d);
    let err = auto_vmap(foo)
        .ranks([0, 1, 2])
        .call::<_, _, _, Tensor<1>>((s, v, m))
        .unwrap_err();
    assert_eq!(
        err,
        VmapError::RankTooSmall {
            argument: "args[2]".into(),
            shape: vec![3],
            min_rank: 2
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("args[2]") && msg.contains("[3]") && msg.contains("base rank is 2"),
        "{msg}"
    );
}

#[test]
fn should_name_the_struct_field_whose_rank_is_too_small() {
    let f = |p: BTreeMap<String, DynTree>| p;
    let p = BTreeMap::from([
        ("a".to_string(), dyn_tensor(&[3], &values(3, 1))),
        ("b".to_string(), dyn_tensor(&[2], &values(2, 1))),
    ]);
    let ranks = Spec::fields([("a", 1.into()), ("b", 2.into())]);
    let err = auto_vmap(f)
        .ranks(ranks)
        .call::<_, _, _, BTreeMap<String, DynTree>>(p)
        .unwrap_err();
    assert!(
        matches!(&err, VmapError::RankTooSmall { argument, min_rank: 2, .. } if argument == "args.b"),
        "{err:?}"
    );
}

#[test]
fn should_reject_ranks_that_do_not_fit_the_arguments() {
    let d = Device::default();
    let v = Tensor::<2>::ones([2, 3], &d);
    let err = auto_vmap(|(v, w): (Tensor<1>, Tensor<1>)| v + w)
        .ranks([1, 1, 1])
        .call::<_, _, _, Tensor<2>>((v.clone(), v.clone()))
        .unwrap_err();
    assert!(
        matches!(&err, VmapError::TreeMismatch { what, .. } if what == "ranks"),
        "{err:?}"
    );
    // A result type of the wrong rank: a clear error, no panic.
    let err = auto_vmap(|(v, w): (Tensor<1>, Tensor<1>)| v + w)
        .ranks(1)
        .call::<_, _, _, Tensor<3>>((v.clone(), v))
        .unwrap_err();
    assert!(matches!(err, VmapError::LeafMismatch { .. }), "{err:?}");
}

#[test]
fn should_report_the_batch_shape_without_calling() {
    let inputs = (
        dyn_tensor(&[4, 3], &values(12, 1)),
        dyn_tensor(&[2, 1, 3, 2], &values(12, 2)),
        dyn_tensor(&[], &[1.0]),
    );
    assert_eq!(
        auto_vmap(g).ranks([1, 2, 0]).batch_shape(inputs).unwrap(),
        vec![2, 4]
    );
}

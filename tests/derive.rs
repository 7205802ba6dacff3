//! `#[derive(Tree)]` and the tree visitor API: round trips, paths, attributes, generics, error
//! paths, and derived structs through `vmap` and `micro_vmap` against loops.

use std::collections::BTreeMap;

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, ElementConversion, Int, Tensor, TensorData};
use burn_vmap::accumulate::{Concat, Mean, Sum};
use burn_vmap::testing::TestBackend;
use burn_vmap::tree::{Key, MAX_RANK, NodeKind, TensorMapper, TensorVisitor, TensorZipper};
use burn_vmap::tree::{Leaf, TreeDef};
use burn_vmap::{Static, Tree, Vmap, VmapError, micro_vmap, vmap};

/// Trees are backend-generic. The tests hold them on `Vmap<TestBackend>`, which with nothing
/// batched runs the inner backend's ops and holds rank-0 leaves on every backend (Burn 0.21's
/// cubecl backends cannot allocate a rank-0 tensor).
type B = V;
type V = Vmap<TestBackend>;

fn dev() -> burn::tensor::Device<B> {
    Default::default()
}

fn floats<Bk: Backend, const D: usize>(t: Tensor<Bk, D>) -> Vec<f32> {
    t.into_data().to_vec::<f32>().unwrap()
}

/// An int tensor's values, whatever the backend's int dtype.
fn ints<Bk: Backend, const D: usize>(t: Tensor<Bk, D, Int>) -> Vec<i64> {
    t.into_data().convert::<i64>().to_vec::<i64>().unwrap()
}

/// A bool tensor's values, whatever the backend's bool storage.
fn bools<Bk: Backend, const D: usize>(t: Tensor<Bk, D, Bool>) -> Vec<bool> {
    t.into_data().convert::<bool>().to_vec::<bool>().unwrap()
}

/// A rank-0 float tensor from rank-0 data.
fn rank0(v: f32) -> Tensor<B, 0> {
    use burn::tensor::TensorPrimitive;
    use burn::tensor::backend::ops::FloatTensorOps;
    Tensor::from_primitive(TensorPrimitive::Float(B::float_from_data(
        TensorData::new(vec![v], Vec::<usize>::new()),
        &dev(),
    )))
}

fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "{got:?} vs {want:?}"
        );
    }
}

/// Deterministic data of a shape.
fn data<Bk: Backend, const D: usize>(shape: [usize; D], seed: f32) -> Tensor<Bk, D> {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| ((i as f32 + 1.0) * 0.37 + seed).sin())
        .collect();
    Tensor::from_data(TensorData::new(v, shape), &Default::default())
}

// ---------------------------------------------------------------------------------------------
// Types under test
// ---------------------------------------------------------------------------------------------

#[derive(Tree, Clone, Debug)]
struct Linear<B: Backend> {
    weight: Tensor<B, 2>,
    bias: Tensor<B, 1>,
}

#[derive(Tree, Clone, Debug)]
struct Mlp<B: Backend> {
    layer1: Linear<B>,
    layer2: Linear<B>,
}

#[derive(Tree, Clone, Debug)]
struct Pair<B: Backend>(Tensor<B, 1>, Tensor<B, 2, Int>);

#[derive(Tree, Clone, Debug, PartialEq)]
struct Unit;

#[derive(Tree, Clone, Debug)]
struct Mixed<B: Backend> {
    scalar: Tensor<B, 0>,
    cube: Tensor<B, 3>,
    ids: Tensor<B, 1, Int>,
    mask: Tensor<B, 2, Bool>,
    extra: Option<Vec<Tensor<B, 1>>>,
    named: BTreeMap<String, Tensor<B, 1>>,
    nested: (Pair<B>, Unit),
}

#[derive(Tree, Clone, Debug)]
struct Configured<B: Backend> {
    weight: Tensor<B, 1>,
    #[tree(static)]
    activation: String,
    #[tree(skip)]
    calls: usize,
    flag: Static<bool>,
}

#[derive(Tree, Clone, Debug)]
struct Stats<P, T> {
    per_example: P,
    total: T,
}

#[derive(Tree, Clone, Debug)]
struct Tuple2<P, T>(P, #[tree(skip)] Vec<String>, T);

/// Two backend-bounded parameters: the attribute says which one the tree lives on.
#[derive(Tree, Clone, Debug)]
#[tree(backend = B1)]
struct Explicit<X, B1: Backend, B2: Backend> {
    x: X,
    w: Tensor<B1, 1>,
    #[tree(skip)]
    other: Option<Tensor<B2, 1>>,
}

#[derive(Tree, Clone, Debug)]
struct WhereBackend<Bk>
where
    Bk: Backend,
{
    w: Tensor<Bk, 2>,
}

/// Generic over the rank too.
#[derive(Tree, Clone, Debug)]
struct Ranked<B: Backend, const D: usize> {
    x: Tensor<B, D>,
    ys: [Tensor<B, D, Int>; 2],
}

/// Rank 1 everywhere where `Mlp` has ranks 2 and 1: for rank-mismatch errors.
#[derive(Tree, Debug)]
struct FlatMlp<B: Backend> {
    layer1: FlatLinear<B>,
    layer2: FlatLinear<B>,
}

#[derive(Tree, Debug)]
struct FlatLinear<B: Backend> {
    weight: Tensor<B, 1>,
    bias: Tensor<B, 1>,
}

fn linear<Bk: Backend>(o: usize, i: usize, seed: f32) -> Linear<Bk> {
    Linear {
        weight: data([o, i], seed),
        bias: data([o], seed + 1.0),
    }
}

fn mlp<Bk: Backend>() -> Mlp<Bk> {
    Mlp {
        layer1: linear(3, 2, 0.0),
        layer2: linear(1, 3, 5.0),
    }
}

// ---------------------------------------------------------------------------------------------
// Round trips and structure
// ---------------------------------------------------------------------------------------------

#[test]
fn should_round_trip_a_named_struct() {
    let l = linear::<B>(3, 2, 0.5);
    let (leaves, def) = l.clone().flatten();
    assert_eq!(leaves.len(), 2);
    match &def {
        TreeDef::Node {
            kind,
            keys,
            children,
        } => {
            assert_eq!(*kind, NodeKind::Struct("Linear"));
            assert_eq!(
                keys,
                &[Key::Field("weight".into()), Key::Field("bias".into())]
            );
            assert!(children.iter().all(|c| matches!(c, TreeDef::Leaf)));
        }
        other => panic!("{other:?}"),
    }
    let back: Linear<B> = Tree::unflatten(&def, leaves).unwrap();
    assert_eq!(floats(back.weight), floats(l.weight));
    assert_eq!(floats(back.bias), floats(l.bias));
}

#[test]
fn should_round_trip_a_tuple_struct_and_a_unit_struct() {
    let p = Pair::<B>(data([2], 0.0), Tensor::from_ints([[1, 2, 3]], &dev()));
    let (leaves, def) = p.clone().flatten();
    assert_eq!(def.leaf_paths("p"), ["p[0]", "p[1]"]);
    assert!(
        matches!(&def, TreeDef::Node { kind: NodeKind::Struct("Pair"), keys, .. }
        if keys == &[Key::Index(0), Key::Index(1)])
    );
    let back: Pair<B> = Tree::unflatten(&def, leaves).unwrap();
    assert_eq!(floats(back.0), floats(p.0));
    assert_eq!(ints(back.1), vec![1, 2, 3]);

    let (leaves, def) = Tree::<B>::flatten(Unit);
    assert!(leaves.is_empty());
    assert!(
        matches!(&def, TreeDef::Node { kind: NodeKind::Struct("Unit"), keys, .. } if keys.is_empty())
    );
    assert_eq!(Tree::<B>::unflatten(&def, leaves), Ok(Unit));
}

#[test]
fn should_name_nested_paths_in_declaration_order() {
    let m = mlp::<B>();
    assert_eq!(
        m.leaf_paths("grads"),
        [
            "grads.layer1.weight",
            "grads.layer1.bias",
            "grads.layer2.weight",
            "grads.layer2.bias"
        ]
    );
    assert_eq!(m.leaf_count(), 4);
    let (leaves, def) = m.clone().flatten();
    // The leaf order is the declaration order: the second leaf is layer1.bias.
    assert_eq!(leaves[1].shape().to_vec(), vec![3]);
    assert_eq!(leaves[2].shape().to_vec(), vec![1, 3]);
    let back: Mlp<B> = Tree::unflatten(&def, leaves).unwrap();
    assert_eq!(floats(back.layer2.weight), floats(m.layer2.weight));
}

#[test]
fn should_round_trip_mixed_ranks_and_kinds() {
    let mut named = BTreeMap::new();
    named.insert("b".to_string(), data::<B, 1>([2], 3.0));
    named.insert("a".to_string(), data::<B, 1>([1], 4.0));
    let m = Mixed::<B> {
        scalar: rank0(0.25),
        cube: data([2, 1, 3], 1.0),
        ids: Tensor::from_ints([4, 5], &dev()),
        mask: Tensor::from_bool(TensorData::from([[true, false]]), &dev()),
        extra: Some(vec![data([3], 2.0)]),
        named,
        nested: (Pair(data([1], 5.0), Tensor::from_ints([[7]], &dev())), Unit),
    };
    let (leaves, def) = m.clone().flatten();
    let kinds: Vec<_> = leaves
        .iter()
        .map(|l| (l.kind_name(), l.shape().num_dims()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("float", 0),
            ("float", 3),
            ("int", 1),
            ("bool", 2),
            ("float", 1),
            ("float", 1),
            ("float", 1),
            ("float", 1),
            ("int", 2)
        ]
    );
    assert_eq!(
        def.leaf_paths("m"),
        [
            "m.scalar",
            "m.cube",
            "m.ids",
            "m.mask",
            "m.extra[0][0]",
            "m.named.a",
            "m.named.b",
            "m.nested[0][0]",
            "m.nested[0][1]"
        ]
    );
    let back: Mixed<B> = Tree::unflatten(&def, leaves).unwrap();
    assert_eq!(floats(back.scalar), floats(m.scalar));
    assert_eq!(floats(back.cube), floats(m.cube));
    assert_eq!(ints(back.ids), vec![4, 5]);
    assert_eq!(bools(back.mask), vec![true, false]);
    assert_eq!(
        floats(back.named["a"].clone()),
        floats(m.named["a"].clone())
    );
    assert_eq!(back.nested.1, Unit);
}

#[test]
fn should_carry_static_fields_and_rebuild_skipped_ones_with_default() {
    let c = Configured::<B> {
        weight: data([2], 0.0),
        activation: "gelu".into(),
        calls: 42,
        flag: Static(true),
    };
    let (leaves, def) = c.clone().flatten();
    assert_eq!(leaves.len(), 1);
    assert_eq!(def.leaf_paths("c"), ["c.weight"]);
    match &def {
        TreeDef::Node { keys, children, .. } => {
            // The skipped field is not in the structure; the static ones are, without leaves.
            assert_eq!(
                keys,
                &[
                    Key::Field("weight".into()),
                    Key::Field("activation".into()),
                    Key::Field("flag".into())
                ]
            );
            assert_eq!(children[1].static_ref::<String>().unwrap(), "gelu");
            assert_eq!(children[2].static_ref::<bool>(), Some(&true));
        }
        other => panic!("{other:?}"),
    }
    let back: Configured<B> = Tree::unflatten(&def, leaves).unwrap();
    assert_eq!(back.activation, "gelu");
    assert_eq!(back.calls, 0);
    assert_eq!(back.flag, Static(true));
}

#[test]
fn should_compare_static_fields_by_value() {
    let make = |act: &str, flag: bool| {
        Configured::<B> {
            weight: data([2], 0.0),
            activation: act.into(),
            calls: 1,
            flag: Static(flag),
        }
        .flatten()
        .1
    };
    assert!(make("relu", true).same_structure(&make("relu", true)));
    assert!(!make("relu", true).same_structure(&make("gelu", true)));
    assert!(!make("relu", true).same_structure(&make("relu", false)));
    let err = make("relu", true)
        .check_same(&make("gelu", true), "carry", "state")
        .unwrap_err();
    assert!(
        matches!(&err, VmapError::TreeMismatch { what, path, .. } if what == "carry" && path == "state.activation"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// Generics
// ---------------------------------------------------------------------------------------------

fn is_tree<Bk: Backend, T: Tree<Bk>>() {}

#[test]
fn should_derive_for_structs_generic_over_their_leaves() {
    // The same struct holds tensors (an output) and accumulators (its accumulator spec).
    is_tree::<B, Stats<Tensor<B, 1>, Tensor<B, 0>>>();
    is_tree::<B, Stats<Concat, Sum>>();
    is_tree::<V, Stats<Mean, (Sum, Concat)>>();
    is_tree::<B, Tuple2<Tensor<B, 1>, Sum>>();
    is_tree::<B, Explicit<Vec<Tensor<B, 2>>, B, V>>();
    is_tree::<B, WhereBackend<B>>();
    is_tree::<V, Ranked<V, 4>>();

    let r = Ranked::<B, 2> {
        x: data([1, 2], 0.0),
        ys: [Tensor::zeros([1, 1], &dev()), Tensor::ones([2, 1], &dev())],
    };
    assert_eq!(r.leaf_paths("r"), ["r.x", "r.ys[0]", "r.ys[1]"]);
    let (leaves, def) = r.flatten();
    let err = Ranked::<B, 3>::unflatten_named(&def, leaves, "r").unwrap_err();
    assert!(
        matches!(&err, VmapError::LeafMismatch { path, expected_rank: 3, .. } if path == "r.x"),
        "{err}"
    );

    let s = Stats::<Tensor<B, 2>, Vec<Tensor<B, 1, Int>>> {
        per_example: data([2, 2], 0.0),
        total: vec![
            Tensor::from_ints([1], &dev()),
            Tensor::from_ints([2], &dev()),
        ],
    };
    let (leaves, def) = s.flatten();
    assert_eq!(
        def.leaf_paths("s"),
        ["s.per_example", "s.total[0]", "s.total[1]"]
    );
    let back: Stats<Tensor<B, 2>, Vec<Tensor<B, 1, Int>>> = Tree::unflatten(&def, leaves).unwrap();
    assert_eq!(back.total.len(), 2);

    let (leaves, def) = Tree::<B>::flatten(Stats {
        per_example: Concat,
        total: Sum,
    });
    assert!(leaves.is_empty());
    assert_eq!(def.num_leaves(), 0);
    let _: Stats<Concat, Sum> = Tree::<B>::unflatten(&def, leaves).unwrap();

    let t = Tuple2::<Tensor<B, 1>, Tensor<B, 1>>(data([1], 0.0), vec!["x".into()], data([2], 1.0));
    let (leaves, def) = t.flatten();
    assert_eq!(def.leaf_paths("t"), ["t[0]", "t[2]"]);
    let back: Tuple2<Tensor<B, 1>, Tensor<B, 1>> = Tree::unflatten(&def, leaves).unwrap();
    assert!(back.1.is_empty());
    assert_eq!(back.2.dims(), [2]);

    let e = Explicit::<Tensor<B, 1, Bool>, B, V> {
        x: Tensor::from_bool(TensorData::from([true]), &dev()),
        w: data([3], 0.0),
        other: Some(data([1], 0.0)),
    };
    assert_eq!(e.leaf_paths("e"), ["e.x", "e.w"]);
    let (leaves, def) = e.flatten();
    let back: Explicit<Tensor<B, 1, Bool>, B, V> = Tree::unflatten(&def, leaves).unwrap();
    assert!(back.other.is_none());
}

// ---------------------------------------------------------------------------------------------
// Error paths
// ---------------------------------------------------------------------------------------------

#[test]
fn should_name_the_path_of_a_rank_mismatch() {
    let (leaves, def) = mlp::<B>().flatten();
    let err = FlatMlp::<B>::unflatten_named(&def, leaves, "args").unwrap_err();
    assert_eq!(
        err,
        VmapError::LeafMismatch {
            path: "args.layer1.weight".into(),
            expected: "float",
            expected_rank: 1,
            got: "float",
            got_rank: 2,
            shape: vec![3, 2],
        }
    );
    assert!(err.to_string().contains("args.layer1.weight"), "{err}");
}

#[test]
fn should_reject_another_struct_or_other_fields() {
    // Same fields, another struct name.
    let (leaves, def) = mlp::<B>().flatten();
    let err = Stats::<Linear<B>, Linear<B>>::unflatten_named(&def, leaves, "out").unwrap_err();
    assert!(
        matches!(&err, VmapError::TreeMismatch { path, why, .. } if path == "out" && why.contains("struct Stats")),
        "{err}"
    );
    // A tuple where a struct is expected, one level down.
    let m = Mlp::<B> {
        layer1: linear(1, 1, 0.0),
        layer2: linear(1, 1, 0.0),
    };
    let (leaves, mut def) = m.flatten();
    if let TreeDef::Node { children, .. } = &mut def {
        children[1] = TreeDef::Node {
            kind: NodeKind::Tuple,
            keys: vec![Key::Index(0), Key::Index(1)],
            children: vec![TreeDef::Leaf, TreeDef::Leaf],
        };
    }
    let err = Mlp::<B>::unflatten_named(&def, leaves, "args").unwrap_err();
    assert!(
        matches!(&err, VmapError::TreeMismatch { path, .. } if path == "args.layer2"),
        "{err}"
    );
    // Too few leaves.
    let (mut leaves, def) = mlp::<B>().flatten();
    leaves.pop();
    let err = Mlp::<B>::unflatten_named(&def, leaves, "args").unwrap_err();
    assert!(
        matches!(&err, VmapError::LeafCount { path, .. } if path == "args.layer2.bias"),
        "{err}"
    );
    // A static value of another type.
    let (leaves, def) = Configured::<B> {
        weight: data([2], 0.0),
        activation: "relu".into(),
        calls: 0,
        flag: Static(true),
    }
    .flatten();
    #[derive(Tree, Debug)]
    struct Configured2<B: Backend> {
        weight: Tensor<B, 1>,
        #[tree(static)]
        activation: u32,
        flag: Static<bool>,
    }
    #[derive(Tree, Debug)]
    #[allow(dead_code)]
    struct Configured3<B: Backend> {
        weight: Tensor<B, 1>,
        activation: Static<u32>,
        flag: Static<bool>,
    }
    let err = Configured2::<B>::unflatten_named(&def, leaves.clone(), "c").unwrap_err();
    assert!(
        matches!(&err, VmapError::TreeMismatch { path, .. } if path == "c.activation"),
        "{err}"
    );
    let err = Configured3::<B>::unflatten_named(&def, leaves, "c").unwrap_err();
    assert!(err.to_string().contains("c.activation"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Through vmap and micro_vmap, against loops
// ---------------------------------------------------------------------------------------------

/// One example: `x: [2]` through a 2-layer MLP given per-example parameters.
fn forward<Bk: Backend>(m: Mlp<Bk>, x: Tensor<Bk, 1>) -> Stats<Tensor<Bk, 1>, Tensor<Bk, 1>> {
    let h = m
        .layer1
        .weight
        .matmul(x.unsqueeze_dim(1))
        .squeeze_dim::<1>(1)
        + m.layer1.bias;
    let h = h.tanh();
    let y = m
        .layer2
        .weight
        .matmul(h.clone().unsqueeze_dim(1))
        .squeeze_dim::<1>(1)
        + m.layer2.bias;
    Stats {
        per_example: y,
        total: h.sum(),
    }
}

/// `Mlp` with one more axis in front of every leaf.
#[derive(Tree, Clone)]
struct BatchedMlp<B: Backend> {
    layer1: BatchedLinear<B>,
    layer2: BatchedLinear<B>,
}

#[derive(Tree, Clone)]
struct BatchedLinear<B: Backend> {
    weight: Tensor<B, 3>,
    bias: Tensor<B, 2>,
}

#[test]
fn should_vmap_over_derived_inputs_and_outputs() {
    let n = 4;
    let params = BatchedMlp::<V> {
        layer1: BatchedLinear {
            weight: data([n, 3, 2], 0.0),
            bias: data([n, 3], 1.0),
        },
        layer2: BatchedLinear {
            weight: data([n, 1, 3], 2.0),
            bias: data([n, 1], 3.0),
        },
    };
    let xs = data::<V, 2>([n, 2], 4.0);
    let out: Stats<Tensor<V, 2>, Tensor<V, 2>> =
        vmap(|(m, x): (Mlp<V>, Tensor<V, 1>)| forward(m, x))
            .call((params.clone(), xs.clone()))
            .unwrap();
    assert_eq!(out.per_example.dims(), [n, 1]);
    assert_eq!(out.total.dims(), [n, 1]);

    // The loop, on the plain backend.
    let (mut per, mut tot) = (Vec::new(), Vec::new());
    let plain = |t: Tensor<V, 3>, i: usize| {
        Tensor::<B, 2>::from_data(t.narrow(0, i, 1).squeeze_dim::<2>(0).into_data(), &dev())
    };
    let plain1 = |t: Tensor<V, 2>, i: usize| {
        Tensor::<B, 1>::from_data(t.narrow(0, i, 1).squeeze_dim::<1>(0).into_data(), &dev())
    };
    for i in 0..n {
        let m = Mlp::<B> {
            layer1: Linear {
                weight: plain(params.layer1.weight.clone(), i),
                bias: plain1(params.layer1.bias.clone(), i),
            },
            layer2: Linear {
                weight: plain(params.layer2.weight.clone(), i),
                bias: plain1(params.layer2.bias.clone(), i),
            },
        };
        let s = forward(m, plain1(xs.clone(), i));
        per.extend(floats(s.per_example));
        tot.extend(floats(s.total));
    }
    assert_close(&floats(out.per_example), &per);
    assert_close(&floats(out.total), &tot);

    // in_axes as a tree prefix: map the inputs, share layer2 (unbatched struct parameters).
    let shared = linear::<V>(1, 3, 7.0);
    let out: Tensor<V, 2> = vmap(|(l1, l2, x): (Linear<V>, Linear<V>, Tensor<V, 1>)| {
        forward(
            Mlp {
                layer1: l1,
                layer2: l2,
            },
            x,
        )
        .per_example
    })
    .in_axes(burn_vmap::transform::Axes::Seq(vec![
        burn_vmap::tree::Spec::Leaf(Some(0)),
        burn_vmap::tree::Spec::Leaf(None),
        burn_vmap::tree::Spec::Leaf(Some(0)),
    ]))
    .call((
        BatchedLinear::<V> {
            weight: params.layer1.weight.clone(),
            bias: params.layer1.bias.clone(),
        },
        shared.clone(),
        xs.clone(),
    ))
    .unwrap();
    let mut want = Vec::new();
    for i in 0..n {
        let m = Mlp::<B> {
            layer1: Linear {
                weight: plain(params.layer1.weight.clone(), i),
                bias: plain1(params.layer1.bias.clone(), i),
            },
            layer2: Linear {
                weight: Tensor::from_data(shared.weight.clone().into_data(), &dev()),
                bias: Tensor::from_data(shared.bias.clone().into_data(), &dev()),
            },
        };
        want.extend(floats(forward(m, plain1(xs.clone(), i)).per_example));
    }
    assert_close(&floats(out), &want);
}

#[test]
fn should_report_derived_paths_in_vmap_errors() {
    let params = BatchedLinear::<V> {
        weight: data([4, 3, 2], 0.0),
        bias: data([5, 3], 1.0),
    };
    let err = vmap(|l: Linear<V>| l.bias)
        .call_as::<V, V, _, _, _, Tensor<V, 2>>(params)
        .unwrap_err();
    assert_eq!(
        err,
        VmapError::InconsistentBatchSizes {
            arguments: vec![("args.weight".into(), 4), ("args.bias".into(), 5)]
        }
    );
    // The function's view has the wrong ranks.
    let params = BatchedLinear::<V> {
        weight: data([4, 3, 2], 0.0),
        bias: data([4, 3], 1.0),
    };
    let err = vmap(|l: BatchedLinear<V>| l.bias)
        .call_as::<V, V, _, _, _, Tensor<V, 3>>(params)
        .unwrap_err();
    assert!(
        matches!(&err, VmapError::LeafMismatch { path, expected_rank: 3, got_rank: 2, .. } if path == "args.weight"),
        "{err}"
    );
}

#[test]
fn should_accumulate_a_derived_output_with_a_derived_accumulator_spec() {
    let xs = data::<V, 2>([6, 3], 0.5);
    let f = |x: Tensor<V, 1>| Stats {
        per_example: x.clone().exp(),
        total: x.sum(),
    };
    let out: Stats<Tensor<V, 2>, Tensor<V, 1>> = micro_vmap(f)
        .microbatch_size(2)
        .accumulator(Stats {
            per_example: Concat,
            total: Mean,
        })
        .call(xs.clone())
        .unwrap();
    assert_close(&floats(out.per_example), &floats(xs.clone().exp()));
    let rows = floats(xs);
    let mean = rows.iter().sum::<f32>() / 6.0;
    assert_close(&floats(out.total), &[mean]);

    // A spec whose fields are not the output's does not fit.
    #[derive(Tree, Clone)]
    struct Other<P, T> {
        per_example: P,
        sum: T,
    }
    let err = micro_vmap(f)
        .accumulator(Other {
            per_example: Concat,
            sum: Sum,
        })
        .call_as::<V, V, _, _, _, Stats<Tensor<V, 2>, Tensor<V, 1>>>(data::<V, 2>([2, 3], 0.0))
        .map(|_| ())
        .unwrap_err();
    assert!(
        matches!(&err, VmapError::TreeMismatch { why, .. } if why.contains("sum")),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// Visitors and mappers
// ---------------------------------------------------------------------------------------------

/// Records (path, kind, rank) and the sum of every float leaf.
#[derive(Default)]
struct Record {
    seen: Vec<(String, &'static str, usize)>,
    float_sum: f32,
}

impl<Bk: Backend> TensorVisitor<Bk> for Record {
    fn visit_float<const D: usize>(&mut self, path: &str, t: &Tensor<Bk, D>) {
        self.seen.push((path.into(), "float", D));
        self.float_sum += t.clone().sum().into_scalar().elem::<f32>();
    }
    fn visit_int<const D: usize>(&mut self, path: &str, _: &Tensor<Bk, D, Int>) {
        self.seen.push((path.into(), "int", D));
    }
    fn visit_bool<const D: usize>(&mut self, path: &str, _: &Tensor<Bk, D, Bool>) {
        self.seen.push((path.into(), "bool", D));
    }
}

/// Adds 1 to floats, 10 to ints, negates bools; records paths.
#[derive(Default)]
struct Bump(Vec<String>);

impl<Bk: Backend> TensorMapper<Bk> for Bump {
    fn map_float<const D: usize>(&mut self, path: &str, t: Tensor<Bk, D>) -> Tensor<Bk, D> {
        self.0.push(path.into());
        t + 1.0
    }
    fn map_int<const D: usize>(&mut self, path: &str, t: Tensor<Bk, D, Int>) -> Tensor<Bk, D, Int> {
        self.0.push(path.into());
        t + 10
    }
    fn map_bool<const D: usize>(
        &mut self,
        path: &str,
        t: Tensor<Bk, D, Bool>,
    ) -> Tensor<Bk, D, Bool> {
        self.0.push(path.into());
        t.bool_not()
    }
}

fn mixed() -> Mixed<B> {
    Mixed {
        scalar: rank0(0.25),
        cube: data([2, 1, 3], 1.0),
        ids: Tensor::from_ints([4, 5], &dev()),
        mask: Tensor::from_bool(TensorData::from([[true, false]]), &dev()),
        extra: None,
        named: BTreeMap::new(),
        nested: (Pair(data([1], 5.0), Tensor::from_ints([[7]], &dev())), Unit),
    }
}

#[test]
fn should_visit_every_tensor_with_its_rank_kind_and_path() {
    let m = mixed();
    let mut rec = Record::default();
    m.visit_tensors(&mut rec).unwrap();
    assert_eq!(
        rec.seen,
        [
            ("scalar".to_string(), "float", 0),
            ("cube".to_string(), "float", 3),
            ("ids".to_string(), "int", 1),
            ("mask".to_string(), "bool", 2),
            ("nested[0][0]".to_string(), "float", 1),
            ("nested[0][1]".to_string(), "int", 2),
        ]
    );
    let want: f32 = [floats(m.scalar), floats(m.cube), floats(m.nested.0.0)]
        .concat()
        .iter()
        .sum();
    assert!((rec.float_sum - want).abs() < 1e-5);

    // A tree that is one tensor: the path is empty.
    let mut rec = Record::default();
    data::<B, 2>([1, 1], 0.0).visit_tensors(&mut rec).unwrap();
    assert_eq!(rec.seen, [(String::new(), "float", 2)]);
}

#[test]
fn should_map_every_tensor_keeping_the_structure() {
    let m = mixed();
    let mut bump = Bump::default();
    let out = m.clone().map_tensors(&mut bump).unwrap();
    assert_eq!(
        bump.0,
        [
            "scalar",
            "cube",
            "ids",
            "mask",
            "nested[0][0]",
            "nested[0][1]"
        ]
    );
    let plus1 = |v: Vec<f32>| v.into_iter().map(|x| x + 1.0).collect::<Vec<_>>();
    assert_close(&floats(out.scalar), &plus1(floats(m.scalar)));
    assert_close(&floats(out.cube), &plus1(floats(m.cube)));
    assert_eq!(ints(out.ids), vec![14, 15]);
    assert_eq!(bools(out.mask), vec![false, true]);
    assert!(out.extra.is_none());

    // Default methods are the identity; statics and skipped fields are as for unflatten.
    struct Nothing;
    impl<Bk: Backend> TensorMapper<Bk> for Nothing {}
    let c = Configured::<B> {
        weight: data([2], 0.0),
        activation: "relu".into(),
        calls: 3,
        flag: Static(false),
    };
    let out = c.clone().map_tensors(&mut Nothing).unwrap();
    assert_eq!(floats(out.weight), floats(c.weight));
    assert_eq!(
        (out.activation.as_str(), out.calls, out.flag),
        ("relu", 0, Static(false))
    );
}

#[test]
fn should_reject_ranks_above_the_maximum() {
    let big = (
        data::<B, 1>([1], 0.0),
        Tensor::<B, 9>::zeros([1; 9], &dev()),
    );
    let err = big.clone().map_tensors(&mut Bump::default()).unwrap_err();
    assert_eq!(
        err,
        VmapError::UnsupportedRank {
            path: "tree[1]".into(),
            rank: 9,
            max: MAX_RANK
        }
    );
    let mut rec = Record::default();
    let err = big.visit_tensors(&mut rec).unwrap_err();
    assert!(matches!(err, VmapError::UnsupportedRank { rank: 9, .. }));
    assert!(rec.seen.is_empty(), "nothing is visited on error");
    // map_leaves handles any rank.
    let (a, b) = big.map_leaves(|_, l| l).unwrap();
    assert_eq!((a.dims(), b.dims()), ([1], [1; 9]));
}

#[test]
fn should_map_leaves_and_report_kind_or_rank_changes() {
    use burn::tensor::TensorPrimitive;
    use burn::tensor::backend::ops::FloatTensorOps;
    let m = mlp::<B>();
    let mut paths = Vec::new();
    let out = m
        .clone()
        .map_leaves(|path, leaf| {
            paths.push(path.to_string());
            leaf.map(
                |f| TensorPrimitive::Float(B::float_neg(f.tensor())),
                |i| i,
                |b| b,
            )
        })
        .unwrap();
    assert_eq!(
        paths,
        [
            "layer1.weight",
            "layer1.bias",
            "layer2.weight",
            "layer2.bias"
        ]
    );
    let neg = |v: Vec<f32>| v.into_iter().map(|x| -x).collect::<Vec<_>>();
    assert_close(
        &floats(out.layer1.bias),
        &neg(floats(m.layer1.bias.clone())),
    );
    assert_close(
        &floats(out.layer2.weight),
        &neg(floats(m.layer2.weight.clone())),
    );

    // Changing the rank of a leaf is reported at its path.
    let err = m
        .clone()
        .map_leaves(|path, leaf| {
            if path == "layer2.bias" {
                Leaf::Float(data::<B, 2>([1, 1], 0.0).into_primitive())
            } else {
                leaf
            }
        })
        .unwrap_err();
    assert!(
        matches!(&err, VmapError::LeafMismatch { path, expected_rank: 1, got_rank: 2, .. } if path == "tree.layer2.bias"),
        "{err}"
    );
    // Changing the kind too.
    let err = m
        .map_leaves(|path, leaf| {
            if path == "layer1.weight" {
                Leaf::Int(Tensor::<B, 2, Int>::zeros([3, 2], &dev()).into_primitive())
            } else {
                leaf
            }
        })
        .unwrap_err();
    assert!(
        matches!(&err, VmapError::LeafMismatch { path, expected: "float", got: "int", .. } if path == "tree.layer1.weight"),
        "{err}"
    );
}

struct Axpy(f32, Vec<String>);

impl<Bk: Backend> TensorZipper<Bk> for Axpy {
    fn zip_float<const D: usize>(
        &mut self,
        path: &str,
        a: Tensor<Bk, D>,
        b: Tensor<Bk, D>,
    ) -> Tensor<Bk, D> {
        self.1.push(path.into());
        a + b * self.0
    }
}

#[test]
fn should_zip_two_trees_of_the_same_structure() {
    let (a, b) = (
        mlp::<B>(),
        Mlp::<B> {
            layer1: linear(3, 2, 10.0),
            layer2: linear(1, 3, 20.0),
        },
    );
    let mut z = Axpy(-0.5, Vec::new());
    let out = a.clone().zip_map(b.clone(), &mut z).unwrap();
    assert_eq!(
        z.1,
        [
            "layer1.weight",
            "layer1.bias",
            "layer2.weight",
            "layer2.bias"
        ]
    );
    let want: Vec<f32> = floats(a.layer2.weight.clone())
        .iter()
        .zip(floats(b.layer2.weight.clone()))
        .map(|(x, y)| x - 0.5 * y)
        .collect();
    assert_close(&floats(out.layer2.weight), &want);

    // Int and bool leaves keep the left tree's by default.
    let m = mixed();
    let mut other = mixed().map_tensors(&mut Bump::default()).unwrap();
    other.nested.1 = Unit;
    let out = m
        .clone()
        .zip_map(other, &mut Axpy(1.0, Vec::new()))
        .unwrap();
    assert_eq!(ints(out.ids), vec![4, 5]);
    let want: Vec<f32> = floats(m.cube.clone())
        .iter()
        .map(|x| 2.0 * x + 1.0)
        .collect();
    assert_close(&floats(out.cube), &want);
}

#[test]
fn should_name_the_path_where_zipped_trees_differ() {
    let mut z = Axpy(1.0, Vec::new());
    // Another length one level down.
    let a = Stats::<Tensor<B, 1>, Vec<Tensor<B, 1>>> {
        per_example: data([2], 0.0),
        total: vec![data([1], 0.0)],
    };
    let b = Stats::<Tensor<B, 1>, Vec<Tensor<B, 1>>> {
        per_example: data([2], 0.0),
        total: vec![],
    };
    let err = a.clone().zip_map(b, &mut z).unwrap_err();
    assert!(
        matches!(&err, VmapError::TreeMismatch { what, path, .. } if what == "zip_map" && path == "tree.total"),
        "{err}"
    );
    // Another static value.
    let c = |act: &str| Configured::<B> {
        weight: data([2], 0.0),
        activation: act.into(),
        calls: 0,
        flag: Static(true),
    };
    let err = c("relu").zip_map(c("tanh"), &mut z).unwrap_err();
    assert!(
        matches!(&err, VmapError::TreeMismatch { path, .. } if path == "tree.activation"),
        "{err}"
    );
    // Another rank or kind at the same position (a different type of the same structure).
    let other = Stats::<Tensor<B, 2>, Vec<Tensor<B, 1>>> {
        per_example: data([1, 2], 0.0),
        total: vec![data([1], 0.0)],
    };
    let err = a.clone().zip_map(other, &mut z).unwrap_err();
    assert!(
        matches!(&err, VmapError::TreeMismatch { path, why, .. } if path == "tree.per_example" && why.contains("rank 2")),
        "{err}"
    );
    let other = Stats::<Tensor<B, 1, Int>, Vec<Tensor<B, 1>>> {
        per_example: Tensor::from_ints([1, 2], &dev()),
        total: vec![data([1], 0.0)],
    };
    let err = a.zip_map(other, &mut z).unwrap_err();
    assert!(
        matches!(&err, VmapError::TreeMismatch { why, .. } if why.contains("int")),
        "{err}"
    );
    assert!(z.1.is_empty(), "nothing is zipped on error");
}

/// Per-example global-norm clipping written with a visitor and a mapper, under `vmap`,
/// against the same computation done example by example with plain arithmetic.
#[test]
fn should_clip_per_example_global_norms_under_vmap() {
    struct SumSquares<Bk: Backend>(Vec<Tensor<Bk, 1>>);
    impl<Bk: Backend> TensorVisitor<Bk> for SumSquares<Bk> {
        fn visit_float<const D: usize>(&mut self, _: &str, t: &Tensor<Bk, D>) {
            self.0.push(t.clone().powi_scalar(2).sum());
        }
    }
    struct Scale<Bk: Backend>(Tensor<Bk, 1>);
    impl<Bk: Backend> TensorMapper<Bk> for Scale<Bk> {
        fn map_float<const D: usize>(&mut self, _: &str, t: Tensor<Bk, D>) -> Tensor<Bk, D> {
            t * self.0.clone().reshape([1; D])
        }
    }
    let clip = |g: Mlp<V>| {
        let mut sq = SumSquares(Vec::new());
        g.visit_tensors(&mut sq).unwrap();
        let norm = Tensor::cat(sq.0, 0).sum().sqrt();
        g.map_tensors(&mut Scale(norm.recip().clamp_max(1.0)))
            .unwrap()
    };
    let n = 5;
    let grads = BatchedMlp::<V> {
        layer1: BatchedLinear {
            weight: data::<V, 3>([n, 3, 2], 0.0) * 0.8,
            bias: data([n, 3], 1.0),
        },
        layer2: BatchedLinear {
            weight: data::<V, 3>([n, 1, 3], 2.0) * 0.1,
            bias: data::<V, 2>([n, 1], 3.0) * 0.1,
        },
    };
    let clipped: BatchedMlp<V> = vmap(clip).call_as(grads.clone()).unwrap();

    let leaves = |m: BatchedMlp<V>| {
        [
            (floats(m.layer1.weight), 6),
            (floats(m.layer1.bias), 3),
            (floats(m.layer2.weight), 3),
            (floats(m.layer2.bias), 1),
        ]
    };
    let before = leaves(grads);
    let after = leaves(clipped);
    let mut some_clipped = false;
    for i in 0..n {
        let norm: f32 = before
            .iter()
            .map(|(v, k)| v[i * k..(i + 1) * k].iter().map(|x| x * x).sum::<f32>())
            .sum::<f32>()
            .sqrt();
        let factor = (1.0 / norm).min(1.0);
        some_clipped |= factor < 1.0;
        for ((b, k), (a, _)) in before.iter().zip(&after) {
            let want: Vec<f32> = b[i * k..(i + 1) * k].iter().map(|x| x * factor).collect();
            assert_close(&a[i * k..(i + 1) * k], &want);
        }
    }
    assert!(some_clipped);
}

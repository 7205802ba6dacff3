//! `#[derive(Tree)]` on Burn 0.22: round trips, paths, attributes, generics, `Lift` and error
//! paths. The visitor API, `DynTree` and `Spec` are in `tree.rs`.
//!
//! Derived structs through `vmap` and `micro_vmap` are in `derive_transforms.rs`.

mod common;

use std::collections::BTreeMap;
use std::marker::PhantomData;

use burn::tensor::{Bool, Int, Tensor, TensorData};
use burn_vmap::tree::{DynTree, Key, Lift, NodeKind, TreeDef};
use burn_vmap::{Static, Tree, VmapError};
use common::*;

// ---------------------------------------------------------------------------------------------
// Round trips and structure
// ---------------------------------------------------------------------------------------------

#[test]
fn should_round_trip_a_named_struct() {
    let l = linear(3, 2, 0.5);
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
    let back: Linear = Tree::unflatten(&def, leaves).unwrap();
    assert_eq!(floats(back.weight), floats(l.weight));
    assert_eq!(floats(back.bias), floats(l.bias));
}

#[test]
fn should_round_trip_a_tuple_struct_and_a_unit_struct() {
    let p = Pair(data([2], 0.0), Tensor::from_ints([[1, 2, 3]], &dev()));
    let (leaves, def) = p.clone().flatten();
    assert_eq!(def.leaf_paths("p"), ["p[0]", "p[1]"]);
    assert!(
        matches!(&def, TreeDef::Node { kind: NodeKind::Struct("Pair"), keys, .. }
        if keys == &[Key::Index(0), Key::Index(1)])
    );
    let back: Pair = Tree::unflatten(&def, leaves).unwrap();
    assert_eq!(floats(back.0), floats(p.0));
    assert_eq!(ints(back.1), vec![1, 2, 3]);

    let (leaves, def) = Unit.flatten();
    assert!(leaves.is_empty());
    assert!(
        matches!(&def, TreeDef::Node { kind: NodeKind::Struct("Unit"), keys, .. } if keys.is_empty())
    );
    assert_eq!(Unit::unflatten(&def, leaves), Ok(Unit));
}

#[test]
fn should_name_nested_paths_in_declaration_order() {
    let m = mlp();
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
    let back: Mlp = Tree::unflatten(&def, leaves).unwrap();
    assert_eq!(floats(back.layer2.weight), floats(m.layer2.weight));
}

#[test]
fn should_round_trip_mixed_ranks_and_kinds() {
    let mut named = BTreeMap::new();
    named.insert("b".to_string(), data::<1>([2], 3.0));
    named.insert("a".to_string(), data::<1>([1], 4.0));
    let m = mixed(Some(vec![data([3], 2.0)]), named);
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
    let back: Mixed = Tree::unflatten(&def, leaves).unwrap();
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
    let c = configured("gelu", true);
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
    let back: Configured = Tree::unflatten(&def, leaves).unwrap();
    assert_eq!(back.activation, "gelu");
    assert_eq!(back.calls, 0);
    assert_eq!(back.flag, Static(true));
}

#[test]
fn should_compare_static_fields_by_value() {
    let make = |act: &str, flag: bool| configured(act, flag).flatten().1;
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

fn is_tree<T: Tree>() {}

#[test]
fn should_derive_for_structs_generic_over_their_leaves() {
    // The same struct holds tensors (an output) and leaf-less trees (an accumulator spec).
    is_tree::<Stats<Tensor<1>, Tensor<0>>>();
    is_tree::<Stats<Static<&'static str>, ()>>();
    is_tree::<Stats<(), (Static<u8>, ())>>();
    is_tree::<Tuple2<Tensor<1>, Static<u8>>>();
    is_tree::<Skipping<Vec<Tensor<2>>, String>>();
    is_tree::<Tagged<Tensor<1>, String>>();
    is_tree::<Ranked<4>>();

    let r = Ranked::<2> {
        x: data([1, 2], 0.0),
        ys: [Tensor::zeros([1, 1], &dev()), Tensor::ones([2, 1], &dev())],
    };
    assert_eq!(r.leaf_paths("r"), ["r.x", "r.ys[0]", "r.ys[1]"]);
    let (leaves, def) = r.flatten();
    let err = Ranked::<3>::unflatten_named(&def, leaves, "r").unwrap_err();
    assert!(
        matches!(&err, VmapError::LeafMismatch { path, expected_rank: 3, .. } if path == "r.x"),
        "{err}"
    );

    let s = Stats::<Tensor<2>, Vec<Tensor<1, Int>>> {
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
    let back: Stats<Tensor<2>, Vec<Tensor<1, Int>>> = Tree::unflatten(&def, leaves).unwrap();
    assert_eq!(back.total.len(), 2);

    let (leaves, def) = Stats {
        per_example: Static("concat"),
        total: (),
    }
    .flatten();
    assert!(leaves.is_empty());
    assert_eq!(def.num_leaves(), 0);
    let back: Stats<Static<&str>, ()> = Tree::unflatten(&def, leaves).unwrap();
    assert_eq!(back.per_example, Static("concat"));

    let t = Tuple2::<Tensor<1>, Tensor<1>>(data([1], 0.0), vec!["x".into()], data([2], 1.0));
    let (leaves, def) = t.flatten();
    assert_eq!(def.leaf_paths("t"), ["t[0]", "t[2]"]);
    let back: Tuple2<Tensor<1>, Tensor<1>> = Tree::unflatten(&def, leaves).unwrap();
    assert!(back.1.is_empty());
    assert_eq!(back.2.dims(), [2]);

    let e = Skipping::<Tensor<1, Bool>, Tensor<1>> {
        x: Tensor::from_bool(TensorData::from([true]), &dev()),
        other: Some(data([1], 0.0)),
    };
    assert_eq!(e.leaf_paths("e"), ["e.x"]);
    let (leaves, def) = e.flatten();
    let back: Skipping<Tensor<1, Bool>, Tensor<1>> = Tree::unflatten(&def, leaves).unwrap();
    assert!(back.other.is_none());

    let g = Tagged {
        x: data::<1>([2], 0.0),
        tag: 7_u32,
    };
    let (leaves, def) = g.flatten();
    assert_eq!(def.leaf_paths("g"), ["g.x"]);
    let back: Tagged<Tensor<1>, u32> = Tree::unflatten(&def, leaves).unwrap();
    assert_eq!(back.tag, 7);
}

fn lifted<T: Lift>() -> PhantomData<T::Lifted> {
    PhantomData
}

#[test]
fn should_lift_generic_structs_and_containers() {
    // Every tensor gains an axis; the kind is kept; statics and dynamic trees keep their type.
    let _: PhantomData<(Tensor<1>, Tensor<2, Int>, Tensor<8, Bool>)> =
        lifted::<(Tensor<0>, Tensor<1, Int>, Tensor<7, Bool>)>();
    let _: PhantomData<Stats<Tensor<3>, Vec<Option<Tensor<1, Int>>>>> =
        lifted::<Stats<Tensor<2>, Vec<Option<Tensor<0, Int>>>>>();
    type Map<const D: usize> = BTreeMap<String, Box<Tensor<D>>>;
    let _: PhantomData<Tuple2<[Tensor<2>; 2], Map<1>>> = lifted::<Tuple2<[Tensor<1>; 2], Map<0>>>();
    let _: PhantomData<Stats<Static<u8>, (DynTree, ())>> =
        lifted::<Stats<Static<u8>, (DynTree, ())>>();

    // The lifted type is the batched mirror: a batch of `Stats` rebuilds into it.
    let batch = Stats {
        per_example: data::<2>([4, 3], 0.0),
        total: data::<1>([4], 1.0),
    };
    let (leaves, def) = batch.flatten();
    let back = <Stats<Tensor<1>, Tensor<0>> as Lift>::Lifted::unflatten(&def, leaves).unwrap();
    assert_eq!((back.per_example.dims(), back.total.dims()), ([4, 3], [4]));
}

// ---------------------------------------------------------------------------------------------
// Error paths
// ---------------------------------------------------------------------------------------------

#[test]
fn should_name_the_path_of_a_rank_mismatch() {
    let (leaves, def) = mlp().flatten();
    let err = FlatMlp::unflatten_named(&def, leaves, "args").unwrap_err();
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
    let (leaves, def) = mlp().flatten();
    let err = Stats::<Linear, Linear>::unflatten_named(&def, leaves, "out").unwrap_err();
    assert!(
        matches!(&err, VmapError::TreeMismatch { path, why, .. } if path == "out" && why.contains("struct Stats")),
        "{err}"
    );
    // A tuple where a struct is expected, one level down.
    let m = Mlp {
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
    let err = Mlp::unflatten_named(&def, leaves, "args").unwrap_err();
    assert!(
        matches!(&err, VmapError::TreeMismatch { path, .. } if path == "args.layer2"),
        "{err}"
    );
    // Too few leaves, and too many.
    let (mut leaves, def) = mlp().flatten();
    let extra = leaves.pop().unwrap();
    let err = Mlp::unflatten_named(&def, leaves.clone(), "args").unwrap_err();
    assert!(
        matches!(&err, VmapError::LeafCount { path, .. } if path == "args.layer2.bias"),
        "{err}"
    );
    leaves.extend([extra.clone(), extra]);
    let err = Mlp::unflatten_named(&def, leaves, "args").unwrap_err();
    assert_eq!(
        err,
        VmapError::LeafCount {
            path: "args".into(),
            expected: 4,
            got: 5
        }
    );
    // A static value of another type.
    let (leaves, def) = configured("relu", true).flatten();
    #[derive(Tree, Debug)]
    struct Configured2 {
        weight: Tensor<1>,
        #[tree(static)]
        activation: u32,
        flag: Static<bool>,
    }
    #[derive(Tree, Debug)]
    #[allow(dead_code)]
    struct Configured3 {
        weight: Tensor<1>,
        activation: Static<u32>,
        flag: Static<bool>,
    }
    let err = Configured2::unflatten_named(&def, leaves.clone(), "c").unwrap_err();
    assert!(
        matches!(&err, VmapError::TreeMismatch { path, .. } if path == "c.activation"),
        "{err}"
    );
    let err = Configured3::unflatten_named(&def, leaves, "c").unwrap_err();
    assert!(err.to_string().contains("c.activation"), "{err}");
}

//! The tree API on Burn 0.22: visitors, mappers, zippers, `map_leaves`, `DynTree` and `Spec`,
//! over derived structs.

mod common;

use std::collections::BTreeMap;

use burn::tensor::{Bool, Float, Int, Tensor};
use burn_vmap::tree::{DynTree, Leaf, MAX_RANK, Spec};
use burn_vmap::tree::{TensorMapper, TensorVisitor, TensorZipper};
use burn_vmap::{Static, Tree, VmapError};
use common::*;

// ---------------------------------------------------------------------------------------------
// Visitors and mappers
// ---------------------------------------------------------------------------------------------

/// Records (path, kind, rank) and the sum of every float leaf.
#[derive(Default)]
struct Record {
    seen: Vec<(String, &'static str, usize)>,
    float_sum: f32,
}

impl TensorVisitor for Record {
    fn visit_float<const D: usize>(&mut self, path: &str, t: &Tensor<D>) {
        self.seen.push((path.into(), "float", D));
        self.float_sum += t.clone().sum().into_scalar::<f32>();
    }
    fn visit_int<const D: usize>(&mut self, path: &str, _: &Tensor<D, Int>) {
        self.seen.push((path.into(), "int", D));
    }
    fn visit_bool<const D: usize>(&mut self, path: &str, _: &Tensor<D, Bool>) {
        self.seen.push((path.into(), "bool", D));
    }
}

/// Adds 1 to floats, 10 to ints, negates bools; records paths.
#[derive(Default)]
struct Bump(Vec<String>);

impl TensorMapper for Bump {
    fn map_float<const D: usize>(&mut self, path: &str, t: Tensor<D>) -> Tensor<D> {
        self.0.push(path.into());
        t + 1.0
    }
    fn map_int<const D: usize>(&mut self, path: &str, t: Tensor<D, Int>) -> Tensor<D, Int> {
        self.0.push(path.into());
        t + 10
    }
    fn map_bool<const D: usize>(&mut self, path: &str, t: Tensor<D, Bool>) -> Tensor<D, Bool> {
        self.0.push(path.into());
        t.bool_not()
    }
}

#[test]
fn should_visit_every_tensor_with_its_rank_kind_and_path() {
    let m = mixed(None, BTreeMap::new());
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
    data::<2>([1, 1], 0.0).visit_tensors(&mut rec).unwrap();
    assert_eq!(rec.seen, [(String::new(), "float", 2)]);
}

#[test]
fn should_map_every_tensor_keeping_the_structure() {
    let m = mixed(None, BTreeMap::new());
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
    impl TensorMapper for Nothing {}
    let c = configured("relu", false);
    let out = c.clone().map_tensors(&mut Nothing).unwrap();
    assert_eq!(floats(out.weight), floats(c.weight));
    assert_eq!(
        (out.activation.as_str(), out.calls, out.flag),
        ("relu", 0, Static(false))
    );
}

#[test]
fn should_reject_ranks_above_the_maximum() {
    let big = (data::<1>([1], 0.0), Tensor::<9>::zeros([1; 9], &dev()));
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
    let mut z = Axpy(1.0, Vec::new());
    let err = big.clone().zip_map(big.clone(), &mut z).unwrap_err();
    assert!(matches!(err, VmapError::UnsupportedRank { rank: 9, .. }));
    assert!(z.1.is_empty(), "nothing is zipped on error");
    // map_leaves handles any rank.
    let (a, b) = big.map_leaves(|_, l| l).unwrap();
    assert_eq!((a.dims(), b.dims()), ([1], [1; 9]));
}

/// Negates a float leaf of rank 1 or 2.
fn neg(leaf: Leaf) -> Leaf {
    match leaf.shape().num_dims() {
        1 => Leaf::new(leaf.into_tensor::<1, Float>().unwrap().neg()),
        2 => Leaf::new(leaf.into_tensor::<2, Float>().unwrap().neg()),
        _ => leaf,
    }
}

#[test]
fn should_map_leaves_and_report_kind_or_rank_changes() {
    let m = mlp();
    let mut paths = Vec::new();
    let out = m
        .clone()
        .map_leaves(|path, leaf| {
            paths.push(path.to_string());
            neg(leaf)
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
    let negated = |v: Vec<f32>| v.into_iter().map(|x| -x).collect::<Vec<_>>();
    assert_close(
        &floats(out.layer1.bias),
        &negated(floats(m.layer1.bias.clone())),
    );
    assert_close(
        &floats(out.layer2.weight),
        &negated(floats(m.layer2.weight.clone())),
    );

    // Changing the rank of a leaf is reported at its path.
    let err = m
        .clone()
        .map_leaves(|path, leaf| {
            if path == "layer2.bias" {
                Leaf::new(data::<2>([1, 1], 0.0))
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
                Leaf::new(Tensor::<2, Int>::zeros([3, 2], &dev()))
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

impl TensorZipper for Axpy {
    fn zip_float<const D: usize>(&mut self, path: &str, a: Tensor<D>, b: Tensor<D>) -> Tensor<D> {
        self.1.push(path.into());
        a + b * self.0
    }
}

#[test]
fn should_zip_two_trees_of_the_same_structure() {
    let (a, b) = (
        mlp(),
        Mlp {
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

    // Int and bool leaves keep the left tree's by default. `mixed` holds a rank-0 leaf, which
    // Burn 0.22.1's fusion cannot add (its fused kernels index a rank-0 tensor's strides at
    // `rank - 1`; `.ci/run` skips the other rank-0 cases on wgpu for the same gap).
    if cfg!(feature = "fusion") && cfg!(any(feature = "wgpu", feature = "cuda")) {
        return;
    }
    let m = mixed(None, BTreeMap::new());
    let other = mixed(None, BTreeMap::new())
        .map_tensors(&mut Bump::default())
        .unwrap();
    let out = m
        .clone()
        .zip_map(other, &mut Axpy(1.0, Vec::new()))
        .unwrap();
    assert_eq!(ints(out.ids), vec![4, 5]);
    assert_eq!(bools(out.mask), vec![true, false]);
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
    let a = Stats::<Tensor<1>, Vec<Tensor<1>>> {
        per_example: data([2], 0.0),
        total: vec![data([1], 0.0)],
    };
    let b = Stats::<Tensor<1>, Vec<Tensor<1>>> {
        per_example: data([2], 0.0),
        total: vec![],
    };
    let err = a.clone().zip_map(b, &mut z).unwrap_err();
    assert!(
        matches!(&err, VmapError::TreeMismatch { what, path, .. } if what == "zip_map" && path == "tree.total"),
        "{err}"
    );
    // Another static value.
    let err = configured("relu", true)
        .zip_map(configured("tanh", true), &mut z)
        .unwrap_err();
    assert!(
        matches!(&err, VmapError::TreeMismatch { path, .. } if path == "tree.activation"),
        "{err}"
    );
    // Another rank or kind at the same position (a different type of the same structure).
    let other = Stats::<Tensor<2>, Vec<Tensor<1>>> {
        per_example: data([1, 2], 0.0),
        total: vec![data([1], 0.0)],
    };
    let err = a.clone().zip_map(other, &mut z).unwrap_err();
    assert!(
        matches!(&err, VmapError::TreeMismatch { path, why, .. } if path == "tree.per_example" && why.contains("rank 2")),
        "{err}"
    );
    let other = Stats::<Tensor<1, Int>, Vec<Tensor<1>>> {
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

/// Global-norm clipping written with a visitor and a mapper (what the 0.21 test ran under
/// `vmap`, here example by example), against the same computation in plain arithmetic.
#[test]
fn should_clip_global_norms_with_a_visitor_and_a_mapper() {
    struct SumSquares(Vec<Tensor<1>>);
    impl TensorVisitor for SumSquares {
        fn visit_float<const D: usize>(&mut self, _: &str, t: &Tensor<D>) {
            self.0.push(t.clone().powi_scalar(2).sum());
        }
    }
    struct Scale(Tensor<1>);
    impl TensorMapper for Scale {
        fn map_float<const D: usize>(&mut self, _: &str, t: Tensor<D>) -> Tensor<D> {
            t * self.0.clone().reshape([1; D])
        }
    }
    let clip = |g: Mlp| {
        let mut sq = SumSquares(Vec::new());
        g.visit_tensors(&mut sq).unwrap();
        let norm = Tensor::cat(sq.0, 0).sum().sqrt();
        g.map_tensors(&mut Scale(norm.recip().clamp_max(1.0)))
            .unwrap()
    };
    let leaves = |m: Mlp| {
        [
            floats(m.layer1.weight),
            floats(m.layer1.bias),
            floats(m.layer2.weight),
            floats(m.layer2.bias),
        ]
    };
    let mut some_clipped = false;
    for (i, scale) in [0.1_f32, 0.8, 2.0].into_iter().enumerate() {
        let seed = i as f32;
        let g = Mlp {
            layer1: Linear {
                weight: data([3, 2], seed) * scale,
                bias: data([3], seed + 1.0),
            },
            layer2: Linear {
                weight: data([1, 3], seed + 2.0),
                bias: data([1], seed + 3.0),
            },
        };
        let before = leaves(g.clone());
        let after = leaves(clip(g));
        let norm = before.iter().flatten().map(|x| x * x).sum::<f32>().sqrt();
        let factor = (1.0 / norm).min(1.0);
        some_clipped |= factor < 1.0;
        for (b, a) in before.iter().zip(&after) {
            let want: Vec<f32> = b.iter().map(|x| x * factor).collect();
            assert_close(a, &want);
        }
    }
    assert!(some_clipped);
}

// ---------------------------------------------------------------------------------------------
// DynTree and Spec
// ---------------------------------------------------------------------------------------------

#[test]
fn should_erase_and_recover_types_with_a_dyn_tree() {
    let d = DynTree::new(mlp());
    assert_eq!(d.leaves().len(), 4);
    assert_eq!(d.def().leaf_paths("m")[3], "m.layer2.bias");
    // The wrong ranks name the argument.
    let err = d.clone().get::<FlatMlp>().unwrap_err();
    assert!(
        matches!(&err, VmapError::LeafMismatch { path, .. } if path == "args.layer1.weight"),
        "{err}"
    );
    let m: Mlp = d.clone().get().unwrap();
    assert_eq!(m.layer1.weight.dims(), [3, 2]);

    // A DynTree is itself a tree: it flattens in place of its contents and rebuilds from them.
    let (leaves, def) = (data::<1>([2], 0.0), d).flatten();
    assert_eq!(
        def.leaf_paths("x"),
        [
            "x[0]",
            "x[1].layer1.weight",
            "x[1].layer1.bias",
            "x[1].layer2.weight",
            "x[1].layer2.bias"
        ]
    );
    let (_, back): (Tensor<1>, DynTree) = Tree::unflatten(&def, leaves).unwrap();
    let (leaves, def) = back.into_parts();
    let m: Mlp = Tree::unflatten(&def, leaves).unwrap();
    assert_eq!(m.layer2.bias.dims(), [1]);
}

#[test]
fn should_broadcast_spec_prefixes_to_the_leaves() {
    let def = mlp().flatten().1;
    // One value per subtree.
    let spec = Spec::fields([("layer1", Spec::Leaf(0)), ("layer2", Spec::Leaf(1))]);
    assert_eq!(
        spec.broadcast_to(&def, "in_axes", "args").unwrap(),
        [0, 0, 1, 1]
    );
    assert_eq!(
        Spec::Leaf(7).broadcast_to(&def, "in_axes", "args").unwrap(),
        [7; 4]
    );
    let spec = Spec::fields([
        (
            "layer1",
            Spec::fields([("weight", Spec::Leaf(1)), ("bias", Spec::Leaf(2))]),
        ),
        ("layer2", Spec::Leaf(3)),
    ]);
    assert_eq!(
        spec.broadcast_to(&def, "in_axes", "args").unwrap(),
        [1, 2, 3, 3]
    );
    // Positional entries for tuples; statics take no entry's value.
    let def = (data::<1>([1], 0.0), Static(1), vec![data::<1>([1], 0.0)])
        .flatten()
        .1;
    let spec: Spec<Option<isize>> = Spec::from([Some(0), None, Some(1)]);
    assert_eq!(
        spec.broadcast_to(&def, "in_axes", "args").unwrap(),
        [Some(0), Some(1)]
    );

    // A prefix that does not fit names the path.
    let def = mlp().flatten().1;
    let err = Spec::fields([("layer1", Spec::Leaf(0))]).broadcast_to(&def, "in_axes", "args");
    assert!(
        matches!(&err, Err(VmapError::TreeMismatch { what, why, .. }) if what == "in_axes" && why.contains("layer2")),
        "{err:?}"
    );
    let err = Spec::fields([("layer3", Spec::Leaf(0))]).broadcast_to(&def, "in_axes", "args");
    assert!(matches!(&err, Err(VmapError::TreeMismatch { why, .. }) if why.contains("layer3")));
    let err = Spec::<i32>::from([0, 1, 2])
        .broadcast_to(&def, "out_axes", "out")
        .unwrap_err();
    assert!(
        matches!(&err, VmapError::TreeMismatch { path, .. } if path == "out"),
        "{err}"
    );
    let nested = Spec::Seq(vec![Spec::Leaf(0), Spec::Seq(vec![Spec::Leaf(1)])]);
    let def = (data::<1>([1], 0.0), data::<1>([1], 0.0)).flatten().1;
    let err = nested.broadcast_to(&def, "in_axes", "args").unwrap_err();
    assert!(
        matches!(&err, VmapError::TreeMismatch { path, .. } if path == "args[1]"),
        "{err}"
    );
}

#[test]
fn should_flatten_a_spec_of_trees() {
    let spec = Spec::Seq(vec![
        Spec::Leaf(data::<1>([2], 0.0)),
        Spec::fields([("a", Spec::Leaf(data::<1>([3], 0.0)))]),
    ]);
    let (leaves, def) = spec.flatten();
    assert_eq!(def.leaf_paths("s"), ["s[0]", "s[1].a"]);
    let back: Spec<Tensor<1>> = Tree::unflatten(&def, leaves).unwrap();
    match back {
        Spec::Seq(items) => match &items[..] {
            [Spec::Leaf(x), Spec::Fields(f)] => {
                assert_eq!(x.dims(), [2]);
                assert_eq!(f[0].0, "a");
            }
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

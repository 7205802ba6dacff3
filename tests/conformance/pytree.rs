//! Dynamic pytrees: what programs take and return, of any rank and kind.

use crate::*;

/// A pytree of tensors of any rank and kind, decided at run time: what programs take and return.
///
/// Burn 0.22 tensors carry no backend, so neither does `Pt`: the same tree holds the user's
/// tensors (inputs, outputs) and the capture tensors a recorded program sees.
#[derive(Debug, Clone)]
pub(crate) enum Pt {
    Leaf(Leaf),
    /// A dict / struct (JAX sorts the keys, as `BTreeMap` does).
    Dict(BTreeMap<String, Pt>),
    /// A tuple / list.
    Tuple(Vec<Pt>),
}

impl Tree for Pt {
    fn flatten_into(self, leaves: &mut Vec<Leaf>) -> TreeDef {
        match self {
            Pt::Leaf(l) => {
                leaves.push(l);
                TreeDef::Leaf
            }
            Pt::Dict(m) => {
                let mut keys = Vec::with_capacity(m.len());
                let mut children = Vec::with_capacity(m.len());
                for (k, v) in m {
                    keys.push(Key::Field(k));
                    children.push(v.flatten_into(leaves));
                }
                TreeDef::Node {
                    kind: NodeKind::Map,
                    keys,
                    children,
                }
            }
            Pt::Tuple(items) => {
                let keys = (0..items.len()).map(Key::Index).collect();
                let children = items.into_iter().map(|x| x.flatten_into(leaves)).collect();
                TreeDef::Node {
                    kind: NodeKind::Tuple,
                    keys,
                    children,
                }
            }
        }
    }

    fn unflatten_from(def: &TreeDef, leaves: &mut Leaves) -> Result<Self, VmapError> {
        match def {
            TreeDef::Leaf => leaves.next_leaf().map(Pt::Leaf),
            TreeDef::Node {
                kind: NodeKind::Map | NodeKind::Struct(_),
                keys,
                children,
            } => {
                let mut out = BTreeMap::new();
                for (k, c) in keys.iter().zip(children) {
                    let name = match k {
                        Key::Field(name) => name.clone(),
                        Key::Index(i) => i.to_string(),
                    };
                    out.insert(
                        name,
                        leaves.with_key(k.clone(), |l| Pt::unflatten_from(c, l))?,
                    );
                }
                Ok(Pt::Dict(out))
            }
            TreeDef::Node { keys, children, .. } => {
                let items = keys
                    .iter()
                    .zip(children)
                    .map(|(k, c)| leaves.with_key(k.clone(), |l| Pt::unflatten_from(c, l)))
                    .collect::<Result<_, _>>()?;
                Ok(Pt::Tuple(items))
            }
            TreeDef::Static(_) => Err(VmapError::TreeMismatch {
                what: "tree".into(),
                path: leaves.path(),
                why: "the runner's pytrees have no static values".into(),
            }),
        }
    }
}

/// A typed tensor as a [`Pt`] leaf.
pub(crate) fn pt<const D: usize, K: TensorKind + Basic>(t: Tensor<D, K>) -> Pt {
    Pt::Leaf(Leaf::new(t))
}

impl Pt {
    pub(crate) fn leaf(&self) -> &Leaf {
        match self {
            Pt::Leaf(l) => l,
            other => panic!("runner: expected a tensor, got {}", other.describe()),
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            Pt::Leaf(l) => format!("{} tensor of shape {:?}", l.kind_name(), l.shape().to_vec()),
            Pt::Dict(m) => format!("dict with keys {:?}", m.keys().collect::<Vec<_>>()),
            Pt::Tuple(v) => format!("tuple of {}", v.len()),
        }
    }

    /// Rank of a tensor leaf (under `vmap`, the logical rank: mapped axes removed).
    pub(crate) fn rank(&self) -> usize {
        self.leaf().shape().num_dims()
    }

    /// Shape of a tensor leaf.
    pub(crate) fn dims(&self) -> Vec<usize> {
        self.leaf().shape().to_vec()
    }

    pub(crate) fn is_float(&self) -> bool {
        self.leaf().kind_name() == "float"
    }

    /// The typed tensor `Tensor<D, K>`; panics with the library's error otherwise.
    pub(crate) fn get<const D: usize, K: TensorKind + Basic>(self) -> Tensor<D, K> {
        match self {
            Pt::Leaf(l) => l
                .into_tensor::<D, K>()
                .unwrap_or_else(|e| panic!("runner: {e}")),
            other => panic!("runner: expected a tensor, got {}", other.describe()),
        }
    }

    pub(crate) fn f<const D: usize>(self) -> Tensor<D> {
        self.get::<D, Float>()
    }

    pub(crate) fn i<const D: usize>(self) -> Tensor<D, Int> {
        self.get::<D, Int>()
    }

    pub(crate) fn field(&self, key: &str) -> Pt {
        match self {
            Pt::Dict(m) => m
                .get(key)
                .cloned()
                .unwrap_or_else(|| panic!("runner: no field {key:?} in {}", self.describe())),
            other => panic!(
                "runner: expected a dict with field {key:?}, got {}",
                other.describe()
            ),
        }
    }

    /// The positional arguments of a call (the argument tuple).
    pub(crate) fn into_args(self) -> Vec<Pt> {
        match self {
            Pt::Tuple(v) => v,
            other => panic!(
                "runner: expected the argument tuple, got {}",
                other.describe()
            ),
        }
    }

    /// Leafwise `f(self_leaf, other_leaf)` over two trees of the same structure.
    #[allow(dead_code)] // used by apis/micro.rs (grad_and_square's variance), not built yet
    pub(crate) fn zip_with(self, other: &Pt, f: impl Fn(Pt, Pt) -> Pt + Copy) -> Pt {
        match (self, other) {
            (Pt::Dict(a), Pt::Dict(b)) => Pt::Dict(
                a.into_iter()
                    .map(|(k, v)| {
                        let o = &b[&k];
                        (k, v.zip_with(o, f))
                    })
                    .collect(),
            ),
            (Pt::Tuple(a), Pt::Tuple(b)) => Pt::Tuple(
                a.into_iter()
                    .zip(b)
                    .map(|(x, y)| x.zip_with(y, f))
                    .collect(),
            ),
            (a, b) => f(a, b.clone()),
        }
    }

    /// Applies `f` to every leaf, keeping the structure.
    pub(crate) fn map_leaves(self, f: &mut impl FnMut(Pt) -> Pt) -> Pt {
        match self {
            Pt::Leaf(_) => f(self),
            Pt::Dict(m) => Pt::Dict(m.into_iter().map(|(k, v)| (k, v.map_leaves(f))).collect()),
            Pt::Tuple(v) => Pt::Tuple(v.into_iter().map(|x| x.map_leaves(f)).collect()),
        }
    }
}

/// `N` positional arguments.
pub(crate) fn take<const N: usize>(args: Vec<Pt>) -> [Pt; N] {
    let n = args.len();
    args.try_into()
        .unwrap_or_else(|_| panic!("runner: the program takes {N} arguments, got {n}"))
}

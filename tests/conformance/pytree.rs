//! Dynamic pytrees: what programs take and return, of any rank and kind.

use crate::*;

/// A pytree of tensors of any rank and kind, decided at run time: what programs take and return.
#[derive(Debug, Clone)]
pub(crate) enum Pt<B: Backend> {
    Leaf(Leaf<B>),
    /// A dict / struct (JAX sorts the keys, as `BTreeMap` does).
    Dict(BTreeMap<String, Pt<B>>),
    /// A tuple / list.
    Tuple(Vec<Pt<B>>),
}

impl<B: Backend> Tree<B> for Pt<B> {
    fn flatten_into(self, leaves: &mut Vec<Leaf<B>>) -> TreeDef {
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

    fn unflatten_from(def: &TreeDef, leaves: &mut Leaves<B>) -> Result<Self, VmapError> {
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

/// A typed tensor (or any typed tree) as a [`Pt`].
pub(crate) fn pt<B: Backend, T: Tree<B>>(t: T) -> Pt<B> {
    let (leaves, def) = t.flatten();
    Pt::unflatten(&def, leaves).expect("a flattened tree rebuilds")
}

impl<B: Backend> Pt<B> {
    pub(crate) fn leaf(&self) -> &Leaf<B> {
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

    /// Logical rank of a tensor leaf.
    pub(crate) fn rank(&self) -> usize {
        self.leaf().shape().num_dims()
    }

    pub(crate) fn is_float(&self) -> bool {
        matches!(self.leaf(), Leaf::Float(_))
    }

    /// The typed tree `T` (a tensor of the right kind and rank); panics with the library's
    /// error otherwise.
    pub(crate) fn get<T: Tree<B>>(self) -> T {
        let (leaves, def) = self.flatten();
        T::unflatten_named(&def, leaves, "program argument")
            .unwrap_or_else(|e| panic!("runner: {e}"))
    }

    pub(crate) fn f<const D: usize>(self) -> Tensor<B, D> {
        self.get()
    }

    pub(crate) fn i<const D: usize>(self) -> Tensor<B, D, Int> {
        self.get()
    }

    pub(crate) fn field(&self, key: &str) -> Pt<B> {
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
    pub(crate) fn into_args(self) -> Vec<Pt<B>> {
        match self {
            Pt::Tuple(v) => v,
            other => panic!(
                "runner: expected the argument tuple, got {}",
                other.describe()
            ),
        }
    }

    /// Applies `f` to every leaf, keeping the structure.
    /// Leafwise `f(self_leaf, other_leaf)` over two trees of the same structure.
    pub(crate) fn zip_with(self, other: &Pt<B>, f: impl Fn(Pt<B>, Pt<B>) -> Pt<B> + Copy) -> Pt<B> {
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

    pub(crate) fn map_leaves<C: Backend>(self, f: &mut impl FnMut(Pt<B>) -> Pt<C>) -> Pt<C> {
        match self {
            Pt::Leaf(_) => f(self),
            Pt::Dict(m) => Pt::Dict(m.into_iter().map(|(k, v)| (k, v.map_leaves(f))).collect()),
            Pt::Tuple(v) => Pt::Tuple(v.into_iter().map(|x| x.map_leaves(f)).collect()),
        }
    }
}

/// `N` positional arguments.
pub(crate) fn take<const N: usize, B: Backend>(args: Vec<Pt<B>>) -> [Pt<B>; N] {
    let n = args.len();
    args.try_into()
        .unwrap_or_else(|_| panic!("runner: the program takes {N} arguments, got {n}"))
}

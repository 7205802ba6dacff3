//! Tree prefixes: one value for a whole subtree (JAX's `in_axes`, optax's accumulator trees).

use super::{Key, Leaf, Leaves, NodeKind, Tree, TreeDef};
use crate::VmapError;

/// A tree prefix whose leaves are values of type `T`.
///
/// A [`Spec::Leaf`] applies to every tensor of the subtree at its position; [`Spec::Seq`] matches
/// a tuple, array or `Vec` positionally, [`Spec::Fields`] a struct or map by name.
///
/// ```
/// use burn_vmap::tree::Spec;
/// // in_axes for (x, w): map x on axis 0, do not map w
/// let axes: Spec<Option<isize>> = Spec::from([Some(0), None]);
/// assert_eq!(axes, Spec::Seq(vec![Spec::Leaf(Some(0)), Spec::Leaf(None)]));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Spec<T> {
    /// One value for the whole subtree.
    Leaf(T),
    /// Positional children.
    Seq(Vec<Spec<T>>),
    /// Named children (struct fields, map keys).
    Fields(Vec<(String, Spec<T>)>),
}

impl<T: Clone> Spec<T> {
    /// Named children.
    pub fn fields<S: Into<String>>(fields: impl IntoIterator<Item = (S, Spec<T>)>) -> Self {
        Spec::Fields(fields.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    /// Expands the prefix to one value per leaf of `def`, in leaf order.
    ///
    /// # Errors
    /// [`VmapError::TreeMismatch`] naming the path where the prefix does not fit (`what` names
    /// the specification, e.g. `in_axes`).
    pub fn broadcast_to(&self, def: &TreeDef, what: &str, root: &str) -> Result<Vec<T>, VmapError> {
        let mut out = Vec::with_capacity(def.num_leaves());
        go(self, def, what, &mut root.to_string(), &mut out)?;
        Ok(out)
    }
}

fn go<T: Clone>(
    spec: &Spec<T>,
    def: &TreeDef,
    what: &str,
    path: &mut String,
    out: &mut Vec<T>,
) -> Result<(), VmapError> {
    let err = |path: &str, why: String| VmapError::TreeMismatch {
        what: what.into(),
        path: path.into(),
        why,
    };
    match (spec, def) {
        (Spec::Leaf(v), _) => {
            out.extend(core::iter::repeat_n(v.clone(), def.num_leaves()));
            Ok(())
        }
        (Spec::Seq(specs), TreeDef::Node { keys, children, .. }) => {
            if specs.len() != children.len() {
                return Err(err(
                    path,
                    format!(
                        "{} entries given for a node with {} children",
                        specs.len(),
                        children.len()
                    ),
                ));
            }
            for ((s, k), c) in specs.iter().zip(keys).zip(children) {
                let len = path.len();
                super::def::push_key(path, k);
                go(s, c, what, path, out)?;
                path.truncate(len);
            }
            Ok(())
        }
        (Spec::Fields(specs), TreeDef::Node { keys, children, .. }) => {
            for (name, _) in specs {
                if !keys.iter().any(|k| matches!(k, Key::Field(f) if f == name)) {
                    return Err(err(path, format!("no field `{name}` (fields: {keys:?})")));
                }
            }
            for (k, c) in keys.iter().zip(children) {
                let Key::Field(f) = k else {
                    return Err(err(
                        path,
                        "named entries given for a positional node".into(),
                    ));
                };
                let Some((_, s)) = specs.iter().find(|(n, _)| n == f) else {
                    return Err(err(path, format!("missing an entry for field `{f}`")));
                };
                let len = path.len();
                super::def::push_key(path, k);
                go(s, c, what, path, out)?;
                path.truncate(len);
            }
            Ok(())
        }
        (_, TreeDef::Static(_)) => Ok(()),
        (_, TreeDef::Leaf) => Err(err(
            path,
            "a nested specification was given for a single tensor".into(),
        )),
    }
}

impl<T> From<T> for Spec<T> {
    fn from(v: T) -> Self {
        Spec::Leaf(v)
    }
}

impl<T, const N: usize> From<[T; N]> for Spec<T> {
    fn from(v: [T; N]) -> Self {
        Spec::Seq(v.into_iter().map(Spec::Leaf).collect())
    }
}

impl<T> From<Vec<Spec<T>>> for Spec<T> {
    fn from(v: Vec<Spec<T>>) -> Self {
        Spec::Seq(v)
    }
}

/// A [`Spec`] of trees is a tree: `Leaf` is its value, `Seq` a tuple, `Fields` a struct. This
/// lets a `Spec` of accumulators serve as an accumulator tree.
impl<T: Tree> Tree for Spec<T> {
    fn flatten_into(self, leaves: &mut Vec<Leaf>) -> TreeDef {
        match self {
            Spec::Leaf(t) => t.flatten_into(leaves),
            Spec::Seq(items) => TreeDef::Node {
                kind: NodeKind::Tuple,
                keys: (0..items.len()).map(Key::Index).collect(),
                children: items.into_iter().map(|s| s.flatten_into(leaves)).collect(),
            },
            Spec::Fields(fields) => {
                let (keys, children) = fields
                    .into_iter()
                    .map(|(k, s)| (Key::Field(k), s.flatten_into(leaves)))
                    .unzip();
                TreeDef::Node {
                    kind: NodeKind::Map,
                    keys,
                    children,
                }
            }
        }
    }

    fn unflatten_from(def: &TreeDef, leaves: &mut Leaves) -> Result<Self, VmapError> {
        match def {
            TreeDef::Node { keys, children, .. }
                if keys.iter().all(|k| matches!(k, Key::Field(_))) && !keys.is_empty() =>
            {
                let mut out = Vec::with_capacity(keys.len());
                for (k, c) in keys.iter().zip(children) {
                    let Key::Field(name) = k else { unreachable!() };
                    out.push((
                        name.clone(),
                        leaves.with_key(k.clone(), |l| Spec::unflatten_from(c, l))?,
                    ));
                }
                Ok(Spec::Fields(out))
            }
            TreeDef::Node { keys, children, .. } => Ok(Spec::Seq(
                keys.iter()
                    .zip(children)
                    .map(|(k, c)| leaves.with_key(k.clone(), |l| Spec::unflatten_from(c, l)))
                    .collect::<Result<_, _>>()?,
            )),
            _ => T::unflatten_from(def, leaves).map(Spec::Leaf),
        }
    }
}

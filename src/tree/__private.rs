//! What `#[derive(Tree)]` expands to. Not public API.
#![allow(missing_docs)]

use super::{Key, Leaves, NodeKind, TreeDef};
use crate::VmapError;

/// The structure of struct `name` with the given children, in declaration order.
pub fn struct_def(name: &'static str, fields: Vec<(Key, TreeDef)>) -> TreeDef {
    let (keys, children) = fields.into_iter().unzip();
    TreeDef::Node {
        kind: NodeKind::Struct(name),
        keys,
        children,
    }
}

/// The children of `def`, checked to be a struct node with exactly the named `fields`
/// (`name`, the deriving struct's, is for messages).
pub fn named_children<'a>(
    def: &'a TreeDef,
    name: &'static str,
    fields: &[&str],
    leaves: &Leaves,
) -> Result<&'a [TreeDef], VmapError> {
    children(def, fields, |k, f| matches!(k, Key::Field(k) if k == f))
        .map_err(|found| mismatch(leaves, name, &fields.join(", "), found))
}

/// The children of `def`, checked to be a struct node with exactly the fields at `indices`
/// (`name`, the deriving tuple struct's, is for messages).
pub fn tuple_children<'a>(
    def: &'a TreeDef,
    name: &'static str,
    indices: &[usize],
    leaves: &Leaves,
) -> Result<&'a [TreeDef], VmapError> {
    children(def, indices, |k, i| matches!(k, Key::Index(k) if k == i)).map_err(|found| {
        let fields: Vec<String> = indices.iter().map(|i| i.to_string()).collect();
        mismatch(leaves, name, &fields.join(", "), found)
    })
}

/// Any struct node whose keys are the `expected` ones (`is(key, expected)`, in order): the
/// struct's name is not checked, so a `BatchedLinear { weight, bias }` rebuilds as a
/// `Linear { weight, bias }`.
fn children<'a, E>(
    def: &'a TreeDef,
    expected: &[E],
    is: impl Fn(&Key, &E) -> bool,
) -> Result<&'a [TreeDef], &'a TreeDef> {
    match def {
        TreeDef::Node {
            kind: NodeKind::Struct(_),
            keys,
            children,
        } if keys.len() == expected.len() && keys.iter().zip(expected).all(|(k, e)| is(k, e)) => {
            Ok(children)
        }
        _ => Err(def),
    }
}

fn mismatch(leaves: &Leaves, name: &str, fields: &str, found: &TreeDef) -> VmapError {
    VmapError::TreeMismatch {
        what: "tree".into(),
        path: leaves.path(),
        why: format!("expected struct {name} with fields [{fields}], found {found:?}"),
    }
}

//! Visiting and mapping the tensors of a tree with visitors generic over rank and kind
//! (Burn's `ModuleVisitor` / `ModuleMapper`, for trees).
//!
//! A flattened tree's leaves are type-erased; these helpers dispatch each leaf on its runtime
//! rank (0 to [`MAX_RANK`]) and kind to the const-generic method of the visitor.

use burn::tensor::kind::Kind;
use burn::tensor::{Bool, Int, Tensor};

use super::Leaf;
use crate::VmapError;

/// The highest rank that [`TensorMapper`], [`TensorVisitor`] and [`TensorZipper`] dispatch to.
/// Leaves of a higher rank are reported as [`VmapError::UnsupportedRank`]; use
/// [`Tree::map_leaves`](crate::Tree::map_leaves) for them.
pub const MAX_RANK: usize = 8;

/// Maps every tensor of a tree, keeping its rank and kind: the argument of
/// [`Tree::map_tensors`](crate::Tree::map_tensors).
///
/// Each method receives the leaf's path relative to the root (`"layer1.weight"`, `"[0]"`, or
/// `""` for a tree that is one tensor). All methods default to the identity, so a mapper
/// overrides only the kinds it changes.
///
/// ```
/// use burn::tensor::{Device, Int, Tensor};
/// use burn_vmap::tree::TensorMapper;
/// use burn_vmap::Tree;
///
/// /// Scales every float tensor; ints are left alone.
/// struct Scale(f32);
/// impl TensorMapper for Scale {
///     fn map_float<const D: usize>(&mut self, _path: &str, t: Tensor<D>) -> Tensor<D> {
///         t * self.0
///     }
/// }
///
/// let device = Device::default();
/// let tree = (
///     Tensor::<1>::from_floats([1.0, 2.0], &device),
///     Tensor::<2, Int>::from_ints([[1, 2]], &device),
/// );
/// let (x, i) = tree.map_tensors(&mut Scale(10.0)).unwrap();
/// assert_eq!(x.into_data().try_to_vec::<f32>().unwrap(), vec![10.0, 20.0]);
/// assert_eq!(i.into_data().try_into_vec_as::<i64>().unwrap(), vec![1, 2]);
/// ```
pub trait TensorMapper {
    /// Maps a float tensor.
    fn map_float<const D: usize>(&mut self, path: &str, tensor: Tensor<D>) -> Tensor<D> {
        let _ = path;
        tensor
    }

    /// Maps an int tensor.
    fn map_int<const D: usize>(&mut self, path: &str, tensor: Tensor<D, Int>) -> Tensor<D, Int> {
        let _ = path;
        tensor
    }

    /// Maps a bool tensor.
    fn map_bool<const D: usize>(&mut self, path: &str, tensor: Tensor<D, Bool>) -> Tensor<D, Bool> {
        let _ = path;
        tensor
    }
}

/// Reads every tensor of a tree: the argument of
/// [`Tree::visit_tensors`](crate::Tree::visit_tensors).
///
/// Paths are relative to the root, as for [`TensorMapper`]. All methods default to doing
/// nothing.
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::tree::TensorVisitor;
/// use burn_vmap::Tree;
///
/// /// Counts the float elements and remembers the paths.
/// #[derive(Default)]
/// struct Count { elements: usize, paths: Vec<String> }
/// impl TensorVisitor for Count {
///     fn visit_float<const D: usize>(&mut self, path: &str, t: &Tensor<D>) {
///         self.elements += t.shape().num_elements();
///         self.paths.push(path.to_string());
///     }
/// }
///
/// let device = Device::default();
/// let tree = vec![Tensor::<2>::zeros([2, 3], &device), Tensor::zeros([1, 1], &device)];
/// let mut count = Count::default();
/// tree.visit_tensors(&mut count).unwrap();
/// assert_eq!(count.elements, 7);
/// assert_eq!(count.paths, vec!["[0]", "[1]"]);
/// ```
pub trait TensorVisitor {
    /// Visits a float tensor.
    fn visit_float<const D: usize>(&mut self, path: &str, tensor: &Tensor<D>) {
        let _ = (path, tensor);
    }

    /// Visits an int tensor.
    fn visit_int<const D: usize>(&mut self, path: &str, tensor: &Tensor<D, Int>) {
        let _ = (path, tensor);
    }

    /// Visits a bool tensor.
    fn visit_bool<const D: usize>(&mut self, path: &str, tensor: &Tensor<D, Bool>) {
        let _ = (path, tensor);
    }
}

/// Combines the tensors at the same positions of two trees of the same structure: the argument
/// of [`Tree::zip_map`](crate::Tree::zip_map).
///
/// `zip_float` is required; int and bool leaves keep the left tree's tensor unless
/// `zip_int` / `zip_bool` are overridden.
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::tree::TensorZipper;
/// use burn_vmap::Tree;
///
/// struct Add;
/// impl TensorZipper for Add {
///     fn zip_float<const D: usize>(&mut self, _: &str, a: Tensor<D>, b: Tensor<D>) -> Tensor<D> {
///         a + b
///     }
/// }
///
/// let device = Device::default();
/// let a = (Tensor::<1>::from_floats([1.0, 2.0], &device),);
/// let b = (Tensor::<1>::from_floats([10.0, 20.0], &device),);
/// let (sum,) = a.zip_map(b, &mut Add).unwrap();
/// assert_eq!(sum.into_data().try_to_vec::<f32>().unwrap(), vec![11.0, 22.0]);
/// ```
pub trait TensorZipper {
    /// Combines two float tensors of the same rank.
    fn zip_float<const D: usize>(&mut self, path: &str, a: Tensor<D>, b: Tensor<D>) -> Tensor<D>;

    /// Combines two int tensors of the same rank (keeps `a` by default).
    fn zip_int<const D: usize>(
        &mut self,
        path: &str,
        a: Tensor<D, Int>,
        b: Tensor<D, Int>,
    ) -> Tensor<D, Int> {
        let _ = (path, b);
        a
    }

    /// Combines two bool tensors of the same rank (keeps `a` by default).
    fn zip_bool<const D: usize>(
        &mut self,
        path: &str,
        a: Tensor<D, Bool>,
        b: Tensor<D, Bool>,
    ) -> Tensor<D, Bool> {
        let _ = (path, b);
        a
    }
}

/// Calls `$body` with `$d` bound to the leaf's rank as a constant, for ranks `0..=MAX_RANK`
/// (one match arm per rank; `$other` for the rest).
macro_rules! with_rank {
    ($rank:expr, $d:ident => $body:expr, $other:expr) => {
        with_rank!(@arms $rank, $d, $body, $other; 0, 1, 2, 3, 4, 5, 6, 7, 8)
    };
    (@arms $rank:expr, $d:ident, $body:expr, $other:expr; $($n:literal),*) => {
        match $rank {
            $($n => {
                const $d: usize = $n;
                $body
            })*
            _ => $other,
        }
    };
}

pub(crate) fn unsupported(at: &str, rank: usize) -> VmapError {
    VmapError::UnsupportedRank {
        path: at.to_string(),
        rank,
        max: MAX_RANK,
    }
}

/// The path a visitor sees: `rooted` (`tree.layer1.weight`, `tree[0]`) without the root and its
/// dot (`layer1.weight`, `[0]`; `""` for the root itself).
pub(crate) fn relative<'a>(rooted: &'a str, root: &str) -> &'a str {
    let rest = rooted.strip_prefix(root).unwrap_or(rooted);
    rest.strip_prefix('.').unwrap_or(rest)
}

pub(crate) fn map_leaf<M: TensorMapper>(
    mapper: &mut M,
    path: &str,
    at: &str,
    leaf: Leaf,
) -> Result<Leaf, VmapError> {
    let rank = leaf.shape().num_dims();
    let kind = leaf.kind();
    let t = leaf.into_dispatch();
    with_rank!(rank, D => Ok(match kind {
        Kind::Float => Leaf::new(mapper.map_float::<D>(path, Tensor::from_dispatch(t))),
        Kind::Int => Leaf::new(mapper.map_int::<D>(path, Tensor::from_dispatch(t))),
        Kind::Bool => Leaf::new(mapper.map_bool::<D>(path, Tensor::from_dispatch(t))),
    }), Err(unsupported(at, rank)))
}

pub(crate) fn visit_leaf<V: TensorVisitor>(
    visitor: &mut V,
    path: &str,
    at: &str,
    leaf: Leaf,
) -> Result<(), VmapError> {
    let rank = leaf.shape().num_dims();
    let kind = leaf.kind();
    let t = leaf.into_dispatch();
    with_rank!(rank, D => {
        match kind {
            Kind::Float => visitor.visit_float::<D>(path, &Tensor::from_dispatch(t)),
            Kind::Int => visitor.visit_int::<D>(path, &Tensor::from_dispatch(t)),
            Kind::Bool => visitor.visit_bool::<D>(path, &Tensor::from_dispatch(t)),
        }
        Ok(())
    }, Err(unsupported(at, rank)))
}

/// Zips two leaves of the same rank (checked by the caller). `path` is what the zipper sees,
/// `at` the rooted path for errors.
pub(crate) fn zip_leaf<Z: TensorZipper>(
    zipper: &mut Z,
    path: &str,
    at: &str,
    a: Leaf,
    b: Leaf,
) -> Result<Leaf, VmapError> {
    let rank = a.shape().num_dims();
    let (ka, kb) = (a.kind(), b.kind());
    if ka != kb {
        return Err(VmapError::TreeMismatch {
            what: "zip_map".into(),
            path: at.to_string(),
            why: format!(
                "a {} tensor on the left, a {} tensor on the right",
                a.kind_name(),
                b.kind_name()
            ),
        });
    }
    let (a, b) = (a.into_dispatch(), b.into_dispatch());
    with_rank!(rank, D => Ok(match ka {
        Kind::Float => Leaf::new(
            zipper.zip_float::<D>(path, Tensor::from_dispatch(a), Tensor::from_dispatch(b)),
        ),
        Kind::Int => Leaf::new(
            zipper.zip_int::<D>(path, Tensor::from_dispatch(a), Tensor::from_dispatch(b)),
        ),
        Kind::Bool => Leaf::new(
            zipper.zip_bool::<D>(path, Tensor::from_dispatch(a), Tensor::from_dispatch(b)),
        ),
    }), Err(unsupported(at, rank)))
}

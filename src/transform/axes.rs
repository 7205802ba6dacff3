//! Batch axes: the [`Axes`] type of `in_axes` / `out_axes`, and the checks every vectorizing
//! transform makes on them (axis normalization, one batch size, at least one mapped argument).

use crate::VmapError;
use crate::tree::{Leaf, Spec, TreeDef};

/// Batch axes: per argument (or output) a tree prefix whose leaves are `Some(axis)` (negative
/// counts from the end) or `None` (not mapped).
pub type Axes = Spec<Option<isize>>;

impl From<isize> for Axes {
    fn from(axis: isize) -> Self {
        Spec::Leaf(Some(axis))
    }
}

impl From<i32> for Axes {
    fn from(axis: i32) -> Self {
        Spec::Leaf(Some(axis as isize))
    }
}

/// The batch axes of a vectorizing builder (`vmap`, `chunked_vmap`): both default to axis 0 of
/// every tensor.
#[derive(Debug, Clone)]
pub(crate) struct AxesOptions {
    pub(crate) in_axes: Axes,
    pub(crate) out_axes: Axes,
}

impl Default for AxesOptions {
    fn default() -> Self {
        Self {
            in_axes: Spec::Leaf(Some(0)),
            out_axes: Spec::Leaf(Some(0)),
        }
    }
}

/// The `in_axes` / `out_axes` setters of a builder holding an `axes: AxesOptions` field.
macro_rules! axes_setters {
    () => {
        /// Sets the batch axis of every argument (a tree prefix of the arguments).
        ///
        /// `0`, `-1`: that axis of every tensor; `[Some(0), None]`: per argument of a pair;
        /// nested [`Spec`](crate::tree::Spec)s for structs and tuples. `None` passes an argument
        /// whole to every example.
        pub fn in_axes(mut self, axes: impl Into<$crate::transform::Axes>) -> Self {
            self.axes.in_axes = axes.into();
            self
        }

        /// Sets where the batch axis goes in every output (a tree prefix of the outputs).
        /// `None` declares an output that does not vary across the batch.
        pub fn out_axes(mut self, axes: impl Into<$crate::transform::Axes>) -> Self {
            self.axes.out_axes = axes.into();
            self
        }
    };
}
pub(crate) use axes_setters;

/// `axis` (negative counts from the end) as a position in a tensor of rank `rank`.
///
/// # Errors
/// [`VmapError::AxisOutOfRange`] naming `argument` (its path) and its `shape`.
pub(crate) fn normalize_axis(
    spec: &'static str,
    axis: isize,
    rank: usize,
    argument: &str,
    shape: &[usize],
) -> Result<usize, VmapError> {
    normalize_axis_with(spec, axis, rank, || argument.into(), shape)
}

/// [`normalize_axis`], with the argument's name made only for the error.
pub(crate) fn normalize_axis_with(
    spec: &'static str,
    axis: isize,
    rank: usize,
    argument: impl FnOnce() -> String,
    shape: &[usize],
) -> Result<usize, VmapError> {
    let a = if axis < 0 { axis + rank as isize } else { axis };
    if a < 0 || a as usize >= rank {
        return Err(VmapError::AxisOutOfRange {
            spec,
            argument: argument(),
            axis,
            rank,
            shape: shape.to_vec(),
        });
    }
    Ok(a as usize)
}

/// An argument tree, flattened, with the mapped axis of every leaf checked.
pub(crate) struct Mapped {
    pub(crate) leaves: Vec<Leaf>,
    pub(crate) def: TreeDef,
    /// The mapped axis of every leaf, normalized (`None`: passed whole).
    pub(crate) axes: Vec<Option<usize>>,
    /// The size of the mapped axes: the batch size.
    pub(crate) size: usize,
}

/// Checks `in_axes` against flattened inputs: every mapped axis within its leaf's rank, at
/// least one leaf mapped, all mapped axes of one size.
///
/// # Errors
/// [`VmapError::TreeMismatch`], [`VmapError::AxisOutOfRange`]; [`VmapError::NothingMapped`] and
/// [`VmapError::InconsistentBatchSizes`] naming `transform`.
pub(crate) fn map_inputs(
    transform: &'static str,
    leaves: Vec<Leaf>,
    def: TreeDef,
    in_axes: &Axes,
) -> Result<Mapped, VmapError> {
    let given = in_axes.broadcast_to(&def, "in_axes", "args")?;
    let mut sizes: Vec<(usize, usize)> = Vec::new();
    let mut axes = Vec::with_capacity(leaves.len());
    for (i, (leaf, axis)) in leaves.iter().zip(given).enumerate() {
        match axis {
            Some(a) => {
                let shape = leaf.shape();
                let a = normalize_axis_with(
                    "in_axes",
                    a,
                    shape.num_dims(),
                    || def.leaf_path("args", i),
                    &shape,
                )?;
                sizes.push((i, shape[a]));
                axes.push(Some(a));
            }
            None => axes.push(None),
        }
    }
    let Some(&(_, size)) = sizes.first() else {
        return Err(VmapError::NothingMapped { transform });
    };
    if sizes.iter().any(|(_, s)| *s != size) {
        let paths = def.leaf_paths("args");
        let arguments = sizes
            .into_iter()
            .map(|(i, s)| (paths[i].clone(), s))
            .collect();
        return Err(VmapError::InconsistentBatchSizes {
            transform,
            arguments,
        });
    }
    Ok(Mapped {
        leaves,
        def,
        axes,
        size,
    })
}

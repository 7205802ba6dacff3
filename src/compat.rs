//! Every backend workaround of the engine, the backend detection they use, and the places where
//! the engine reads tensor values.
//!
//! Batched tensors are views that Burn's own code rarely builds (batch axes moved to the front,
//! unit dims for missing levels), and they exposed bugs in Burn 0.21.0's backends. Each
//! workaround below is a function that the rules call instead of the plain backend op, with a
//! comment naming the bug and the version. Moving to a later Burn touches this file: re-check
//! each entry, and where the bug is fixed, make the function the plain op. No other file of
//! `src/` names a backend.
//!
//! | Burn bug or limit (found on 0.21.0) | backends | workaround | on 0.22.1 |
//! |---|---|---|---|
//! | reductions, scans, sorts and `scatter_nd` misread some permuted or expanded layouts | cubecl | [`kernel_layout`] | kept |
//! | `scatter_nd` pairs index tuples spanning several dims with the wrong value rows | cubecl | [`flat_tuples`] | kept |
//! | `scatter_nd` loses updates at a repeated index tuple (its kernel's read-modify-write is not atomic) | cubecl | [`scatter_nd`] | found on 0.22.1 |
//! | top-k (`topk`, `topk_with_indices`, `argtopk`) along a dim that is not the last returns wrong values for `k >= 2` | cubecl | [`topk_dim`], [`topk_back`] | found on 0.22.1 |
//! | `mask_where` / `mask_fill` leave part of a broadcast output unwritten when the masked tensor is the smaller operand | cubecl | [`mask_target`] | kept |
//! | `float_unfold` windows permuted ahead of the kernel dims are misread when a dim has one window | cubecl | [`conv_patches`] | kept: on wgpu 0.22.1 (lavapipe) windows as long as their dim read right, one shorter than its dim along both spatial dims reads wrong rows (the `unfold` bug below) |
//! | `unfold` to a single window shorter than its dim is read as if contiguous | cubecl | [`unfold`] | kept: still wrong on wgpu 0.22.1 (lavapipe); `unfold_to_a_single_short_window` and `conv_patches_with_one_short_window_per_spatial_dim` (tests/oracle/misc.rs) fail without it |
//! | broadcasting a size-1 dim against a size-0 one panics ("Broadcast dims must be size 1") | cubecl | [`expand_empty_batch`] | kept |
//! | copying a view broadcast along a leading dim writes one scattered element at a time | Flex | [`write_target`] | kept: `copy_2d_tiled` still walks the stride-0 dim innermost (measured: 4.7–6.0 ms against 1.0–1.2 ms repeated, `[64, 128, 256]`) |
//! | a pending reshape of a strided tensor is copied by each reader (Flex reshapes views as views) | Flex | [`reshapes_at_once`] | kept |
//! | a folded `[0, k] x [k, n]` matmul divides by zero (burn-ndarray) | every backend | [`can_fold_rows`] | kept: an empty batch has nothing to fold, and no backend is asked for an empty GEMM |
//! | reshapes that raise the rank of a non-contiguous tensor ending in size-1 dims get wrong strides (`burn_std::split_strides`) | cubecl | `reshape` | **dropped**: burn-std 0.22.1's `split_strides` skips the old shape's unit dims, which cubecl's reshape uses |
//! | binary ops over expanded operands run element by element (slow outer products) | Flex | `outer_product` (a matmul) | **dropped**: Flex 0.22.1's broadcast multiply beats its batched matmul (measured: 51–54 ms against 80 ms for `64 × 784 ⊗ 512`, 7 against 13 ms for `16 × 512 ⊗ 512`) |
//! | binary ops over a broadcast left operand run element by element | Flex | `binary_lhs` | **dropped**: Flex 0.22.1 runs broadcast binary ops through one collapsed loop nest (`zip.rs`), with no copy of the broadcast operand (measured: 0.6–0.7 ms against 1.1–1.4 ms repeated, `[64, 128, 256]`) |
//! | backend-level default implementations (`float_clamp_min`, `leaky_relu`, ...) record bools of the capture backend's own default dtype (`U8`: they read its device type's settings, which configuring the capture device does not reach); cubecl's WGSL has no `u8` | capture, cubecl | [`replay_bool_dtype`] | found on 0.22.1 |
//! | reshaping to rank 0 panics | ndarray | `reshapes_to_rank0`, `rank0_through_data` | **dropped**: NdArray is not a backend of this crate (deprecated in Burn 0.22) |
//!
//! The cubecl entries were not re-checked on a GPU for 0.22.1 (none was at hand): they are kept,
//! and cost nothing elsewhere ([`kernel_layout`] makes a contiguous copy on cubecl only). The
//! two unfold entries were re-checked on wgpu's software Vulkan driver, as the table says.
//!
//! **Nested recordings.** A `vmap` inside a recorded function runs its rules on the capture
//! backend, where no workaround applies; the outer level replays the recorded physical ops
//! through its own rules, often on operands it does not map. So a workaround must act in the
//! rule of the op it protects whether its operands are batched or not: [`unfold`] does (the
//! engine's `unfold` rule calls it on every route), and so do the reductions' layouts
//! ([`kernel_layout`] in `rules::reduce`). [`conv_patches`] protects a composite route (two
//! unfolds, a permute) that a nested recording replays as those ops, each through its rule.
//!
//! **Flex** (`burn-flex`, Burn 0.22's default CPU backend) needs none of the correctness
//! workarounds above; it takes two speed routes, [`write_target`] and [`reshapes_at_once`]; the
//! cubecl backends, bound by their launches, two others, [`scales_broadcast_views`] and
//! [`joins_parts_to_cast`]. The
//! Flex timings above are medians of 15 alternating runs of a release build of burn-flex 0.22.1
//! (simd, rayon) on a 2-core CPU. **Capture** (`burn_dispatch::backends::Capture`, a router over
//! `burn-capture`'s channel, named `router<capture>`) records ops instead of running them: it
//! takes no workaround and no speed route, and cannot read values (see below).
//!
//! # Where the engine reads tensor values
//!
//! No batching rule reads a tensor's values: every rule is a fixed sequence of backend ops
//! decided from shapes and batch dims alone, so the engine runs over the capture backend. The
//! exceptions are the ops whose *output shape* depends on the values, which Burn itself
//! implements by reading them (`bool_argwhere`, and `*_mask_select` through it):
//!
//! - `bool_argwhere` and `float_mask_select` / `int_mask_select` / `bool_mask_select` on a
//!   batched tensor run the loop fallback (`rules::fallback`), which calls the inner op once
//!   per example (each reads its example); on a backend that cannot read values
//!   ([`reads_values`]) they panic with a `vmap:` message first;
//! - reading a tensor back (`*_into_data`, `q_into_data`, transactions) is the user's read,
//!   forwarded for unbatched tensors only.
//!
//! Limits that shaped the design itself, and stay right on any backend (nothing to change on
//! an upgrade):
//!
//! - rank-0 tensors cannot be allocated on cubecl: a logical rank-0 tensor is held as
//!   `[batch sizes.., 1]` (`VmapTensor`'s physical layout, `rules::create`);
//! - reductions over a zero-length dim panic on cubecl: sums, products and means over an empty
//!   dim give 0, 1 and NaN on every backend (`rules::reduce::reduce_dim_or`, `reduce::all`);
//! - some backends copy on a reshape of a strided tensor: reshapes of batched tensors are held
//!   pending (`VmapTensor`'s "Pending reshapes", except on Flex: [`reshapes_at_once`]), a
//!   reshape to the same shape is skipped (`rules::view::reshape`), and whole-tensor
//!   reductions reduce one dim at a time (`rules::reduce::all`);
//! - burn-cubecl's `is_nonoverlapping` overflows on zero-size tensors in debug builds (found on
//!   0.21: build cubecl dependencies without overflow checks).
//!
//! Not fixable from a decorator: Burn's own cubecl `scatter_nd` outside `Vmap` still loses
//! updates at a repeated index tuple (found on 0.21, still so on 0.22.1), and rank-0 tensors on
//! a plain cubecl backend (outside `Vmap`) still panic inside Burn.

use std::any::TypeId;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use burn_backend::backend::{Backend, BackendTypes};
use burn_backend::{Shape, Slice, TensorMetadata};

use crate::physical::{Int as IntKind, Kind, with_batch_sizes};
use crate::tensor::BatchDims;

// =================================================================================================
// Backend detection
// =================================================================================================

/// What the workarounds need to know about a backend type, read from its name once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Flavor {
    cubecl: bool,
    flex: bool,
    capture: bool,
}

impl Flavor {
    /// From a backend's name (Burn 0.22.1): `flex` for Flex, `cubecl<..>` (inside `fusion<..>`
    /// when fused) for the cubecl backends, `router<capture>` for the capture backend;
    /// `dispatch<..>` wraps the name of the backend of the device it is given, and `vmap<..>`
    /// and `autodiff<..>` the backend a program replays on (the engine, with autodiff for
    /// gradients), whose tensors live on the wrapped backend.
    fn from_name(name: &str) -> Self {
        let mut inner = name;
        for wrapper in ["autodiff<", "vmap<", "dispatch<", "fusion<", "router<"] {
            while let Some(rest) = inner.strip_prefix(wrapper) {
                inner = rest.strip_suffix('>').unwrap_or(rest);
            }
        }
        Flavor {
            cubecl: inner.starts_with("cubecl"),
            flex: inner == "flex",
            capture: inner == "capture",
        }
    }
}

/// `B`'s flavor: from a per-thread copy of the last backend asked about (the rules ask on every
/// reshape, almost always about the same backend), else from the process-wide cache, else from
/// the backend's name. Burn's `Dispatch` backend names the backend of each device, so its flavor
/// is read from the name every time (not cached).
fn flavor<B: Backend>(device: &B::Device) -> Flavor {
    thread_local! {
        static LAST: Cell<Option<(TypeId, Flavor)>> = const { Cell::new(None) };
    }
    static BY_BACKEND: OnceLock<Mutex<HashMap<TypeId, Option<Flavor>>>> = OnceLock::new();
    let id = TypeId::of::<B>();
    if let Some((last, f)) = LAST.get()
        && last == id
    {
        return f;
    }
    let cached = *BY_BACKEND
        .get_or_init(Default::default)
        .lock()
        .expect("backend cache")
        .entry(id)
        .or_insert_with(|| {
            let name = B::name(device);
            (!name.starts_with("dispatch<")).then(|| Flavor::from_name(&name))
        });
    match cached {
        Some(f) => {
            LAST.set(Some((id, f)));
            f
        }
        None => Flavor::from_name(&B::name(device)),
    }
}

/// Whether `B` is one of Burn's cubecl backends (wgpu, CUDA, ...), read from its name once per
/// backend type; Burn's capture backend too while it stands in for one ([`capture_as_cubecl`]).
pub(crate) fn is_cubecl<B: Backend>(device: &B::Device) -> bool {
    let f = flavor::<B>(device);
    f.cubecl || (f.capture && CAPTURE_AS_CUBECL.get())
}

thread_local! {
    /// Whether the capture backend takes the cubecl backends' workarounds on this thread.
    static CAPTURE_AS_CUBECL: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with Burn's capture backend taking the cubecl backends' paths here (their
/// contiguous layouts, top-k along the last dim, ...): a step recorded on it then holds the
/// operations a cubecl backend runs (`transform::operations` counts them).
pub(crate) fn capture_as_cubecl<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            CAPTURE_AS_CUBECL.set(self.0);
        }
    }
    let _reset = Reset(CAPTURE_AS_CUBECL.replace(true));
    f()
}

/// Whether the engine may read tensor values on `B`: not on Burn's capture backend, which
/// records ops without running them (see "Where the engine reads tensor values" above).
pub(crate) fn reads_values<B: Backend>(device: &B::Device) -> bool {
    !flavor::<B>(device).capture
}

/// The widest float dtype `B` computes in on `device`: `f64` where it has general `f64`
/// arithmetic (Flex, CUDA), else `f32` (wgpu's WGSL has no `f64`). [`WideSum`] sums in it.
///
/// [`WideSum`]: crate::accumulate::WideSum
pub(crate) fn widest_float<B: Backend>(device: &B::Device) -> burn_backend::FloatDType {
    if B::supports_dtype(device, burn_backend::DType::F64) {
        burn_backend::FloatDType::F64
    } else {
        burn_backend::FloatDType::F32
    }
}

// =================================================================================================
// Flex: copies of broadcast views
// =================================================================================================

/// `t`, aligned (a unit dim for each batch dim it lacks), broadcast to `full` as the tensor an
/// op writes into (`slice_assign`, `scatter`, `select_assign`; the backend copies it first): an
/// expanded view, except on Flex (0.21 and 0.22.1) where only leading dims are broadcast.
/// Flex copies a view with a stride-0 dim by walking that dim innermost (`copy_2d_tiled` puts
/// the smaller stride inside), one scattered write per element; an LSTM's states, slice-assigned
/// per time step into a tensor shared by every example, spent 15% of its clipped step there.
/// Repeating the rows instead is one memcpy per example (still 4–6× faster on 0.22.1: see the
/// table above).
pub(crate) fn write_target<B: Backend, K: Kind<B>>(t: K::P, full: Shape) -> K::P {
    let shape = t.shape();
    let lead = (0..shape.num_dims())
        .take_while(|&d| shape[d] != full[d])
        .count();
    let leading_only = lead > 0
        && shape[..lead].iter().all(|&s| s == 1)
        && shape[lead..] == full[lead..]
        && full.num_elements() > 0;
    if leading_only && flavor::<B>(&t.device()).flex {
        let times = full[..lead].iter().product();
        let rows = K::reshape(t, Shape::from(vec![1, shape.num_elements()]));
        return K::reshape(K::repeat_dim(rows, 0, times), full);
    }
    K::expand(t, full)
}

/// Whether a product with a constant may run as one scaling of the other operand broadcast
/// through a view (`rules::constant`): on the cubecl backends, whose kernels read any strides
/// (one launch instead of writing the constant and multiplying); not on Flex (0.22.1), whose
/// scalar kernels walk a broadcast view element by element (`StridedIter`): the CNN bench
/// model's clipped sum, whose mean's backward broadcasts its gradient over 576 positions, took
/// 1.14-1.19x its standard step that way against 0.97-0.99x writing the constant and
/// multiplying (ABBA, `BURN_VMAP_BENCH_ONLY=cnn cargo bench --bench clipping`, two runs each).
pub(crate) fn scales_broadcast_views<B: Backend>(device: &B::Device) -> bool {
    is_cubecl::<B>(device)
}

/// Whether a reshape of a batched tensor runs at once rather than being held pending
/// (`VmapTensor`'s "Pending reshapes"): on Flex (0.21 and 0.22.1) and the cubecl backends.
/// Both reshape a tensor as a view where its strides allow and copy it otherwise, once; held
/// pending, the copy is made again by every reader of every clone (a `Linear`'s three backward
/// ops each copied the attention heads' gradient back into rows: 13% of a transformer's clipped
/// step on Flex, on 0.21; an LSTM's four gates each copied their step's input twice, 256 launches
/// of its clipped step on cubecl, counted by `transform::operations`). Pending reshapes pay on
/// backends that copy on more reshapes (burn-ndarray did on every one).
pub(crate) fn reshapes_at_once<B: Backend>(device: &B::Device) -> bool {
    flavor::<B>(device).flex || is_cubecl::<B>(device)
}

/// Whether a cast of a factored product of several parts (an LSTM's weight, one part per time
/// step) joins the parts first (`rules::factored::cast`), so that a wide sum over the examples
/// (`accumulate::WideSum`) takes two joins, two casts and one product per weight instead of two
/// casts and one product per part: on the cubecl backends, whose steps are bound by their
/// launches (the LSTM bench model's f64 clipped sum: 2663 launches joined against 3638, the f32
/// sum's 3113, counted by `transform::operations`); not on Flex (0.22.1), where the joins'
/// copies cost more than the products they save (the same sum: 75-83 ms joined against
/// 60-62 ms, three alternating runs).
pub(crate) fn joins_parts_to_cast<B: Backend>(device: &B::Device) -> bool {
    is_cubecl::<B>(device)
}

// =================================================================================================
// cubecl: kernels that misread strided layouts
// =================================================================================================

/// A physical tensor laid out so that every backend's kernels read it right: contiguous on
/// Burn's cubecl backends (wgpu, CUDA; found on 0.21), unchanged elsewhere.
///
/// cubecl's reductions (`sum_dim`, `max_dim`, ...) return wrong values for some permuted
/// layouts: `[6, 2, 3]` with dims 1 and 2 swapped and a unit dim in front, summed over that
/// unit dim, does not give the tensor back; its `scatter_nd` reads an expanded or permuted
/// `values` operand as if it were contiguous. A loop over examples never builds such layouts,
/// but batched tensors are permuted views all the time (batch axes moved to the front, unit
/// dims permuted in by `rules::helpers::align`), so reductions, scans and sorts of batched
/// tensors, and materialized operands, read them through this. The flattening reshape copies
/// only a tensor that is not contiguous already; the reshape back is a view.
///
/// Reductions read unbatched tensors through it too: a program recorded with a `vmap` inside
/// holds the inner levels' physical ops (permuted views included), recorded on the capture
/// backend, where no workaround applies; replayed on cubecl under an outer level that does not
/// map their operand, those ops arrive unbatched (`rules::reduce::reduce_dim`).
pub(crate) fn kernel_layout<B: Backend, K: Kind<B>>(t: K::P) -> K::P {
    let shape = t.shape();
    let n = shape.num_elements();
    if shape.num_dims() < 2 || n == 0 || !is_cubecl::<B>(&t.device()) {
        return t;
    }
    let flat = K::reshape(t, Shape::from(vec![n]));
    K::reshape(flat, shape)
}

// =================================================================================================
// cubecl: top-k along a dim that is not the last
// =================================================================================================

/// `t` with `dim` swapped to the last place (contiguous), and the dim a top-k then runs along,
/// on Burn's cubecl backends; `t` and `dim` unchanged elsewhere or when `dim` is the last.
/// Burn 0.22.1's cubecl top-k (`topk`, `topk_with_indices`, `argtopk`, float and int) along a
/// dim that is not the last returns wrong values for `k >= 2`: a contiguous `[3, 3, 1, 2]`
/// along dim 1 with `k = 2` gives another row's values and garbage (found by the loop oracle
/// on wgpu, `int_topk_with_indices`; along the last dim it is right). Batched tensors hit it
/// all the time: a per-example top-k along dim 0 runs along dim 1 with the batch in front.
/// [`topk_back`] swaps each output back.
pub(crate) fn topk_dim<B: Backend, K: Kind<B>>(t: K::P, dim: usize) -> (K::P, usize) {
    let rank = t.shape().num_dims();
    if dim + 1 == rank || !is_cubecl::<B>(&t.device()) {
        return (t, dim);
    }
    let mut axes: Vec<usize> = (0..rank).collect();
    axes.swap(dim, rank - 1);
    (kernel_layout::<B, K>(K::permute(t, &axes)), rank - 1)
}

/// An output of a top-k run along `used` ([`topk_dim`]) with its dims as if it had run along
/// `dim` (a view).
pub(crate) fn topk_back<B: Backend, K: Kind<B>>(out: K::P, dim: usize, used: usize) -> K::P {
    if dim == used {
        return out;
    }
    let mut axes: Vec<usize> = (0..out.shape().num_dims()).collect();
    axes.swap(dim, used);
    K::permute(out, &axes)
}

// =================================================================================================
// cubecl: scatter_nd with several dims of index tuples, or with repeated tuples
// =================================================================================================

type IntP<B> = <B as BackendTypes>::IntTensorPrimitive;

/// `scatter_nd`'s operands with their tuple dims `M..` flattened into one: indices
/// `[M.., K] -> [m, K]`, values `[M.., D..] -> [m, D..]` (the same updates). Burn 0.21's cubecl
/// `scatter_nd` pairs tuples with the wrong value rows when the tuples span several dims, so
/// the inner op always gets one flat dim of tuples (`rules::indexing::scatter_nd`).
pub(crate) fn flat_tuples<B: Backend, K: Kind<B>>(
    indices: IntP<B>,
    values: K::P,
) -> (IntP<B>, K::P) {
    let ishape = indices.shape();
    let tuple_dims = ishape.num_dims() - 1;
    if tuple_dims == 1 {
        return (indices, values);
    }
    let m: usize = ishape[..tuple_dims].iter().product();
    let vshape = values.shape();
    let indices = <IntKind as Kind<B>>::reshape(indices, Shape::from(vec![m, ishape[tuple_dims]]));
    let flat_values: Shape = core::iter::once(m)
        .chain(vshape[tuple_dims..].iter().copied())
        .collect();
    (indices, K::reshape(values, flat_values))
}

/// `scatter_nd(data, indices, values, reduction)` with indices `[m, K]` (one flat dim of tuples,
/// [`flat_tuples`]) and values `[m, D_K..]`: `nd`, the backend's `scatter_nd`, except on cubecl.
///
/// burn-cubecl 0.22.1's `scatter_nd` kernel (`kernel/index/scatter_nd.rs`) runs one unit per
/// updated element and writes `data[i] = op(data[i], v)` with a plain load and store, so the
/// units of two updates at the same index tuple race and one update is lost (found by the loop
/// oracle on wgpu with repeated tuples, `Add`; on 0.21 too). Its `scatter` along one dim walks
/// the updates of each output column serially (or adds atomically), so there each tuple is
/// turned into the row number of `data` viewed as `[D_0·…·D_{K-1}, D_K·…]` and the update runs
/// as `scatter` along that dim (`scatter_dim0`, the backend's `scatter` at dim 0).
pub(crate) fn scatter_nd<B: Backend, K: Kind<B>>(
    data: K::P,
    indices: IntP<B>,
    values: K::P,
    nd: impl FnOnce(K::P, IntP<B>, K::P) -> K::P,
    scatter_dim0: impl FnOnce(K::P, IntP<B>, K::P) -> K::P,
) -> K::P {
    if !is_cubecl::<B>(&data.device()) {
        return nd(data, indices, values);
    }
    let shape = data.shape();
    let ishape = indices.shape();
    let (m, k) = (ishape[0], ishape[1]);
    let rows: usize = shape[..k].iter().product();
    let row_len: usize = shape[k..].iter().product();
    if m == 0 || row_len == 0 {
        return data;
    }
    // Row number of every tuple: Σ_j index_j · (D_{j+1}·…·D_{K-1}), as `[m, 1]`.
    let mut row: Option<IntP<B>> = None;
    let mut stride = 1i64;
    for j in (0..k).rev() {
        let col = B::int_slice(
            indices.clone(),
            &[
                Slice::new(0, Some(m as isize), 1),
                Slice::new(j as isize, Some(j as isize + 1), 1),
            ],
        );
        let term = if stride == 1 {
            col
        } else {
            B::int_mul_scalar(col, stride.into())
        };
        row = Some(match row {
            Some(r) => B::int_add(r, term),
            None => term,
        });
        stride *= shape[j] as i64;
    }
    let row = row.expect("K >= 1");
    let row = <IntKind as Kind<B>>::repeat_dim(row, 1, row_len);
    let data = K::reshape(data, Shape::from(vec![rows, row_len]));
    let values = kernel_layout::<B, K>(K::reshape(values, Shape::from(vec![m, row_len])));
    K::reshape(scatter_dim0(data, row, values), shape)
}

// =================================================================================================
// cubecl: mask ops on a smaller masked tensor
// =================================================================================================

/// The masked tensor expanded to the broadcast shape of the mask ops' operands (same rank):
/// Burn 0.21's cubecl `mask_where` / `mask_fill` run one unit per element of the tensor, so
/// output elements beyond a smaller tensor (`max_pair` of a `[1]` and a `[2]` tensor masks the
/// `[1]` one) were never written. A view; nothing when the shapes already agree.
pub(crate) fn mask_target<B: Backend, K: Kind<B>>(t: K::P, others: &[Shape]) -> K::P {
    let shape = t.shape();
    // Incompatible shapes are left to the backend's own error.
    let out =
        Shape::broadcast_many(core::iter::once(&shape).chain(others)).unwrap_or(shape.clone());
    if out == shape {
        return t;
    }
    K::expand(t, out)
}

// =================================================================================================
// cubecl: broadcasting against an empty batch
// =================================================================================================

/// An operand aligned to `target` (size-1 dims at the levels it lacks, then its `logical`
/// dims), expanded to the full batch when `target` has an empty batch dim (to nothing, a view):
/// Burn 0.21's cubecl backends refuse to broadcast a size-1 dim against a size-0 one
/// ("Broadcast dims must be size 1").
pub(crate) fn expand_empty_batch<B: Backend, K: Kind<B>>(
    aligned: K::P,
    target: &BatchDims,
    logical: &[usize],
) -> K::P {
    if target.sizes().any(|size| size == 0) {
        return K::expand(aligned, with_batch_sizes(target, logical));
    }
    aligned
}

// =================================================================================================
// cubecl: unfold to a single window
// =================================================================================================

/// `unfold(t, dim)` (windows of `size` every `step` along `dim`, as a new last dim), except on
/// Burn 0.21's cubecl backends when `dim` holds a single window shorter than it: there the view
/// `unfold` returns is read as if it were contiguous (`[2, 1, 3]` unfolded along its last dim
/// by 2 every 2 reads the second row from offset 2, not 3), so the window is sliced out, made
/// contiguous, and moved into place instead.
pub(crate) fn unfold<B: Backend, K: Kind<B>>(
    t: K::P,
    dim: usize,
    size: usize,
    step: usize,
    unfold: impl FnOnce(K::P, usize) -> K::P,
) -> K::P {
    let shape = t.shape();
    let len = shape[dim];
    let one_short_window = size < len && (len - size) / step.max(1) == 0;
    if !one_short_window || !is_cubecl::<B>(&t.device()) {
        return unfold(t, dim);
    }
    let rank = shape.num_dims();
    let mut slices = vec![burn_backend::Slice::full(); rank];
    slices[dim] = burn_backend::Slice::from(0..size);
    let window = kernel_layout::<B, K>(K::slice(t, &slices));
    let window = crate::physical::move_dim::<B, K>(window, dim, rank - 1);
    let mut dims = window.shape().to_vec();
    dims.insert(dim, 1);
    K::reshape(window, Shape::from(dims))
}

// =================================================================================================
// cubecl: unfolded windows moved ahead of the kernel dims
// =================================================================================================

/// A convolution's input patches as rows, `[N, c, h, w] -> [N, L, c·kh·kw]` (`L` output
/// positions), for the factored weight gradients (`rules::factored`): `direct(x)` (windows as
/// views, one copy), except on cubecl, which misreads `float_unfold`'s windows permuted ahead
/// of the kernel dims when a spatial dim has a single window: on Burn 0.21 any single window
/// (reads of `[N, 1, 1, c, kh, kw]` returned the wrong elements, even through an elementwise
/// kernel); on 0.22.1 (wgpu, lavapipe) a single window shorter than its dim (the second window
/// row read from the contiguous offset: the [`unfold`] bug). There the backend's own `unfold4d`
/// (windows kept last, `[N, c·kh·kw, L]`) is transposed and made contiguous through a flat
/// reshape. A nested recording replays `direct`'s ops one by one, each through its rule, where
/// [`unfold`] applies (`conv_patches_with_one_short_window_per_spatial_dim`, tests/oracle/misc.rs).
pub(crate) fn conv_patches<B: Backend>(
    x: B::FloatTensorPrimitive,
    kernel: [usize; 2],
    options: burn_backend::ops::UnfoldOptions,
    direct: impl FnOnce(B::FloatTensorPrimitive) -> B::FloatTensorPrimitive,
) -> B::FloatTensorPrimitive {
    if !is_cubecl::<B>(&x.device()) {
        return direct(x);
    }
    let patches = B::float_swap_dims(B::unfold4d(x, kernel, options), 1, 2);
    kernel_layout::<B, crate::physical::Float>(patches)
}

// =================================================================================================
// Every backend: an empty folded matmul
// =================================================================================================

/// Whether a batched matmul may fold its batch into `rows` rows of one `[rows, k] x [k, n]`
/// product (`rules::linalg::matmul`): not with no row, as the folded `[0, k] x [k, n]` product
/// divided by zero in burn-ndarray 0.21's matmul (found by the loop oracle's `batch_size_zero`).
/// Kept for every backend: an empty batch takes the broadcasting path instead, which computes
/// nothing either.
pub(crate) fn can_fold_rows(rows: usize) -> bool {
    rows > 0
}

// =================================================================================================
// capture: bools recorded with the capture backend's own dtype
// =================================================================================================

/// The dtype of every bool a replayed program creates on `device` (comparisons, `is_nan`,
/// `all`/`any`, bool `zeros`/`ones`/`empty`) on cubecl: the device's own, whatever the
/// recording says; `None` elsewhere (the recorded dtype). Burn 0.22.1's backend-level default
/// implementations (`float_clamp_min`, `leaky_relu`, `hard_sigmoid` through `clamp`, ...) read
/// the bool dtype from the settings of the capture backend's own device type, which
/// configuring the capture device with the user's dtypes does not reach, so they record the
/// capture backend's default `U8`. Flex stores bools as `U8`, so nothing showed there; on wgpu
/// the replayed mask was a `u8` tensor, which WGSL cannot declare ("no definition in scope for
/// identifier: `u8`"). Replays on the capture backend itself (a transform nested in a recorded
/// function) keep the recorded dtypes, which are the ones the function's own tensors have there.
pub(crate) fn replay_bool_dtype<B: Backend>(device: &B::Device) -> Option<burn_backend::BoolDType> {
    is_cubecl::<B>(device)
        .then(|| burn_backend::get_or_init_device_settings::<B>(device).bool_dtype)
}

#[cfg(test)]
mod tests {
    use super::Flavor;

    #[test]
    fn should_read_the_flavor_from_burn_0_22_names() {
        let f = |name: &str| {
            let f = Flavor::from_name(name);
            (f.cubecl, f.flex, f.capture)
        };
        assert_eq!(f("flex"), (false, true, false));
        assert_eq!(f("dispatch<flex>"), (false, true, false));
        assert_eq!(f("cubecl<cuda>"), (true, false, false));
        assert_eq!(f("fusion<cubecl<wgpu<vulkan>>>"), (true, false, false));
        assert_eq!(f("router<capture>"), (false, false, true));
        assert_eq!(f("dispatch<router<capture>>"), (false, false, true));
        assert_eq!(f("ndarray"), (false, false, false));
        // The backends a program replays on: the engine over a backend, with autodiff.
        assert_eq!(
            f("vmap<fusion<cubecl<wgpu<vulkan>>>>"),
            (true, false, false)
        );
        assert_eq!(f("autodiff<vmap<flex>>"), (false, true, false));
        assert_eq!(f("autodiff<vmap<router<capture>>>"), (false, false, true));
    }
}

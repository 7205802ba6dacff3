//! Registration macros for op families (burn-fusion's `binary_float_ops!` style).
//!
//! Every generated method keeps the name of the Burn method it implements and calls the rule of
//! its family in [`crate::rules`]. The families with several tensor operands start with the one
//! no-batched-operand fast path, [`unbatched!`]: when no operand is batched, the inner op runs
//! directly, so their rules only ever see a batched operand.

/// The no-batched-operand fast path: when none of the operands is batched, returns (from the
/// enclosing method) the inner op `$op` run on their physical tensors, unbatched, with the
/// logical rank of the first operand (rank 0 stays rank 0).
macro_rules! unbatched {
    ($first:ident $(, $rest:ident)* => $op:expr) => {
        if !$first.is_batched() $(&& !$rest.is_batched())* {
            let scalar = $first.is_scalar();
            let ($first $(, $rest)*) = ($first.inner() $(, $rest.inner())*);
            return $crate::tensor::VmapTensor::unbatched($op).with_scalar(scalar);
        }
    };
}

/// Unary ops: `fn name(tensor) -> tensor` with the batch dims passed through.
macro_rules! unary_ops {
    ($prim:ident; $($name:ident),* $(,)?) => {
        $(
            fn $name(tensor: $prim<Self>) -> $prim<Self> {
                $crate::rules::elementwise::unary(tensor, B::$name)
            }
        )*
    };
}

/// Ops with a scalar right-hand side: `fn name(lhs, rhs: Scalar) -> lhs`.
macro_rules! scalar_ops {
    ($prim:ident; $($name:ident),* $(,)?) => {
        $(
            fn $name(lhs: $prim<Self>, rhs: burn_backend::Scalar) -> $prim<Self> {
                $crate::rules::elementwise::unary(lhs, |t| B::$name(t, rhs))
            }
        )*
    };
}

/// Binary ops whose backends broadcast size-1 dims.
macro_rules! broadcasting_ops {
    ($prim:ident, $kind:ty; $($name:ident),* $(,)?) => {
        $(
            fn $name(lhs: $prim<Self>, rhs: $prim<Self>) -> $prim<Self> {
                unbatched!(lhs, rhs => B::$name(lhs, rhs));
                $crate::rules::elementwise::binary::<B, $kind, $kind, _>(lhs, rhs, B::$name)
            }
        )*
    };
}

/// Binary ops whose backends may not broadcast: missing batch dims are materialized.
macro_rules! materializing_ops {
    ($prim:ident, $kind:ty; $($name:ident),* $(,)?) => {
        $(
            fn $name(lhs: $prim<Self>, rhs: $prim<Self>) -> $prim<Self> {
                unbatched!(lhs, rhs => B::$name(lhs, rhs));
                $crate::rules::elementwise::binary_materialized::<B, $kind, $kind, _>(lhs, rhs, |l, r, _| B::$name(l, r))
            }
        )*
    };
}

/// Comparisons of two tensors, giving a bool tensor.
macro_rules! comparison_ops {
    ($prim:ident, $kind:ty; $($name:ident),* $(,)?) => {
        $(
            fn $name(lhs: $prim<Self>, rhs: $prim<Self>, out_dtype: burn_backend::BoolDType) -> BoolTensor<Self> {
                unbatched!(lhs, rhs => B::$name(lhs, rhs, out_dtype));
                $crate::rules::elementwise::binary::<B, $kind, $kind, _>(lhs, rhs, |l, r| B::$name(l, r, out_dtype))
            }
        )*
    };
}

/// Comparisons with a scalar, giving a bool tensor.
macro_rules! comparison_scalar_ops {
    ($prim:ident; $($name:ident),* $(,)?) => {
        $(
            fn $name(lhs: $prim<Self>, rhs: burn_backend::Scalar, out_dtype: burn_backend::BoolDType) -> BoolTensor<Self> {
                $crate::rules::elementwise::unary(lhs, |t| B::$name(t, rhs, out_dtype))
            }
        )*
    };
}

/// Reductions and scans along one logical dim: `fn name(tensor, dim) -> tensor`.
macro_rules! dim_ops {
    ($prim:ident, $kind:ty; $($name:ident),* $(,)?) => {
        $(
            fn $name(tensor: $prim<Self>, dim: usize) -> $prim<Self> {
                $crate::rules::reduce::reduce_dim::<B, $kind, _>(tensor, dim, B::$name)
            }
        )*
    };
}

/// Arg-reductions along one logical dim with an output dtype: `fn name(tensor, dim, dtype)`.
macro_rules! arg_ops {
    ($prim:ident, $kind:ty; $($name:ident),* $(,)?) => {
        $(
            fn $name(tensor: $prim<Self>, dim: usize, out_dtype: burn_backend::IntDType) -> IntTensor<Self> {
                $crate::rules::reduce::reduce_dim::<B, $kind, _>(tensor, dim, |t, d| B::$name(t, d, out_dtype))
            }
        )*
    };
}

/// The ops that float, int and bool tensors share (creation and transfer, views, indexing),
/// written once, as a table of Burn's method names: one row per op, `rule float int bool;`,
/// where `rule` names the op's arm of [`kind_ops!`] (its family rule), `-` marks a kind that has
/// no such method or implements it by hand, and `(name scatter)` also names the scatter that a
/// batched index of `select_assign` (`bool_select_or`) becomes. `shared_ops!(float)` (or `int`, `bool`) generates one
/// kind's column inside its op-trait impl.
macro_rules! shared_ops {
    ($kind:ident) => {
        shared_ops!(@table $kind;
            // Overridden (speed): zeros and ones; the defaults build them on the host. Float
            // zeros and ones are lazy constants, by hand in `float_tensor.rs`.
            create        float_empty        int_empty         bool_empty;
            create        -                  int_zeros         bool_zeros;
            create        -                  int_ones          bool_ones;
            random        float_random       int_random        -;
            cast          -                  int_cast          -;
            from_data     float_from_data    int_from_data     bool_from_data;
            into_data     float_into_data    int_into_data     bool_into_data;
            to_device     float_to_device    int_to_device     bool_to_device;
            reshape       float_reshape      int_reshape       bool_reshape;
            swap_dims     float_swap_dims    int_swap_dims     bool_swap_dims;
            permute       float_permute      int_permute       bool_permute;
            flip          float_flip         int_flip          bool_flip;
            expand        float_expand       int_expand        bool_expand;
            slice         float_slice        int_slice         bool_slice;
            unfold        float_unfold       int_unfold        bool_unfold;
            pad           float_pad          int_pad           -;
            cat           -                  int_cat           bool_cat;
            gather        float_gather       int_gather        bool_gather;
            scatter       float_scatter      int_scatter       -;
            scatter_or    -                  -                 bool_scatter_or;
            select        -                  int_select        bool_select;
            select_assign (float_select_assign float_scatter) (int_select_assign int_scatter) -;
            select_or     -                  -                 (bool_select_or bool_scatter_or);
            slice_assign  float_slice_assign int_slice_assign  bool_slice_assign;
            mask_where    float_mask_where   int_mask_where    bool_mask_where;
            mask_fill     float_mask_fill    int_mask_fill     bool_mask_fill;
            mask_select   float_mask_select  int_mask_select   bool_mask_select;
            scatter_nd    (float_scatter_nd float_scatter) (int_scatter_nd int_scatter) -;
            gather_nd     float_gather_nd    int_gather_nd     -;
        );
    };
    (@table float; $($op:ident $float:tt $int:tt $bool:tt;)*) => {
        $( shared_ops!(@one $op, FloatTensor, Float, FloatDType, $float); )*
    };
    (@table int; $($op:ident $float:tt $int:tt $bool:tt;)*) => {
        $( shared_ops!(@one $op, IntTensor, Int, IntDType, $int); )*
    };
    (@table bool; $($op:ident $float:tt $int:tt $bool:tt;)*) => {
        $( shared_ops!(@one $op, BoolTensor, Bool, BoolDType, $bool); )*
    };
    (@one $op:ident, $prim:ident, $kind:ty, $dtype:ty, -) => {};
    (@one $op:ident, $prim:ident, $kind:ty, $dtype:ty, ($name:ident $aux:ident)) => {
        kind_ops!(@ $op, $prim, $kind, $dtype, $name, $aux);
    };
    (@one $op:ident, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        kind_ops!(@ $op, $prim, $kind, $dtype, $name);
    };
}

/// One shared op of one kind (see [`shared_ops!`]), by its family rule:
/// `kind_ops!(@ rule, Prim, Kind, DType, burn_method)`.
macro_rules! kind_ops {
    // --- creation and transfer: new tensors are unbatched ---------------------------------------
    (@ create, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        fn $name(shape: Shape, device: &Device<Self>, dtype: $dtype) -> $prim<Self> {
            $crate::rules::create::create(shape, |s| B::$name(s, device, dtype))
        }
    };
    // Inside vmap a draw gets a batch dim at every level in `Randomness::Different` mode.
    (@ random, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        fn $name(
            shape: Shape,
            distribution: burn_backend::Distribution,
            device: &Device<Self>,
            dtype: $dtype,
        ) -> $prim<Self> {
            $crate::rules::random::random(stringify!($name), shape, |s| {
                B::$name(s, distribution, device, dtype)
            })
        }
    };
    (@ cast, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        fn $name(tensor: $prim<Self>, dtype: $dtype) -> $prim<Self> {
            $crate::rules::elementwise::unary(tensor, |t| B::$name(t, dtype))
        }
    };
    (@ from_data, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        fn $name(data: TensorData, device: &Device<Self>) -> $prim<Self> {
            $crate::rules::create::from_data(data, |d| B::$name(d, device))
        }
    };
    (@ into_data, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        fn $name(
            tensor: $prim<Self>,
        ) -> impl core::future::Future<Output = Result<TensorData, ExecutionError>> + Send {
            $crate::ops::assert_unbatched(&tensor, stringify!($name));
            $crate::rules::create::into_data(tensor, B::$name)
        }
    };
    (@ to_device, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        fn $name(tensor: $prim<Self>, device: &Device<Self>) -> $prim<Self> {
            $crate::rules::elementwise::unary(tensor, |t| B::$name(t, device))
        }
    };

    // --- views (rules::view) ---------------------------------------------------------------------
    (@ reshape, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        fn $name(tensor: $prim<Self>, shape: Shape) -> $prim<Self> {
            $crate::rules::view::reshape::<B, $kind>(tensor, shape)
        }
    };
    (@ swap_dims, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        fn $name(tensor: $prim<Self>, dim1: usize, dim2: usize) -> $prim<Self> {
            $crate::rules::view::swap_dims::<B, $kind>(tensor, dim1, dim2, B::$name)
        }
    };
    (@ permute, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        fn $name(tensor: $prim<Self>, axes: &[usize]) -> $prim<Self> {
            $crate::rules::view::permute::<B, $kind>(tensor, axes)
        }
    };
    (@ flip, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        fn $name(tensor: $prim<Self>, axes: &[usize]) -> $prim<Self> {
            $crate::rules::view::flip(tensor, axes, B::$name)
        }
    };
    (@ expand, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        fn $name(tensor: $prim<Self>, shape: Shape) -> $prim<Self> {
            $crate::rules::view::expand::<B, $kind>(tensor, shape)
        }
    };
    (@ slice, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        fn $name(tensor: $prim<Self>, slices: &[Slice]) -> $prim<Self> {
            $crate::rules::view::slice::<B, $kind>(tensor, slices)
        }
    };
    (@ unfold, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        fn $name(tensor: $prim<Self>, dim: usize, size: usize, step: usize) -> $prim<Self> {
            $crate::rules::reduce::along_dim(tensor, dim, |t, d| {
                $crate::compat::unfold::<B, $kind>(t, d, size, step, |t, d| B::$name(t, d, size, step))
            })
        }
    };
    // Overridden (speed): the default builds the padded tensor from slices and `cat`s; one
    // inner `pad` of the logical dims (the batch dims unpadded) serves every mode.
    (@ pad, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        fn $name(
            tensor: $prim<Self>,
            padding: &[(usize, usize)],
            mode: burn_backend::ops::PadMode,
        ) -> $prim<Self> {
            $crate::rules::view::pad(tensor, padding, |t, p| B::$name(t, p, mode))
        }
    };
    // Overridden (speed): the default assigns every input into an empty tensor.
    (@ cat, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        fn $name(tensors: Vec<$prim<Self>>, dim: usize) -> $prim<Self> {
            $crate::rules::view::cat::<B, $kind>(tensors, dim, B::$name)
        }
    };

    // --- indexing (rules::indexing), after the fast path ------------------------------------------
    (@ gather, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        fn $name(dim: usize, tensor: $prim<Self>, indices: IntTensor<Self>) -> $prim<Self> {
            unbatched!(tensor, indices => B::$name(dim, tensor, indices));
            $crate::rules::indexing::gather::<B, $kind>(dim, tensor, indices)
        }
    };
    (@ scatter, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        fn $name(
            dim: usize,
            tensor: $prim<Self>,
            indices: IntTensor<Self>,
            value: $prim<Self>,
            update: burn_backend::tensor::IndexingUpdateOp,
        ) -> $prim<Self> {
            unbatched!(tensor, indices, value => B::$name(dim, tensor, indices, value, update));
            $crate::rules::indexing::scatter::<B, $kind>(dim, tensor, indices, value, |d, t, i, v| {
                B::$name(d, t, i, v, update)
            })
        }
    };
    (@ scatter_or, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        fn $name(
            dim: usize,
            tensor: $prim<Self>,
            indices: IntTensor<Self>,
            value: $prim<Self>,
        ) -> $prim<Self> {
            unbatched!(tensor, indices, value => B::$name(dim, tensor, indices, value));
            $crate::rules::indexing::scatter::<B, $kind>(dim, tensor, indices, value, B::$name)
        }
    };
    (@ select, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        fn $name(tensor: $prim<Self>, dim: usize, indices: IntTensor<Self>) -> $prim<Self> {
            $crate::rules::indexing::select::<B, $kind>(tensor, dim, indices)
        }
    };
    (@ select_assign, $prim:ident, $kind:ty, $dtype:ty, $name:ident, $scatter:ident) => {
        fn $name(
            tensor: $prim<Self>,
            dim: usize,
            indices: IntTensor<Self>,
            value: $prim<Self>,
            update: burn_backend::tensor::IndexingUpdateOp,
        ) -> $prim<Self> {
            unbatched!(tensor, indices, value => B::$name(tensor, dim, indices, value, update));
            $crate::rules::indexing::select_assign::<B, $kind>(
                tensor,
                dim,
                indices,
                value,
                |t, d, i, v| B::$name(t, d, i, v, update),
                |d, t, i, v| B::$scatter(d, t, i, v, update),
            )
        }
    };
    (@ select_or, $prim:ident, $kind:ty, $dtype:ty, $name:ident, $scatter:ident) => {
        fn $name(
            tensor: $prim<Self>,
            dim: usize,
            indices: IntTensor<Self>,
            value: $prim<Self>,
        ) -> $prim<Self> {
            unbatched!(tensor, indices, value => B::$name(tensor, dim, indices, value));
            $crate::rules::indexing::select_assign::<B, $kind>(
                tensor, dim, indices, value, B::$name, B::$scatter,
            )
        }
    };
    (@ slice_assign, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        fn $name(tensor: $prim<Self>, slices: &[Slice], value: $prim<Self>) -> $prim<Self> {
            unbatched!(tensor, value => B::$name(tensor, slices, value));
            $crate::rules::indexing::slice_assign::<B, $kind>(tensor, slices, value, B::$name)
        }
    };
    (@ mask_where, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        fn $name(tensor: $prim<Self>, mask: BoolTensor<Self>, value: $prim<Self>) -> $prim<Self> {
            unbatched!(tensor, mask, value => {
                let t = $crate::compat::mask_target::<B, $kind>(tensor, &[burn_backend::TensorMetadata::shape(&mask), burn_backend::TensorMetadata::shape(&value)]);
                B::$name(t, mask, value)
            });
            $crate::rules::indexing::mask_where::<B, $kind>(tensor, mask, value, B::$name)
        }
    };
    (@ mask_fill, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        fn $name(tensor: $prim<Self>, mask: BoolTensor<Self>, value: burn_backend::Scalar) -> $prim<Self> {
            unbatched!(tensor, mask => {
                let t = $crate::compat::mask_target::<B, $kind>(tensor, &[burn_backend::TensorMetadata::shape(&mask)]);
                B::$name(t, mask, value)
            });
            $crate::rules::indexing::mask_fill::<B, $kind>(tensor, mask, |t, m| B::$name(t, m, value))
        }
    };
    // Overridden (correctness): the number of selected elements depends on each example's mask;
    // batched operands run the loop fallback (stackable when every example selects as many),
    // where the default would read the batched mask back and panic.
    (@ mask_select, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        #[allow(clippy::manual_async_fn)] // The trait asks for `'static + Send`.
        fn $name(
            tensor: $prim<Self>,
            mask: BoolTensor<Self>,
        ) -> impl core::future::Future<Output = $prim<Self>> + 'static + Send {
            $crate::rules::fallback::mask_select::<B, $kind, _, _>(stringify!($name), tensor, mask, B::$name)
        }
    };
    (@ scatter_nd, $prim:ident, $kind:ty, $dtype:ty, $name:ident, $scatter:ident) => {
        fn $name(
            data: $prim<Self>,
            indices: IntTensor<Self>,
            values: $prim<Self>,
            reduction: burn_backend::tensor::IndexingUpdateOp,
        ) -> $prim<Self> {
            let run = move |d, i, v| {
                $crate::compat::scatter_nd::<B, $kind>(
                    d,
                    i,
                    v,
                    |d, i, v| B::$name(d, i, v, reduction),
                    |d, i, v| B::$scatter(0, d, i, v, reduction),
                )
            };
            unbatched!(data, indices, values => {
                let (i, v) = $crate::compat::flat_tuples::<B, $kind>(indices, values);
                run(data, i, v)
            });
            $crate::rules::indexing::scatter_nd::<B, $kind>(data, indices, values, run)
        }
    };
    (@ gather_nd, $prim:ident, $kind:ty, $dtype:ty, $name:ident) => {
        fn $name(data: $prim<Self>, indices: IntTensor<Self>) -> $prim<Self> {
            $crate::rules::indexing::gather_nd::<B, $kind>(data, indices, B::$name)
        }
    };
}

pub(crate) use {
    arg_ops, broadcasting_ops, comparison_ops, comparison_scalar_ops, dim_ops, kind_ops,
    materializing_ops, scalar_ops, shared_ops, unary_ops, unbatched,
};

//! Registration macros for op families (burn-fusion's `binary_float_ops!` style).

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

pub(crate) use {
    broadcasting_ops, comparison_ops, comparison_scalar_ops, dim_ops, materializing_ops,
    scalar_ops, unary_ops,
};

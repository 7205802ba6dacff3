//! The match over Burn's [`OperationIr`]: each captured operation becomes the backend call it
//! was recorded from, on any backend `B` (the user's own, `Vmap<B>`, `Autodiff<Vmap<B>>`).
//!
//! This directory is the only place that names the IR's variants, one file per IR enum
//! (`mod.rs`: `OperationIr` itself; `base.rs`: `BaseOperationIr` for the three kinds;
//! `numeric.rs`: `NumericOperationIr` for floats and ints; `float.rs`: `FloatOperationIr`,
//! `IntOperationIr`, `BoolOperationIr`, `ActivationOperationIr`; `module.rs`:
//! `ModuleOperationIr`), so following a Burn release that changes the IR (0.23 adds `Fmod`,
//! attention backward, 3-D pools and removes `Distributed`) is a change here. An operation the
//! interpreter does not run is a typed error ([`VmapError::UnsupportedOp`]), never a panic.

mod base;
mod float;
mod module;
mod numeric;

use burn_backend::backend::Backend;
use burn_ir::OperationIr;

use super::env::Env;
use crate::VmapError;

/// `x -> f(x)` for an op descriptor with `input` and `out`.
macro_rules! un {
    ($env:ident, $d:ident: $get:ident -> $put:ident, $f:expr) => {{
        let x = $env.$get(&$d.input);
        $env.$put(&$d.out, $f(x))
    }};
}

/// `(lhs, rhs) -> f(lhs, rhs)`.
macro_rules! bin {
    ($env:ident, $d:ident: $get:ident -> $put:ident, $f:expr) => {{
        let l = $env.$get(&$d.lhs);
        let r = $env.$get(&$d.rhs);
        $env.$put(&$d.out, $f(l, r))
    }};
}

/// `(lhs, scalar) -> f(lhs, scalar)`.
macro_rules! sc {
    ($env:ident, $d:ident: $get:ident -> $put:ident, $f:expr) => {{
        let l = $env.$get(&$d.lhs);
        $env.$put(&$d.out, $f(l, $d.rhs.into()))
    }};
}

/// A comparison: `(lhs, rhs, out dtype) -> bool`.
macro_rules! cmp {
    ($env:ident, $d:ident: $get:ident, $f:expr) => {{
        let l = $env.$get(&$d.lhs);
        let r = $env.$get(&$d.rhs);
        let dtype = $env.bool_out($d.out.dtype);
        $env.put_b(&$d.out, $f(l, r, dtype))
    }};
}

/// A comparison with a scalar: `(lhs, scalar, out dtype) -> bool`.
macro_rules! cmp_sc {
    ($env:ident, $d:ident: $get:ident, $f:expr) => {{
        let l = $env.$get(&$d.lhs);
        let dtype = $env.bool_out($d.out.dtype);
        $env.put_b(&$d.out, $f(l, $d.rhs.into(), dtype))
    }};
}

/// A reduction along `axis`: `(input, axis) -> out`.
macro_rules! dim {
    ($env:ident, $d:ident: $get:ident -> $put:ident, $f:expr) => {{
        let x = $env.$get(&$d.input);
        $env.$put(&$d.out, $f(x, $d.axis))
    }};
}

pub(super) use {bin, cmp, cmp_sc, dim, sc, un};

pub(super) fn unsupported(op: &str, why: &'static str) -> Result<(), VmapError> {
    Err(VmapError::UnsupportedOp {
        op: op.to_string(),
        why,
    })
}

/// Runs one captured operation on backend `B`, reading its inputs from `env` and binding its
/// outputs there.
///
/// # Errors
/// [`VmapError::UnsupportedOp`] for an operation the interpreter does not run: quantization,
/// custom operations of backend extensions, distributed operations.
pub(crate) fn execute<B: Backend>(env: &mut Env<B>, op: &OperationIr) -> Result<(), VmapError> {
    match op {
        OperationIr::BaseFloat(op) => base::base_float(env, op)?,
        OperationIr::BaseInt(op) => base::base_int(env, op)?,
        OperationIr::BaseBool(op) => base::base_bool(env, op)?,
        OperationIr::NumericFloat(_, op) => numeric::numeric_float(env, op),
        OperationIr::NumericInt(_, op) => numeric::numeric_int(env, op)?,
        OperationIr::Float(_, op) => float::float(env, op)?,
        OperationIr::Int(op) => float::int(env, op),
        OperationIr::Bool(op) => float::bool_(env, op),
        OperationIr::Module(op) => module::module(env, op)?,
        OperationIr::Activation(op) => float::activation(env, op),
        // Inputs and constants are bound before the run; Drop only manages handle lifetimes
        // (the environment frees each tensor after its last read).
        OperationIr::Init(_) | OperationIr::Drop(_) => {}
        // `custom_vmap` and `sequential_vmap` calls (a backend extension's op is an error there).
        OperationIr::Custom(op) => super::custom::execute(env, op)?,
        OperationIr::Distributed(_) => unsupported(
            "a distributed all-reduce",
            "collectives cannot run per example",
        )?,
    }
    Ok(())
}

//! Coverage: every required method of `FloatTensorOps`, `IntTensorOps` and `BoolTensorOps`
//! (Burn 0.21: the trait methods without a default body) maps to at least one registered oracle
//! case that exercises it through the public `Tensor` API inside `vmap`. A method with no case
//! fails `every_required_op_has_an_oracle_case`, naming it.
//!
//! The lists are the required methods of `burn-backend` 0.21's `backend/ops/{tensor,
//! int_tensor, bool_tensor}.rs` (quantized, module, activation and transaction ops are out of
//! scope here).

use std::collections::BTreeMap;

use crate::harness::{OpCase, backend_lacks};

pub const REQUIRED_FLOAT: &[&str] = &[
    "float_from_data",
    "float_random",
    "float_into_data",
    "float_device",
    "float_to_device",
    "float_into_int",
    "float_empty",
    "float_add",
    "float_add_scalar",
    "float_sub",
    "float_sub_scalar",
    "float_mul",
    "float_mul_scalar",
    "float_div",
    "float_div_scalar",
    "float_remainder",
    "float_remainder_scalar",
    "float_matmul",
    "float_cross",
    "float_recip",
    "float_swap_dims",
    "float_permute",
    "float_flip",
    "float_reshape",
    "float_gather",
    "float_scatter_add",
    "float_select",
    "float_select_add",
    "float_slice",
    "float_slice_assign",
    "float_mask_where",
    "float_mask_fill",
    "float_equal",
    "float_equal_elem",
    "float_greater",
    "float_greater_elem",
    "float_greater_equal",
    "float_greater_equal_elem",
    "float_lower",
    "float_lower_elem",
    "float_lower_equal",
    "float_lower_equal_elem",
    "float_sum",
    "float_sum_dim",
    "float_mean_dim",
    "float_cumsum",
    "float_cumprod",
    "float_cummin",
    "float_cummax",
    "float_cast",
    "float_exp",
    "float_log",
    "float_log1p",
    "float_powf",
    "float_powf_scalar_impl",
    "float_sqrt",
    "float_abs",
    "float_cos",
    "float_sin",
    "float_tan",
    "float_cosh",
    "float_sinh",
    "float_tanh",
    "float_acos",
    "float_acosh",
    "float_asin",
    "float_asinh",
    "float_atan",
    "float_atanh",
    "float_atan2",
    "float_round",
    "float_floor",
    "float_ceil",
    "float_trunc",
    "float_erf",
    "float_argmax",
    "float_argtopk",
    "float_argmin",
    "float_expand",
    "float_unfold",
];

pub const REQUIRED_INT: &[&str] = &[
    "int_empty",
    "int_into_data",
    "int_from_data",
    "int_device",
    "int_to_device",
    "int_reshape",
    "int_slice",
    "int_slice_assign",
    "int_into_float",
    "int_mask_where",
    "int_mask_fill",
    "int_gather",
    "int_scatter_add",
    "int_select",
    "int_select_add",
    "int_equal",
    "int_equal_elem",
    "int_greater",
    "int_greater_elem",
    "int_greater_equal",
    "int_greater_equal_elem",
    "int_lower",
    "int_lower_elem",
    "int_lower_equal",
    "int_lower_equal_elem",
    "int_add",
    "int_add_scalar",
    "int_sub",
    "int_sub_scalar",
    "int_mul",
    "int_mul_scalar",
    "int_div",
    "int_div_scalar",
    "int_remainder",
    "int_remainder_scalar",
    "int_matmul",
    "int_sum",
    "int_sum_dim",
    "int_prod",
    "int_prod_dim",
    "int_mean_dim",
    "int_cumsum",
    "int_cumprod",
    "int_cummin",
    "int_cummax",
    "int_argmax",
    "int_argtopk",
    "int_argmin",
    "int_abs",
    "int_swap_dims",
    "int_permute",
    "int_flip",
    "int_random",
    "int_expand",
    "bitwise_and",
    "bitwise_and_scalar",
    "bitwise_or",
    "bitwise_or_scalar",
    "bitwise_xor",
    "bitwise_xor_scalar",
    "bitwise_not",
    "bitwise_left_shift",
    "bitwise_left_shift_scalar",
    "bitwise_right_shift",
    "bitwise_right_shift_scalar",
    "int_cast",
    "int_unfold",
];

pub const REQUIRED_BOOL: &[&str] = &[
    "bool_empty",
    "bool_zeros",
    "bool_ones",
    "bool_into_data",
    "bool_from_data",
    "bool_into_int",
    "bool_into_float",
    "bool_device",
    "bool_to_device",
    "bool_reshape",
    "bool_slice",
    "bool_slice_assign",
    "bool_mask_where",
    "bool_mask_fill",
    "bool_gather",
    "bool_scatter_or",
    "bool_select",
    "bool_select_or",
    "bool_equal",
    "bool_equal_elem",
    "bool_not",
    "bool_and",
    "bool_or",
    "bool_swap_dims",
    "bool_permute",
    "bool_flip",
    "bool_expand",
    "bool_unfold",
];

/// Checks outside the registered cases, and the methods they exercise.
const EXTRA: &[(&str, &[&str])] = &[
    // Every oracle comparison reads the vmapped results back with `into_data` (unbatched after
    // `call`), and every `*_into_data` case reads an unbatched tensor inside vmap.
    (
        "harness::check_levels (readback)",
        &["float_into_data", "int_into_data", "bool_into_data"],
    ),
    (
        "misc::reading_a_batched_tensor_inside_vmap_panics_with_a_clear_message",
        &["float_into_data", "bool_into_data"],
    ),
    (
        "misc::batch_size_zero",
        &[
            "float_exp",
            "float_add",
            "int_mul",
            "float_sum_dim",
            "float_sum",
            "float_matmul",
            "float_gather",
            "float_greater_elem",
        ],
    ),
    (
        "grads::oracle_per_example_grads",
        &[
            "float_matmul",
            "float_tanh",
            "float_exp",
            "float_log1p",
            "float_sqrt",
            "float_recip",
            "float_abs",
            "float_powf_scalar_impl",
            "float_sin",
            "float_gather",
            "float_select",
            "float_select_add",
            "float_scatter_add",
            "float_slice",
            "float_mask_where",
            "float_cumsum",
            "float_flip",
            "float_reshape",
            "float_swap_dims",
            "float_sum_dim",
            "float_argmax",
        ],
    ),
];

fn all_cases() -> Vec<OpCase> {
    let mut v = crate::float_ops::cases();
    v.extend(crate::int_ops::cases());
    v.extend(crate::bool_ops::cases());
    v
}

#[test]
fn every_required_op_has_an_oracle_case() {
    let cases = all_cases();
    let mut by_op: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut names = std::collections::BTreeSet::new();
    let required: Vec<&str> = REQUIRED_FLOAT
        .iter()
        .chain(REQUIRED_INT)
        .chain(REQUIRED_BOOL)
        .copied()
        .collect();
    let mut unknown = Vec::new();
    for c in &cases {
        assert!(
            names.insert(c.name),
            "duplicate oracle case name {}",
            c.name
        );
        for op in c.covers {
            if !required.contains(op) {
                unknown.push(format!("{} (case {})", op, c.name));
            }
            by_op.entry(op).or_default().push(c.name);
        }
    }
    for (test, ops) in EXTRA {
        for op in *ops {
            assert!(required.contains(op), "EXTRA names an unknown method {op}");
            by_op.entry(op).or_default().push(test);
        }
    }
    assert!(
        unknown.is_empty(),
        "cases claim to cover methods that are not required ones (typo?): {unknown:?}"
    );
    let missing: Vec<&str> = required
        .iter()
        .copied()
        .filter(|op| !by_op.contains_key(op))
        .collect();
    println!(
        "required methods: {} (float {}, int {}, bool {}); covered: {}",
        required.len(),
        REQUIRED_FLOAT.len(),
        REQUIRED_INT.len(),
        REQUIRED_BOOL.len(),
        required.len() - missing.len()
    );
    for op in &required {
        println!(
            "  {op:<28} -> {}",
            by_op
                .get(op)
                .map(|v| v.join(", "))
                .unwrap_or_else(|| "MISSING".into())
        );
    }
    assert!(
        missing.is_empty(),
        "required methods with no oracle case: {missing:?}"
    );
}

/// Methods whose oracle case cannot run on the test backend (it panics with "not
/// implemented" even without vmap). They pass on backends that implement them (`wgpu`,
/// `cuda` features); listed so the gap stays visible.
#[test]
fn list_cases_the_test_backend_cannot_run() {
    let lacking: Vec<String> = all_cases()
        .iter()
        .filter_map(|c| {
            backend_lacks(c).map(|why| format!("{} [{}]: {why}", c.name, c.covers.join(", ")))
        })
        .collect();
    println!(
        "cases skipped on {}: {}",
        core::any::type_name::<burn_vmap::testing::TestBackend>(),
        lacking.len()
    );
    for l in &lacking {
        println!("  {l}");
    }
    // Only argtopk is known to be missing from burn-ndarray 0.21; anything else is new.
    #[cfg(all(feature = "ndarray", not(feature = "wgpu"), not(feature = "cuda")))]
    assert!(
        lacking.iter().all(|l| l.contains("argtopk")),
        "unexpected ops missing from the test backend: {lacking:?}"
    );
}

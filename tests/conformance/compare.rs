//! Comparison: a run against a case's `expected` (values within tolerance, or an error).

use crate::*;

/// Checks a run against `expected`: `Err(why)` on a mismatch.
pub(crate) fn judge(case: &Case, run: Run) -> Result<(), String> {
    match (&case.expected, run) {
        (Expected::Outputs(expected), Run::Outputs(got)) => {
            for (key, exp) in expected {
                match (exp, got.get(key)) {
                    (None, None | Some(None)) => {}
                    (None, Some(Some(g))) => {
                        return Err(format!(
                            "{key}: expected None, got an array of shape {:?}",
                            g.shape
                        ));
                    }
                    (Some(_), None) => {
                        return Err(format!(
                            "{key}: missing output (got {:?})",
                            got.keys().collect::<Vec<_>>()
                        ));
                    }
                    (Some(_), Some(None)) => {
                        return Err(format!("{key}: expected an array, got None"));
                    }
                    (Some(e), Some(Some(g))) => {
                        compare(e, g, case.tolerance).map_err(|why| format!("{key}: {why}"))?
                    }
                }
            }
            Ok(())
        }
        (Expected::Outputs(_), Run::Error(e)) => Err(format!("unexpected error: {e}")),
        (Expected::Error { kind, .. }, Run::Outputs(got)) => Err(format!(
            "expected a {kind} error, got outputs {:?}",
            got.keys().collect::<Vec<_>>()
        )),
        (Expected::Error { kind, details }, Run::Error(e)) => check_error(case, kind, details, &e),
    }
}

/// numpy `allclose` for floats (`|a - e| <= atol + rtol * |e|`), exact for int and bool; shapes
/// and dtypes exactly.
pub(crate) fn compare(e: &Array, g: &Got, tol: Tolerance) -> Result<(), String> {
    if e.dtype != g.dtype {
        return Err(format!(
            "dtype: expected {}, got {}",
            e.dtype.name(),
            g.dtype.name()
        ));
    }
    if e.shape != g.shape {
        return Err(format!("shape: expected {:?}, got {:?}", e.shape, g.shape));
    }
    let bad: Vec<usize> = (0..e.data.len())
        .filter(|&i| {
            let (x, y) = (g.data[i], e.data[i]);
            match e.dtype {
                DType::F32 => {
                    // NaN in the actual value is a mismatch.
                    let close = (x - y).abs() <= tol.atol + tol.rtol * y.abs();
                    !close
                }
                DType::I32 | DType::Bool => x != y,
            }
        })
        .collect();
    if let Some(&i) = bad.first() {
        let max_err = bad
            .iter()
            .map(|&i| (g.data[i] - e.data[i]).abs())
            .fold(0.0, f64::max);
        return Err(format!(
            "{} of {} values differ (rtol {}, atol {}); first at flat index {i}: expected {}, got {}; max abs error {max_err:e}",
            bad.len(),
            e.data.len(),
            tol.rtol,
            tol.atol,
            e.data[i],
            g.data[i]
        ));
    }
    Ok(())
}

/// The integers written in `msg` (to check a message names the sizes).
pub(crate) fn integers_in(msg: &str) -> Vec<u64> {
    msg.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect()
}

pub(crate) fn json_usizes(v: &Value) -> Vec<usize> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_u64())
                .map(|x| x as usize)
                .collect()
        })
        .unwrap_or_default()
}

/// Checks the library's error has the category `kind` and names what `details` lists.
pub(crate) fn check_error(
    case: &Case,
    kind: &str,
    details: &Value,
    e: &VmapError,
) -> Result<(), String> {
    let msg = e.to_string();
    let numbers = integers_in(&msg);
    let mentions = |n: usize| numbers.contains(&(n as u64));
    match kind {
        "inconsistent_batch_sizes" => {
            let VmapError::InconsistentBatchSizes { arguments, .. } = e else {
                return Err(format!("expected InconsistentBatchSizes, got {e:?}"));
            };
            let want = json_usizes(&details["batch_sizes"]);
            let got: Vec<usize> = arguments.iter().map(|(_, s)| *s).collect();
            if got != want {
                return Err(format!(
                    "batch sizes: expected {want:?}, got {got:?} ({msg})"
                ));
            }
            if let Some(&n) = want.iter().find(|&&n| !mentions(n)) {
                return Err(format!("the message does not mention size {n}: {msg}"));
            }
            // Argument names: the library names an argument by its path, `args[i]` for the i-th
            // positional one; an argument that is not positional must appear as a whole word.
            for name in details["arguments"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                let named = match case.arg_position(name) {
                    Some(i) => msg.contains(&format!("args[{i}]")),
                    None => msg
                        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .any(|w| w == name),
                };
                if !named {
                    let position = case
                        .arg_position(name)
                        .map(|i| format!(" (args[{i}])"))
                        .unwrap_or_default();
                    return Err(format!(
                        "the message does not name argument {name}{position}: {msg}"
                    ));
                }
            }
            Ok(())
        }
        "non_dividing_microbatch_size" => {
            let VmapError::NonDividingMicrobatchSize {
                batch_size,
                microbatch_size,
            } = e
            else {
                return Err(format!("expected NonDividingMicrobatchSize, got {e:?}"));
            };
            let want = (
                details["batch_size"].as_u64().unwrap_or(u64::MAX) as usize,
                details["microbatch_size"].as_u64().unwrap_or(u64::MAX) as usize,
            );
            if (*batch_size, *microbatch_size) != want {
                return Err(format!(
                    "expected batch_size/microbatch_size {want:?}, got ({batch_size}, {microbatch_size})"
                ));
            }
            if !(mentions(want.0) && mentions(want.1)) {
                return Err(format!("the message does not name both sizes: {msg}"));
            }
            Ok(())
        }
        "unsupported_out_axes" => {
            let VmapError::UnsupportedOutAxes { .. } = e else {
                return Err(format!("expected UnsupportedOutAxes, got {e:?}"));
            };
            let want = details["out_axes"].as_u64().unwrap_or(u64::MAX) as usize;
            if !mentions(want) {
                return Err(format!("the message does not name out_axes {want}: {msg}"));
            }
            Ok(())
        }
        "rank_too_small" | "incompatible_batch_shapes" => {
            check_auto_vmap_error(case, kind, details, e)
        }
        "chunk_size_not_positive" => {
            let VmapError::ChunkSizeNotPositive { chunk_size, .. } = e else {
                return Err(format!("expected ChunkSizeNotPositive, got {e:?}"));
            };
            let want = details["chunk_size"].as_i64().unwrap_or(0);
            if *chunk_size as i64 != want {
                return Err(format!(
                    "chunk_size: expected {want}, got {chunk_size} ({msg})"
                ));
            }
            if !msg.contains("chunk_size") || !mentions(want.unsigned_abs() as usize) {
                return Err(format!(
                    "the message does not name chunk_size = {want}: {msg}"
                ));
            }
            Ok(())
        }
        other => Err(format!(
            "runner: error kind {other} is not supported yet (got: {msg})"
        )),
    }
}

/// Parameter names of the auto_vmap programs (FORMAT section 4), which `ranks` objects use.
pub(crate) fn auto_vmap_param_names(case: &Case) -> Vec<String> {
    let names: &[&str] = match case.program.as_str() {
        "foo_s_v_m" => &["s", "v", "m"],
        "alpha_times_norm" => &["v", "alpha"],
        "dot_a_x_plus_b" => &["p", "x"],
        "u_times_sum_w" => &["t"],
        _ => &[],
    };
    if names.len() == case.args.len() {
        return names.iter().map(|n| n.to_string()).collect();
    }
    // Otherwise the positional arguments' input names.
    case.args
        .iter()
        .enumerate()
        .map(|(i, a)| match a {
            ArgSpec::Input(n) => n.clone(),
            ArgSpec::Struct(_) => format!("arg{i}"),
        })
        .collect()
}

/// `rank_too_small` / `incompatible_batch_shapes`: the variant, its fields, and a message that
/// names the arguments (`args[i]`, i the parameter's position) and the sizes.
pub(crate) fn check_auto_vmap_error(
    case: &Case,
    kind: &str,
    details: &Value,
    e: &VmapError,
) -> Result<(), String> {
    let msg = e.to_string();
    let names = auto_vmap_param_names(case);
    let path_of = |name: &str| -> Result<String, String> {
        names
            .iter()
            .position(|n| n == name)
            .map(|i| format!("args[{i}]"))
            .ok_or_else(|| format!("runner: {name:?} is not a parameter of {names:?}"))
    };
    let numbers = integers_in(&msg);
    let mentions_all = |sizes: &[usize]| -> Result<(), String> {
        match sizes.iter().find(|&&n| !numbers.contains(&(n as u64))) {
            Some(n) => Err(format!("the message does not mention size {n}: {msg}")),
            None => Ok(()),
        }
    };
    match (kind, e) {
        (
            "rank_too_small",
            VmapError::RankTooSmall {
                argument,
                shape,
                min_rank,
            },
        ) => {
            let want_arg = path_of(details["argument"].as_str().unwrap_or_default())?;
            let want_shape = json_usizes(&details["shape"]);
            let want_rank = details["min_rank"].as_u64().unwrap_or(u64::MAX) as usize;
            if !argument.starts_with(&want_arg) || *shape != want_shape || *min_rank != want_rank {
                return Err(format!(
                    "expected {want_arg} of shape {want_shape:?} and min rank {want_rank}, got {e:?}"
                ));
            }
            if !msg.contains(&want_arg) {
                return Err(format!("the message does not name {want_arg}: {msg}"));
            }
            mentions_all(&want_shape)?;
            mentions_all(&[want_rank])
        }
        (
            "incompatible_batch_shapes",
            VmapError::IncompatibleBatchShapes {
                arguments,
                batch_shapes,
            },
        ) => {
            let want_args = details["arguments"].as_array().cloned().unwrap_or_default();
            let want_shapes = details["batch_shapes"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for (name, shape) in want_args.iter().zip(&want_shapes) {
                let path = path_of(name.as_str().unwrap_or_default())?;
                let shape = json_usizes(shape);
                let found = arguments
                    .iter()
                    .zip(batch_shapes)
                    .any(|(a, s)| a.starts_with(&path) && *s == shape);
                if !found {
                    return Err(format!(
                        "expected {path} with batch shape {shape:?} among {arguments:?} / {batch_shapes:?}"
                    ));
                }
                if !msg.contains(&path) {
                    return Err(format!("the message does not name {path}: {msg}"));
                }
                mentions_all(&shape)?;
            }
            Ok(())
        }
        _ => Err(format!("expected a {kind} error, got {e:?}")),
    }
}

//! Extra powerpax cases: the reference cases with other parameters and lengths, judged
//! against host loops written here (f64), through the same apis and comparison. Backend-free
//! (it builds cases and runs them through `run_case`).

use crate::*;

/// The first case named `name`, parsed.
pub(crate) fn load_case(name: &str) -> Case {
    let path = vectors_dir().join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Case::parse(&serde_json::from_str(&text).unwrap()).unwrap()
}

pub(crate) fn array(shape: Vec<usize>, data: Vec<f64>) -> Array {
    Array {
        dtype: DType::F32,
        shape,
        data,
    }
}

/// Keeps the first `n` rows of input `name`.
pub(crate) fn truncate_rows(case: &mut Case, name: &str, n: usize) {
    let a = case.inputs.get_mut(name).unwrap();
    let row: usize = a.shape[1..].iter().product();
    a.shape[0] = n;
    a.data.truncate(n * row);
}

pub(crate) fn run_extra(case: &Case) -> Result<(), String> {
    match run_case(case) {
        Outcome::Pass => Ok(()),
        Outcome::Fail(why) => Err(format!("{}: {why}", case.name)),
        Outcome::Skip(why) => Err(format!("{}: skipped: {why}", case.name)),
    }
}

/// `range(*slice(start, stop, step).indices(n))`, as Python computes it.
pub(crate) fn py_slice(n: i64, start: Option<i64>, stop: Option<i64>, step: i64) -> Vec<usize> {
    let (lower, upper) = if step > 0 { (0, n) } else { (-1, n - 1) };
    let fix = |v: i64| {
        if v < 0 {
            (v + n).max(lower)
        } else {
            v.min(upper)
        }
    };
    let mut i = start.map_or(if step > 0 { lower } else { upper }, fix);
    let stop = stop.map_or(if step > 0 { upper } else { lower }, fix);
    let mut out = vec![];
    while (step > 0 && i < stop) || (step < 0 && i > stop) {
        out.push(i as usize);
        i += step;
    }
    out
}

#[test]
pub(crate) fn powerpax_extra_sliced_scan_cases() {
    let mut failures = vec![];
    let mut count = 0;
    for base in [
        "sliced_scan_xs_startN_stopN_stepN_revFalse",
        "sliced_scan_xs2_startN_stopN_stepN_revFalse",
    ] {
        if crate::fusion_skip(base).is_some() {
            continue;
        }
        let base = load_case(base);
        for n in [0usize, 1, 4, 10] {
            for (start, stop, step) in [
                (None, None, None),
                (Some(-2), None, None),
                (Some(1), Some(-1), Some(2)),
                (None, None, Some(-3)),
                (Some(7), Some(-9), Some(-1)),
                (Some(12), Some(-12), Some(-5)),
                (Some(3), Some(3), None),
                (Some(-100), Some(100), Some(4)),
            ] {
                for reverse in [false, true] {
                    let mut case = base.clone();
                    case.name = format!(
                        "{} n{n} {start:?}:{stop:?}:{step:?} rev{reverse}",
                        base.name
                    );
                    truncate_rows(&mut case, "xs", n);
                    for (k, v) in [("start", start), ("stop", stop), ("step", step)] {
                        case.params
                            .insert(k.into(), v.map_or(Value::Null, Value::from));
                    }
                    case.params.insert("reverse".into(), Value::from(reverse));
                    // Oracle: cumsum_carry as a host loop, then the Python slice.
                    let xs = &case.inputs["xs"];
                    let row: usize = xs.shape[1..].iter().product();
                    let mut c = case.inputs["init"].data.clone();
                    let mut ys = vec![vec![]; n];
                    let order: Vec<usize> = if reverse {
                        (0..n).rev().collect()
                    } else {
                        (0..n).collect()
                    };
                    for t in order {
                        for (ci, x) in c.iter_mut().zip(&xs.data[t * row..(t + 1) * row]) {
                            *ci += x;
                        }
                        ys[t] = c.clone();
                    }
                    let idx = py_slice(n as i64, start, stop, step.unwrap_or(1));
                    let mut ys_shape = xs.shape.clone();
                    ys_shape[0] = idx.len();
                    let expected = BTreeMap::from([
                        ("carry".to_string(), Some(array(xs.shape[1..].to_vec(), c))),
                        (
                            "ys".to_string(),
                            Some(array(
                                ys_shape,
                                idx.iter().flat_map(|&t| ys[t].clone()).collect(),
                            )),
                        ),
                    ]);
                    case.expected = Expected::Outputs(expected);
                    count += 1;
                    if let Err(e) = run_extra(&case) {
                        failures.push(e);
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {count} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Whether the checkpointed scan of `n` steps in chunks of `chunk` runs on the test backend:
/// every one of the 21 on Flex; on the cubecl backends (wgpu, CUDA) 8 that cover each kind of
/// chunking (none; chunks that divide the length, leave a remainder, exceed it) at one step
/// and at seven, 16 of the 42 cases with `reverse`. The chunking is the transform's host logic,
/// the same on every backend, and there a case costs mostly its kernels' compilation (on
/// lavapipe, 59 s for the 42).
fn checkpoint_case_on_this_backend(n: usize, chunk: Option<usize>) -> bool {
    let cubecl = cfg!(any(feature = "wgpu", feature = "cuda"));
    !cubecl || (n != 5 && matches!(chunk, None | Some(1) | Some(2) | Some(9)))
}

#[test]
pub(crate) fn powerpax_extra_checkpoint_chunked_scan_cases() {
    let base = load_case("checkpoint_chunked_scan_chunkNone_revFalse");
    let d = base.inputs["init"].shape[0];
    let mut failures = vec![];
    let mut count = 0;
    for n in [1usize, 5, 7] {
        for chunk in [None, Some(1), Some(2), Some(4), Some(5), Some(6), Some(9)] {
            if !checkpoint_case_on_this_backend(n, chunk) {
                continue;
            }
            for reverse in [false, true] {
                let mut case = base.clone();
                case.name = format!("checkpoint n{n} chunk{chunk:?} rev{reverse}");
                truncate_rows(&mut case, "xs", n);
                case.params
                    .insert("chunk_size".into(), chunk.map_or(Value::Null, Value::from));
                case.params.insert("reverse".into(), Value::from(reverse));
                // Oracle: sincos_carry as a host loop. Every op is elementwise, so d carry /
                // d init is diagonal: the product of the per-step derivatives.
                let xs = case.inputs["xs"].data.clone();
                let mut c = case.inputs["init"].data.clone();
                let mut cs = vec![c.clone()];
                let order: Vec<usize> = if reverse {
                    (0..n).rev().collect()
                } else {
                    (0..n).collect()
                };
                let mut ys = vec![0.0; n];
                let mut dc = vec![1.0; d];
                for &t in &order {
                    let x = &xs[t * d..(t + 1) * d];
                    for i in 0..d {
                        dc[i] *= c[i].cos() * x[i].cos() + 0.5 * x[i];
                    }
                    c = (0..d)
                        .map(|i| c[i].sin() * x[i].cos() + 0.5 * c[i] * x[i])
                        .collect();
                    ys[t] = c.iter().map(|v| v * v).sum();
                    cs.push(c.clone());
                }
                // d sum(ys) / d xs: reverse accumulation over the executed steps.
                let mut gc = vec![0.0; d];
                let mut gx = vec![0.0; n * d];
                for (k, &t) in order.iter().enumerate().rev() {
                    let (before, after) = (&cs[k], &cs[k + 1]);
                    let x = &xs[t * d..(t + 1) * d];
                    for i in 0..d {
                        let g = gc[i] + 2.0 * after[i];
                        gx[t * d + i] = g * (-before[i].sin() * x[i].sin() + 0.5 * before[i]);
                        gc[i] = g * (before[i].cos() * x[i].cos() + 0.5 * x[i]);
                    }
                }
                let mut jac = vec![0.0; d * d];
                for i in 0..d {
                    jac[i * d + i] = dc[i];
                }
                case.expected = Expected::Outputs(BTreeMap::from([
                    ("carry".to_string(), Some(array(vec![d], c))),
                    ("ys".to_string(), Some(array(vec![n], ys))),
                    (
                        "grad_sum_carry_wrt_init".to_string(),
                        Some(array(vec![d], dc)),
                    ),
                    (
                        "grad_sum_ys_wrt_xs".to_string(),
                        Some(array(vec![n, d], gx)),
                    ),
                    (
                        "jacobian_carry_wrt_init".to_string(),
                        Some(array(vec![d, d], jac)),
                    ),
                ]));
                count += 1;
                if let Err(e) = run_extra(&case) {
                    failures.push(e);
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {count} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
pub(crate) fn powerpax_extra_chunked_vmap_cases() {
    let base = load_case("chunked_vmap_chunk3");
    let w = base.inputs["w"].data.clone();
    let (k, m) = (base.inputs["w"].shape[0], base.inputs["w"].shape[1]);
    let mut failures = vec![];
    let mut count = 0;
    for batch in [1usize, 6, 10] {
        for chunk in 1..=(batch as i64 + 2) {
            let mut case = base.clone();
            case.name = format!("chunked_vmap batch{batch} chunk{chunk}");
            truncate_rows(&mut case, "x", batch);
            case.params.insert("chunk_size".into(), Value::from(chunk));
            let x = case.inputs["x"].data.clone();
            let mut y = vec![];
            let mut norms = vec![];
            for b in 0..batch {
                let row = &x[b * k..(b + 1) * k];
                for j in 0..m {
                    y.push((0..k).map(|i| row[i] * w[i * m + j]).sum::<f64>().tanh());
                }
                norms.push(row.iter().map(|v| v * v).sum());
            }
            case.expected = Expected::Outputs(BTreeMap::from([
                ("out['y']".to_string(), Some(array(vec![batch, m], y))),
                ("out['n']".to_string(), Some(array(vec![batch], norms))),
            ]));
            count += 1;
            if let Err(e) = run_extra(&case) {
                failures.push(e);
            }
        }
    }
    // Errors: negative chunk sizes at construction, inconsistent sizes at the call.
    for chunk in [0i64, -1, -7] {
        let mut case = load_case("chunked_vmap_error_chunk0");
        case.name = format!("chunked_vmap chunk{chunk}");
        case.params.insert("chunk_size".into(), Value::from(chunk));
        case.expected = Expected::Error {
            kind: "chunk_size_not_positive".into(),
            details: serde_json::json!({ "chunk_size": chunk }),
        };
        count += 1;
        if let Err(e) = run_extra(&case) {
            failures.push(e);
        }
    }
    let mut case = load_case("checkpoint_chunked_scan_chunk2_revFalse");
    case.name = "checkpoint chunk -3".into();
    case.params.insert("chunk_size".into(), Value::from(-3));
    case.expected = Expected::Error {
        kind: "chunk_size_not_positive".into(),
        details: serde_json::json!({ "chunk_size": -3 }),
    };
    count += 1;
    if let Err(e) = run_extra(&case) {
        failures.push(e);
    }
    assert!(
        failures.is_empty(),
        "{} of {count} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

//! `custom_vmap` and `sequential_vmap`: which rule branch runs, values against the loop,
//! nesting, per-example gradients, and rules that break their promises.

use std::sync::{Arc, Mutex};

use burn::module::{Module, Param};
use burn::tensor::{Device, Int, Tensor, TensorData};
use burn_vmap::transform::{custom_vmap, sequential_vmap, vmap};
use burn_vmap::tree::{DynTree, Spec};
use burn_vmap::{VmapError, per_example_grads};

type Log = Arc<Mutex<Vec<String>>>;

fn values(n: usize, seed: u64) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let x = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed.wrapping_mul(31);
            ((x >> 40) % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

fn tensor<const D: usize>(shape: [usize; D], seed: u64) -> Tensor<D> {
    let n = shape.iter().product();
    Tensor::from_data(TensorData::new(values(n, seed), shape), &Device::default())
}

fn data<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap()
}

fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "lengths: {got:?} vs {want:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 + 1e-4 * w.abs(),
            "index {i}: got {g}, want {w} ({got:?} vs {want:?})"
        );
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn logged(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

// ---- the seed's vector_dot ----------------------------------------------------------------------

/// `vector_dot(u, v) = u·v` (Burn's scalar `[1]`) with the rule of JAX's proposal; the rule
/// logs which branch ran.
fn vector_dot(u: Tensor<1>, v: Tensor<1>, log: &Log) -> Tensor<1> {
    let log = log.clone();
    custom_vmap(|(u, v): (Tensor<1>, Tensor<1>)| (u * v).sum())
        .def_vmap(
            move |size: usize,
                  in_batched: &[bool],
                  args: DynTree|
                  -> Result<(Tensor<2>, bool), VmapError> {
                let mut log = log.lock().unwrap();
                let out = match in_batched {
                    [true, true] => {
                        log.push(format!("lhs batched, rhs batched ({size})"));
                        let (u, v): (Tensor<2>, Tensor<2>) = args.get()?;
                        (u * v).sum_dim(1)
                    }
                    [true, false] => {
                        log.push(format!("lhs batched ({size})"));
                        let (u, v): (Tensor<2>, Tensor<1>) = args.get()?;
                        u.matmul(v.unsqueeze_dim(1))
                    }
                    [false, true] => {
                        log.push(format!("rhs batched ({size})"));
                        let (u, v): (Tensor<1>, Tensor<2>) = args.get()?;
                        v.matmul(u.unsqueeze_dim(1))
                    }
                    other => panic!("the rule runs only with a batched input, got {other:?}"),
                };
                Ok((out, true))
            },
        )
        .call((u, v))
        .unwrap()
}

/// `vmap(exp ∘ vector_dot, in_axes)` on `(u, v)`, with the log of rule branches.
fn run_vector_dot<const DU: usize, const DV: usize>(
    u: Tensor<DU>,
    v: Tensor<DV>,
    in_axes: [Option<isize>; 2],
) -> (Vec<f32>, Vec<String>) {
    let log = Log::default();
    let f = |(u, v): (Tensor<1>, Tensor<1>)| vector_dot(u, v, &log).exp();
    let out: Tensor<2> = vmap(f).in_axes(in_axes).call((u, v)).unwrap();
    assert_eq!(out.dims()[1], 1);
    (data(out), logged(&log))
}

#[test]
fn should_run_the_lhs_branch_for_a_batched_lhs() {
    let (u, v) = (tensor([4, 3], 1), tensor([3], 2));
    let (ud, vd) = (data(u.clone()), data(v.clone()));
    let (got, log) = run_vector_dot(u, v, [Some(0), None]);
    assert_eq!(log, vec!["lhs batched (4)"]);
    let want: Vec<f32> = (0..4)
        .map(|i| dot(&ud[i * 3..i * 3 + 3], &vd).exp())
        .collect();
    assert_close(&got, &want);
}

#[test]
fn should_move_the_batch_axis_to_the_front_for_the_rule() {
    // in_axes (1, None): u is (3, 4), the batch is its axis 1; the rule sees (4, 3).
    let (u, v) = (tensor([3, 4], 3), tensor([3], 4));
    let (ud, vd) = (data(u.clone()), data(v.clone()));
    let (got, log) = run_vector_dot(u, v, [Some(1), None]);
    assert_eq!(log, vec!["lhs batched (4)"]);
    let want: Vec<f32> = (0..4)
        .map(|i| (0..3).map(|k| ud[k * 4 + i] * vd[k]).sum::<f32>().exp())
        .collect();
    assert_close(&got, &want);
}

#[test]
fn should_run_the_rhs_branch_for_a_batched_rhs() {
    let (u, v) = (tensor([3], 5), tensor([4, 3], 6));
    let (ud, vd) = (data(u.clone()), data(v.clone()));
    let (got, log) = run_vector_dot(u, v, [None, Some(0)]);
    assert_eq!(log, vec!["rhs batched (4)"]);
    let want: Vec<f32> = (0..4)
        .map(|i| dot(&ud, &vd[i * 3..i * 3 + 3]).exp())
        .collect();
    assert_close(&got, &want);
}

#[test]
fn should_run_the_both_branch_when_both_are_batched() {
    let (u, v) = (tensor([4, 3], 7), tensor([3, 4], 8));
    let (ud, vd) = (data(u.clone()), data(v.clone()));
    // in_axes (0, 1): v's batch is its axis 1.
    let (got, log) = run_vector_dot(u, v, [Some(0), Some(1)]);
    assert_eq!(log, vec!["lhs batched, rhs batched (4)"]);
    let want: Vec<f32> = (0..4)
        .map(|i| {
            (0..3)
                .map(|k| ud[i * 3 + k] * vd[k * 4 + i])
                .sum::<f32>()
                .exp()
        })
        .collect();
    assert_close(&got, &want);
}

#[test]
fn should_record_the_rule_once_per_batching_pattern() {
    // A second call of the same vmap runs the recordings: neither f nor the rule runs again.
    let log = Log::default();
    let f = |(u, v): (Tensor<1>, Tensor<1>)| vector_dot(u, v, &log);
    let g = vmap(f).in_axes([Some(0), None]);
    for seed in [1, 2] {
        let _: Tensor<2> = g.call((tensor([4, 3], seed), tensor([3], 9))).unwrap();
    }
    assert_eq!(logged(&log), vec!["lhs batched (4)"]);
}

#[test]
fn should_skip_the_rule_when_nothing_is_batched() {
    let log = Log::default();
    let (u, v) = (tensor([3], 9), tensor([3], 10));
    let want = dot(&data(u.clone()), &data(v.clone()));
    let got = vector_dot(u.clone(), v.clone(), &log);
    assert!(logged(&log).is_empty());
    assert_close(&data(got), &[want]);

    // Under a vmap that maps something else only: the rule is skipped too.
    let xs = tensor([5], 11);
    let f = |(u, v, x): (Tensor<1>, Tensor<1>, Tensor<0>)| vector_dot(u, v, &log) * x.reshape([1]);
    let out: Tensor<2> = vmap(f)
        .in_axes([None, None, Some(0)])
        .call((u, v, xs.clone()))
        .unwrap();
    assert!(logged(&log).is_empty());
    let want: Vec<f32> = data(xs).iter().map(|x| x * want).collect();
    assert_close(&data(out), &want);
}

#[test]
fn should_apply_the_rule_to_the_innermost_batched_level() {
    // vmap over v's rows (outer), vmap over u's rows (inner): out[j, i] = exp(u_i · v_j).
    // The rule handles the inner level (u batched, v not at that level); inside it, v is still
    // batched at the outer level and the rule's ops are batched by the ordinary rules.
    let (us, vs) = (tensor([4, 3], 12), tensor([5, 3], 13));
    let (ud, vd) = (data(us.clone()), data(vs.clone()));
    let log = Log::default();
    let inner = |(us, v): (Tensor<2>, Tensor<1>)| -> Tensor<2> {
        vmap(|(u, v): (Tensor<1>, Tensor<1>)| vector_dot(u, v, &log).exp())
            .in_axes([Some(0), None])
            .call((us, v))
            .unwrap()
    };
    let out: Tensor<3> = vmap(inner).in_axes([None, Some(0)]).call((us, vs)).unwrap();
    assert_eq!(out.dims(), [5, 4, 1]);
    assert_eq!(logged(&log), vec!["lhs batched (4)"]);
    let want: Vec<f32> = (0..5)
        .flat_map(|j| {
            let (ud, vd) = (&ud, &vd);
            (0..4).map(move |i| dot(&ud[i * 3..i * 3 + 3], &vd[j * 3..j * 3 + 3]).exp())
        })
        .collect();
    assert_close(&data(out), &want);
}

// ---- outputs: structure, unbatched outputs, dynamic outputs --------------------------------------

#[test]
fn should_keep_outputs_declared_unbatched_unbatched() {
    // f(x, w) = (x * w, 2 w): the second output does not depend on the batch.
    type Seen = Option<(usize, Vec<bool>)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let seen_by_rule = seen.clone();
    let g = custom_vmap(|(x, w): (Tensor<1>, Tensor<1>)| (x * w.clone(), w.mul_scalar(2.0)))
        .def_vmap(move |size: usize, in_batched: &[bool], args: DynTree| {
            let (x, w): (Tensor<2>, Tensor<1>) = args.get()?;
            *seen_by_rule.lock().unwrap() = Some((size, in_batched.to_vec()));
            let shared = w.clone().mul_scalar(2.0);
            Ok(((x * w.unsqueeze::<2>(), shared), [true, false]))
        });
    let xs = tensor([3, 2], 14);
    let w = tensor([2], 15);
    let (xd, wd) = (data(xs.clone()), data(w.clone()));
    // The unbatched output really is unbatched: out_axes None accepts it.
    let (a, b): (Tensor<2>, Tensor<1>) =
        vmap(|(x, w)| -> (Tensor<1>, Tensor<1>) { g.call((x, w)).unwrap() })
            .in_axes([Some(0), None])
            .out_axes(Spec::Seq(vec![Spec::Leaf(Some(0)), Spec::Leaf(None)]))
            .call_as((xs, w))
            .unwrap();
    assert_eq!(*seen.lock().unwrap(), Some((3, vec![true, false])));
    let want_a: Vec<f32> = (0..6).map(|i| xd[i] * wd[i % 2]).collect();
    let want_b: Vec<f32> = (0..2).map(|i| 2.0 * wd[i]).collect();
    assert_close(&data(a), &want_a);
    assert_close(&data(b), &want_b);
}

#[test]
fn should_accept_a_dynamic_output_tree() {
    // A rule that returns a DynTree: its output rank depends on the branch.
    let g = custom_vmap(|x: Tensor<1>| x.clone() * x).def_vmap(
        |_size: usize, _b: &[bool], args: DynTree| {
            let x: Tensor<2> = args.get()?;
            Ok((DynTree::new(x.clone() * x), Spec::Leaf(true)))
        },
    );
    let xs = tensor([3, 2], 16);
    let want: Vec<f32> = data(xs.clone()).iter().map(|x| x * x).collect();
    let out: Tensor<2> = vmap(|x| g.call(x).unwrap()).call(xs).unwrap();
    assert_close(&data(out), &want);
}

// ---- wrong rules ----------------------------------------------------------------------------------

/// The error of `vmap(call)` over `x (3, 2)`: the rule runs (and fails) when the batched
/// function runs.
fn vmap_error(call: impl Fn(Tensor<1>) -> Result<Tensor<1>, VmapError>) -> VmapError {
    vmap(|x: Tensor<1>| call(x).unwrap())
        .call::<_, _, Tensor<1>>(tensor([3, 2], 17))
        .unwrap_err()
}

#[test]
fn should_reject_a_batched_output_with_the_wrong_leading_size() {
    let g = custom_vmap(|x: Tensor<1>| x).def_vmap(|_size: usize, _b: &[bool], args: DynTree| {
        let x: Tensor<2> = args.get()?;
        Ok((x.narrow(0, 0, 2), true)) // 2 rows for a batch of 3
    });
    let err = vmap_error(|x| g.call(x));
    let VmapError::InvalidRuleOutput { output, why } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(output, "out");
    assert!(why.contains("size 3") && why.contains("[2, 2]"), "{err}");
    assert!(
        err.to_string().starts_with("vmap: custom_vmap rule: out:"),
        "{err}"
    );
}

#[test]
fn should_reject_a_batched_output_without_a_batch_axis() {
    let g =
        custom_vmap(|x: Tensor<1>| x.sum()).def_vmap(|_size: usize, _b: &[bool], args: DynTree| {
            let x: Tensor<2> = args.get()?;
            Ok((x.sum(), true)) // one value for the whole batch, declared batched
        });
    let err = vmap_error(|x| g.call(x).map(|s| s.expand([2])));
    assert!(
        matches!(&err, VmapError::InvalidRuleOutput { why, .. } if why.contains("[1]") && why.contains("size 3")),
        "{err}"
    );
}

#[test]
fn should_reject_an_unbatched_output_shaped_like_the_batch() {
    let g = custom_vmap(|x: Tensor<1>| x).def_vmap(|_size: usize, _b: &[bool], args: DynTree| {
        let x: Tensor<2> = args.get()?;
        Ok((x, false)) // the batch, declared unbatched
    });
    let err = vmap_error(|x| g.call(x));
    let VmapError::InvalidRuleOutput { output, why } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(output, "out");
    assert!(why.contains("rank-2") && why.contains("[3, 2]"), "{err}");
}

#[test]
fn should_reject_an_output_of_another_structure() {
    let g = custom_vmap(|x: Tensor<1>| x).def_vmap(|_size: usize, _b: &[bool], args: DynTree| {
        let x: Tensor<2> = args.get()?;
        Ok(((x.clone(), x), true)) // a pair where f returns one tensor
    });
    let err = vmap_error(|x| g.call(x));
    assert!(
        matches!(err, VmapError::InvalidRuleOutput { .. }),
        "{err:?}"
    );
}

#[test]
fn should_pass_on_the_rules_own_errors() {
    // The rule asks for the wrong ranks: the error names the argument.
    let g = custom_vmap(|(u, v): (Tensor<1>, Tensor<1>)| u * v).def_vmap(
        |_size: usize, _b: &[bool], args: DynTree| {
            let (u, v): (Tensor<2>, Tensor<2>) = args.get()?;
            Ok((u * v, true))
        },
    );
    let w = tensor([2], 18);
    let err = vmap(|(x, w)| g.call((x, w)).unwrap())
        .in_axes([Some(0), None])
        .call::<_, _, Tensor<1>>((tensor([3, 2], 17), w))
        .unwrap_err();
    assert!(
        matches!(&err, VmapError::LeafMismatch { path, .. } if path == "args[1]"),
        "{err:?}"
    );
}

#[test]
fn should_reject_a_tensor_the_rule_closes_over() {
    // The rule is recorded like the function: a tensor it captures instead of receiving it
    // through `args` is an error naming the fix.
    let captured = tensor([3, 2], 19);
    let g =
        custom_vmap(|x: Tensor<1>| x).def_vmap(move |_size: usize, _b: &[bool], args: DynTree| {
            let x: Tensor<2> = args.get()?;
            Ok((x + captured.clone(), true))
        });
    let err = vmap_error(|x| g.call(x));
    assert!(
        matches!(
            &err,
            VmapError::ForeignTensor {
                transform: "custom_vmap",
                ..
            }
        ),
        "{err:?}"
    );
}

// ---- per-example gradients ------------------------------------------------------------------------

/// A shared parameter `w`, differentiated per example.
#[derive(Module, Debug)]
struct Weights {
    w: Param<Tensor<1>>,
}

/// Per-example gradients of `loss(w, x_i)` w.r.t. the shared `w`, for `x (4, 3)`, and the
/// expected ones for `exp(w · x_i)`: `exp(w·x_i) x_i`.
fn per_example(loss: impl Fn(Tensor<1>, Tensor<1>) -> Tensor<1>) -> (Vec<f32>, Vec<f32>) {
    let w = tensor([3], 20);
    let wd = data(w.clone());
    let model = Weights {
        w: Param::from_tensor(w),
    };
    let xs = tensor([4, 3], 21);
    let xd = data(xs.clone());
    let grads =
        per_example_grads(&model, xs, |m: &Weights, x: Tensor<1>| loss(m.w.val(), x)).unwrap();
    let got = grads.get::<2>("w").unwrap();
    assert_eq!(got.dims(), [4, 3]);
    let mut want = Vec::new();
    for i in 0..4 {
        let xi = &xd[i * 3..i * 3 + 3];
        let e = dot(&wd, xi).exp();
        want.extend(xi.iter().map(|x| e * x));
    }
    (data(got), want)
}

#[test]
fn should_give_per_example_gradients_through_the_rule() {
    let log = Log::default();
    let (got, want) = per_example(|w, x| vector_dot(w, x, &log).exp());
    assert_close(&got, &want);
    // Differentiated, the shared float input is handed to the rule broadcast.
    assert_eq!(logged(&log), vec!["lhs batched, rhs batched (4)"]);
    // The same as without the custom rule.
    let (plain, _) = per_example(|w, x| (w * x).sum().exp());
    assert_close(&got, &plain);
}

#[test]
fn should_give_per_example_gradients_through_sequential_vmap() {
    let dot = sequential_vmap(|(w, x): (Tensor<1>, Tensor<1>)| (w * x).sum());
    let (got, want) = per_example(|w, x| dot.call((w, x)).unwrap().exp());
    assert_close(&got, &want);
}

#[test]
fn should_give_the_batch_gradient_as_the_sum_of_per_example_ones() {
    let log = Log::default();
    let w = tensor([3], 22);
    let wd = data(w.clone());
    let model = Weights {
        w: Param::from_tensor(w),
    };
    let xs = tensor([4, 3], 23);
    let xd = data(xs.clone());
    let loss = |m: &Weights, x: Tensor<1>| vector_dot(m.w.val(), x, &log).exp();
    let summed = per_example_grads(&model, xs, loss).unwrap().sum_batch();
    let mut want = vec![0.0; 3];
    for i in 0..4 {
        let xi = &xd[i * 3..i * 3 + 3];
        let e = dot(&wd, xi).exp();
        for k in 0..3 {
            want[k] += e * xi[k];
        }
    }
    assert_close(&data(summed.get::<1>("w").unwrap()), &want);
}

// ---- sequential_vmap ------------------------------------------------------------------------------

/// `h(m, v) = tanh(m v) * sum(v)`, m (2, 3), v (3,): (2,).
fn h((m, v): (Tensor<2>, Tensor<1>)) -> Tensor<1> {
    let s = v.clone().sum();
    m.matmul(v.unsqueeze_dim(1)).squeeze_dim::<1>(1).tanh() * s
}

/// `vmap(h)` and `vmap(sequential_vmap(h))` on `inputs` with `in_axes`: equal, `h` recorded once
/// (its recording runs once per example).
fn compare_sequential<I: burn_vmap::Tree + Clone>(inputs: I, in_axes: [Option<isize>; 2]) {
    let calls = Arc::new(Mutex::new(0));
    let counter = calls.clone();
    let seq = sequential_vmap(move |args: (Tensor<2>, Tensor<1>)| {
        *counter.lock().unwrap() += 1;
        h(args)
    });
    let plain: Tensor<2> = vmap(h).in_axes(in_axes).call_as(inputs.clone()).unwrap();
    let looped: Tensor<2> = vmap(|a| seq.call(a).unwrap())
        .in_axes(in_axes)
        .call_as(inputs)
        .unwrap();
    assert_eq!(looped.dims(), plain.dims());
    assert_close(&data(looped), &data(plain));
    assert_eq!(*calls.lock().unwrap(), 1, "{in_axes:?}");
}

#[test]
fn should_equal_plain_vmap() {
    let m = tensor([5, 2, 3], 24);
    let v = tensor([5, 3], 25);
    compare_sequential((m, v.clone()), [Some(0), Some(0)]);
    compare_sequential((tensor([2, 3], 26), v), [None, Some(0)]);
    compare_sequential((tensor([2, 3, 5], 27), tensor([3], 28)), [Some(2), None]);
}

#[test]
fn should_loop_over_every_nested_level() {
    // vmap(vmap(seq)): the loop runs at both levels and equals the plain nested vmap.
    let seq = sequential_vmap(h);
    let ms = tensor([4, 2, 3], 26);
    let vs = tensor([3, 3], 27);
    let run = |f: &dyn Fn((Tensor<2>, Tensor<1>)) -> Tensor<1>| -> Tensor<3> {
        vmap(|(m, vs): (Tensor<2>, Tensor<2>)| -> Tensor<2> {
            vmap(f).in_axes([None, Some(0)]).call((m, vs)).unwrap()
        })
        .in_axes([Some(0), None])
        .call((ms.clone(), vs.clone()))
        .unwrap()
    };
    let plain = run(&h);
    let looped = run(&|a| seq.call(a).unwrap());
    assert_eq!(looped.dims(), [4, 3, 2]);
    assert_close(&data(looped), &data(plain));
}

#[test]
fn should_stack_int_outputs_and_handle_an_empty_batch() {
    let argmax = sequential_vmap(|x: Tensor<1>| x.argmax(0));
    let xs = Tensor::<2>::from_floats([[0.0, 2.0, 1.0], [5.0, 1.0, 0.0]], &Device::default());
    let out: Tensor<2, Int> = vmap(|x| argmax.call(x).unwrap()).call(xs).unwrap();
    assert_eq!(
        out.into_data().try_into_vec_as::<i64>().unwrap(),
        vec![1, 0]
    );

    let sq = sequential_vmap(|x: Tensor<1>| x.clone() * x);
    let empty = Tensor::<2>::zeros([0, 3], &Device::default());
    let out: Tensor<2> = vmap(|x| sq.call(x).unwrap()).call(empty).unwrap();
    assert_eq!(out.dims(), [0, 3]);
}

#[test]
fn should_call_the_function_on_the_users_tensors() {
    let seq = sequential_vmap(|x: Tensor<1>| x * 2.0);
    let out = seq
        .call(Tensor::<1>::from_floats([1.0, 2.0], &Device::default()))
        .unwrap();
    assert_eq!(data(out), vec![2.0, 4.0]);
}

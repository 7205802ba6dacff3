//! `custom_vmap` and `sequential_vmap`: which rule branch runs, values against the loop,
//! nesting, per-example gradients, and rules that break their promises.

use std::cell::RefCell;

use burn::backend::Autodiff;
use burn::tensor::{Int, Tensor, TensorData};
use burn_vmap::testing::TestBackend;
use burn_vmap::transform::{custom_vmap, sequential_vmap};
use burn_vmap::tree::{DynTree, Spec};
use burn_vmap::{BatchOps, Vmap, VmapError, vmap};

type V = Vmap<TestBackend>;
type AD = Autodiff<V>;

fn values(n: usize, seed: u64) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let x = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed.wrapping_mul(31);
            ((x >> 40) % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

fn tensor<B: BatchOps, const D: usize>(shape: [usize; D], seed: u64) -> Tensor<B, D> {
    let n = shape.iter().product();
    Tensor::from_data(TensorData::new(values(n, seed), shape), &Default::default())
}

fn data<B: BatchOps, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().to_vec::<f32>().unwrap()
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

// ---- the seed's vector_dot ----------------------------------------------------------------------

/// `vector_dot(u, v) = u·v` (Burn's scalar `[1]`) with the rule of JAX's proposal; the rule
/// logs which branch ran.
fn vector_dot<B: BatchOps>(
    u: Tensor<B, 1>,
    v: Tensor<B, 1>,
    log: &RefCell<Vec<String>>,
) -> Tensor<B, 1> {
    let f = |(u, v): (Tensor<B, 1>, Tensor<B, 1>)| (u * v).sum();
    let rule = |size: usize,
                in_batched: &[bool],
                args: DynTree<B>|
     -> Result<(Tensor<B, 2>, bool), VmapError> {
        let out = match in_batched {
            [true, true] => {
                log.borrow_mut()
                    .push(format!("lhs batched, rhs batched ({size})"));
                let (u, v): (Tensor<B, 2>, Tensor<B, 2>) = args.get()?;
                (u * v).sum_dim(1)
            }
            [true, false] => {
                log.borrow_mut().push(format!("lhs batched ({size})"));
                let (u, v): (Tensor<B, 2>, Tensor<B, 1>) = args.get()?;
                u.matmul(v.unsqueeze_dim(1))
            }
            [false, true] => {
                log.borrow_mut().push(format!("rhs batched ({size})"));
                let (u, v): (Tensor<B, 1>, Tensor<B, 2>) = args.get()?;
                v.matmul(u.unsqueeze_dim(1))
            }
            other => panic!("the rule runs only with a batched input, got {other:?}"),
        };
        Ok((out, true))
    };
    custom_vmap(f, rule).call((u, v)).unwrap()
}

/// `vmap(exp ∘ vector_dot, in_axes)` on `(u, v)`, with the log of rule branches.
fn run_vector_dot<const DU: usize, const DV: usize>(
    u: Tensor<V, DU>,
    v: Tensor<V, DV>,
    in_axes: [Option<isize>; 2],
) -> (Vec<f32>, Vec<String>) {
    let log = RefCell::new(Vec::new());
    let f = |(u, v): (Tensor<V, 1>, Tensor<V, 1>)| vector_dot(u, v, &log).exp();
    let out: Tensor<V, 2> = vmap(f).in_axes(in_axes).call((u, v)).unwrap();
    assert_eq!(out.dims()[1], 1);
    (data(out), log.into_inner())
}

#[test]
fn should_run_the_lhs_branch_for_a_batched_lhs() {
    let (u, v) = (tensor::<V, 2>([4, 3], 1), tensor::<V, 1>([3], 2));
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
    let (u, v) = (tensor::<V, 2>([3, 4], 3), tensor::<V, 1>([3], 4));
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
    let (u, v) = (tensor::<V, 1>([3], 5), tensor::<V, 2>([4, 3], 6));
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
    let (u, v) = (tensor::<V, 2>([4, 3], 7), tensor::<V, 2>([3, 4], 8));
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
fn should_skip_the_rule_when_nothing_is_batched() {
    let log = RefCell::new(Vec::new());
    let (u, v) = (tensor::<V, 1>([3], 9), tensor::<V, 1>([3], 10));
    let want = dot(&data(u.clone()), &data(v.clone()));
    let got = vector_dot(u, v, &log);
    assert!(log.borrow().is_empty());
    assert_close(&data(got), &[want]);

    // Under a vmap that maps something else only: the rule is skipped too.
    let (u, v) = (tensor::<V, 1>([3], 9), tensor::<V, 1>([3], 10));
    let xs = tensor::<V, 1>([5], 11);
    let f = |(u, v, x): (Tensor<V, 1>, Tensor<V, 1>, Tensor<V, 0>)| {
        vector_dot(u, v, &log) * x.reshape([1])
    };
    let out: Tensor<V, 2> = vmap(f)
        .in_axes([None, None, Some(0)])
        .call((u, v, xs.clone()))
        .unwrap();
    assert!(log.borrow().is_empty());
    let want: Vec<f32> = data(xs).iter().map(|x| x * want).collect();
    assert_close(&data(out), &want);
}

#[test]
fn should_apply_the_rule_to_the_innermost_batched_level() {
    // vmap over v's rows (outer), vmap over u's rows (inner): out[j, i] = exp(u_i · v_j).
    // The rule handles the inner level (u batched, v not at that level); inside it, v is still
    // batched at the outer level and the rule's ops are batched by the ordinary rules.
    let (us, vs) = (tensor::<V, 2>([4, 3], 12), tensor::<V, 2>([5, 3], 13));
    let (ud, vd) = (data(us.clone()), data(vs.clone()));
    let log = RefCell::new(Vec::new());
    let inner = |(us, v): (Tensor<V, 2>, Tensor<V, 1>)| -> Tensor<V, 2> {
        vmap(|(u, v): (Tensor<V, 1>, Tensor<V, 1>)| vector_dot(u, v, &log).exp())
            .in_axes([Some(0), None])
            .call((us, v))
            .unwrap()
    };
    let out: Tensor<V, 3> = vmap(inner).in_axes([None, Some(0)]).call((us, vs)).unwrap();
    assert_eq!(out.dims(), [5, 4, 1]);
    assert_eq!(*log.borrow(), vec!["lhs batched (4)"]);
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
    let f = |(x, w): (Tensor<V, 1>, Tensor<V, 1>)| (x * w.clone(), w.mul_scalar(2.0));
    let seen = RefCell::new(None);
    let rule = |size: usize, in_batched: &[bool], args: DynTree<V>| {
        let (x, w): (Tensor<V, 2>, Tensor<V, 1>) = args.get()?;
        *seen.borrow_mut() = Some((size, in_batched.to_vec()));
        let shared = w.clone().mul_scalar(2.0);
        Ok(((x * w.unsqueeze::<2>(), shared), [true, false]))
    };
    let g = custom_vmap(f, rule);
    let xs = tensor::<V, 2>([3, 2], 14);
    let w = tensor::<V, 1>([2], 15);
    let (xd, wd) = (data(xs.clone()), data(w.clone()));
    let (a, b): (Tensor<V, 2>, Tensor<V, 2>) = vmap(|(x, w)| {
        let (a, b): (Tensor<V, 1>, Tensor<V, 1>) = g.call((x, w)).unwrap();
        // The unbatched output really is unbatched inside the vmap.
        assert!(V::float_batch_dims(&b.clone().into_primitive().tensor()).is_empty());
        (a, b)
    })
    .in_axes([Some(0), None])
    .call((xs, w))
    .unwrap();
    assert_eq!(*seen.borrow(), Some((3, vec![true, false])));
    let want_a: Vec<f32> = (0..6).map(|i| xd[i] * wd[i % 2]).collect();
    let want_b: Vec<f32> = (0..6).map(|i| 2.0 * wd[i % 2]).collect();
    assert_close(&data(a), &want_a);
    assert_close(&data(b), &want_b);
}

#[test]
fn should_accept_a_dynamic_output_tree() {
    // A rule that returns a DynTree: its output rank depends on the branch.
    let f = |x: Tensor<V, 1>| x.clone() * x;
    let rule = |_size: usize, _b: &[bool], args: DynTree<V>| {
        let x: Tensor<V, 2> = args.get()?;
        Ok((DynTree::new(x.clone() * x), Spec::Leaf(true)))
    };
    let g = custom_vmap(f, rule);
    let xs = tensor::<V, 2>([3, 2], 16);
    let want: Vec<f32> = data(xs.clone()).iter().map(|x| x * x).collect();
    let out: Tensor<V, 2> = vmap(|x| g.call(x).unwrap()).call(xs).unwrap();
    assert_close(&data(out), &want);
}

// ---- wrong rules ----------------------------------------------------------------------------------

/// Calls `g` under a vmap of size 3 over `x (3, 2)` and returns the error of the inner call.
fn inner_error<F>(call: F) -> VmapError
where
    F: Fn(Tensor<V, 1>) -> Result<Tensor<V, 1>, VmapError>,
{
    let err = RefCell::new(None);
    let _: Tensor<V, 2> = vmap(|x: Tensor<V, 1>| match call(x.clone()) {
        Ok(t) => t,
        Err(e) => {
            *err.borrow_mut() = Some(e);
            x
        }
    })
    .call(tensor::<V, 2>([3, 2], 17))
    .unwrap();
    err.into_inner().expect("the call must fail")
}

#[test]
fn should_reject_a_batched_output_with_the_wrong_leading_size() {
    let f = |x: Tensor<V, 1>| x;
    let rule = |_size: usize, _b: &[bool], args: DynTree<V>| {
        let x: Tensor<V, 2> = args.get()?;
        Ok((x.narrow(0, 0, 2), true)) // 2 rows for a batch of 3
    };
    let g = custom_vmap(f, rule);
    let err = inner_error(|x| g.call(x));
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
    let f = |x: Tensor<V, 1>| x.sum();
    let rule = |_size: usize, _b: &[bool], args: DynTree<V>| {
        let x: Tensor<V, 2> = args.get()?;
        Ok((x.sum(), true)) // one value for the whole batch, declared batched
    };
    let g = custom_vmap(f, rule);
    let err = inner_error(|x| g.call(x).map(|s| s.expand([2])));
    assert!(
        matches!(&err, VmapError::InvalidRuleOutput { why, .. } if why.contains("[1]") && why.contains("size 3")),
        "{err}"
    );
}

#[test]
fn should_reject_an_unbatched_output_shaped_like_the_batch() {
    let f = |x: Tensor<V, 1>| x;
    let rule = |_size: usize, _b: &[bool], args: DynTree<V>| {
        let x: Tensor<V, 2> = args.get()?;
        Ok((x, false)) // the batch, declared unbatched
    };
    let g = custom_vmap(f, rule);
    let err = inner_error(|x| g.call(x));
    let VmapError::InvalidRuleOutput { output, why } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(output, "out");
    assert!(why.contains("rank 2") && why.contains("[3, 2]"), "{err}");
}

#[test]
fn should_reject_an_output_of_another_structure() {
    let f = |x: Tensor<V, 1>| x;
    let rule = |_size: usize, _b: &[bool], args: DynTree<V>| {
        let x: Tensor<V, 2> = args.get()?;
        Ok(((x.clone(), x), true)) // a pair where f returns one tensor
    };
    let g = custom_vmap(f, rule);
    let err = inner_error(|x| g.call(x));
    assert!(
        matches!(err, VmapError::InvalidRuleOutput { .. }),
        "{err:?}"
    );
}

#[test]
fn should_pass_on_the_rules_own_errors() {
    // The rule asks for the wrong ranks: the error names the argument.
    let f = |(u, v): (Tensor<V, 1>, Tensor<V, 1>)| u * v;
    let rule = |_size: usize, _b: &[bool], args: DynTree<V>| {
        let (u, v): (Tensor<V, 2>, Tensor<V, 2>) = args.get()?;
        Ok((u * v, true))
    };
    let g = custom_vmap(f, rule);
    let w = tensor::<V, 1>([2], 18);
    let err = inner_error(|x| g.call((x, w.clone())));
    assert!(
        matches!(&err, VmapError::LeafMismatch { path, .. } if path == "args[1]"),
        "{err:?}"
    );
}

#[test]
fn should_reject_a_value_captured_from_the_enclosing_vmap() {
    let err = RefCell::new(None);
    let _: Tensor<V, 2> = vmap(|x: Tensor<V, 1>| {
        let captured = x.clone();
        let g = custom_vmap(
            |x: Tensor<V, 1>| x,
            |_size: usize, _b: &[bool], _args: DynTree<V>| Ok((captured.clone(), false)),
        );
        match g.call(x.clone()) {
            Ok(t) => t,
            Err(e) => {
                *err.borrow_mut() = Some(e);
                x
            }
        }
    })
    .call(tensor::<V, 2>([3, 2], 19))
    .unwrap();
    let err = err.into_inner().unwrap();
    assert!(
        matches!(&err, VmapError::InvalidRuleOutput { why, .. } if why.contains("captured")),
        "{err}"
    );
}

// ---- per-example gradients ------------------------------------------------------------------------

/// Per-example gradients of `exp(w · x_i)` w.r.t. the shared `w` and the batched `x_i`:
/// `exp(w·x_i) x_i` and `exp(w·x_i) w`.
fn per_example_grads(
    loss: impl Fn(Tensor<AD, 1>, Tensor<AD, 1>) -> Tensor<AD, 1>,
) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
    let w = tensor::<AD, 1>([3], 20).require_grad();
    let xs = tensor::<AD, 2>([4, 3], 21);
    let (wd, xd) = (data(w.clone()), data(xs.clone()));
    let (gw, gx): (Tensor<V, 2>, Tensor<V, 2>) = vmap(|x: Tensor<AD, 1>| {
        let x = x.require_grad();
        let grads = loss(w.clone(), x.clone()).backward();
        (w.grad(&grads).unwrap(), x.grad(&grads).unwrap())
    })
    .call(xs)
    .unwrap();
    let mut want_w = Vec::new();
    let mut want_x = Vec::new();
    for i in 0..4 {
        let xi = &xd[i * 3..i * 3 + 3];
        let e = dot(&wd, xi).exp();
        want_w.extend(xi.iter().map(|x| e * x));
        want_x.extend(wd.iter().map(|w| e * w));
    }
    (data(gw), want_w, data(gx), want_x)
}

#[test]
fn should_give_per_example_gradients_through_the_rule() {
    let log = RefCell::new(Vec::new());
    let (gw, ww, gx, wx) = per_example_grads(|w, x| vector_dot(w, x, &log).exp());
    assert_close(&gw, &ww);
    assert_close(&gx, &wx);
    // On an autodiff backend the shared float input is handed to the rule broadcast.
    assert_eq!(*log.borrow(), vec!["lhs batched, rhs batched (4)"]);
    // The same as without the custom rule.
    let (pw, _, px, _) = per_example_grads(|w, x| (w * x).sum().exp());
    assert_close(&gw, &pw);
    assert_close(&gx, &px);
}

#[test]
fn should_give_per_example_gradients_through_sequential_vmap() {
    let calls = RefCell::new(0);
    let dot = sequential_vmap(|(w, x): (Tensor<AD, 1>, Tensor<AD, 1>)| {
        *calls.borrow_mut() += 1;
        (w * x).sum()
    });
    let (gw, ww, gx, wx) = per_example_grads(|w, x| dot.call((w, x)).unwrap().exp());
    assert_close(&gw, &ww);
    assert_close(&gx, &wx);
    assert_eq!(*calls.borrow(), 4);
}

#[test]
fn should_give_batch_gradients_through_the_rule() {
    // backward outside the vmap, w.r.t. the batched input: d/dx_i sum_j exp(w·x_j) = exp(w·x_i) w.
    let log = RefCell::new(Vec::new());
    let w = tensor::<AD, 1>([3], 22);
    let xs = tensor::<AD, 2>([4, 3], 23).require_grad();
    let (wd, xd) = (data(w.clone()), data(xs.clone()));
    let out: Tensor<AD, 2> = vmap(|(w, x)| vector_dot(w, x, &log).exp())
        .in_axes([None, Some(0)])
        .call((w, xs.clone()))
        .unwrap();
    let g = xs.grad(&out.sum().backward()).unwrap();
    let want: Vec<f32> = (0..4)
        .flat_map(|i| {
            let e = dot(&wd, &xd[i * 3..i * 3 + 3]).exp();
            wd.iter().map(move |w| e * w).collect::<Vec<_>>()
        })
        .collect();
    assert_close(&data(g), &want);
}

// ---- sequential_vmap ------------------------------------------------------------------------------

/// `h(m, v) = tanh(m v) * sum(v)`, m (2, 3), v (3,): (2,).
fn h<B: BatchOps>((m, v): (Tensor<B, 2>, Tensor<B, 1>)) -> Tensor<B, 1> {
    let s = v.clone().sum();
    m.matmul(v.unsqueeze_dim(1)).squeeze_dim::<1>(1).tanh() * s
}

/// `vmap(h)` and `vmap(sequential_vmap(h))` on `inputs` with `in_axes`: equal, one call of `h`
/// per example.
fn compare_sequential<I: burn_vmap::Tree<V> + Clone>(inputs: I, in_axes: [Option<isize>; 2]) {
    let calls = RefCell::new(0);
    let seq = sequential_vmap(|args: (Tensor<V, 2>, Tensor<V, 1>)| {
        *calls.borrow_mut() += 1;
        h(args)
    });
    let plain: Tensor<V, 2> = vmap(h::<V>).in_axes(in_axes).call(inputs.clone()).unwrap();
    let looped: Tensor<V, 2> = vmap(|a| seq.call(a).unwrap())
        .in_axes(in_axes)
        .call(inputs)
        .unwrap();
    assert_eq!(looped.dims(), plain.dims());
    assert_close(&data(looped), &data(plain));
    assert_eq!(*calls.borrow(), 5, "{in_axes:?}");
}

#[test]
fn should_equal_plain_vmap_with_one_call_per_example() {
    let m = tensor::<V, 3>([5, 2, 3], 24);
    let v = tensor::<V, 2>([5, 3], 25);
    compare_sequential((m, v.clone()), [Some(0), Some(0)]);
    compare_sequential((tensor::<V, 2>([2, 3], 26), v), [None, Some(0)]);
    compare_sequential(
        (tensor::<V, 3>([2, 3, 5], 27), tensor::<V, 1>([3], 28)),
        [Some(2), None],
    );
}

#[test]
fn should_loop_over_every_nested_level() {
    // vmap(vmap(seq)): the loop runs at both levels, 4 * 3 calls of f, each on one example.
    let calls = RefCell::new(Vec::new());
    let seq = sequential_vmap(|(m, v): (Tensor<V, 2>, Tensor<V, 1>)| {
        let bd = V::float_batch_dims(&v.clone().into_primitive().tensor());
        calls.borrow_mut().push(bd.sizes().collect::<Vec<_>>());
        h((m, v))
    });
    let ms = tensor::<V, 3>([4, 2, 3], 26);
    let vs = tensor::<V, 2>([3, 3], 27);
    let run = |f: &dyn Fn((Tensor<V, 2>, Tensor<V, 1>)) -> Tensor<V, 1>| -> Tensor<V, 3> {
        vmap(|(m, vs): (Tensor<V, 2>, Tensor<V, 2>)| -> Tensor<V, 2> {
            vmap(f).in_axes([None, Some(0)]).call((m, vs)).unwrap()
        })
        .in_axes([Some(0), None])
        .call((ms.clone(), vs.clone()))
        .unwrap()
    };
    let plain = run(&|a| h(a));
    let looped = run(&|a| seq.call(a).unwrap());
    assert_eq!(looped.dims(), [4, 3, 2]);
    assert_close(&data(looped), &data(plain));
    // Every call sees one example: only the size-1 private levels of the loops remain.
    let calls = calls.into_inner();
    assert_eq!(calls.len(), 12);
    assert!(calls.iter().all(|c| c.iter().all(|&s| s == 1)), "{calls:?}");
}

#[test]
fn should_stack_int_outputs_and_handle_an_empty_batch() {
    let argmax = sequential_vmap(|x: Tensor<V, 1>| x.argmax(0));
    let xs = Tensor::<V, 2>::from_floats([[0.0, 2.0, 1.0], [5.0, 1.0, 0.0]], &Default::default());
    let out: Tensor<V, 2, Int> = vmap(|x| argmax.call(x).unwrap()).call(xs).unwrap();
    assert_eq!(
        out.into_data().convert::<i64>().to_vec::<i64>().unwrap(),
        vec![1, 0]
    );

    let sq = sequential_vmap(|x: Tensor<V, 1>| x.clone() * x);
    let empty = Tensor::<V, 2>::zeros([0, 3], &Default::default());
    let out: Tensor<V, 2> = vmap(|x| sq.call(x).unwrap()).call(empty).unwrap();
    assert_eq!(out.dims(), [0, 3]);
}

//! Per-example gradients on `Autodiff<Vmap<Flex>>`: parameters unbatched, inputs batched, the
//! backward pass of a batched loss gives every example's gradient (the weight's held factored),
//! equal to the loop over examples on `Autodiff<Flex>`.

use burn_autodiff::Autodiff;
use burn_backend::AutodiffBackend;
use burn_backend::ops::{ActivationOps, FloatTensorOps, IntTensorOps, ModuleOps};
use burn_backend::{TensorData, TensorMetadata};
use burn_vmap::level::{Level, VmapScope};
use burn_vmap::{BatchOps, Randomness};

use crate::common::*;

type Ad = Autodiff<V>;
type Adf = Autodiff<F>;

const D_IN: usize = 6;
const D_OUT: usize = 5;

fn data(shape: &[usize], seed: u64) -> TensorData {
    TensorData::new(values(shape.iter().product(), seed), shape.to_vec())
}

/// `sum(tanh(x W + b)²)` on any autodiff backend: the loss of one example (`x: [rows, D_IN]`;
/// Burn's `Linear` gives the backend a vector as one row).
macro_rules! loss {
    ($B:ty, $x:expr, $w:expr, $b:expr) => {{
        let y = <$B>::float_tanh(<$B>::linear($x, $w, Some($b)));
        <$B>::float_sum(<$B>::float_mul(y.clone(), y))
    }};
}

/// The gradients of one example's loss on `Autodiff<Flex>`: `(dW, db, dx)`.
fn per_example(x: TensorData) -> (T, T, T) {
    let p = |d: TensorData| Adf::float_set_require_grad(Adf::float_from_data(d, &dev()), true);
    let (w, b, x) = (p(data(&[D_IN, D_OUT], 1)), p(data(&[D_OUT], 2)), p(x));
    let grads = Adf::backward(loss!(Adf, x.clone(), w.clone(), b.clone()));
    let g = |t: &<Adf as burn_backend::BackendTypes>::FloatTensorPrimitive| {
        Adf::grad(t, &grads).expect("a gradient")
    };
    (g(&w), g(&b), g(&x))
}

/// `(level, dW, db, dxs)` of the batched loss over `xs: [E, rows, D_IN]`, batched at a fresh
/// level.
fn batched(xs: TensorData) -> (Level, VT, VT, VT) {
    let level = Level::fresh();
    let p = |d: TensorData| Ad::float_set_require_grad(Ad::float_from_data(d, &dev()), true);
    let (w, b, xs) = (p(data(&[D_IN, D_OUT], 1)), p(data(&[D_OUT], 2)), p(xs));
    let x = Ad::float_batch(xs.clone(), 0, level);
    let loss = loss!(Ad, x, w.clone(), b.clone());
    assert!(Ad::float_batch_dims(&loss).size_at(level).is_some());
    let grads = Ad::backward(loss);
    let g = |t: &<Ad as burn_backend::BackendTypes>::FloatTensorPrimitive| {
        Ad::grad(t, &grads).expect("a gradient")
    };
    (level, g(&w), g(&b), g(&xs))
}

fn example(t: &TensorData, e: usize) -> TensorData {
    let shape = t.shape().to_vec();
    let n: usize = shape[1..].iter().product();
    let v: Vec<f32> = t.iter::<f32>().skip(e * n).take(n).collect();
    TensorData::new(v, shape[1..].to_vec())
}

#[test]
fn should_give_per_example_gradients_of_a_linear_model() {
    for rows in [&[1][..], &[2]] {
        let e = 4;
        let mut shape = vec![e];
        shape.extend_from_slice(rows);
        shape.push(D_IN);
        let xs = data(&shape, 7);
        let (level, dw, db, dxs) = batched(xs.clone());
        // Parameters unbatched, so their gradients are per example.
        assert_eq!(dw.batch_dims().size_at(level), Some(e));
        assert_eq!(dims(&dw), vec![D_IN, D_OUT]);
        assert!(
            dw.is_factored(),
            "the weight gradient is held factored (rows {rows:?})"
        );
        // The input's gradient comes back through the level move, unbatched.
        assert!(!dxs.is_batched());
        let lv = Levels {
            levels: vec![(level, e)],
        };
        check_result(&lv, &dw, |idx| per_example(example(&xs, idx[0])).0);
        check_result(&lv, &db, |idx| per_example(example(&xs, idx[0])).1);
        let dxs = read(dxs.into_parts().0);
        let loop_dxs: Vec<f32> = (0..e)
            .flat_map(|i| read(per_example(example(&xs, i)).2))
            .collect();
        assert_close(&dxs, &loop_dxs, "input gradients");
    }
}

#[test]
fn should_keep_squared_norms_of_factored_gradients_factored() {
    // One row per example (an outer product) and two (a Gram product).
    for rows in [&[1][..], &[2]] {
        let e = 5;
        let mut shape = vec![e];
        shape.extend_from_slice(rows);
        shape.push(D_IN);
        let (level, dw, _, _) = batched(data(&shape, 3));
        assert!(dw.is_factored());
        let squared = V::float_mul(dw.clone(), dw.clone());
        assert!(
            squared.is_factored(),
            "g * g stays factored (rows {rows:?})"
        );
        let norms = V::float_sum(squared);
        assert_eq!(norms.batch_dims().size_at(level), Some(e));
        // The same norms from the multiplied-out gradient.
        let dense = read(dw.into_parts().0);
        let want: Vec<f32> = dense
            .chunks(D_IN * D_OUT)
            .map(|g| g.iter().map(|v| v * v).sum())
            .collect();
        assert_close(&read(norms.into_parts().0), &want, "squared norms");
    }
}

/// The square of a one-row weight gradient, held as the pair until a rule reads it (its sum is
/// the rows' inner products), under every other rule with a factored form: each result stays
/// factored and equals the same rule on the multiplied-out squares.
#[test]
fn should_keep_one_row_squares_factored_under_every_factored_rule() {
    let e = 4;
    let n = D_IN * D_OUT;
    let (level, dw, _, _) = batched(data(&[e, 1, D_IN], 11));
    let squared = || V::float_mul(dw.clone(), dw.clone());
    let sq: Vec<f32> = read(dw.clone().into_parts().0)
        .iter()
        .map(|v| v * v)
        .collect();
    // A per-example factor `[1, 1]`: 0.5, 1.5, ...
    let factor: Vec<f32> = (0..e).map(|i| 0.5 + i as f32).collect();
    let s = || {
        let t = V::float_from_data(TensorData::new(factor.clone(), vec![e, 1, 1]), &dev());
        V::float_batch(t, 0, level)
    };
    let each = |f: &dyn Fn(usize, f32) -> f32| -> Vec<f32> {
        sq.iter().enumerate().map(|(j, v)| f(j / n, *v)).collect()
    };
    // Rows `[D_IN, D_OUT]` of example `i`, summed along `dim` of the matrix.
    let summed = |dim: usize| -> Vec<f32> {
        let mut out = Vec::new();
        for g in sq.chunks(n) {
            match dim {
                0 => {
                    out.extend((0..D_OUT).map(|c| (0..D_IN).map(|r| g[r * D_OUT + c]).sum::<f32>()))
                }
                _ => {
                    out.extend((0..D_IN).map(|r| g[r * D_OUT..(r + 1) * D_OUT].iter().sum::<f32>()))
                }
            }
        }
        out
    };
    let cases: Vec<(&str, VT, Vec<f32>)> = vec![
        (
            "g² + g²",
            V::float_add(squared(), squared()),
            each(&|_, v| 2.0 * v),
        ),
        (
            "3 g²",
            V::float_mul_scalar(squared(), 3.0.into()),
            each(&|_, v| 3.0 * v),
        ),
        (
            "g² / 2",
            V::float_div_scalar(squared(), 2.0.into()),
            each(&|_, v| v / 2.0),
        ),
        (
            "s g²",
            V::float_mul(s(), squared()),
            each(&|i, v| factor[i] * v),
        ),
        (
            "g² s",
            V::float_mul(squared(), s()),
            each(&|i, v| factor[i] * v),
        ),
        (
            "g² / s",
            V::float_div(squared(), s()),
            each(&|i, v| v / factor[i]),
        ),
        ("sum_dim(g², 0)", V::float_sum_dim(squared(), 0), summed(0)),
        ("sum_dim(g², 1)", V::float_sum_dim(squared(), 1), summed(1)),
    ];
    for (what, out, want) in cases {
        // A sum along a matrix dim is kept factored only where smaller so (here it is not).
        assert!(
            out.is_factored() || what.starts_with("sum_dim"),
            "{what} stays factored"
        );
        assert_eq!(out.batch_dims().size_at(level), Some(e), "{what}");
        assert_close(&read(out.into_parts().0), &want, what);
    }
    // Leaving the level, the sum over the examples (one product), `cat` and `select` along the
    // examples.
    let rows = || V::float_unbatch(squared(), level, e, 0);
    let all = rows();
    assert!(all.is_factored(), "unbatched g² stays factored");
    assert_close(&read(all.into_parts().0), &sq, "unbatched g²");
    let total = V::float_sum_dim(rows(), 0);
    let want: Vec<f32> = (0..n).map(|j| sq.chunks(n).map(|g| g[j]).sum()).collect();
    assert_close(&read(total.into_parts().0), &want, "Σ g² over the examples");
    let both = V::float_cat(vec![rows(), rows()], 0);
    assert!(both.is_factored(), "cat of g² stays factored");
    let twice: Vec<f32> = sq.iter().chain(&sq).copied().collect();
    assert_close(&read(both.into_parts().0), &twice, "cat of g²");
    let index = V::int_from_data(TensorData::new(vec![3i32, 0], vec![2]), &dev());
    let picked = V::float_select(rows(), 0, index);
    assert!(picked.is_factored(), "select of g² stays factored");
    let want: Vec<f32> = sq[3 * n..4 * n].iter().chain(&sq[..n]).copied().collect();
    assert_close(&read(picked.into_parts().0), &want, "select of g²");
}

/// Weights used once per time step, as an LSTM's gates are: `Σ_t x_tᵀ g_t` per example, summed
/// in either order. Under a vmap level, equal factors share their Gram matrices (the gates read
/// one `x_t`; a gate's two weights one output gradient), and only equal ones: weights reading
/// the same inputs against other output gradients, other inputs of the same shapes, one input
/// on either side, and the same products summed backwards. Every squared norm, and every
/// pair's `sum(w * w')`, equals the multiplied-out one.
#[test]
fn should_share_gram_matrices_only_between_equal_factors() {
    // Kept factored: `steps (d + d) < d d`.
    let (e, steps, d) = (3, 3, 8);
    let level = Level::fresh();
    let scope = VmapScope::enter(level, e, Randomness::Error);
    let rows = |seed: u64| -> Vec<VT> {
        (0..steps as u64)
            .map(|t| {
                let x = V::float_from_data(data(&[e, 1, d], 10 * seed + t), &dev());
                V::float_batch(x, 0, level)
            })
            .collect()
    };
    let (x, y, g, h) = (rows(1), rows(2), rows(3), rows(4));
    let sum = |pairs: Vec<(&VT, &VT)>| {
        pairs
            .into_iter()
            .map(|(l, r)| V::linear_weight_backward(l.clone(), r.clone()))
            .reduce(V::float_add)
            .expect("steps")
    };
    let forward = |l: &[VT], r: &[VT]| sum(l.iter().zip(r).collect());
    let backward = |l: &[VT], r: &[VT]| sum(l.iter().zip(r).rev().collect());
    let weights = [
        ("x g", forward(&x, &g)),
        ("x h, backwards", backward(&x, &h)),
        ("y g", forward(&y, &g)),
        ("g x", forward(&g, &x)),
        ("x g, backwards", backward(&x, &g)),
        ("y h", forward(&y, &h)),
    ];
    // Every pair's `sum(w * w')` per example (a squared norm where they are one weight), from
    // the factors, against the multiplied-out products.
    let dense: Vec<Vec<f32>> = weights
        .iter()
        .map(|(_, w)| read(w.clone().into_parts().0))
        .collect();
    for (i, (what, w)) in weights.iter().enumerate() {
        assert!(w.is_factored(), "{what}");
        for (j, (other, w2)) in weights.iter().enumerate() {
            let w2 = if i == j { w.clone() } else { w2.clone() };
            let sums = V::float_sum(V::float_mul(w.clone(), w2));
            let want: Vec<f32> = dense[i]
                .chunks(d * d)
                .zip(dense[j].chunks(d * d))
                .map(|(a, b)| a.iter().zip(b).map(|(a, b)| a * b).sum())
                .collect();
            assert_close(
                &read(sums.into_parts().0),
                &want,
                &format!("{what} * {other}"),
            );
        }
    }
    drop(scope);
}

#[test]
fn should_sum_factored_gradients_over_the_examples() {
    let e = 6;
    let xs = data(&[e, 1, D_IN], 9);
    let (level, dw, _, _) = batched(xs.clone());
    // Leaving the level keeps the factors; the sum over the examples is one matrix product.
    let all = V::float_unbatch(dw, level, e, 0);
    assert!(all.is_factored());
    assert_eq!(dims(&all), vec![e, D_IN, D_OUT]);
    let total = V::float_sum_dim(all, 0);
    let mut want = vec![0.0; D_IN * D_OUT];
    for i in 0..e {
        for (acc, v) in want.iter_mut().zip(read(per_example(example(&xs, i)).0)) {
            *acc += v;
        }
    }
    assert_close(&read(total.into_parts().0), &want, "summed gradient");
}

#[test]
fn should_differentiate_through_shared_parameters() {
    // `float_shared`: a parameter entering a level unmapped gets the sum of the per-example
    // gradients when the backward pass runs outside the level.
    let e = 3;
    let xs = data(&[e, 1, D_IN], 5);
    let level = Level::fresh();
    let p = |d: TensorData| Ad::float_set_require_grad(Ad::float_from_data(d, &dev()), true);
    let (w, b) = (p(data(&[D_IN, D_OUT], 1)), p(data(&[D_OUT], 2)));
    let x = Ad::float_batch(Ad::float_from_data(xs.clone(), &dev()), 0, level);
    let (ws, bs) = (
        Ad::float_shared(w.clone(), level),
        Ad::float_shared(b.clone(), level),
    );
    let per = loss!(Ad, x, ws, bs);
    // Out of the level: [e, 1], summed to the batch loss.
    let out = Ad::float_sum(Ad::float_unbatch(per, level, e, 0));
    let grads = Ad::backward(out);
    let dw = Ad::grad(&w, &grads).expect("a gradient");
    assert!(!dw.is_batched());
    let mut want = vec![0.0; D_IN * D_OUT];
    for i in 0..e {
        for (acc, v) in want.iter_mut().zip(read(per_example(example(&xs, i)).0)) {
            *acc += v;
        }
    }
    assert_close(&read(dw.into_parts().0), &want, "batch gradient");
    let _ = (
        Ad::relu(Ad::float_from_data(data(&[2], 1), &dev())),
        b.shape(),
    );
}

/// `sum(tanh(embedding(table, tokens))²)`: the loss of one example's tokens.
macro_rules! embedding_loss {
    ($B:ty, $table:expr, $tokens:expr) => {{
        let y = <$B>::float_tanh(<$B>::embedding($table, $tokens));
        <$B>::float_sum(<$B>::float_mul(y.clone(), y))
    }};
}

#[test]
fn should_give_per_example_gradients_of_an_embedding() {
    let (e, vocabulary, d) = (4, 10, 4);
    let tokens = TensorData::new(vec![1i32, 3, 1, 0, 9, 9, 2, 2, 7, 5, 5, 5], vec![e, 1, 3]);
    let level = Level::fresh();
    let table =
        Ad::float_set_require_grad(Ad::float_from_data(data(&[vocabulary, d], 4), &dev()), true);
    let ts = Ad::int_batch(Ad::int_from_data(tokens.clone(), &dev()), 0, level);
    let grads = Ad::backward(embedding_loss!(Ad, table.clone(), ts));
    let dt = Ad::grad(&table, &grads).expect("a gradient");
    assert!(
        dt.is_factored(),
        "one-hot rows against the output gradients"
    );
    let loop_grad = |i: usize| {
        let table = Adf::float_set_require_grad(
            Adf::float_from_data(data(&[vocabulary, d], 4), &dev()),
            true,
        );
        let t: Vec<i32> = tokens.iter::<i32>().skip(i * 3).take(3).collect();
        let t = Adf::int_from_data(TensorData::new(t, vec![1, 3]), &dev());
        let grads = Adf::backward(embedding_loss!(Adf, table.clone(), t));
        Adf::grad(&table, &grads).expect("a gradient")
    };
    let lv = Levels {
        levels: vec![(level, e)],
    };
    check_result(&lv, &dt, |idx| loop_grad(idx[0]));
    // Squared norms from the factors (a comparison of token indices), and the sum over the
    // examples (a scatter-add of the rows).
    let norms = V::float_sum(V::float_mul(dt.clone(), dt.clone()));
    let want: Vec<f32> = (0..e)
        .map(|i| read(loop_grad(i)).iter().map(|v| v * v).sum())
        .collect();
    assert_close(&read(norms.into_parts().0), &want, "squared norms");
    let total = V::float_sum_dim(V::float_unbatch(dt, level, e, 0), 0);
    let mut want = vec![0.0; vocabulary * d];
    for i in 0..e {
        for (acc, v) in want.iter_mut().zip(read(loop_grad(i))) {
            *acc += v;
        }
    }
    assert_close(&read(total.into_parts().0), &want, "summed gradient");
}

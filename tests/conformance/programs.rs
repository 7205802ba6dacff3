//! Programs: the functions the cases name (`program`), written once for any rank, and their
//! registry.
//!
//! Every program is recorded by the transforms (on Burn's capture device): it reads tensors only
//! through its arguments, never reads values, and may call `vmap` itself. A value the 0.21
//! program closed over (`captured`) is an argument here.
//!
//! A program that takes a gradient itself (`grad_w_tanh_sq`, a gradient inside `vmap`) cannot be
//! recorded on Burn 0.22.1 (its capture backend has no autodiff: `backward` and
//! `Tensor::autodiff` panic with "Capture tensors do not support autodiff"). It is registered
//! as its loss and the argument differentiated ([`grad_program`]), and the apis run it through
//! the library's per-example gradients (`apis/vmap_grad.rs`).

use burn::tensor::activation;
use burn::tensor::module::{conv2d, max_pool2d};
use burn::tensor::ops::{ConvOptions, MaxPoolOptions};

use crate::*;

/// A program: positional arguments to result.
pub(crate) type Program = fn(Vec<Pt>) -> Pt;

/// The program registered for `id` (FORMAT section 4).
pub(crate) fn program(id: &str) -> Option<Program> {
    let f: Program = match id {
        "a_times_sum_b_plus_a" => a_times_sum_b_plus_a,
        "argmax" => argmax,
        "concat" => concat,
        "concat_double" => concat_double,
        "conv2d_same" => conv2d_same,
        "cumsum" => cumsum,
        "dict_sum_scale" => dict_sum_scale,
        "dot" => dot,
        "dot_self_plus_one" => dot_self_plus_one,
        "index" => index,
        "log_softmax_axis0" => log_softmax_axis0,
        "matmul" => matmul,
        "max_axis1" => max_axis1,
        "max_pool_2x2" => max_pool_2x2,
        "mean_all" => mean_all,
        "mean_axis0" => mean_axis0,
        "mlp_tanh_xent" => mlp_tanh_xent,
        "identity" => identity,
        "square" => square,
        "triple" => triple,
        "tanh_times_sumsq" => tanh_times_sumsq,
        "scale_by_sum" => scale_by_sum,
        "tanh_matmul" => tanh_matmul,
        "affine" => affine,
        "add_pair" => add_pair,
        "tree_stats" => tree_stats,
        "mse_linreg" => mse_linreg,
        "mse_linreg_aux" => mse_linreg_aux,
        "mse_linreg_bias" => mse_linreg_bias,
        "mse_linreg_dict_batch" => mse_linreg_dict_batch,
        "sum_matvec_times_ndim" => sum_matvec_times_ndim,
        "conv_tanh_meanpool_linear" => conv_tanh_meanpool_linear,
        "mul" => mul,
        "reshape_2x3" => reshape_2x3,
        "softmax" => softmax,
        "sum_axis0" => sum_axis0,
        "sum_pair" => sum_pair,
        "tanh_matmul_and_sqnorm" => tanh_matmul_and_sqnorm,
        "transpose" => transpose,
        "where_gt_else_neg" => where_gt_else_neg,
        _ => return None,
    };
    Some(f)
}

/// A gradient program: `grad(loss, argnum)`, the gradient of a scalar `loss` with respect to
/// its argument `argnum` (a tensor or a tree of float tensors).
#[derive(Clone, Copy)]
pub(crate) struct GradProgram {
    pub(crate) loss: Program,
    pub(crate) argnum: usize,
}

/// The gradient program registered for `id` (FORMAT section 4).
pub(crate) fn grad_program(id: &str) -> Option<GradProgram> {
    let (loss, argnum): (Program, usize) = match id {
        "grad_w_tanh_sq" => (tanh_sq_dot, 0),
        _ => return None,
    };
    Some(GradProgram { loss, argnum })
}

// ---- helpers ----------------------------------------------------------------------------

/// A `[1]` tensor as a rank-0 one.
pub fn scalar<K: TensorKind + Basic>(t: Tensor<1, K>) -> Tensor<0, K> {
    t.reshape([0usize; 0])
}

/// Removes the size-1 axis `axis` (by a reshape: `squeeze_dim` refuses to produce rank 0).
pub fn drop_axis<K: TensorKind + Basic, const D: usize, const DM: usize>(
    t: Tensor<D, K>,
    axis: usize,
) -> Tensor<DM, K> {
    let dims = t.dims();
    assert_eq!(
        dims[axis], 1,
        "runner: drop_axis of an axis of size {}",
        dims[axis]
    );
    let mut out = [0usize; DM];
    for (o, &d) in out.iter_mut().zip(
        dims.iter()
            .enumerate()
            .filter(|(i, _)| *i != axis)
            .map(|(_, d)| d),
    ) {
        *o = d;
    }
    t.reshape(out)
}

/// A float tensor of rank `<= D` broadcast to rank `D` by leading 1-dims (numpy rules).
pub fn lift<const D: usize>(p: Pt) -> Tensor<D> {
    let r = p.rank();
    assert!(r <= D, "runner: cannot lift rank {r} to rank {D}");
    if r == D {
        return p.f::<D>();
    }
    with_rank!(r, R => {
        let t = p.f::<R>();
        let mut shape = [1usize; D];
        shape[D.saturating_sub(R)..].copy_from_slice(&t.dims());
        t.reshape(shape)
    })
}

/// `sum` over all elements, as Burn's scalar: a `[1]` tensor.
///
/// Intermediate scalars stay `[1]` (what Burn's `sum()` and `mean()` give; they broadcast like
/// rank 0); only a program's result is made rank 0 ([`scalar`]), JAX's `()`.
pub fn sum1(p: Pt) -> Tensor<1> {
    // The sum of a scalar is itself (and Burn's autodiff cannot reduce a rank-0 tensor).
    if p.rank() == 0 {
        return p.f::<0>().reshape([1]);
    }
    with_rank!(p.rank(), D => p.f::<D>().sum())
}

/// Elementwise binary op with numpy broadcasting: `binop!(a, b, |x, y| expr)`.
macro_rules! binop {
    ($a:expr, $b:expr, |$x:ident, $y:ident| $body:expr) => {{
        let (a, b) = ($a, $b);
        with_rank!(a.rank().max(b.rank()), D => {
            let $x = lift::<D>(a);
            let $y = lift::<D>(b);
            pt($body)
        })
    }};
}

/// numpy `a @ b` (1-D operands act as vectors).
pub fn np_matmul(a: Pt, b: Pt) -> Pt {
    match (a.rank(), b.rank()) {
        (1, 1) => pt(scalar(sum1(binop!(a, b, |x, y| x * y)))),
        (1, 2) => pt(a
            .f::<1>()
            .unsqueeze::<2>()
            .matmul(b.f::<2>())
            .squeeze_dim::<1>(0)),
        (2, 1) => pt(a
            .f::<2>()
            .matmul(b.f::<1>().unsqueeze_dim::<2>(1))
            .squeeze_dim::<1>(1)),
        (ra, rb) if ra >= 2 && rb >= 2 => binop!(a, b, |x, y| x.matmul(y)),
        (ra, rb) => panic!("runner: matmul of ranks {ra} and {rb} is not supported"),
    }
}

/// Mean over rows of `-log_softmax(logits)[label]`, logits `(b, c)`, labels `(b,)`.
///
/// A loss is returned as Burn's scalar, a `[1]` tensor (what `mean()` gives, what Burn's
/// losses and `per_example_grads` take). The apis that take a loss report it as JAX's `()`.
pub fn xent(logits: Tensor<2>, labels: Tensor<1, Int>) -> Tensor<1> {
    let logp = activation::log_softmax(logits, 1);
    let picked = logp.gather(1, labels.unsqueeze_dim::<2>(1));
    picked.mean().neg()
}

// ---- jax.vmap programs --------------------------------------------------------------------

pub fn a_times_sum_b_plus_a(args: Vec<Pt>) -> Pt {
    let [a, b] = take(args);
    let rank = a.rank();
    let s = pt(sum1(b));
    let a2 = a.clone();
    let out = binop!(binop!(a, s, |x, y| x * y), a2, |x, y| x + y);
    if rank == 0 {
        pt(scalar(out.f::<1>()))
    } else {
        out
    }
}

pub fn argmax(args: Vec<Pt>) -> Pt {
    let [r] = take(args);
    // numpy argmax without an axis: over the flattened array, first maximum.
    with_rank!(r.rank(), D => pt(scalar(r.f::<D>().reshape([-1]).argmax(0))))
}

pub fn concat(args: Vec<Pt>) -> Pt {
    let [a, c] = take(args);
    with_rank!(a.rank(), D => pt(Tensor::cat(vec![a.f::<D>(), c.f::<D>()], 0)))
}

pub fn concat_double(args: Vec<Pt>) -> Pt {
    let [a] = take(args);
    with_rank!(a.rank(), D => {
        let a = a.f::<D>();
        pt(Tensor::cat(vec![a.clone(), a.mul_scalar(2.0)], 0))
    })
}

/// One example CHW (or a batch NCHW), kernel OIHW, stride 1, SAME padding, no bias.
pub fn conv2d_same(args: Vec<Pt>) -> Pt {
    let [x, k] = take(args);
    let k = k.f::<4>();
    let [_, _, kh, kw] = k.dims();
    let (lo, hi) = (
        [(kh - 1) / 2, (kw - 1) / 2],
        [kh - 1 - (kh - 1) / 2, kw - 1 - (kw - 1) / 2],
    );
    let options =
        ConvOptions::new_with_padding([1, 1], [(lo[0], hi[0]), (lo[1], hi[1])], [1, 1], 1);
    match x.rank() {
        3 => pt(conv2d(x.f::<3>().unsqueeze::<4>(), k, None, options).squeeze_dim::<3>(0)),
        4 => pt(conv2d(x.f::<4>(), k, None, options)),
        r => panic!("runner: conv2d_same of a rank-{r} input"),
    }
}

pub fn cumsum(args: Vec<Pt>) -> Pt {
    let [r] = take(args);
    // numpy cumsum without an axis: over the flattened array.
    with_rank!(r.rank(), D => pt(r.f::<D>().reshape([-1]).cumsum(0)))
}

pub fn dict_sum_scale(args: Vec<Pt>) -> Pt {
    let [d] = take(args);
    let (a, b) = (d.field("a"), d.field("b"));
    let s = pt(scalar(
        binop!(pt(sum1(a.clone())), b.clone(), |x, y| x * y).f::<1>(),
    ));
    let p = binop!(a, b, |x, y| x * y);
    Pt::Dict(BTreeMap::from([("p".to_owned(), p), ("s".to_owned(), s)]))
}

pub fn dot(args: Vec<Pt>) -> Pt {
    let [a, b] = take(args);
    pt(scalar(sum1(binop!(a, b, |x, y| x * y))))
}

pub fn dot_self_plus_one(args: Vec<Pt>) -> Pt {
    let [r] = take(args);
    pt(scalar(
        sum1(binop!(r.clone(), r, |x, y| x * y)).add_scalar(1.0),
    ))
}

/// `tanh(x·w)^2`: the loss of `grad_w_tanh_sq = d/dw tanh(x·w)^2` ([`grad_program`]).
pub fn tanh_sq_dot(args: Vec<Pt>) -> Pt {
    let [w, x] = take(args);
    let t = sum1(binop!(x, w, |a, b| a * b)).tanh();
    pt(scalar(t.clone() * t))
}

/// `t[i]` along axis 0, `i` an int scalar.
pub fn index(args: Vec<Pt>) -> Pt {
    let [t, i] = take(args);
    let i = i.i::<0>().reshape([1]);
    with_rank_m1!(t.rank(), D, DM => pt(drop_axis::<Float, D, DM>(t.f::<D>().select(0, i), 0)))
}

pub fn log_softmax_axis0(args: Vec<Pt>) -> Pt {
    let [m] = take(args);
    with_rank!(m.rank(), D => pt(activation::log_softmax(m.f::<D>(), 0)))
}

pub fn matmul(args: Vec<Pt>) -> Pt {
    let [a, b] = take(args);
    np_matmul(a, b)
}

pub fn max_axis1(args: Vec<Pt>) -> Pt {
    let [m] = take(args);
    with_rank_m1!(m.rank(), D, DM => pt(drop_axis::<Float, D, DM>(m.f::<D>().max_dim(1), 1)))
}

/// Window 2x2, stride 2, VALID, per channel; CHW (or NCHW).
pub fn max_pool_2x2(args: Vec<Pt>) -> Pt {
    let [x] = take(args);
    let pool = |x: Tensor<4>| max_pool2d(x, MaxPoolOptions::new([2, 2]).with_stride([2, 2]));
    match x.rank() {
        3 => pt(pool(x.f::<3>().unsqueeze::<4>()).squeeze_dim::<3>(0)),
        4 => pt(pool(x.f::<4>())),
        r => panic!("runner: max_pool_2x2 of a rank-{r} input"),
    }
}

pub fn mean_all(args: Vec<Pt>) -> Pt {
    let [m] = take(args);
    with_rank!(m.rank(), D => pt(scalar(m.f::<D>().mean())))
}

pub fn mean_axis0(args: Vec<Pt>) -> Pt {
    let [m] = take(args);
    with_rank_m1!(m.rank(), D, DM => pt(drop_axis::<Float, D, DM>(m.f::<D>().mean_dim(0), 0)))
}

pub fn mul(args: Vec<Pt>) -> Pt {
    let [x, y] = take(args);
    binop!(x, y, |a, b| a * b)
}

pub fn reshape_2x3(args: Vec<Pt>) -> Pt {
    let [m] = take(args);
    with_rank!(m.rank(), D => pt(m.f::<D>().reshape([2, 3])))
}

/// Softmax over the last axis.
pub fn softmax(args: Vec<Pt>) -> Pt {
    let [r] = take(args);
    with_rank_m1!(r.rank(), D, _DM => pt(activation::softmax(r.f::<D>(), D - 1)))
}

pub fn sum_axis0(args: Vec<Pt>) -> Pt {
    let [m] = take(args);
    with_rank_m1!(m.rank(), D, DM => pt(drop_axis::<Float, D, DM>(m.f::<D>().sum_dim(0), 0)))
}

pub fn sum_pair(args: Vec<Pt>) -> Pt {
    let [a, b] = take(args);
    pt(scalar(sum1(a) + sum1(b)))
}

/// All axes reversed (`m.T`).
pub fn transpose(args: Vec<Pt>) -> Pt {
    let [m] = take(args);
    with_rank!(m.rank(), D => pt(m.f::<D>().permute(core::array::from_fn::<isize, D, _>(|i| (D - i - 1) as isize))))
}

/// `where(r > t, r, -r)`, `t` broadcast (numpy rules).
pub fn where_gt_else_neg(args: Vec<Pt>) -> Pt {
    let [r, t] = take(args);
    binop!(r, t, |r, t| {
        let t = t.expand(r.dims());
        let mask = r.clone().greater(t);
        r.clone().neg().mask_where(mask, r)
    })
}

// ---- powerpax programs -------------------------------------------------------------------

pub fn identity(args: Vec<Pt>) -> Pt {
    let [v] = take(args);
    v
}

/// `{"y": tanh(x @ w), "n": sum(x**2)}` with `w` captured: the captured `w` is the last
/// argument (unmapped), as a recorded function reads tensors only through its arguments.
pub fn tanh_matmul_and_sqnorm(args: Vec<Pt>) -> Pt {
    let [x, w] = take(args);
    let y = np_matmul(x.clone(), w);
    let y = with_rank!(y.rank(), D => pt(y.f::<D>().tanh()));
    let n = pt(scalar(sum1(binop!(x.clone(), x, |a, b| a * b))));
    Pt::Dict(BTreeMap::from([("n".to_owned(), n), ("y".to_owned(), y)]))
}

/// Scan body: `c' = c + x`, `y = c'`.
#[allow(dead_code)] // used by apis/powerpax.rs, not built yet
pub fn cumsum_carry(c: Pt, x: Pt) -> (Pt, Pt) {
    let c2 = with_rank!(c.rank(), D => pt(c.f::<D>() + x.f::<D>()));
    (c2.clone(), c2)
}

/// Scan body: `c' = sin(c) cos(x) + 0.5 c x`, `y = sum(c'^2)` (Burn's scalar, `[1]`).
#[allow(dead_code)] // used by apis/powerpax.rs, not built yet
pub fn sincos_carry(c: Pt, x: Pt) -> (Pt, Pt) {
    with_rank!(c.rank(), D => {
        let (c, x) = (c.f::<D>(), x.f::<D>());
        let c2 = c.clone().sin() * x.clone().cos() + c * x * 0.5;
        let y = sum1(pt(c2.clone().powi_scalar(2)));
        (pt(c2), pt(y))
    })
}

// ---- losses -------------------------------------------------------------------------------

/// `params {W1 (5,7), b1 (7,), W2 (7,3), b2 (3,)}, x (b,5), labels i32 (b,)` -> mean
/// cross-entropy of a tanh MLP. `x (5,)`, `labels ()` are one row.
pub fn mlp_tanh_xent(args: Vec<Pt>) -> Pt {
    let [params, x, labels] = take(args);
    let (w1, b1) = (params.field("W1").f::<2>(), params.field("b1").f::<1>());
    let (w2, b2) = (params.field("W2").f::<2>(), params.field("b2").f::<1>());
    let (x, labels) = match x.rank() {
        2 => (x.f::<2>(), labels.i::<1>()),
        1 => (x.f::<1>().unsqueeze::<2>(), labels.i::<0>().reshape([1])),
        r => panic!("runner: mlp_tanh_xent of a rank-{r} x"),
    };
    let h = (x.matmul(w1) + b1.unsqueeze::<2>()).tanh();
    let logits = h.matmul(w2) + b2.unsqueeze::<2>();
    pt(xent(logits, labels))
}

// ---- optax.microbatching programs ---------------------------------------------------------

/// `x * x` for any dtype and shape.
pub fn square(args: Vec<Pt>) -> Pt {
    let [x] = take(args);
    let r = x.rank();
    if x.is_float() {
        with_rank!(r, D => { let t = x.f::<D>(); pt(t.clone() * t) })
    } else {
        with_rank!(r, D => { let t = x.i::<D>(); pt(t.clone() * t) })
    }
}

pub fn triple(args: Vec<Pt>) -> Pt {
    let [v] = take(args);
    with_rank!(v.rank(), D => pt(v.f::<D>() * 3.0))
}

/// `tanh(v) * sum(v**2)`.
pub fn tanh_times_sumsq(args: Vec<Pt>) -> Pt {
    let [v] = take(args);
    let v = v.f::<1>();
    let s = (v.clone() * v.clone()).sum();
    pt(v.tanh() * s)
}

/// `v * sum(v)`.
pub fn scale_by_sum(args: Vec<Pt>) -> Pt {
    let [v] = take(args);
    let v = v.f::<1>();
    pt(v.clone() * v.sum())
}

/// `tanh(v @ w)`.
pub fn tanh_matmul(args: Vec<Pt>) -> Pt {
    let [v, w] = take(args);
    pt(np_matmul(v, w).f::<1>().tanh())
}

/// `v @ w + b` with `b` a keyword argument (last).
pub fn affine(args: Vec<Pt>) -> Pt {
    let [w, v, b] = take(args);
    pt(np_matmul(v, w).f::<1>() + b.f::<1>())
}

pub fn add_pair(args: Vec<Pt>) -> Pt {
    let [v, u] = take(args);
    binop!(v, u, |x, y| x + y)
}

/// `{"per": 2v, "total": sum(v), "avg": v**2, "stats": (max(v), min(v))}`.
pub fn tree_stats(args: Vec<Pt>) -> Pt {
    let [v] = take(args);
    let v = v.f::<1>();
    let mut m = BTreeMap::new();
    m.insert("per".to_string(), pt(v.clone() * 2.0));
    m.insert("total".to_string(), pt(scalar(v.clone().sum())));
    m.insert("avg".to_string(), pt(v.clone() * v.clone()));
    m.insert(
        "stats".to_string(),
        Pt::Tuple(vec![pt(scalar(v.clone().max())), pt(scalar(v.min()))]),
    );
    Pt::Dict(m)
}

/// `X @ w - Y` (numpy matmul; an int `Y` as float).
pub(crate) fn residual(w: Pt, x: Pt, y: Pt) -> Pt {
    let y = if y.is_float() {
        y
    } else {
        with_rank!(y.rank(), D => pt(y.i::<D>().float()))
    };
    let preds = np_matmul(x, w);
    binop!(preds, y, |p, t| p - t)
}

/// `mean over all elements` as `[1]`.
pub(crate) fn mean1(p: Pt) -> Tensor<1> {
    if p.rank() == 0 {
        return p.f::<0>().reshape([1]);
    }
    with_rank!(p.rank(), D => p.f::<D>().mean())
}

/// `0.5 * mean((X @ w - Y)**2)`.
pub fn mse_linreg(args: Vec<Pt>) -> Pt {
    let [w, x, y] = take(args);
    let d = residual(w, x, y);
    let sq = binop!(d.clone(), d, |a, b| a * b);
    pt(mean1(sq) * 0.5)
}

/// `(loss, {"preds": X @ w, "abs_err": |X @ w - Y|})`.
pub fn mse_linreg_aux(args: Vec<Pt>) -> Pt {
    let [w, x, y] = take(args);
    let preds = np_matmul(x.clone(), w.clone());
    let d = residual(w, x, y);
    let abs = with_rank!(d.rank(), D => pt(d.clone().f::<D>().abs()));
    let sq = binop!(d.clone(), d, |a, b| a * b);
    let mut aux = BTreeMap::new();
    aux.insert("preds".to_string(), preds);
    aux.insert("abs_err".to_string(), abs);
    Pt::Tuple(vec![pt(mean1(sq) * 0.5), Pt::Dict(aux)])
}

/// `0.5 * mean((X @ w + b - Y)**2)`.
pub fn mse_linreg_bias(args: Vec<Pt>) -> Pt {
    let [w, b, x, y] = take(args);
    let d = residual(w, x, y);
    let d = binop!(d, b, |r, c| r + c);
    let sq = binop!(d.clone(), d, |a, b| a * b);
    pt(mean1(sq) * 0.5)
}

/// `0.5 * mean((batch.X @ w - batch.Y)**2)` over all elements.
pub fn mse_linreg_dict_batch(args: Vec<Pt>) -> Pt {
    let [w, batch] = take(args);
    let d = residual(w, batch.field("X"), batch.field("Y"));
    let sq = binop!(d.clone(), d, |a, b| a * b);
    pt(mean1(sq) * 0.5)
}

/// `sum(X @ w) * ndim(X)`.
pub fn sum_matvec_times_ndim(args: Vec<Pt>) -> Pt {
    let [w, x] = take(args);
    let ndim = x.rank() as f32;
    pt(sum1(np_matmul(x, w)) * ndim)
}

/// conv (VALID, stride 1) + bias, tanh, mean over h,w, linear, softmax cross-entropy.
pub fn conv_tanh_meanpool_linear(args: Vec<Pt>) -> Pt {
    let [params, x, labels] = take(args);
    let k = params.field("K").f::<4>();
    let bk = params.field("bk").f::<1>();
    let (wl, bl) = (params.field("Wl").f::<2>(), params.field("bl").f::<1>());
    let (x, labels) = match x.rank() {
        4 => (x.f::<4>(), labels.i::<1>()),
        3 => (x.f::<3>().unsqueeze::<4>(), labels.i::<0>().reshape([1])),
        r => panic!("runner: conv_tanh_meanpool_linear of a rank-{r} x"),
    };
    let z = conv2d(
        x,
        k,
        Some(bk),
        burn::tensor::ops::ConvOptions::new([1, 1], [0, 0], [1, 1], 1),
    );
    let [b, o, h, w] = z.dims();
    let f = z.tanh().reshape([b, o, h * w]).mean_dim(2).reshape([b, o]);
    let logits = f.matmul(wl) + bl.unsqueeze::<2>();
    pt(xent(logits, labels))
}

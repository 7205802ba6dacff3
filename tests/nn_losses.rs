//! Every burn-nn 0.22 loss as a user writes it in a per-example loss: built inside the loss or
//! held by the model (a class-weight tensor that is not a parameter), behind a `Linear`.
//! `per_example_grads` equals Burn's own backward of each example alone (`support::check_grads`),
//! with strict mode on (an op that fell back to a per-example loop would panic).

#[path = "shared/strict.rs"]
mod strict;
mod support;

use burn::module::Module;
use burn::nn::loss::{
    BinaryCrossEntropyLossConfig, CosineEmbeddingLossConfig, CrossEntropyLoss,
    CrossEntropyLossConfig, GaussianNLLLossConfig, HingeEmbeddingLossConfig, HuberLossConfig,
    KLDivLossConfig, LpLossConfig, MarginRankingLossConfig, MseLoss, MultiMarginLossConfig,
    PoissonNllLossConfig, Reduction, SmoothL1LossConfig, SoftMarginLoss, TripletMarginLossConfig,
};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::{log_softmax, softmax, softplus};
use burn::tensor::{Int, Tensor, TensorData};
use strict::{dev, normal};
use support::{check_grads, example};

/// Examples, rows an example, input features, classes.
const B: usize = 4;
const T: usize = 3;
const F: usize = 4;
const K: usize = 5;

fn ints<const D: usize>(shape: [usize; D], value: impl Fn(usize) -> i64) -> Tensor<D, Int> {
    let n = shape.iter().product();
    Tensor::from_data(
        TensorData::new((0..n).map(value).collect::<Vec<_>>(), shape),
        &dev(),
    )
}

/// Logits `[T, K]` of one example's rows `[T, F]`.
#[derive(Module, Debug)]
struct Head {
    fc: Linear,
}

fn head() -> Head {
    Head {
        fc: LinearConfig::new(F, K).init(&dev()),
    }
}

/// The rows, and a float target of the logits' shape.
fn regression() -> (Tensor<3>, Tensor<3>) {
    (normal([B, T, F]), normal([B, T, K]))
}

/// Checks a loss of the logits against a float target of their shape.
fn check_regression(what: &str, loss: fn(Tensor<2>, Tensor<2>) -> Tensor<1>) {
    let model = head();
    let (xs, ts) = regression();
    let at = |i| (example::<3, 2, _>(&xs, i), example::<3, 2, _>(&ts, i));
    check_grads(
        &model,
        (xs.clone(), ts.clone()),
        at,
        move |m: &Head, (x, t): (Tensor<2>, Tensor<2>)| loss(m.fc.forward(x), t),
        what,
    );
}

#[test]
fn should_batch_the_regression_losses() {
    check_regression("mse", |y, t| MseLoss::new().forward(y, t, Reduction::Mean));
    check_regression("huber", |y, t| {
        HuberLossConfig::new(0.5)
            .init()
            .forward(y, t, Reduction::Sum)
    });
    check_regression("smooth_l1", |y, t| {
        SmoothL1LossConfig::new()
            .with_beta(0.7)
            .init()
            .forward(y, t)
            .mean()
    });
    check_regression("lp", |y, t| {
        LpLossConfig::new(1.5).init().forward(y, t, Reduction::Mean)
    });
    check_regression("gaussian_nll", |y, t| {
        let var = softplus(y.clone(), 1.0) + 0.1;
        GaussianNLLLossConfig::new()
            .with_full(true)
            .init()
            .forward(y, t, var, Reduction::Mean)
    });
    check_regression("kl_div", |y, t| {
        KLDivLossConfig::new()
            .init()
            .forward(log_softmax(y, 1), softmax(t, 1), Reduction::Sum)
    });
}

#[test]
fn should_batch_the_margin_losses() {
    // Targets of ±1.
    fn sign(t: Tensor<2>) -> Tensor<2> {
        t.sign()
    }
    check_regression("soft_margin", |y, t| {
        SoftMarginLoss::new().forward(y, sign(t), Reduction::Mean)
    });
    check_regression("hinge_embedding", |y, t| {
        HingeEmbeddingLossConfig::new()
            .with_margin(0.5)
            .init()
            .forward(y, sign(t), Reduction::Mean)
    });
    check_regression("margin_ranking", |y, t| {
        MarginRankingLossConfig::new()
            .with_margin(0.2)
            .init()
            .forward(y, t.clone() * 0.5, sign(t), Reduction::Mean)
    });
    check_regression("triplet_margin", |y, t| {
        TripletMarginLossConfig::new()
            .init()
            .forward(y, t.clone(), t.flip([1]), Reduction::Mean)
    });
    check_regression("cosine_embedding", |y, t| {
        // One ±1 target a row, from the target's first column.
        let target = t.clone().narrow(1, 0, 1).sign().int().reshape([T]);
        CosineEmbeddingLossConfig::new()
            .with_margin(0.1)
            .init()
            .forward(y, t, target)
    });
}

/// A class a row, 0 among them (the padding token below), never a whole example of it.
fn classes() -> Tensor<2, Int> {
    ints([B, T], |k| ((k * 7 + 1) % K) as i64)
}

#[test]
fn should_batch_cross_entropy_built_in_the_loss() {
    let model = head();
    let (xs, ys) = (normal([B, T, F]), classes());
    let at = |i| (example::<3, 2, _>(&xs, i), example::<2, 1, Int>(&ys, i));
    let inputs = (xs.clone(), ys.clone());
    check_grads(
        &model,
        inputs.clone(),
        at,
        |m: &Head, (x, y): (Tensor<2>, Tensor<1, Int>)| {
            CrossEntropyLoss::new(None, &x.device()).forward(m.fc.forward(x), y)
        },
        "cross_entropy",
    );
    check_grads(
        &model,
        inputs.clone(),
        at,
        |m: &Head, (x, y): (Tensor<2>, Tensor<1, Int>)| {
            CrossEntropyLossConfig::new()
                .with_logits(false)
                .init(&x.device())
                .forward(softmax(m.fc.forward(x), 1), y)
        },
        "cross_entropy of probabilities",
    );
    check_grads(
        &model,
        inputs,
        at,
        |m: &Head, (x, y): (Tensor<2>, Tensor<1, Int>)| {
            MultiMarginLossConfig::new().with_p(2).init().forward(
                m.fc.forward(x),
                y,
                Reduction::Mean,
            )
        },
        "multi_margin",
    );
}

/// The loss held by the model, as burn's examples do: its class weights are a tensor that is
/// not a parameter (moved with the model, read at every call).
#[derive(Module, Debug)]
struct Weighted {
    fc: Linear,
    ce: burn::nn::loss::CrossEntropyLoss,
    bce: burn::nn::loss::BinaryCrossEntropyLoss,
}

#[test]
fn should_batch_weighted_padded_and_smoothed_losses_held_by_the_model() {
    let weights = vec![0.5, 1.0, 1.5, 2.0, 0.25];
    let model = Weighted {
        fc: LinearConfig::new(F, K).init(&dev()),
        ce: CrossEntropyLossConfig::new()
            .with_pad_tokens(Some(vec![0]))
            .with_weights(Some(weights.clone()))
            .with_smoothing(Some(0.1))
            .init(&dev()),
        bce: BinaryCrossEntropyLossConfig::new()
            .with_logits(true)
            .with_weights(Some(weights))
            .with_smoothing(Some(0.05))
            .init(&dev()),
    };
    let (xs, ys) = (normal([B, T, F]), classes());
    let at = |i| (example::<3, 2, _>(&xs, i), example::<2, 1, Int>(&ys, i));
    check_grads(
        &model,
        (xs.clone(), ys.clone()),
        at,
        |m: &Weighted, (x, y): (Tensor<2>, Tensor<1, Int>)| m.ce.forward(m.fc.forward(x), y),
        "weighted, padded, smoothed cross_entropy",
    );
    // Several labels a row.
    let labels = ints([B, T, K], |k| ((k * 5) % 3 == 0) as i64);
    let at = |i| (example::<3, 2, _>(&xs, i), example::<3, 2, Int>(&labels, i));
    check_grads(
        &model,
        (xs.clone(), labels.clone()),
        at,
        |m: &Weighted, (x, y): (Tensor<2>, Tensor<2, Int>)| m.bce.forward(m.fc.forward(x), y),
        "weighted, smoothed binary_cross_entropy",
    );
}

/// One example's sequence losses: its rows `[T, F]` (a lattice `[T, U + 1, F]` for RNN-T),
/// targets `[1, L]` and lengths `[1]` (a batch of one, as the losses take them).
type Sequence<const D: usize> = (Tensor<D>, Tensor<2, Int>, Tensor<1, Int>, Tensor<1, Int>);

#[test]
fn should_batch_ctc_and_rnnt() {
    let model = head();
    // Targets of 1..K (0 is the blank), lengths that differ between examples.
    let (t_in, l) = (6, 3);
    let xs = normal([B, t_in, F]);
    let targets = ints([B, 1, l], |k| (1 + k % (K - 1)) as i64);
    let input_lengths = ints([B, 1], |k| (t_in - k % 2) as i64);
    let target_lengths = ints([B, 1], |k| (l - k % 2) as i64);
    let inputs = (
        xs.clone(),
        targets.clone(),
        input_lengths.clone(),
        target_lengths.clone(),
    );
    let at = |i| {
        (
            example::<3, 2, _>(&xs, i),
            example::<3, 2, Int>(&targets, i),
            example::<2, 1, Int>(&input_lengths, i),
            example::<2, 1, Int>(&target_lengths, i),
        )
    };
    // `CTCLoss::forward` checks the lengths on the host in a debug build (`length_assertions`,
    // under `cfg(debug_assertions)`): a value read, refused by name. Burn's `ctc_loss`, which
    // it calls after the check, runs batched.
    let ctc = |m: &Head, (x, t, il, tl): Sequence<2>| {
        let log_probs = log_softmax(m.fc.forward(x), 1).unsqueeze_dim::<3>(1); // [T, 1, K]
        burn::tensor::module::ctc_loss(log_probs, t, il, tl, 0).sum()
    };
    check_grads(&model, inputs.clone(), at, ctc, "ctc_loss");
    let checked = |m: &Head, (x, t, il, tl): Sequence<2>| {
        let log_probs = log_softmax(m.fc.forward(x), 1).unsqueeze_dim::<3>(1);
        burn::nn::loss::CTCLossConfig::new()
            .init()
            .forward(log_probs, t, il, tl)
            .sum()
    };
    let result = burn_vmap::per_example_grads(&model, inputs, checked);
    if cfg!(debug_assertions) {
        let err = result.unwrap_err();
        assert!(
            matches!(err, burn_vmap::VmapError::ValueRead { .. }),
            "{err}"
        );
    }

    // RNN-T over a lattice of T = 4 frames and U + 1 = 3 target positions.
    let (t_in, l) = (4, 2);
    let xs = normal([B, t_in, l + 1, F]);
    let targets = ints([B, 1, l], |k| (1 + (k * 3) % (K - 1)) as i64);
    let logit_lengths = ints([B, 1], |k| (t_in - k % 2) as i64);
    let target_lengths = ints([B, 1], |k| (l - k % 2) as i64);
    let at = |i| {
        (
            example::<4, 3, _>(&xs, i),
            example::<3, 2, Int>(&targets, i),
            example::<2, 1, Int>(&logit_lengths, i),
            example::<2, 1, Int>(&target_lengths, i),
        )
    };
    check_grads(
        &model,
        (
            xs.clone(),
            targets.clone(),
            logit_lengths.clone(),
            target_lengths.clone(),
        ),
        at,
        |m: &Head, (x, t, ll, tl): Sequence<3>| {
            let logits = m.fc.forward(x).unsqueeze_dim::<4>(0); // [1, T, U + 1, K]
            burn::nn::loss::RNNTLossConfig::new()
                .init()
                .forward(logits, t, ll, tl)
                .sum()
        },
        "rnnt",
    );
}

/// `PoissonNllLoss` checks its targets' signs on the host (`into_scalar`) at every call: a value
/// read, refused by name; its formula written out runs batched.
#[test]
fn should_refuse_poisson_nll_by_name_and_batch_its_formula() {
    let model = head();
    let (xs, ts) = regression();
    let ts = ts.abs();
    let inputs = (xs.clone(), ts.clone());
    let err = burn_vmap::per_example_grads(
        &model,
        inputs.clone(),
        |m: &Head, (x, t): (Tensor<2>, Tensor<2>)| {
            PoissonNllLossConfig::new()
                .init()
                .forward(m.fc.forward(x), t, Reduction::Mean)
        },
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            burn_vmap::VmapError::ValueRead {
                transform: "per_example_grads",
                ..
            }
        ),
        "{err}"
    );
    let at = |i| (example::<3, 2, _>(&xs, i), example::<3, 2, _>(&ts, i));
    check_grads(
        &model,
        inputs,
        at,
        |m: &Head, (x, t): (Tensor<2>, Tensor<2>)| {
            // `log_input`: exp(y) - t·y, as `PoissonNllLoss` computes it.
            let y = m.fc.forward(x);
            (y.clone().exp() - t * y).mean()
        },
        "poisson_nll written out",
    );
}

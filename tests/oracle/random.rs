//! Random ops under each `Randomness` mode, through `vmap` on Burn 0.22 code: `Error` refuses
//! (float, int and `random_like` draws, `Dropout` on an autodiff device, at any nesting level),
//! `Different` draws per example (independent rows with the distribution's moments), `Same`
//! shares one draw (the loop with one draw: `f(x_i, r)`), and nested levels combine modes.

use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig};
use burn::tensor::{Device, Distribution, Int, Tensor, TensorData};
use burn_vmap::{Randomness, VmapError, vmap};

fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

fn rows(v: &[f32], n: usize) -> Vec<&[f32]> {
    v.chunks(v.len() / n).collect()
}

/// Mean and variance of a row.
fn moments(row: &[f32]) -> (f32, f32) {
    let n = row.len() as f32;
    let mean = row.iter().sum::<f32>() / n;
    (
        mean,
        row.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / n,
    )
}

#[test]
fn should_refuse_every_kind_of_draw_in_error_mode() {
    let device = Device::default();
    let xs = Tensor::<2>::zeros([3, 4], &device);
    let is = Tensor::<2, Int>::zeros([3, 4], &device);
    let errors = [
        vmap(|x: Tensor<1>| x.random_like(Distribution::Default))
            .call(xs.clone())
            .map(|_| ()),
        vmap(|x: Tensor<1>| {
            x.clone() + Tensor::<1>::random([4], Distribution::Default, &x.device())
        })
        .call(xs.clone())
        .map(|_| ()),
        vmap(|i: Tensor<1, Int>| {
            i.clone() + Tensor::<1, Int>::random([4], Distribution::Uniform(0.0, 5.0), &i.device())
        })
        .call(is)
        .map(|_| ()),
        // The refusal of an inner level surfaces through the outer one.
        vmap(|x: Tensor<1>| -> Tensor<1> {
            vmap(|y: Tensor<0>| y.clone() + y.random_like(Distribution::Default))
                .call(x)
                .unwrap_or_else(|e| panic!("{e}"))
        })
        .randomness(Randomness::Different)
        .call(xs)
        .map(|_| ()),
    ];
    for (k, e) in errors.into_iter().enumerate() {
        let err = e.unwrap_err();
        let refused = matches!(err, VmapError::Randomness { .. })
            || err.to_string().contains("Randomness::Different");
        assert!(refused, "draw {k}: {err}");
    }
}

#[test]
fn should_draw_independent_rows_with_the_distributions_moments_in_different_mode() {
    let device = Device::default();
    let (n, d) = (16, 2000);
    let xs = Tensor::<2>::zeros([n, d], &device);
    let draws = values(
        vmap(|x: Tensor<1>| x.random_like(Distribution::Normal(1.0, 2.0)))
            .randomness(Randomness::Different)
            .call(xs)
            .unwrap(),
    );
    let rows = rows(&draws, n);
    // Bounds at about 6.5 standard deviations of each statistic over d = 2000 draws (the mean's
    // 0.045, the variance's 0.126, a correlation's 0.022), for 16 rows and 15 pairs: a chance
    // failure is below 1e-9 (at 4.5 it was about 1e-4, and CI met one: a correlation of 0.102),
    // while a shared or a wrong draw is far outside (a correlation of 1, a mean of 0).
    for row in &rows {
        let (mean, var) = moments(row);
        assert!((mean - 1.0).abs() < 0.3, "mean {mean}");
        assert!((var - 4.0).abs() < 0.85, "variance {var}");
    }
    for (i, row) in rows.iter().enumerate().skip(1) {
        let cov = rows[0]
            .iter()
            .zip(*row)
            .map(|(a, b)| (a - 1.0) * (b - 1.0))
            .sum::<f32>()
            / d as f32
            / 4.0;
        assert!(cov.abs() < 0.15, "correlation of rows 0 and {i}: {cov}");
    }
    // Int draws stay in their range and differ between examples.
    let is = Tensor::<2, Int>::zeros([n, 64], &device);
    let ints: Tensor<2, Int> = vmap(|i: Tensor<1, Int>| {
        i.clone() + Tensor::<1, Int>::random([64], Distribution::Uniform(0.0, 5.0), &i.device())
    })
    .randomness(Randomness::Different)
    .call(is)
    .unwrap();
    let v: Vec<i64> = ints.into_data().convert::<i64>().try_to_vec().unwrap();
    assert!(v.iter().all(|x| (0..5).contains(x)), "{v:?}");
    assert_ne!(v[..64], v[64..128]);
}

/// `Same`: the law with one shared draw `r`, `vmap(f)(xs) == stack(f(x_i, r))`: every example's
/// output minus its input is the same row.
#[test]
fn should_share_one_draw_in_same_mode_as_the_loop_with_one_draw() {
    let device = Device::default();
    let xs = Tensor::<2>::from_data(
        TensorData::new(
            (0..5 * 30)
                .map(|v| (v % 8) as f32 * 0.125)
                .collect::<Vec<_>>(),
            [5, 30],
        ),
        &device,
    );
    let out: Tensor<2> = vmap(|x: Tensor<1>| x.clone() + x.random_like(Distribution::Default))
        .randomness(Randomness::Same)
        .call(xs.clone())
        .unwrap();
    let noise = values(out - xs);
    let rows = rows(&noise, 5);
    let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6);
    assert!(rows.iter().all(|r| same(r, rows[0])), "{rows:?}");
    assert!(rows[0].iter().all(|v| (0.0..1.0).contains(v)));
}

/// Nested levels with mixed modes: `Different` outside and `Same` inside gives one draw per
/// outer example, shared by its inner examples; the reverse gives one draw per inner index,
/// shared by the outer examples.
#[test]
fn should_combine_randomness_modes_across_nested_levels() {
    let device = Device::default();
    let xs = Tensor::<3>::zeros([3, 4, 50], &device);
    let nested = |outer: Randomness, inner: Randomness| -> Vec<f32> {
        let f = move |x: Tensor<2>| -> Tensor<2> {
            vmap(|y: Tensor<1>| y.random_like(Distribution::Default))
                .randomness(inner)
                .call(x)
                .unwrap()
        };
        values(vmap(f).randomness(outer).call(xs.clone()).unwrap())
    };
    let v = nested(Randomness::Different, Randomness::Same);
    let blocks: Vec<&[f32]> = v.chunks(4 * 50).collect();
    for b in &blocks {
        let r: Vec<&[f32]> = b.chunks(50).collect();
        assert!(r.iter().all(|row| *row == r[0]));
    }
    assert_ne!(blocks[0][..50], blocks[1][..50]);

    let v = nested(Randomness::Same, Randomness::Different);
    let blocks: Vec<&[f32]> = v.chunks(4 * 50).collect();
    assert!(blocks.iter().all(|b| *b == blocks[0]));
    assert_ne!(blocks[0][..50], blocks[0][50..100]);

    let v = nested(Randomness::Different, Randomness::Different);
    let r: Vec<&[f32]> = v.chunks(50).collect();
    for i in 0..r.len() {
        for j in 0..i {
            assert_ne!(r[i], r[j], "rows {i} and {j}");
        }
    }
}

/// `Dropout` in training mode is a random op on an autodiff device: refused without a mode,
/// one mask per example in `Different` mode (keep rate and scale), one shared in `Same` mode.
#[derive(Module, Debug)]
struct Noisy {
    dropout: Dropout,
}

#[test]
fn should_draw_dropout_masks_per_the_mode() {
    let device = Device::default().autodiff();
    let m = Noisy {
        dropout: DropoutConfig::new(0.5).init(),
    };
    let (n, d) = (32, 400);
    let xs = Tensor::<2>::ones([n, d], &device);
    let f = |x: Tensor<1>| m.dropout.forward(x);
    let err = vmap(f).call(xs.clone()).unwrap_err();
    assert!(matches!(err, VmapError::Randomness { .. }), "{err}");

    let out = values(
        vmap(f)
            .randomness(Randomness::Different)
            .call(xs.clone())
            .unwrap(),
    );
    assert!(out.iter().all(|v| *v == 0.0 || (v - 2.0).abs() < 1e-6));
    let kept = out.iter().filter(|v| **v != 0.0).count() as f32 / (n * d) as f32;
    assert!((kept - 0.5).abs() < 0.02, "keep rate {kept}");
    let r = rows(&out, n);
    for i in 1..n {
        let differ = r[0].iter().zip(r[i]).filter(|(a, b)| a != b).count() as f32 / d as f32;
        assert!(
            (differ - 0.5).abs() < 0.15,
            "rows 0 and {i} differ at {differ}"
        );
    }

    let out = values(vmap(f).randomness(Randomness::Same).call(xs).unwrap());
    let r = rows(&out, n);
    assert!(r.iter().all(|row| *row == r[0]));

    // In eval mode there is nothing to draw: no mode needed, the identity.
    let eval = m.valid();
    let ys = Tensor::<2>::ones([n, d], &Device::default());
    let out = vmap(|x: Tensor<1>| eval.dropout.forward(x))
        .call(ys)
        .unwrap();
    assert!(values(out).iter().all(|v| *v == 1.0));
}

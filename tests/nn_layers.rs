//! burn-nn layers under vmap against the loop oracle: forward values (`vmap(f)(xs)` equals
//! stacking `f(x_i)`) and per-example gradients (one backward pass inside vmap on
//! `Autodiff<Vmap<B>>` equals a loop of single-example backward passes), for every parameter.
//!
//! Strict mode is on: an op that fell back to the per-example loop would panic here.

use burn::backend::Autodiff;
use burn::module::{AutodiffModule, Module};
use burn::nn::attention::{MhaInput, MultiHeadAttention, MultiHeadAttentionConfig};
use burn::nn::conv::{
    Conv1d, Conv1dConfig, Conv2d, Conv2dConfig, ConvTranspose2d, ConvTranspose2dConfig,
};
use burn::nn::pool::{
    AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig, AvgPool2d, AvgPool2dConfig, MaxPool2d,
    MaxPool2dConfig,
};
use burn::nn::{
    BatchNormConfig, Dropout, DropoutConfig, Embedding, EmbeddingConfig, Gelu, GroupNorm,
    GroupNormConfig, InstanceNorm, InstanceNormConfig, LayerNorm, LayerNormConfig, Linear,
    LinearConfig, Lstm, LstmConfig, Relu, Sigmoid, Tanh,
};
use burn::tensor::activation::{log_softmax, softmax};
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensorOps;
use burn::tensor::{Bool, Distribution, Int, Tensor, TensorData, TensorPrimitive, Tolerance};
use burn_vmap::testing::TestBackend;
use burn_vmap::{ParamGrads, Randomness, Vmap, VmapError, per_example_grads, vmap};

type V = Vmap<TestBackend>;
type AD = Autodiff<V>;

const E: usize = 3;

fn setup() {
    burn_vmap::strict::set_strict(true);
}

fn normal<const D: usize>(shape: [usize; D]) -> Tensor<AD, D> {
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), &Default::default())
}

/// Initializes every (lazily initialized) parameter of `m` outside vmap: Burn draws a
/// parameter's initial value on first use, and a draw inside vmap is a random op there.
fn init<M: Module<AD>>(m: M) -> M {
    struct Touch;
    impl burn::module::ModuleVisitor<AD> for Touch {
        fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<AD, D>>) {
            let _ = param.val();
        }
    }
    m.visit(&mut Touch);
    m
}

/// Example `i` of a batch (axis 0 removed).
fn example<const DB: usize, const D: usize>(xs: &Tensor<AD, DB>, i: usize) -> Tensor<AD, D> {
    let dims = xs.dims();
    let mut shape = [0usize; D];
    shape.copy_from_slice(&dims[1..]);
    xs.clone().narrow(0, i, 1).reshape(shape)
}

fn assert_close(got: TensorData, want: TensorData, what: &str) {
    assert_eq!(got.shape, want.shape, "{what}: shapes differ");
    got.assert_approx_eq::<f32>(&want, Tolerance::rel_abs(1e-4, 1e-5));
}

/// Forward oracle: `vmap(f)(xs) == stack_i f(xs[i])`.
fn forward_oracle<const D: usize, const DB: usize, const O: usize, const OB: usize>(
    xs: Tensor<AD, DB>,
    f: impl Fn(Tensor<AD, D>) -> Tensor<AD, O>,
    what: &str,
) {
    let got: Tensor<AD, OB> = vmap(&f).call_as(xs.clone()).unwrap();
    let want: Vec<Tensor<AD, O>> = (0..xs.dims()[0]).map(|i| f(example(&xs, i))).collect();
    assert_close(
        got.into_data(),
        Tensor::stack::<OB>(want, 0).into_data(),
        what,
    );
}

/// `(path, shape, values)` of every gradient, flattened.
fn flat(grads: ParamGrads<V>) -> Vec<(String, Vec<usize>, TensorData)> {
    let mut out = Vec::new();
    grads.map(|path, g| {
        let t = g.clone().tensor();
        let shape = burn::tensor::TensorMetadata::shape(&t).to_vec();
        let n = shape.iter().product::<usize>();
        let flat = V::float_reshape(t, [n].into());
        let data = Tensor::<V, 1>::from_primitive(TensorPrimitive::Float(flat)).into_data();
        out.push((path.to_string(), shape, data));
        g
    });
    out
}

/// Gradient oracle: per-example gradients of every parameter from one backward pass inside
/// vmap equal the loop of single-example backward passes.
fn grads_oracle<M: AutodiffModule<AD>, const D: usize, const DB: usize>(
    model: &M,
    xs: Tensor<AD, DB>,
    loss: impl Fn(&M, Tensor<AD, D>) -> Tensor<AD, 1>,
    what: &str,
) {
    let n = xs.dims()[0];
    let pe = flat(per_example_grads(model, xs.clone(), &loss).unwrap());
    let reference: Vec<_> = (0..n)
        .map(|i| {
            let mut g = loss(model, example(&xs, i)).backward();
            flat(ParamGrads::from_module(&mut g, model))
        })
        .collect();
    assert!(!pe.is_empty(), "{what}: no parameter gradient");
    for (k, (path, shape, data)) in pe.into_iter().enumerate() {
        let (rpath, rshape, _) = &reference[0][k];
        assert_eq!(&path, rpath, "{what}: parameter order");
        assert_eq!(shape[0], n, "{what}: {path}: batch dim");
        assert_eq!(&shape[1..], &rshape[..], "{what}: {path}: shape");
        let mut values: Vec<f32> = Vec::new();
        for r in &reference {
            values.extend(r[k].2.to_vec::<f32>().unwrap());
        }
        let want = TensorData::new(values, [data.num_elements()]);
        assert_close(data, want, &format!("{what}: {path}"));
    }
}

/// A smooth scalar loss of any output.
fn smooth<const D: usize>(y: Tensor<AD, D>) -> Tensor<AD, 1> {
    (y.clone() * y.sin()).sum()
}

#[test]
fn should_batch_linear() {
    setup();
    let device = Default::default();
    let m: Linear<AD> = init(LinearConfig::new(5, 4).init(&device));
    let xs = normal([E, 2, 5]);
    forward_oracle::<2, 3, 2, 3>(xs.clone(), |x| m.forward(x), "linear");
    grads_oracle(
        &m,
        xs,
        |m: &Linear<AD>, x: Tensor<AD, 2>| smooth(m.forward(x)),
        "linear",
    );
}

#[test]
fn should_batch_conv1d() {
    setup();
    let device = Default::default();
    let m: Conv1d<AD> = init(Conv1dConfig::new(2, 4, 3).with_stride(2).init(&device));
    let xs = normal([E, 2, 2, 9]);
    forward_oracle::<3, 4, 3, 4>(xs.clone(), |x| m.forward(x), "conv1d");
    grads_oracle(
        &m,
        xs,
        |m: &Conv1d<AD>, x: Tensor<AD, 3>| smooth(m.forward(x)),
        "conv1d",
    );
}

#[test]
fn should_batch_conv2d() {
    setup();
    let device = Default::default();
    let m: Conv2d<AD> = init(
        Conv2dConfig::new([4, 6], [3, 2])
            .with_groups(2)
            .with_padding(burn::nn::PaddingConfig2d::Explicit(1, 0, 1, 0))
            .init(&device),
    );
    let xs = normal([E, 2, 4, 6, 5]);
    forward_oracle::<4, 5, 4, 5>(xs.clone(), |x| m.forward(x), "conv2d");
    grads_oracle(
        &m,
        xs,
        |m: &Conv2d<AD>, x: Tensor<AD, 4>| smooth(m.forward(x)),
        "conv2d",
    );
}

#[test]
fn should_batch_conv_transpose2d() {
    setup();
    let device = Default::default();
    let m: ConvTranspose2d<AD> = init(
        ConvTranspose2dConfig::new([3, 4], [3, 2])
            .with_stride([2, 1])
            .init(&device),
    );
    let xs = normal([E, 2, 3, 4, 5]);
    forward_oracle::<4, 5, 4, 5>(xs.clone(), |x| m.forward(x), "conv_transpose2d");
    grads_oracle(
        &m,
        xs,
        |m: &ConvTranspose2d<AD>, x: Tensor<AD, 4>| smooth(m.forward(x)),
        "conv_transpose2d",
    );
}

/// A convolution followed by a parameter-free layer, so that the layer's backward op is on the
/// path of a parameter's gradient.
#[derive(Module, Debug)]
struct ConvThen<B: Backend, L> {
    conv: Conv2d<B>,
    layer: L,
}

macro_rules! pool_test {
    ($name:ident, $ty:ty, $layer:expr) => {
        #[test]
        fn $name() {
            setup();
            let device = Default::default();
            let m = init(ConvThen::<AD, $ty> {
                conv: Conv2dConfig::new([2, 3], [3, 3]).init(&device),
                layer: $layer,
            });
            let xs = normal([E, 2, 2, 9, 8]);
            let f = |m: &ConvThen<AD, $ty>, x: Tensor<AD, 4>| m.layer.forward(m.conv.forward(x));
            forward_oracle::<4, 5, 4, 5>(xs.clone(), |x| f(&m, x), stringify!($name));
            grads_oracle(
                &m,
                xs,
                |m: &ConvThen<AD, $ty>, x: Tensor<AD, 4>| smooth(f(m, x)),
                stringify!($name),
            );
        }
    };
}

pool_test!(
    should_batch_max_pool2d,
    MaxPool2d,
    MaxPool2dConfig::new([2, 3]).with_strides([2, 2]).init()
);
pool_test!(
    should_batch_avg_pool2d,
    AvgPool2d,
    AvgPool2dConfig::new([3, 2])
        .with_strides([2, 1])
        .with_padding(burn::nn::PaddingConfig2d::Explicit(1, 1, 1, 1))
        .init()
);
pool_test!(
    should_batch_adaptive_avg_pool2d,
    AdaptiveAvgPool2d,
    AdaptiveAvgPool2dConfig::new([3, 2]).init()
);

#[test]
fn should_batch_embedding() {
    setup();
    let device = Default::default();
    let m: Embedding<AD> = init(EmbeddingConfig::new(7, 4).init(&device));
    let idx = Tensor::<AD, 3, Int>::from_ints(
        [
            [[0, 3, 3], [6, 1, 0]],
            [[2, 2, 2], [5, 4, 3]],
            [[6, 6, 0], [1, 1, 1]],
        ],
        &device,
    );
    let got: Tensor<AD, 4> = vmap(|i: Tensor<AD, 2, Int>| m.forward(i))
        .call(idx.clone())
        .unwrap();
    let want: Vec<Tensor<AD, 3>> = (0..E)
        .map(|i| m.forward(idx.clone().narrow(0, i, 1).reshape([2, 3])))
        .collect();
    assert_close(
        got.into_data(),
        Tensor::stack::<4>(want, 0).into_data(),
        "embedding",
    );
    // Per-example gradients of the table (embedding_backward), with a weight per position.
    let c = normal([2, 3, 4]);
    let loss = |m: &Embedding<AD>, i: Tensor<AD, 2, Int>| (m.forward(i) * c.clone()).sum();
    let pe = flat(per_example_grads(&m, idx.clone(), loss).unwrap());
    let (_, shape, data) = &pe[0];
    assert_eq!(shape, &vec![E, 7, 4]);
    let mut values = Vec::new();
    for i in 0..E {
        let mut g = loss(&m, idx.clone().narrow(0, i, 1).reshape([2, 3])).backward();
        values.extend(
            flat(ParamGrads::from_module(&mut g, &m))[0]
                .2
                .to_vec::<f32>()
                .unwrap(),
        );
    }
    assert_close(
        data.clone(),
        TensorData::new(values, [E * 28]),
        "embedding grads",
    );
}

#[test]
fn should_batch_layer_group_instance_norm() {
    setup();
    let device = Default::default();
    let ln: LayerNorm<AD> = LayerNormConfig::new(5).init(&device);
    let gn: GroupNorm<AD> = GroupNormConfig::new(2, 4).init(&device);
    let inn: InstanceNorm<AD> = InstanceNormConfig::new(4).with_affine(true).init(&device);
    let xs = normal([E, 2, 4, 5]);
    forward_oracle::<3, 4, 3, 4>(xs.clone(), |x| ln.forward(x), "layer_norm");
    forward_oracle::<3, 4, 3, 4>(xs.clone(), |x| gn.forward(x), "group_norm");
    forward_oracle::<3, 4, 3, 4>(xs.clone(), |x| inn.forward(x), "instance_norm");
    // Scale the input per channel so the affine parameters get nontrivial gradients.
    let grads_of = |x: Tensor<AD, 3>| x.clone() * x.clone().tanh();
    grads_oracle(
        &ln,
        xs.clone(),
        |m: &LayerNorm<AD>, x: Tensor<AD, 3>| smooth(m.forward(grads_of(x))),
        "layer_norm",
    );
    grads_oracle(
        &gn,
        xs.clone(),
        |m: &GroupNorm<AD>, x: Tensor<AD, 3>| smooth(m.forward(grads_of(x))),
        "group_norm",
    );
    grads_oracle(
        &inn,
        xs,
        |m: &InstanceNorm<AD>, x: Tensor<AD, 3>| smooth(m.forward(grads_of(x))),
        "instance_norm",
    );
}

#[derive(Module, Debug)]
struct Act<B: Backend> {
    fc: Linear<B>,
    relu: Relu,
    gelu: Gelu,
    sigmoid: Sigmoid,
    tanh: Tanh,
}

#[test]
fn should_batch_activations() {
    setup();
    let device = Default::default();
    let m = init(Act::<AD> {
        fc: LinearConfig::new(4, 6).init(&device),
        relu: Relu::new(),
        gelu: Gelu::new(),
        sigmoid: Sigmoid::new(),
        tanh: Tanh::new(),
    });
    let xs = normal([E, 2, 4]);
    type F = fn(&Act<AD>, Tensor<AD, 2>) -> Tensor<AD, 2>;
    let cases: [(&str, F); 6] = [
        ("relu", |m, x| m.relu.forward(m.fc.forward(x))),
        ("gelu", |m, x| m.gelu.forward(m.fc.forward(x))),
        ("sigmoid", |m, x| m.sigmoid.forward(m.fc.forward(x))),
        ("tanh", |m, x| m.tanh.forward(m.fc.forward(x))),
        ("softmax", |m, x| softmax(m.fc.forward(x), 1)),
        ("log_softmax", |m, x| log_softmax(m.fc.forward(x), 1)),
    ];
    for (name, f) in cases {
        forward_oracle::<2, 3, 2, 3>(xs.clone(), |x| f(&m, x), name);
        grads_oracle(
            &m,
            xs.clone(),
            |m: &Act<AD>, x: Tensor<AD, 2>| smooth(f(m, x)),
            name,
        );
    }
}

#[test]
fn should_batch_lstm() {
    setup();
    let device = Default::default();
    let m: Lstm<AD> = init(LstmConfig::new(3, 4, true).init(&device));
    let xs = normal([E, 2, 5, 3]);
    forward_oracle::<3, 4, 3, 4>(xs.clone(), |x| m.forward(x, None).0, "lstm");
    grads_oracle(
        &m,
        xs,
        |m: &Lstm<AD>, x: Tensor<AD, 3>| {
            let (out, state) = m.forward(x, None);
            smooth(out) + state.cell.sum()
        },
        "lstm",
    );
}

#[test]
fn should_batch_multi_head_attention_with_mask() {
    setup();
    let device = Default::default();
    let m: MultiHeadAttention<AD> = init(
        MultiHeadAttentionConfig::new(8, 2)
            .with_dropout(0.0)
            .init(&device),
    );
    let xs = normal([E, 2, 4, 8]);
    // A different padding mask per example (batched bool operand).
    let mask = Tensor::<AD, 3, Bool>::from_bool(
        TensorData::new(
            (0..E * 2 * 4)
                .map(|k| (k % 4) >= 4 - (k / 4) % 3)
                .collect::<Vec<bool>>(),
            [E, 2, 4],
        ),
        &device,
    );
    let f = |m: &MultiHeadAttention<AD>, x: Tensor<AD, 3>, mask: Tensor<AD, 2, Bool>| {
        m.forward(MhaInput::self_attn(x).mask_pad(mask)).context
    };
    let got: Tensor<AD, 4> = vmap(|(x, k)| f(&m, x, k))
        .call((xs.clone(), mask.clone()))
        .unwrap();
    let want: Vec<Tensor<AD, 3>> = (0..E)
        .map(|i| {
            let k = mask.clone().narrow(0, i, 1).reshape([2, 4]);
            f(&m, example(&xs, i), k)
        })
        .collect();
    assert_close(
        got.into_data(),
        Tensor::stack::<4>(want, 0).into_data(),
        "mha",
    );

    let loss = |m: &MultiHeadAttention<AD>, (x, k): (Tensor<AD, 3>, Tensor<AD, 2, Bool>)| {
        smooth(f(m, x, k))
    };
    let pe = flat(per_example_grads(&m, (xs.clone(), mask.clone()), loss).unwrap());
    let reference: Vec<_> = (0..E)
        .map(|i| {
            let k = mask.clone().narrow(0, i, 1).reshape([2, 4]);
            let mut g = loss(&m, (example(&xs, i), k)).backward();
            flat(ParamGrads::from_module(&mut g, &m))
        })
        .collect();
    assert_eq!(pe.len(), reference[0].len());
    for (k, (path, _, data)) in pe.into_iter().enumerate() {
        let mut values = Vec::new();
        for r in &reference {
            values.extend(r[k].2.to_vec::<f32>().unwrap());
        }
        let n = values.len();
        assert_close(data, TensorData::new(values, [n]), &format!("mha {path}"));
    }
}

#[derive(Module, Debug)]
struct Noisy<B: Backend> {
    fc: Linear<B>,
    dropout: Dropout,
}

#[test]
fn should_refuse_dropout_without_a_randomness_mode() {
    setup();
    let device = Default::default();
    let m = init(Noisy::<AD> {
        fc: LinearConfig::new(4, 16).init(&device),
        dropout: DropoutConfig::new(0.5).init(),
    });
    let err = vmap(|x: Tensor<AD, 1>| m.dropout.forward(m.fc.forward(x)))
        .call_as::<AD, AD, _, _, _, Tensor<AD, 2>>(normal([E, 4]))
        .unwrap_err();
    assert!(
        matches!(err, VmapError::Randomness { size: E, .. }),
        "{err}"
    );
    let msg = err.to_string();
    assert!(msg.contains("float_random") && msg.contains("Randomness::Different"));
}

/// Dropout in `Different` mode: independent masks per example, the right keep rate and scale,
/// and per-example gradients that use each example's own mask.
#[test]
fn should_draw_independent_dropout_masks_per_example() {
    setup();
    let device = Default::default();
    let (n, d) = (64, 400);
    let m = init(Noisy::<AD> {
        fc: LinearConfig::new(3, d).init(&device),
        dropout: DropoutConfig::new(0.5).init(),
    });
    let xs = normal([n, 3]);
    let f = |x: Tensor<AD, 1>| {
        let z = m.fc.forward(x);
        let y = m.dropout.forward(z.clone());
        let g = y.clone().sum().backward();
        let gb = Tensor::<AD, 1>::from_inner(m.fc.bias.as_ref().unwrap().grad(&g).unwrap());
        (y, z, gb)
    };
    let (ys, zs, gb): (Tensor<AD, 2>, Tensor<AD, 2>, Tensor<AD, 2>) =
        vmap(f).randomness(Randomness::Different).call(xs).unwrap();
    let gb = gb.into_data().to_vec::<f32>().unwrap();
    let ys = ys.into_data().to_vec::<f32>().unwrap();
    let zs = zs.into_data().to_vec::<f32>().unwrap();
    // The bias gradient is the mask times 1/(1-p) = 2, and the forward used the same mask.
    for k in 0..n * d {
        assert!(gb[k] == 0.0 || (gb[k] - 2.0).abs() < 1e-6, "{}", gb[k]);
        assert!((ys[k] - gb[k] * zs[k]).abs() < 1e-4);
    }
    let kept = gb.iter().filter(|&&g| g != 0.0).count() as f64 / (n * d) as f64;
    assert!((kept - 0.5).abs() < 0.02, "keep rate {kept}");
    // Masks differ between examples: about half of the positions disagree.
    let rows: Vec<&[f32]> = gb.chunks(d).collect();
    for i in 1..n {
        let differ = rows[0].iter().zip(rows[i]).filter(|(a, b)| a != b).count() as f64 / d as f64;
        assert!(
            (differ - 0.5).abs() < 0.15,
            "rows 0 and {i} differ at {differ}"
        );
    }
}

#[test]
fn should_share_one_dropout_mask_in_same_mode() {
    setup();
    let device = Default::default();
    let (n, d) = (8, 400);
    let m = init(Noisy::<AD> {
        fc: LinearConfig::new(3, d).init(&device),
        dropout: DropoutConfig::new(0.25).init(),
    });
    let f = |x: Tensor<AD, 1>| {
        let y = m.dropout.forward(m.fc.forward(x));
        m.fc.bias
            .as_ref()
            .unwrap()
            .grad(&y.sum().backward())
            .unwrap()
    };
    let gb: Tensor<V, 2> = vmap(f)
        .randomness(Randomness::Same)
        .call(normal([n, 3]))
        .unwrap();
    let gb = gb.into_data().to_vec::<f32>().unwrap();
    let rows: Vec<&[f32]> = gb.chunks(d).collect();
    for row in &rows[1..] {
        assert_eq!(*row, rows[0]);
    }
    let kept = rows[0].iter().filter(|&&g| g != 0.0).count() as f64 / d as f64;
    assert!((kept - 0.75).abs() < 0.08, "keep rate {kept}");
    let scale = 1.0 / 0.75;
    assert!(
        rows[0]
            .iter()
            .all(|&g| g == 0.0 || (g - scale).abs() < 1e-5)
    );
}

/// Raw random draws: moments per example, and independence across examples (correlation).
#[test]
fn should_give_sane_statistics_for_random_draws() {
    setup();
    let (n, d) = (16, 2000);
    let xs = Tensor::<V, 2>::zeros([n, d], &Default::default());
    let draws: Tensor<V, 2> = vmap(|x: Tensor<V, 1>| x.random_like(Distribution::Normal(1.0, 2.0)))
        .randomness(Randomness::Different)
        .call(xs)
        .unwrap();
    let v = draws.into_data().to_vec::<f32>().unwrap();
    let rows: Vec<&[f32]> = v.chunks(d).collect();
    for row in &rows {
        let mean = row.iter().sum::<f32>() / d as f32;
        let var = row.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / d as f32;
        assert!((mean - 1.0).abs() < 0.2, "mean {mean}");
        assert!((var - 4.0).abs() < 0.6, "variance {var}");
    }
    for i in 1..n {
        let cov = rows[0]
            .iter()
            .zip(rows[i])
            .map(|(a, b)| (a - 1.0) * (b - 1.0))
            .sum::<f32>()
            / d as f32
            / 4.0;
        assert!(cov.abs() < 0.1, "correlation of rows 0 and {i}: {cov}");
    }
}

/// Nested vmaps with mixed modes: `Different` outside, `Same` inside gives one draw per outer
/// example, shared by the inner examples.
#[test]
fn should_combine_randomness_modes_across_nested_levels() {
    setup();
    let xs = Tensor::<V, 3>::zeros([3, 4, 50], &Default::default());
    let inner = |x: Tensor<V, 1>| x.random_like(Distribution::Default);
    let outer = |x: Tensor<V, 2>| -> Tensor<V, 2> {
        vmap(inner).randomness(Randomness::Same).call(x).unwrap()
    };
    let ys: Tensor<V, 3> = vmap(outer)
        .randomness(Randomness::Different)
        .call(xs)
        .unwrap();
    let v = ys.into_data().to_vec::<f32>().unwrap();
    let block: Vec<&[f32]> = v.chunks(4 * 50).collect();
    for b in &block {
        let rows: Vec<&[f32]> = b.chunks(50).collect();
        assert!(rows.iter().all(|r| *r == rows[0]));
    }
    assert_ne!(block[0][..50], block[1][..50]);
}

/// BatchNorm in training mode computes per-example statistics, exactly like the loop; its
/// running statistics cannot be updated from inside vmap (they would be per example), and the
/// batched value that escapes into the module is reported as soon as it is used.
#[test]
fn should_use_per_example_batch_norm_statistics_and_report_escaped_running_stats() {
    setup();
    let device = Default::default();
    let bn_v = BatchNormConfig::new(3).init::<AD>(&device);
    let bn_loop = BatchNormConfig::new(3).init::<AD>(&device);
    let xs = normal([E, 4, 3, 5]);
    let got: Tensor<AD, 4> = vmap(|x: Tensor<AD, 3>| bn_v.forward(x))
        .call(xs.clone())
        .unwrap();
    let want: Vec<Tensor<AD, 3>> = (0..E).map(|i| bn_loop.forward(example(&xs, i))).collect();
    assert_close(
        got.into_data(),
        Tensor::stack::<4>(want, 0).into_data(),
        "batch_norm",
    );

    // Eval mode on the escaped running statistics: the next vmap reports it.
    let eval = bn_v.valid();
    let err = vmap(|x: Tensor<V, 3>| eval.forward(x))
        .call_as::<V, V, _, _, _, Tensor<V, 4>>(xs.clone().inner())
        .unwrap_err();
    assert!(matches!(err, VmapError::EscapedBatch { .. }), "{err}");
    assert!(err.to_string().contains("BatchNorm"));

    // Reading the running mean back names the cause.
    let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        bn_v.running_mean.value().into_data()
    }));
    let msg = read.unwrap_err();
    let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("escaped its vmap"), "{msg}");
}

/// `argwhere` has no batching rule (its size depends on the values): the loop fallback runs it
/// per example when strict mode is off, and strict mode turns that into a panic.
#[test]
fn should_run_argwhere_through_the_loop_fallback_only_outside_strict_mode() {
    setup();
    let device = Default::default();
    let m = Tensor::<V, 2, Bool>::from_bool(
        TensorData::from([[true, false, true], [false, true, true]]),
        &device,
    );
    let f = |t: Tensor<V, 1, Bool>| t.argwhere();
    let got: Tensor<V, 3, Int> =
        burn_vmap::strict::with_strict(false, || vmap(f).call(m.clone()).unwrap());
    assert_eq!(
        got.into_data()
            .convert::<i64>()
            .to_vec::<i64>()
            .unwrap_or_else(|_| { panic!("argwhere returns int64 indices on this backend") }),
        vec![0, 2, 1, 2]
    );
    let strict = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        burn_vmap::strict::with_strict(true, || {
            let _: Tensor<V, 3, Int> = vmap(f).call(m.clone()).unwrap();
        })
    }));
    let msg = strict.unwrap_err();
    let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.contains("bool_argwhere") && msg.contains("strict"),
        "{msg}"
    );
}

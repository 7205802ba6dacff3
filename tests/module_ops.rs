//! Module ops beyond the oracle's random cases: per-example gradients of convolution layers
//! (grouped, transposed, deformable, 3-d) against the loop, and `gather_nd` / `scatter_nd`
//! with index tuples spanning several dims under `vmap` against the loop.

mod support;

use burn::module::Module;
use burn::nn::PaddingConfig2d;
use burn::nn::conv::{
    Conv2d, Conv2dConfig, Conv3d, Conv3dConfig, ConvTranspose1d, ConvTranspose1dConfig,
    DeformConv2d, DeformConv2dConfig,
};
use burn::tensor::{Distribution, IndexingUpdateOp, Int, Tensor};
use burn_vmap::vmap;
use support::{assert_close, check_grads, dev, example, values};

const E: usize = 3;

fn normal<const D: usize>(shape: [usize; D]) -> Tensor<D> {
    burn_vmap::strict::set_strict(true);
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), &dev())
}

fn smooth<const D: usize>(y: Tensor<D>) -> Tensor<1> {
    (y.clone() * y.sin()).sum()
}

#[test]
fn should_give_per_example_gradients_of_grouped_and_transposed_convolutions() {
    let c2: Conv2d = Conv2dConfig::new([4, 6], [3, 2])
        .with_groups(2)
        .with_stride([2, 1])
        .with_padding(PaddingConfig2d::Explicit(1, 0, 1, 0))
        .init(&dev());
    let xs = normal([E, 2, 4, 7, 5]);
    check_grads(
        &c2,
        xs.clone(),
        |i| example::<5, 4, _>(&xs, i),
        |m: &Conv2d, x| smooth(m.forward(x)),
        "conv2d",
    );

    let ct: ConvTranspose1d = ConvTranspose1dConfig::new([4, 6], 3)
        .with_groups(2)
        .with_stride(2)
        .init(&dev());
    let xs = normal([E, 2, 4, 5]);
    check_grads(
        &ct,
        xs.clone(),
        |i| example::<4, 3, _>(&xs, i),
        |m: &ConvTranspose1d, x| smooth(m.forward(x)),
        "conv_transpose1d",
    );

    let c3: Conv3d = Conv3dConfig::new([2, 3], [2, 2, 2]).init(&dev());
    let xs = normal([E, 1, 2, 3, 3, 3]);
    check_grads(
        &c3,
        xs.clone(),
        |i| example::<6, 5, _>(&xs, i),
        |m: &Conv3d, x| smooth(m.forward(x)),
        "conv3d",
    );
}

#[derive(Module, Debug)]
struct Deform {
    conv: DeformConv2d,
}

/// A deformable convolution with per-example offsets and masks (weight and offset groups 2).
#[test]
fn should_give_per_example_gradients_of_a_deformable_convolution() {
    let m = Deform {
        conv: DeformConv2dConfig::new([4, 4], [3, 3])
            .with_weight_groups(2)
            .with_offset_groups(2)
            .init(&dev()),
    };
    let xs = normal([E, 2, 4, 6, 6]);
    let offsets = normal([E, 2, 2 * 2 * 9, 4, 4]).mul_scalar(0.7);
    let masks = normal([E, 2, 2 * 9, 4, 4]).tanh().abs();
    let example_i = |i| {
        (
            example::<5, 4, _>(&xs, i),
            example::<5, 4, _>(&offsets, i),
            example::<5, 4, _>(&masks, i),
        )
    };
    let loss = |m: &Deform, (x, o, k): (Tensor<4>, Tensor<4>, Tensor<4>)| {
        smooth(m.conv.forward(x, o, Some(k)))
    };
    check_grads(
        &m,
        (xs.clone(), offsets.clone(), masks.clone()),
        example_i,
        loss,
        "deform_conv2d",
    );
    // Forward through vmap, the layer moved into the recording.
    let got: Tensor<5> = vmap(|(x, o, k): (Tensor<4>, Tensor<4>, Tensor<4>)| {
        m.valid().to_device(&x.device()).conv.forward(x, o, Some(k))
    })
    .call((xs.clone(), offsets.clone(), masks.clone()))
    .unwrap();
    let want: Vec<Tensor<4>> = (0..E)
        .map(|i| {
            let (x, o, k) = example_i(i);
            m.conv.forward(x, o, Some(k))
        })
        .collect();
    assert_close(
        &values(got),
        &values(Tensor::stack::<5>(want, 0)),
        "deform_conv2d forward",
    );
}

/// `gather_nd` / `scatter_nd` with a `[2, 2, K]` grid of index tuples (several dims of tuples),
/// data and values batched or shared, against the loop.
#[test]
fn should_batch_gather_nd_and_scatter_nd_over_a_grid_of_tuples() {
    let data = normal([E, 2, 3, 4]);
    let values_ = normal([E, 2, 2, 4]);
    let grids = Tensor::<4, Int>::from_ints(
        [
            [[[0, 2], [1, 0]], [[0, 0], [1, 2]]],
            [[[1, 1], [0, 1]], [[1, 0], [0, 2]]],
            [[[0, 1], [0, 1]], [[1, 1], [1, 2]]],
        ],
        &dev(),
    );
    let g = |(d, i): (Tensor<3>, Tensor<3, Int>)| -> Tensor<3> { d.gather_nd(i) };
    let got: Tensor<4> = vmap(g).call((data.clone(), grids.clone())).unwrap();
    let want: Vec<Tensor<3>> = (0..E)
        .map(|i| g((example(&data, i), example(&grids, i))))
        .collect();
    assert_close(
        &values(got),
        &values(Tensor::stack::<4>(want, 0)),
        "gather_nd",
    );

    // The scatter's reference is a loop on the host: example 2 updates the tuple (0, 1) twice,
    // and Burn 0.22.1's own cubecl `scatter_nd` loses one of two updates at a repeated tuple
    // (`compat::scatter_nd`), so a loop of it on the device is no reference there.
    let tuples = values(grids.clone());
    let updates = values(values_.clone());
    let scattered = |data: &[f32], per_example: bool| -> Vec<f32> {
        let mut out = Vec::new();
        for e in 0..E {
            let mut d = match per_example {
                true => data[e * 24..(e + 1) * 24].to_vec(),
                false => data.to_vec(),
            };
            for u in 0..4 {
                let (r, c) = (tuples[(e * 4 + u) * 2], tuples[(e * 4 + u) * 2 + 1]);
                for l in 0..4 {
                    d[(r as usize * 3 + c as usize) * 4 + l] += updates[(e * 4 + u) * 4 + l];
                }
            }
            out.extend(d);
        }
        out
    };
    let s = |(d, i, v): (Tensor<3>, Tensor<3, Int>, Tensor<3>)| -> Tensor<3> {
        d.scatter_nd(i, v, IndexingUpdateOp::Add)
    };
    // Shared data, per-example tuples and values; and everything per example.
    let shared: Tensor<3> = example(&data, 0);
    let got: Tensor<4> = vmap(s)
        .in_axes([None, Some(0), Some(0)])
        .call((shared.clone(), grids.clone(), values_.clone()))
        .unwrap();
    assert_close(
        &values(got),
        &scattered(&values(shared), false),
        "scatter_nd, shared data",
    );
    let got: Tensor<4> = vmap(s)
        .call((data.clone(), grids.clone(), values_.clone()))
        .unwrap();
    assert_close(&values(got), &scattered(&values(data), true), "scatter_nd");
}

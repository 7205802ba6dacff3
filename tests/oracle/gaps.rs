//! Known gaps of Burn 0.22.1's Flex backend and of its fusion (not of burn-vmap) that the
//! oracle steps around: each test asserts the gap, so it fails the day Burn is fixed and the
//! workaround can go.

use burn::tensor::module::conv1d;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Bool, DType, Device, Int, Tensor, TensorData};
use burn_backend::ops::ModuleOps;
use burn_dispatch::Dispatch;

/// A bool `gather` or `select` returns a tensor whose dtype reads `U8` instead of `Bool`, so
/// anything that dispatches on the dtype (a `Leaf`, `Tensor::from_dispatch`, a transform's
/// outputs) takes it for an int tensor. The oracle reads them as ints
/// (`numeric::bool_gather_as_int`) and skips `bool_ops`' own gather and select cases.
#[test]
fn known_gap_flex_bool_gather_dtype() {
    let device = Device::default();
    let m = Tensor::<1, Bool>::from_data(TensorData::from([true, false]), &device);
    let i = Tensor::<1, Int>::from_ints([1, 0, 1], &device);
    assert!(m.clone().dtype().is_bool());
    assert_eq!(m.clone().gather(0, i.clone()).dtype(), DType::U8);
    assert_eq!(m.select(0, i).dtype(), DType::U8);
}

/// A grouped, strided `conv1d_weight_backward` whose windows leave input positions unread is
/// wrong (it differs from the same gradient computed one group at a time; conv2d's is right).
/// Burn's autodiff calls it for every grouped strided `Conv1d`. The oracle's conv1d backward
/// case uses stride 1 when grouped (`backend_ops::flex_safe`).
#[test]
fn known_gap_flex_grouped_strided_conv1d_weight_backward() {
    let device = Device::default();
    let (groups, ci, co, k, len, stride) = (2, 2, 1, 2, 5, 2);
    let values = |n: usize, seed: f32| -> Vec<f32> {
        (0..n).map(|i| (i as f32 * 0.7 + seed).sin()).collect()
    };
    let x = Tensor::<3>::from_data(
        TensorData::new(values(ci * groups * len, 0.3), [1, ci * groups, len]),
        &device,
    );
    let w = Tensor::<3>::from_data(
        TensorData::new(values(co * groups * ci * k, 1.1), [co * groups, ci, k]),
        &device,
    );
    let grouped = ConvOptions::new([stride], [0], [1], groups);
    let g = conv1d(x.clone(), w.clone(), None, grouped.clone()).sin();
    let backward = |x: Tensor<3>, w: Tensor<3>, g: Tensor<3>, o: ConvOptions<1>| {
        Tensor::<3>::from_dispatch(Dispatch::conv1d_weight_backward(
            x.into_dispatch(),
            w.into_dispatch(),
            g.into_dispatch(),
            o,
        ))
    };
    let whole = backward(x.clone(), w.clone(), g.clone(), grouped);
    let single = ConvOptions::new([stride], [0], [1], 1);
    let per_group: Vec<Tensor<3>> = (0..groups)
        .map(|i| {
            backward(
                x.clone().narrow(1, i * ci, ci),
                w.clone().narrow(0, i * co, co),
                g.clone().narrow(1, i * co, co),
                single.clone(),
            )
        })
        .collect();
    let diff: f32 = (whole - Tensor::cat(per_group, 0))
        .abs()
        .max()
        .into_scalar();
    assert!(
        diff > 1e-3,
        "Flex's grouped strided conv1d_weight_backward is right now: drop backend_ops::flex_safe"
    );
}

/// Under Burn's fusion (wgpu), Burn's own autodiff gives this loss (`grads::loss_scatter_mask`,
/// no vmap anywhere) another gradient than on Flex and on wgpu without fusion: -0.5133 against
/// -0.4647 for `dl/dw[0]`. Each of its five terms alone is right. The oracle skips the case
/// under fusion (`run::FUSION_SKIPS`): its loop reference is wrong there.
#[test]
fn known_gap_fusion_scatter_mask_gradient() {
    if !crate::run::FUSED {
        return;
    }
    let grad = |device: Device| {
        let device = device.autodiff();
        let x = Tensor::<2>::from_data(TensorData::new(vec![0.3f32, -0.7], [2, 1]), &device);
        let w = Tensor::<2>::from_data(TensorData::new(vec![0.5f32, -0.25], [1, 2]), &device)
            .require_grad();
        let i = Tensor::<1, Int>::from_ints([1, 0], &device);
        let g = crate::grads::loss_scatter_mask(x, w.clone(), i).backward();
        w.grad(&g)
            .unwrap()
            .into_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .unwrap()
    };
    let (fused, flex) = (grad(Device::default()), grad(Device::flex()));
    assert!((flex[0] + 0.4647).abs() < 1e-3, "Flex: {flex:?}");
    assert!(
        (fused[0] + 0.5133).abs() < 1e-3,
        "fused wgpu: {fused:?} (fixed? remove the skip)"
    );
}

/// Under Burn's fusion (wgpu), tensors made after an empty one read back as zeros: plain Burn,
/// no vmap, `zeros([2, 0, 3])` and then `full([2, 1, 3], 7)` and `+ 1` read back 0 for every 7
/// and 8 (right on Flex). burn-vmap's engine runs unfused
/// (`runtime::cube`), out of its reach; run on fusion (tried), a mean over an empty dim under
/// `vmap` read 0 for NaN, its `full` made after the empty input.
#[test]
fn known_gap_fusion_tensors_made_after_an_empty_one() {
    let made = |device: Device| {
        let _empty = Tensor::<3>::zeros([2, 0, 3], &device);
        let full = Tensor::<3>::full([2, 1, 3], 7.0, &device);
        let more = full.clone() + 1.0;
        let read = |t: Tensor<3>| t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap();
        (read(full), read(more))
    };
    let flex = made(Device::flex());
    assert_eq!(flex, (vec![7.0; 6], vec![8.0; 6]), "Flex");
    if !crate::run::FUSED {
        return;
    }
    assert_eq!(
        made(Device::default()),
        (vec![0.0; 6], vec![0.0; 6]),
        "fused wgpu (fixed? the engine could run on fusion: see runtime::cube)"
    );
}

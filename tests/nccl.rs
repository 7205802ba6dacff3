//! The NCCL engine (`distributed::nccl::Nccl`, Burn 0.22's all-reduce on CUDA) on the CUDA
//! devices of this machine: sums and broadcasts with the same bits on every rank, and a
//! `ParamGrads` summed across the devices. Compiled by CI's CUDA check; run where `nvidia-smi`
//! lists a device (a group of one on a one-GPU machine), skipped elsewhere.
#![cfg(feature = "cuda")]

use std::time::Duration;

use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Device, Tensor};
use burn_vmap::distributed::nccl::Nccl;
use burn_vmap::distributed::{Collective, all_reduce_grads};
use burn_vmap::per_example_grads;

/// The CUDA devices `nvidia-smi` lists (none without a driver).
fn cuda_devices() -> Vec<Device> {
    let listed = std::process::Command::new("nvidia-smi")
        .arg("-L")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().count())
        .unwrap_or(0);
    (0..listed.min(4)).map(Device::cuda).collect()
}

/// Runs `f` on every rank of a group over the CUDA devices, each on its own thread, and returns
/// their results in rank order; `None` without a CUDA device.
fn on_every_rank<T: Send + 'static>(
    f: impl Fn(Nccl) -> T + Send + Sync + Clone + 'static,
) -> Option<Vec<T>> {
    let devices = cuda_devices();
    if devices.is_empty() {
        println!("SKIP: no CUDA device");
        return None;
    }
    let handles: Vec<_> = Nccl::group(devices)
        .into_iter()
        .map(|engine| {
            let f = f.clone();
            std::thread::spawn(move || f(engine))
        })
        .collect();
    Some(handles.into_iter().map(|h| h.join().unwrap()).collect())
}

const TIMEOUT: Duration = Duration::from_secs(60);

#[test]
fn should_sum_and_broadcast_with_the_same_bits_on_every_rank() {
    let Some(results) = on_every_rank(|engine| {
        let size = engine.size();
        let rank = engine.rank() as f32;
        let mut sum: Vec<f32> = (0..1000).map(|i| rank + i as f32 * 0.001).collect();
        engine.all_reduce_sum(&mut sum, TIMEOUT).unwrap();
        let mut from_last = vec![rank; 7];
        engine.broadcast(&mut from_last, size - 1, TIMEOUT).unwrap();
        (size, sum, from_last)
    }) else {
        return;
    };
    let (size, first, _) = &results[0];
    let ranks: f32 = (0..*size).map(|r| r as f32).sum();
    for (i, v) in first.iter().enumerate() {
        let want = ranks + *size as f32 * i as f32 * 0.001;
        assert!(
            (v - want).abs() <= 1e-4 * (1.0 + want.abs()),
            "{i}: {v} vs {want}"
        );
    }
    for (_, sum, from_last) in &results {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(sum), bits(first), "the same bits on every rank");
        assert_eq!(from_last, &vec![(*size - 1) as f32; 7]);
    }
}

#[test]
fn should_sum_param_grads_across_the_devices() {
    let Some(results) = on_every_rank(|engine| {
        let device = engine.device().clone();
        let model: Linear = LinearConfig::new(3, 2).init(&device);
        let xs = Tensor::<2>::ones([4, 3], &device) * (engine.rank() as f32 + 1.0);
        let grads = per_example_grads(&model, xs, |m: &Linear, x: Tensor<1>| m.forward(x).sum())
            .unwrap()
            .sum_batch();
        let summed = all_reduce_grads(&engine, grads, TIMEOUT).unwrap();
        let bias: Tensor<1> = summed.get("bias").unwrap();
        (engine.size(), bias.into_data().try_to_vec::<f32>().unwrap())
    }) else {
        return;
    };
    for (size, bias) in results {
        // d(sum(W x + b))/db = 1 per output, example and device.
        assert_eq!(bias, vec![4.0 * size as f32; 2]);
    }
}

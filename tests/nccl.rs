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

/// Issue 46, item 4: a rank that never calls makes the others' collective time out within
/// about its timeout (the communicator's start-up, the enqueue and the read back all bounded),
/// and the engine then refuses work. Needs two devices or more.
#[test]
fn should_time_out_on_a_stalled_device() {
    const STALL: Duration = Duration::from_secs(2);
    if cuda_devices().len() < 2 {
        println!("SKIP: fewer than two CUDA devices");
        return;
    }
    let Some(results) = on_every_rank(|engine| {
        if engine.rank() == engine.size() - 1 {
            // Never joins: the others must not hang.
            return None;
        }
        let started = std::time::Instant::now();
        let mut values = vec![1.0f32; 1024];
        let err = engine.all_reduce_sum(&mut values, STALL).unwrap_err();
        let waited = started.elapsed();
        let refused = engine.all_reduce_sum(&mut values, STALL).unwrap_err();
        Some((err, waited, refused))
    }) else {
        return;
    };
    for (err, waited, refused) in results.into_iter().flatten() {
        assert!(
            matches!(err, burn_vmap::distributed::CollectiveError::Timeout { .. }),
            "{err}"
        );
        assert!(waited < STALL + Duration::from_secs(1), "{waited:?}");
        assert!(
            matches!(refused, burn_vmap::distributed::CollectiveError::Engine(_)),
            "{refused}"
        );
    }
}

/// Issue 46, item 4: `DistributedDp` over NCCL, one rank per device: without noise (σ = 0) and
/// with every example sampled (q = 1), three steps equal one process's on the union of the
/// shards (the TF32 tolerance of `tests/shared/tolerance.rs`), the same parameters on every
/// rank.
#[test]
fn should_step_distributed_dp_over_nccl_as_one_process() {
    use std::sync::Arc;

    use burn::data::dataloader::batcher::Batcher;
    use burn::data::dataset::InMemDataset;
    use burn::optim::SgdConfig;
    use burn::tensor::TensorData;
    use burn_vmap::distributed::DistributedDp;
    use burn_vmap::privacy::{DpConfig, DpMechanism, DpSgd, Neighbouring};

    #[derive(Clone)]
    struct Rows;
    impl Batcher<[f32; 4], (Tensor<2>, Tensor<2>)> for Rows {
        fn batch(&self, items: Vec<[f32; 4]>, device: &Device) -> (Tensor<2>, Tensor<2>) {
            let n = items.len();
            let x: Vec<f32> = items.iter().flat_map(|e| e[..3].to_vec()).collect();
            let y: Vec<f32> = items.iter().map(|e| e[3]).collect();
            (
                Tensor::from_data(TensorData::new(x, [n, 3]), device),
                Tensor::from_data(TensorData::new(y, [n, 1]), device),
            )
        }
    }
    fn example(i: usize) -> [f32; 4] {
        let t = i as f32;
        [
            (t * 0.37).sin() * 3.0,
            (t * 0.11).cos(),
            t / 10.0 - 1.0,
            (t * 0.23).sin(),
        ]
    }
    fn loss(m: &Linear, (x, y): (Tensor<2>, Tensor<2>)) -> Tensor<1> {
        (m.forward(x) - y).powi_scalar(2).sum()
    }
    const N: usize = 24;
    let config = DpConfig::new(0.5, 0.0, 1.0, Neighbouring::ReplaceOne { dataset_size: N });
    let step_config = config.clone();
    let Some(results) = on_every_rank(move |engine| {
        let device = engine.device().clone();
        let (rank, size) = (engine.rank(), engine.size());
        let shard: Vec<[f32; 4]> = (0..N).filter(|i| i % size == rank).map(example).collect();
        let mut dp = DistributedDp::new(
            DpMechanism::new(step_config.clone()).unwrap(),
            engine,
            TIMEOUT,
        )
        .unwrap();
        let mut loader = dp
            .loader(
                Arc::new(InMemDataset::new(shard)),
                Arc::new(Rows),
                device.clone(),
            )
            .unwrap();
        let mut model = dp
            .sync_module(LinearConfig::new(3, 1).init(&device))
            .unwrap();
        let mut optimizer = SgdConfig::new().init();
        let params = |m: &Linear| {
            let mut v = m.weight.val().into_data().try_to_vec::<f32>().unwrap();
            v.extend(
                m.bias
                    .as_ref()
                    .unwrap()
                    .val()
                    .into_data()
                    .try_to_vec::<f32>()
                    .unwrap(),
            );
            v
        };
        let start = params(&model);
        for _ in 0..3 {
            let batch = loader.next_batch().unwrap();
            (model, _) = dp.step(&mut optimizer, 0.2, model, loss, batch).unwrap();
        }
        (start, params(&model))
    }) else {
        return;
    };
    for (start, end) in &results {
        assert_eq!(
            start, &results[0].0,
            "every rank starts from rank 0's parameters"
        );
        assert_eq!(end, &results[0].1, "the same parameters on every rank");
    }
    // One process on the union, from the same initial parameters.
    let device = cuda_devices()[0].clone();
    let (start, end) = &results[0];
    let mut reference: Linear = LinearConfig::new(3, 1).init(&device);
    reference.weight = burn::module::Param::from_tensor(
        Tensor::<1>::from_floats(&start[..3], &device).reshape([3, 1]),
    );
    reference.bias = Some(burn::module::Param::from_tensor(Tensor::<1>::from_floats(
        &start[3..],
        &device,
    )));
    let mut one = DpSgd::new(SgdConfig::new().init(), DpMechanism::new(config).unwrap());
    let mut union = one
        .mechanism()
        .loader(
            Arc::new(InMemDataset::new((0..N).map(example).collect())),
            Arc::new(Rows),
            device.clone(),
        )
        .unwrap();
    for _ in 0..3 {
        let batch = union.next_batch().unwrap();
        (reference, _) = one.step(0.2, reference, loss, batch).unwrap();
    }
    let mut want = reference
        .weight
        .val()
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    want.extend(
        reference
            .bias
            .unwrap()
            .val()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap(),
    );
    assert_ne!(end, start, "the steps moved the parameters");
    for (g, w) in end.iter().zip(&want) {
        assert!(
            (g - w).abs() <= 5e-3 * (1.0 + w.abs()),
            "{end:?} vs {want:?}"
        );
    }
}

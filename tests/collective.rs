//! Data-parallel `micro_grad` on Burn's collective (`--features collective`): two local peers
//! and two processes on loopback reach the parameters one device reaches on the whole batch,
//! and a missing peer is a timeout error, not a hang.
#![cfg(feature = "collective")]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use burn::backend::Autodiff;
use burn::module::Param;
use burn::nn::Linear;
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::tensor::{Tensor, TensorData};
use burn_vmap::parallel::{ParallelError, Peer, Topology, start_orchestrator};
use burn_vmap::privacy::{DpSgd, DpSgdConfig, PrivacyRng};
use burn_vmap::testing::TestBackend;
use burn_vmap::{Vmap, clip_by_global_norm, micro_grad_module};

type I = Vmap<TestBackend>;
type AD = Autodiff<I>;

const BATCH: usize = 8;
const STEPS: usize = 3;
const NODE_ENV: &str = "BURN_VMAP_COLLECTIVE_NODE";

/// Burn keeps one collective group per backend type per process: the tests that form a group
/// on `I` take turns.
static GROUP: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn group() -> std::sync::MutexGuard<'static, ()> {
    GROUP.lock().unwrap_or_else(|e| e.into_inner())
}

fn model() -> Linear<AD> {
    let device = Default::default();
    let w: Vec<f32> = (0..8).map(|i| ((i * 7 % 5) as f32 - 2.0) * 0.3).collect();
    Linear {
        weight: Param::from_tensor(Tensor::from_data(TensorData::new(w, [4, 2]), &device)),
        bias: Some(Param::from_tensor(Tensor::from_floats(
            [0.1, -0.2],
            &device,
        ))),
    }
}

/// Example `i` of the whole batch.
fn data(rows: std::ops::Range<usize>) -> (Tensor<AD, 2>, Tensor<AD, 2>) {
    let device = Default::default();
    let x: Vec<f32> = rows
        .clone()
        .flat_map(|i| (0..4).map(move |j| ((i * 3 + j * 5) % 7) as f32 * 0.4 - 1.0))
        .collect();
    let y: Vec<f32> = rows
        .clone()
        .flat_map(|i| [(i % 3) as f32 - 1.0, (i % 2) as f32])
        .collect();
    let n = rows.len();
    (
        Tensor::from_data(TensorData::new(x, [n, 4]), &device),
        Tensor::from_data(TensorData::new(y, [n, 2]), &device),
    )
}

/// `STEPS` steps of clipped-sum SGD on `rows`; with a peer, the clipped sums of all peers are
/// summed first. Returns the final parameters.
fn train(rows: std::ops::Range<usize>, peer: Option<&Peer<I>>) -> Vec<f32> {
    let mut model = model();
    let mut optim = SgdConfig::new().init::<AD, Linear<AD>>();
    let step = micro_grad_module(|m: &Linear<AD>, (x, y): (Tensor<AD, 2>, Tensor<AD, 2>)| {
        (m.forward(x) - y).powi_scalar(2).sum()
    })
    .transform_fn(|g| clip_by_global_norm(g, 1.0));
    for _ in 0..STEPS {
        let (sum, _) = step.call(&model, data(rows.clone())).unwrap();
        let sum = match peer {
            Some(p) => p.all_reduce_sum(sum).unwrap(),
            None => sum,
        };
        let grads: GradientsParams = sum.map_flat(|t| t / BATCH as f64).into_gradients_params();
        model = optim.step(0.5, model, grads);
    }
    let mut out = model.weight.val().into_data().to_vec::<f32>().unwrap();
    out.extend(
        model
            .bias
            .unwrap()
            .val()
            .into_data()
            .to_vec::<f32>()
            .unwrap(),
    );
    out
}

fn assert_close(a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
    }
}

/// The peers' halves of the batch.
fn shard(index: usize) -> std::ops::Range<usize> {
    index * BATCH / 2..(index + 1) * BATCH / 2
}

#[test]
fn should_match_one_device_with_two_local_peers() {
    let _turn = group();
    let single = train(0..BATCH, None);
    let topology = Topology::Local { peers: 2 };
    let peers: Vec<_> = (0..2)
        .map(|i| {
            let topology = topology.clone();
            std::thread::spawn(move || {
                let peer =
                    Peer::<I>::register(i, Default::default(), &topology, Duration::from_secs(60))
                        .unwrap();
                let params = train(shard(i), Some(&peer));
                peer.finish().unwrap();
                params
            })
        })
        .collect();
    for p in peers {
        assert_close(&p.join().unwrap(), &single);
    }
}

/// A free TCP port on loopback.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One process of the multi-node test (a no-op unless launched by it).
#[test]
fn multi_node_child() {
    let Ok(spec) = std::env::var(NODE_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split(':').collect();
    let (index, orchestrator, data_port): (usize, u16, u16) = (
        parts[0].parse().unwrap(),
        parts[1].parse().unwrap(),
        parts[2].parse().unwrap(),
    );
    let topology = Topology::MultiNode {
        nodes: 2,
        peers_per_node: 1,
        orchestrator: format!("ws://127.0.0.1:{orchestrator}"),
        node_address: format!("ws://127.0.0.1:{data_port}"),
        data_port,
    };
    let peer =
        Peer::<I>::register(0, Default::default(), &topology, Duration::from_secs(60)).unwrap();
    let params = train(shard(index), Some(&peer));
    peer.finish().unwrap();
    println!(
        "PARAMS {}",
        params
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
}

#[test]
fn should_match_one_device_with_two_processes_on_loopback() {
    if std::env::var(NODE_ENV).is_ok() {
        return;
    }
    let single = train(0..BATCH, None);
    let orchestrator = free_port();
    start_orchestrator(orchestrator).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let children: Vec<_> = (0..2)
        .map(|i| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "multi_node_child",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(NODE_ENV, format!("{i}:{orchestrator}:{}", free_port()))
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    for mut child in children {
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("a node did not finish within 120 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = BufReader::new(child.stdout.take().unwrap());
        let line = out
            .lines()
            .map_while(Result::ok)
            .find(|l| l.starts_with("PARAMS "))
            .expect("the node printed its parameters");
        let params: Vec<f32> = line["PARAMS ".len()..]
            .split(',')
            .map(|v| v.parse().unwrap())
            .collect();
        assert_close(&params, &single);
    }
}

#[test]
fn should_time_out_when_a_peer_never_joins() {
    // Its own backend type: Burn keeps one collective group per backend type per process, and
    // this one is left waiting.
    let topology = Topology::Local { peers: 2 };
    let start = Instant::now();
    let err =
        Peer::<TestBackend>::register(0, Default::default(), &topology, Duration::from_millis(500))
            .unwrap_err();
    assert!(
        matches!(err, ParallelError::Timeout { op: "register", .. }),
        "{err}"
    );
    assert!(start.elapsed() < Duration::from_secs(10));
}

#[test]
fn should_refuse_bad_addresses_and_peer_indices() {
    let bad = Topology::MultiNode {
        nodes: 2,
        peers_per_node: 1,
        orchestrator: "localhost:3000".into(),
        node_address: "ws://127.0.0.1:3001".into(),
        data_port: 3001,
    };
    let err = Peer::<TestBackend>::register(0, Default::default(), &bad, Duration::from_secs(1))
        .unwrap_err();
    assert!(
        matches!(
            err,
            ParallelError::Address {
                argument: "orchestrator",
                ..
            }
        ),
        "{err}"
    );
    let err = Peer::<TestBackend>::register(
        2,
        Default::default(),
        &Topology::Local { peers: 2 },
        Duration::from_secs(1),
    )
    .unwrap_err();
    assert!(
        matches!(err, ParallelError::PeerOutOfRange { peer: 2, peers: 2 }),
        "{err}"
    );
}

#[test]
fn should_sum_noise_shares_to_the_noise_of_one_device() {
    // Two peers, empty shards: each adds N(0, σ²C²/2); the all-reduced sum is N(0, σ²C²), and
    // both replicas take the same step.
    let _turn = group();
    let (sigma, clip, q, n) = (1.5, 2.0, 0.1, 100);
    let big = || {
        let device = Default::default();
        let w: Vec<f32> = vec![0.0; 40 * 50];
        Linear::<AD> {
            weight: Param::from_tensor(Tensor::from_data(TensorData::new(w, [40, 50]), &device)),
            bias: None,
        }
    };
    let topology = Topology::Local { peers: 2 };
    let peers: Vec<_> = (0..2)
        .map(|i| {
            let topology = topology.clone();
            std::thread::spawn(move || {
                let peer =
                    Peer::<I>::register(i, Default::default(), &topology, Duration::from_secs(60))
                        .unwrap();
                let mut dp = DpSgd::with_rng(
                    SgdConfig::new().init::<AD, Linear<AD>>(),
                    DpSgdConfig::new(clip, sigma, q, n),
                    PrivacyRng::seeded(100 + i as u64),
                )
                .unwrap();
                let loss = |m: &Linear<AD>, x: Tensor<AD, 2>| m.forward(x).sum();
                let model = dp
                    .step_data_parallel(1.0, big(), loss, None::<Tensor<AD, 2>>, &peer)
                    .unwrap();
                peer.finish().unwrap();
                assert_eq!(dp.steps(), 1);
                model.weight.val().into_data().to_vec::<f32>().unwrap()
            })
        })
        .collect();
    let results: Vec<Vec<f32>> = peers.into_iter().map(|p| p.join().unwrap()).collect();
    assert_eq!(results[0], results[1], "replicas take the same step");
    // SGD with lr 1 from zeros: the weights are minus the noisy gradient, i.e. -noise / (q·N).
    let noise: Vec<f64> = results[0]
        .iter()
        .map(|w| -(*w as f64) * q * n as f64)
        .collect();
    let m = noise.len() as f64;
    let mean = noise.iter().sum::<f64>() / m;
    let std = (noise.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (m - 1.0)).sqrt();
    assert!(
        (std - sigma * clip).abs() < 0.05 * sigma * clip,
        "std {std}"
    );
    assert!(mean.abs() < 4.0 * sigma * clip / m.sqrt(), "mean {mean}");
}

#[test]
fn should_time_out_when_a_peer_dies_after_joining() {
    // Its own backend type (a group of its own): peer 1 joins, then its thread ends without
    // taking part in the all-reduce.
    type Other = Vmap<Vmap<TestBackend>>;
    let topology = Topology::Local { peers: 2 };
    let t = topology.clone();
    let dead = std::thread::spawn(move || {
        // Joined; the thread then returns and the peer goes with it.
        let _joined =
            Peer::<Other>::register(1, Default::default(), &t, Duration::from_secs(30)).unwrap();
    });
    let peer =
        Peer::<Other>::register(0, Default::default(), &topology, Duration::from_secs(30)).unwrap();
    dead.join().unwrap();
    let start = Instant::now();
    let err = peer
        .with_timeout(Duration::from_millis(500))
        .all_reduce_sum_tensor(Tensor::<Other, 1>::ones([3], &Default::default()))
        .unwrap_err();
    assert!(
        matches!(
            err,
            ParallelError::Timeout {
                op: "all_reduce",
                ..
            }
        ),
        "{err}"
    );
    assert!(start.elapsed() < Duration::from_secs(10));
}

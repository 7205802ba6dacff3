//! Data-parallel DP-SGD on Burn's collective: the digits of `dp_sgd`, split over several peers
//! (threads of this process, or processes meeting at Burn's global orchestrator), each
//! Poisson-sampling its own shard at the global rate and adding its share of the noise before one
//! all-reduce per step. The same training code runs in both modes.
//!
//! ```text
//! # two peers in this process:
//! cargo run --release --features collective --example dp_sgd_distributed -- --local 2
//! # two processes on loopback (this command starts the orchestrator and both nodes):
//! cargo run --release --features collective --example dp_sgd_distributed -- --processes 2
//! # one node of a multi-machine run (start the orchestrator with `--orchestrator-only PORT`):
//! ... -- --node RANK --nodes N --orchestrator ws://HOST:PORT --address ws://THIS_HOST:DATA_PORT
//! ```
//!
//! Options: `--epochs N`, `--expected-batch B`, `--sigma S`, `--clip C`, `--lr LR`.

#[path = "common/mod.rs"]
pub mod common;

use std::error::Error;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use burn::backend::Autodiff;
use burn::optim::SgdConfig;
use burn::tensor::backend::Backend;
use burn_vmap::Vmap;
use burn_vmap::parallel::{Peer, Topology, start_orchestrator};
use burn_vmap::privacy::{DpSgd, DpSgdConfig, PoissonLoader};
use burn_vmap::testing::TestBackend;

use common::{Dataset, Mlp, SplitMix64};

type I = Vmap<TestBackend>;
type AD = Autodiff<I>;

/// The rows of one peer's shard, as a `burn::data` dataset of indices into it.
struct Shard(usize);

impl burn::data::dataset::Dataset<usize> for Shard {
    fn get(&self, index: usize) -> Option<usize> {
        (index < self.0).then_some(index)
    }
    fn len(&self) -> usize {
        self.0
    }
}

/// The batcher: the shard's rows.
struct Rows(Arc<Dataset>);

impl<B: Backend> burn::data::dataloader::batcher::Batcher<B, usize, common::Batch<B>> for Rows {
    fn batch(&self, items: Vec<usize>, device: &B::Device) -> common::Batch<B> {
        self.0.batch(&items, device)
    }
}

#[derive(Clone, Copy)]
struct Settings {
    epochs: usize,
    expected_batch: usize,
    sigma: f64,
    clip: f64,
    lr: f64,
}

/// Trains peer `rank` of `topology` (`index` on this node) on its shard of the digits; peer 0
/// of node 0 reports.
fn train_peer(
    rank: usize,
    index: usize,
    peers: usize,
    topology: &Topology,
    s: &Settings,
    report: bool,
) -> Result<(), Box<dyn Error>> {
    let digits = common::load_digits()?;
    let (train, test) = digits.split(360, &mut SplitMix64(7));
    let n = train.len();
    let mine: Vec<usize> = (0..n).filter(|i| i % peers == rank).collect();
    let shard = Arc::new(train.subset(&mine));
    let q = s.expected_batch as f64 / n as f64;
    let steps = s.epochs * (1.0 / q).ceil() as usize;

    let device = Default::default();
    I::seed(&device, 7); // the same initial weights on every peer
    let mut model = Mlp::<AD>::new(&[train.dim, 64, 10], &device);
    let peer = Peer::<I>::register(index, device, topology, Duration::from_secs(120))?;
    // Each peer samples its shard at the GLOBAL rate q: together, a Poisson sample of all N.
    let mut loader = PoissonLoader::<AD, _, _>::new(
        Arc::new(Shard(shard.len())),
        Arc::new(Rows(shard.clone())),
        q,
        device,
    )?;
    let mut dp = DpSgd::new(
        SgdConfig::new().init(),
        DpSgdConfig::new(s.clip, s.sigma, q, n), // the global N
    )?;
    let loss = |m: &Mlp<AD>, (x, y): common::Batch<AD>| m.loss(x, y);
    for _ in 0..steps {
        let batch = loader.next_batch().batch;
        model = dp.step_data_parallel(s.lr, model, loss, batch, &peer)?;
    }
    peer.finish()?;
    if report {
        let (xt, yt) = test.all::<AD>(&device);
        println!(
            "{} peers, {steps} steps: test accuracy {:.1}%; ε = {:.3} (PLD) at δ = {:.0e}",
            topology.num_peers(),
            100.0 * model.accuracy(xt, yt),
            dp.epsilon_pld()?,
            dp.config().delta
        );
        println!("{}", dp.statement()?);
    }
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("dp_sgd_distributed: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name| common::flag::<String>(&args, name);
    let s = Settings {
        epochs: common::flag(&args, "--epochs")?.unwrap_or(10),
        expected_batch: common::flag(&args, "--expected-batch")?.unwrap_or(64),
        sigma: common::flag(&args, "--sigma")?.unwrap_or(1.0),
        clip: common::flag(&args, "--clip")?.unwrap_or(1.0),
        lr: common::flag(&args, "--lr")?.unwrap_or(0.1),
    };
    if let Some(port) = common::flag::<u16>(&args, "--orchestrator-only")? {
        start_orchestrator(port)?;
        println!("orchestrator on port {port}; Ctrl-C to stop");
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
    if let Some(peers) = common::flag::<usize>(&args, "--local")? {
        let topology = Topology::Local { peers };
        let handles: Vec<_> = (0..peers)
            .map(|rank| {
                let topology = topology.clone();
                std::thread::spawn(move || {
                    train_peer(rank, rank, peers, &topology, &s, rank == 0)
                        .map_err(|e| e.to_string())
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| "a peer panicked")??;
        }
        return Ok(());
    }
    if let Some(processes) = common::flag::<usize>(&args, "--processes")? {
        let port = free_port()?;
        start_orchestrator(port)?;
        std::thread::sleep(Duration::from_millis(300));
        let exe = std::env::current_exe()?;
        let mut children = Vec::new();
        for rank in 0..processes {
            let data_port = free_port()?;
            let mut cmd = Command::new(&exe);
            cmd.args(args.iter().skip(1).filter(|a| *a != "--processes"))
                .args([
                    "--node",
                    &rank.to_string(),
                    "--nodes",
                    &processes.to_string(),
                ])
                .args(["--orchestrator", &format!("ws://127.0.0.1:{port}")])
                .args(["--address", &format!("ws://127.0.0.1:{data_port}")]);
            children.push(cmd.spawn()?);
        }
        for mut c in children {
            if !c.wait()?.success() {
                return Err("a node failed".into());
            }
        }
        return Ok(());
    }
    if let Some(rank) = common::flag::<usize>(&args, "--node")? {
        let nodes: u32 = common::flag(&args, "--nodes")?.ok_or("--node needs --nodes")?;
        let orchestrator = flag("--orchestrator")?.ok_or("--node needs --orchestrator")?;
        let address = flag("--address")?.ok_or("--node needs --address")?;
        let data_port: u16 = address
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or("--address must end in :PORT")?;
        let topology = Topology::MultiNode {
            nodes,
            peers_per_node: 1,
            orchestrator,
            node_address: address,
            data_port,
        };
        return train_peer(rank, 0, nodes as usize, &topology, &s, rank == 0);
    }
    Err("give --local N, --processes N, --node RANK ... or --orchestrator-only PORT".into())
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

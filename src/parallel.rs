//! Data-parallel training on Burn's collective (`burn-collective`, cargo feature `collective`).
//!
//! Every peer (a device thread in this process, or a process on another node) computes the
//! clipped per-example gradient sum of its own shard with
//! [`micro_grad_module`](crate::micro_grad_module), then [`Peer::all_reduce_sum`] sums the
//! peers' sums: every peer gets the same global sum and applies the same update, so the model
//! replicas stay identical. Which peers exist is a [`Topology`]: several devices of this process
//! (threads), or several processes meeting at Burn's global orchestrator
//! ([`start_orchestrator`]); the training code is the same for both.
//!
//! Burn 0.21's collective has no timeouts: a peer that never registers, or dies, leaves the
//! others blocked forever. [`Peer`] runs every collective call on a worker thread and waits at
//! most [`Peer::timeout`]; past it the call returns [`ParallelError::Timeout`] (the worker
//! thread stays blocked inside Burn, and this peer's collective session is unusable: end the
//! run).
//!
//! # Differential privacy across peers
//!
//! The DP-SGD noise is added once for the whole step: each of the `n` peers adds independent
//! Gaussian noise of variance `σ²C² / n` to its local clipped sum before the all-reduce
//! ([`Peer::noise_share`]), so the global sum carries noise of variance exactly `σ²C²`, the
//! single-device mechanism. Each peer samples its own shard by Poisson sampling at the rate
//! `q`; a union of independent Poisson samples of disjoint shards is a Poisson sample of the
//! whole dataset at rate `q`, so the accountant uses the global rate and the global expected
//! batch size `q·N`. The guarantee is the standard one, for what leaves the group (the model
//! and the summed gradients); the peers trust each other (one peer's share before the sum holds
//! only `1/n` of the noise), as in every data-parallel DP-SGD.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use burn::tensor::TensorPrimitive;
use burn_backend::backend::Backend;
use burn_collective::{
    AllReduceStrategy, CollectiveConfig, CollectiveError, PeerId, ReduceOperation, all_reduce,
    finish_collective, register,
};

use crate::BatchOps;
use crate::privacy::{DpSgd, PrivacyError};
use crate::transform::grad::ParamGrads;
use crate::tree::Tree;

/// Which peers take part in a data-parallel run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Topology {
    /// `peers` devices of this process, one thread each.
    Local {
        /// How many peers (threads) take part.
        peers: usize,
    },
    /// `nodes` processes (on one machine or several), each with `peers_per_node` devices,
    /// meeting at a global orchestrator ([`start_orchestrator`]).
    MultiNode {
        /// How many processes take part.
        nodes: u32,
        /// Devices (threads) per process.
        peers_per_node: usize,
        /// The orchestrator's address, `ws://host:port`.
        orchestrator: String,
        /// This process's address as the others reach it, `ws://host:port`, with `port` =
        /// `data_port`.
        node_address: String,
        /// The port this process serves tensor data on.
        data_port: u16,
    },
}

impl Topology {
    /// Peers in the whole group.
    pub fn num_peers(&self) -> usize {
        match self {
            Topology::Local { peers } => *peers,
            Topology::MultiNode {
                nodes,
                peers_per_node,
                ..
            } => *nodes as usize * peers_per_node,
        }
    }

    fn config(&self) -> Result<CollectiveConfig, ParallelError> {
        let base =
            CollectiveConfig::default().with_local_all_reduce_strategy(AllReduceStrategy::Tree(2));
        Ok(match self {
            Topology::Local { peers } => base.with_num_devices(*peers),
            Topology::MultiNode {
                nodes,
                peers_per_node,
                orchestrator,
                node_address,
                data_port,
            } => base
                .with_num_devices(*peers_per_node)
                .with_num_nodes(*nodes)
                .with_global_address(address("orchestrator", orchestrator)?)
                .with_node_address(address("node_address", node_address)?)
                .with_data_service_port(*data_port)
                .with_global_all_reduce_strategy(AllReduceStrategy::Centralized),
        })
    }
}

fn address(
    argument: &'static str,
    value: &str,
) -> Result<burn_communication::Address, ParallelError> {
    if !(value.starts_with("ws://") || value.starts_with("wss://")) {
        return Err(ParallelError::Address {
            argument,
            value: value.to_string(),
        });
    }
    value.parse().map_err(|_| ParallelError::Address {
        argument,
        value: value.to_string(),
    })
}

/// What a data-parallel call can fail with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ParallelError {
    /// A collective call did not complete in time: a peer never registered, died, or is stuck.
    #[error(
        "collective: {op} did not complete within {timeout:?}: a peer never joined, died or \
             is stuck; every peer must register and call the same collective ops in the same order"
    )]
    Timeout {
        /// The call (`register`, `all_reduce`, `finish`).
        op: &'static str,
        /// The limit that passed.
        timeout: Duration,
    },
    /// Burn's collective refused the call.
    #[error("collective: {op} failed: {error:?}")]
    Collective {
        /// The call.
        op: &'static str,
        /// Burn's error.
        error: CollectiveError,
    },
    /// An address that is not a websocket URL.
    #[error(
        "collective: {argument} must be a websocket address such as `ws://localhost:3000`, got `{value}`"
    )]
    Address {
        /// The argument.
        argument: &'static str,
        /// What was given.
        value: String,
    },
    /// A peer index outside the topology.
    #[error("collective: peer {peer} is out of range for a topology of {peers} peers on this node")]
    PeerOutOfRange {
        /// The index given.
        peer: usize,
        /// Peers on this node.
        peers: usize,
    },
}

/// One peer of a data-parallel group on the backend `B` (the backend of the gradients, e.g.
/// `Vmap<NdArray>`: Burn's collective runs on the inner backend of `Autodiff`).
///
/// ```
/// use std::time::Duration;
/// use burn::tensor::Tensor;
/// use burn_vmap::parallel::{Peer, Topology};
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::Vmap;
/// type I = Vmap<TestBackend>;
///
/// // Two peers (threads) of this process sum their tensors.
/// let topology = Topology::Local { peers: 2 };
/// let handles: Vec<_> = (0..2)
///     .map(|i| {
///         let topology = topology.clone();
///         std::thread::spawn(move || {
///             let peer = Peer::<I>::register(i, Default::default(), &topology, Duration::from_secs(30)).unwrap();
///             let t = Tensor::<I, 1>::from_floats([i as f32 + 1.0], &Default::default());
///             let sum = peer.all_reduce_sum_tensor(t).unwrap();
///             peer.finish().unwrap();
///             sum.into_data().to_vec::<f32>().unwrap()
///         })
///     })
///     .collect();
/// for h in handles {
///     assert_eq!(h.join().unwrap(), vec![3.0]);
/// }
/// ```
#[derive(Debug)]
pub struct Peer<B: Backend> {
    id: PeerId,
    num_peers: usize,
    timeout: Duration,
    _backend: std::marker::PhantomData<B>,
}

impl<B: Backend> Peer<B> {
    /// Joins the group as peer `index` of this node (`0..peers` of the topology on this node),
    /// waiting at most `timeout` for the others to join (and, later, for each collective call).
    ///
    /// # Errors
    /// [`ParallelError::Timeout`] when the group does not assemble in time,
    /// [`ParallelError::Collective`] when Burn refuses (a duplicate index, topologies that
    /// differ between peers), [`ParallelError::Address`], [`ParallelError::PeerOutOfRange`].
    pub fn register(
        index: usize,
        device: B::Device,
        topology: &Topology,
        timeout: Duration,
    ) -> Result<Self, ParallelError> {
        let local = match topology {
            Topology::Local { peers } => *peers,
            Topology::MultiNode { peers_per_node, .. } => *peers_per_node,
        };
        if index >= local {
            return Err(ParallelError::PeerOutOfRange {
                peer: index,
                peers: local,
            });
        }
        let config = topology.config()?;
        let id = PeerId::from(index);
        with_timeout("register", timeout, move || {
            register::<B>(id, device, config)
        })?;
        Ok(Self {
            id,
            num_peers: topology.num_peers(),
            timeout,
            _backend: std::marker::PhantomData,
        })
    }

    /// The limit on every collective call of this peer.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The same peer with another limit on its later collective calls (joining a group can
    /// take longer than a step).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Peers in the whole group (all nodes).
    pub fn num_peers(&self) -> usize {
        self.num_peers
    }

    /// The sum over all peers of `t`: every peer gets the same tensor.
    ///
    /// # Errors
    /// [`ParallelError::Timeout`] when a peer does not take part in time;
    /// [`ParallelError::Collective`] for tensors whose shapes differ between peers.
    pub fn all_reduce_sum_tensor<const D: usize>(
        &self,
        t: burn::tensor::Tensor<B, D>,
    ) -> Result<burn::tensor::Tensor<B, D>, ParallelError> {
        let summed = self.all_reduce(t.into_primitive().tensor())?;
        Ok(burn::tensor::Tensor::from_primitive(
            TensorPrimitive::Float(summed),
        ))
    }

    /// The sum over all peers of every gradient of `grads` (the same parameter paths on every
    /// peer, as for replicas of one model): every peer gets the same global sum.
    ///
    /// # Errors
    /// As [`all_reduce_sum_tensor`](Self::all_reduce_sum_tensor).
    pub fn all_reduce_sum(&self, grads: ParamGrads<B>) -> Result<ParamGrads<B>, ParallelError> {
        let mut failure = None;
        // In the parameters' order, the same on every replica.
        let summed = grads.map(|_, g| {
            if failure.is_some() {
                return g;
            }
            let t = g.tensor();
            match self.all_reduce(t.clone()) {
                Ok(s) => TensorPrimitive::Float(s),
                Err(e) => {
                    failure = Some(e);
                    TensorPrimitive::Float(t)
                }
            }
        });
        match failure {
            Some(e) => Err(e),
            None => Ok(summed),
        }
    }

    /// This peer's share of the DP-SGD noise: the standard deviation `sigma / sqrt(n)` for `n`
    /// peers, so that the shares of all peers sum to noise of standard deviation `sigma` (see
    /// the module documentation).
    pub fn noise_share(&self, sigma: f64) -> f64 {
        sigma / (self.num_peers as f64).sqrt()
    }

    /// Leaves the group.
    ///
    /// # Errors
    /// [`ParallelError::Timeout`], [`ParallelError::Collective`].
    pub fn finish(self) -> Result<(), ParallelError> {
        let id = self.id;
        with_timeout("finish", self.timeout, move || finish_collective::<B>(id))
    }

    fn all_reduce(
        &self,
        t: B::FloatTensorPrimitive,
    ) -> Result<B::FloatTensorPrimitive, ParallelError> {
        let id = self.id;
        with_timeout("all_reduce", self.timeout, move || {
            all_reduce::<B>(id, t, ReduceOperation::Sum)
        })
    }
}

/// Runs a blocking collective call on a worker thread and waits at most `timeout` for it.
fn with_timeout<T: Send + 'static>(
    op: &'static str,
    timeout: Duration,
    call: impl FnOnce() -> Result<T, CollectiveError> + Send + 'static,
) -> Result<T, ParallelError> {
    let (tx, rx) = mpsc::channel();
    thread::Builder::new()
        .name(format!("burn-vmap-collective-{op}"))
        .spawn(move || {
            let _ = tx.send(call());
        })
        .expect("spawn a thread for a collective call");
    match rx.recv_timeout(timeout) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(error)) => Err(ParallelError::Collective { op, error }),
        Err(_) => Err(ParallelError::Timeout { op, timeout }),
    }
}

/// Starts Burn's global orchestrator on `port` on a background thread (its own async runtime),
/// for [`Topology::MultiNode`]: every node's `orchestrator` address points at it. It runs until
/// the process exits.
///
/// # Errors
/// When the runtime cannot start.
pub fn start_orchestrator(port: u16) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    thread::Builder::new()
        .name("burn-vmap-orchestrator".into())
        .spawn(move || runtime.block_on(burn_collective::start_global_orchestrator(port)))?;
    Ok(())
}

impl<O> DpSgd<O> {
    /// One data-parallel DP-SGD step as `peer`: the clipped per-example gradient sum of this
    /// peer's `shard` (Poisson-sampled from its part of the data at the global rate `q`; `None`
    /// when empty), plus this peer's share of the noise (standard deviation `σC / √n` for `n`
    /// peers, [`Peer::noise_share`]), summed over all peers by one all-reduce, divided by the
    /// global expected batch size `q·N`, then the inner optimizer's step. Every peer applies
    /// the same update, so replicas stay equal; the step is accounted once, at the global rate
    /// (see the [module](self) for why the guarantee holds). The config's `dataset_size` is the
    /// global `N`.
    ///
    /// # Errors
    /// As [`DpSgd::step`], and [`PrivacyError::Parallel`] for a collective call that fails or
    /// times out.
    pub fn step_data_parallel<AB, M, A, F>(
        &mut self,
        lr: f64,
        model: M,
        loss_fn: F,
        shard: Option<A>,
        peer: &Peer<AB::InnerBackend>,
    ) -> Result<M, PrivacyError>
    where
        AB: burn::tensor::backend::AutodiffBackend + BatchOps,
        AB::InnerBackend: BatchOps,
        M: burn::module::AutodiffModule<AB>,
        O: burn::optim::Optimizer<M, AB>,
        A: Tree<AB>,
        F: Fn(&M, A) -> burn::tensor::Tensor<AB, 1>,
    {
        // This peer's clipped sum with its noise share, divided by q·N (the division commutes
        // with the sum over peers); the step is accounted once, here, on every peer.
        let share = self.with_noise_fraction(peer.noise_share(1.0), |dp| {
            dp.noisy_gradient(&model, loss_fn, shard)
        })?;
        let total = peer.all_reduce_sum(share)?;
        Ok(self
            .inner_mut()
            .step(lr, model, total.into_gradients_params()))
    }
}

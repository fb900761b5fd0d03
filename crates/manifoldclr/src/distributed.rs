//! Data parallelism on Burn's collective engine (`burn-collective`, Burn's `collective`
//! feature): [`Pretrainer::run_on`] trains on several devices ([`devices_like`] picks them), with
//! the exchanges below between peers that run as threads of one process, each with its own model
//! replica and its part of the global batch (`docs/distributed.md`).
//!
//! * [`Peer::all_reduce_grads`]: a replica's gradients summed or averaged over the peers before
//!   the optimiser steps, so that every replica takes the same step.
//! * [`Peer::all_gather_rows`]: the rows of every peer's batch (the contrastive loss's negatives),
//!   in rank order, with the gradient flowing to this peer's own rows only. When every peer
//!   computes the same loss on the gathered batch, each one's own-rows gradient is that loss's
//!   gradient for its rows, and the sum over peers of the parameter gradients is the loss's
//!   gradient on the global batch.
//! * [`Peer::all_reduce_sum`]: a sum over peers that autodiff differentiates (its backward sums
//!   the upstream gradients over the peers as well), for statistics every peer's loss depends on,
//!   such as synchronised batch-norm statistics.
//!
//! The collective engine keeps one group per backend type and process, and each of its
//! operations waits until every peer has called it: every peer must issue the same exchanges in
//! the same order, with tensors of the same shape. A peer registers when it joins and leaves
//! when dropped.
//!
//! ```
//! use burn::backend::{Autodiff, NdArray};
//! use burn::prelude::*;
//! use manifoldclr::distributed::Peer;
//!
//! type B = Autodiff<NdArray>;
//! let rows = std::thread::scope(|scope| {
//!     let peers: Vec<_> = (0..2)
//!         .map(|rank| {
//!             scope.spawn(move || {
//!                 let device = Default::default();
//!                 let peer = Peer::<B>::join(rank, 2, &device).unwrap();
//!                 let mine = Tensor::<B, 2>::full([1, 2], rank as f32, &device);
//!                 peer.all_gather_rows(mine).unwrap().into_data().to_vec::<f32>().unwrap()
//!             })
//!         })
//!         .collect();
//!     peers.into_iter().map(|p| p.join().unwrap()).collect::<Vec<_>>()
//! });
//! // Both peers hold the rows of both, in rank order.
//! assert_eq!(rows, [vec![0.0, 0.0, 1.0, 1.0], vec![0.0, 0.0, 1.0, 1.0]]);
//! ```

use std::cell::Cell;
use std::marker::PhantomData;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use burn::backend::autodiff::{
    Autodiff,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::collective::{self, CollectiveConfig, CollectiveError, PeerId, ReduceOperation};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::TensorPrimitive;
use burn::tensor::backend::{AutodiffBackend, DeviceId};
use burn::tensor::ops::FloatTensor;

use crate::error::{ClrError, Result};
use crate::manifold::read_floats;
use crate::method::Exchange;
use crate::norm::StatsSum;
use crate::pretrain::{
    PretrainHooks, Pretrainer, StepSync, TrainBackend, ViewSource, check_devices,
};

/// One of `peers` data-parallel peers of this process: a member of the collective group of the
/// inner backend of `B`, left when dropped.
#[derive(Debug)]
pub struct Peer<B: AutodiffBackend> {
    id: PeerId,
    device: B::Device,
    rank: usize,
    peers: usize,
    _backend: PhantomData<B>,
}

/// A collective operation's failure, named.
fn collective_error(op: &'static str) -> impl Fn(CollectiveError) -> ClrError {
    move |e| ClrError::Collective {
        op,
        reason: format!("{e:?}"),
    }
}

impl<B: AutodiffBackend> Peer<B> {
    /// Joins the group of `peers` peers as peer `rank` (0-based), computing on `device`. Blocks
    /// until all `peers` have joined.
    pub fn join(rank: usize, peers: usize, device: &B::Device) -> Result<Self> {
        if peers == 0 || rank >= peers {
            return Err(ClrError::invalid(
                "peer rank",
                format!("{rank} of {peers} peers"),
                "a rank in 0..peers, with at least one peer",
            ));
        }
        let id = PeerId::from(rank);
        let config = CollectiveConfig::default().with_num_devices(peers);
        collective::register::<B::InnerBackend>(id, device.clone(), config)
            .map_err(collective_error("join"))?;
        Ok(Self {
            id,
            device: device.clone(),
            rank,
            peers,
            _backend: PhantomData,
        })
    }

    /// This peer's rank, 0-based.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of peers.
    pub fn peers(&self) -> usize {
        self.peers
    }

    /// `x` reduced over the peers (no gradient: for values outside the autodiff graph).
    pub fn all_reduce<const D: usize>(
        &self,
        x: Tensor<B::InnerBackend, D>,
        op: ReduceOperation,
    ) -> Result<Tensor<B::InnerBackend, D>> {
        let y = collective::all_reduce::<B::InnerBackend>(self.id, x.into_primitive().tensor(), op)
            .map_err(collective_error("all-reduce"))?;
        Ok(Tensor::from_primitive(TensorPrimitive::Float(y)))
    }

    /// The gradients summed (`ReduceOperation::Sum`) or averaged over the peers, parameter by
    /// parameter. Every replica must hold the same parameters (replicas cloned from one model,
    /// or loaded from one record) and have gradients for the same ones.
    pub fn all_reduce_grads(
        &self,
        grads: GradientsParams,
        op: ReduceOperation,
    ) -> Result<GradientsParams> {
        grads
            .all_reduce::<B::InnerBackend>(self.id, op)
            .map_err(collective_error("gradient all-reduce"))
    }

    /// The rows of every peer's `x` [n, d], stacked in rank order into [peers * n, d]; the
    /// gradient flows to this peer's own rows, the others' rows are constants here. Every peer
    /// must pass the same n and d.
    pub fn all_gather_rows(&self, x: Tensor<B, 2>) -> Result<Tensor<B, 2>> {
        let [n, d] = x.dims();
        let own = self.rank * n..(self.rank + 1) * n;
        // Zero-padded slots summed over the peers: adding zeros is exact, so every peer holds
        // the others' rows bit for bit.
        let slots = Tensor::<B::InnerBackend, 2>::zeros([self.peers * n, d], &x.device())
            .slice_assign([own.clone(), 0..d], x.clone().inner());
        let gathered = Tensor::<B, 2>::from_inner(self.all_reduce(slots, ReduceOperation::Sum)?);
        Ok(gathered.slice_assign([own, 0..d], x))
    }

    /// The sum of `x` over the peers, differentiated: the backward pass sums the upstream
    /// gradients over the peers too, so each peer's `x` receives the gradient of every peer's
    /// loss. Every peer's `x` must be tracked alike (all or none), since the backward pass
    /// exchanges too.
    ///
    /// A failure of the exchange in the backward pass, which has no error channel, panics with
    /// the collective's message.
    pub fn all_reduce_sum<const D: usize>(&self, x: Tensor<B, D>) -> Result<Tensor<B, D>>
    where
        B: CollectiveBackend,
    {
        let y = B::all_reduce_sum_tracked(self.id, x.into_primitive().tensor())
            .map_err(collective_error("differentiated all-reduce"))?;
        Ok(Tensor::from_primitive(TensorPrimitive::Float(y)))
    }
}

impl<B: AutodiffBackend> Drop for Peer<B> {
    fn drop(&mut self) {
        // A peer that leaves on an error path cannot report here; the others' next exchange
        // fails or waits, which is the collective engine's behaviour.
        let _ = collective::finish_collective::<B::InnerBackend>(self.id);
    }
}

/// Autodiff backends whose graph can record an all-reduce: Burn's `Autodiff` over any backend.
pub trait CollectiveBackend: AutodiffBackend {
    /// The sum over the peers of `x`, recorded so that the backward pass sums the upstream
    /// gradients over the peers.
    fn all_reduce_sum_tracked(
        id: PeerId,
        x: FloatTensor<Self>,
    ) -> std::result::Result<FloatTensor<Self>, CollectiveError>;
}

#[derive(Debug)]
struct AllReduceSumBackward;

impl<B: Backend> Backward<B, 1> for AllReduceSumBackward {
    type State = PeerId;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [parent] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        if let Some(node) = parent {
            // d(sum_q x_q)/dx_p = I: the gradient of x_p is the sum over the peers of the
            // gradients that reach the sum.
            let summed = collective::all_reduce::<B>(ops.state, grad, ReduceOperation::Sum)
                .unwrap_or_else(|e| panic!("the all-reduce of a gradient failed: {e:?}"));
            grads.register::<B>(node.id, summed);
        }
    }
}

impl<B: Backend, C: CheckpointStrategy> CollectiveBackend for Autodiff<B, C> {
    fn all_reduce_sum_tracked(
        id: PeerId,
        x: FloatTensor<Self>,
    ) -> std::result::Result<FloatTensor<Self>, CollectiveError> {
        // Compute-bound: a checkpointing strategy must keep the output rather than recompute
        // it in the backward pass, where one peer alone would call the exchange.
        match AllReduceSumBackward
            .prepare::<C>([x.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let y = collective::all_reduce::<B>(id, x.primitive, ReduceOperation::Sum)?;
                Ok(prep.finish(id, y))
            }
            OpsKind::UnTracked(prep) => Ok(prep.finish(collective::all_reduce::<B>(
                id,
                x.primitive,
                ReduceOperation::Sum,
            )?)),
        }
    }
}

/// The collective engine keeps one group per backend type and process: a data-parallel run
/// holds its turn while its peers are joined, so that two runs in one process wait for each
/// other instead of mixing their peers.
static GROUP: Mutex<()> = Mutex::new(());

/// This process's turn to form a group of peers.
pub(crate) fn group_turn() -> MutexGuard<'static, ()> {
    // A run that panicked left no peer joined (they leave when dropped): the turn is free.
    GROUP
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<B: AutodiffBackend> Exchange<B> for Peer<B> {
    fn rank(&self) -> usize {
        self.rank
    }

    fn parts(&self) -> usize {
        self.peers
    }

    fn gather_rows(&self, rows: Tensor<B, 2>) -> Result<Tensor<B, 2>> {
        self.all_gather_rows(rows)
    }
}

/// A peer in a pre-training run: its exchanges, whether batch norm is synchronised, and the
/// time the exchanges took since the last step's log.
struct Part<B: TrainBackend> {
    peer: Peer<B>,
    sync_batch_norm: bool,
    spent: Cell<f64>,
}

impl<B: TrainBackend> Part<B> {
    fn new(peer: Peer<B>, sync_batch_norm: bool) -> Self {
        Self {
            peer,
            sync_batch_norm,
            spent: Cell::new(0.0),
        }
    }

    /// `exchange()`, its time counted.
    fn timed<T>(&self, exchange: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = exchange();
        self.spent
            .set(self.spent.get() + start.elapsed().as_secs_f64());
        out
    }
}

impl<B: TrainBackend> Exchange<B> for Part<B> {
    fn rank(&self) -> usize {
        self.peer.rank
    }

    fn parts(&self) -> usize {
        self.peer.peers
    }

    fn gather_rows(&self, rows: Tensor<B, 2>) -> Result<Tensor<B, 2>> {
        self.timed(|| self.peer.all_gather_rows(rows))
    }

    fn batch_stats(&self) -> Option<&dyn StatsSum<B>> {
        self.sync_batch_norm.then_some(self as &dyn StatsSum<B>)
    }
}

impl<B: TrainBackend> StatsSum<B> for Part<B> {
    fn devices(&self) -> usize {
        self.peer.peers
    }

    // The backward pass's exchanges are not timed: autodiff runs them.
    fn sum(&self, x: Tensor<B, 2>) -> Result<Tensor<B, 2>> {
        self.timed(|| self.peer.all_reduce_sum(x))
    }
}

impl<B: TrainBackend> StepSync<B> for Part<B> {
    fn sum_grads(&self, grads: GradientsParams) -> Result<GradientsParams> {
        self.timed(|| self.peer.all_reduce_grads(grads, ReduceOperation::Sum))
    }

    fn mean(&self, figures: Tensor<B::InnerBackend, 1>) -> Result<Tensor<B::InnerBackend, 1>> {
        self.timed(|| self.peer.all_reduce(figures, ReduceOperation::Mean))
    }

    fn all_ok(&self, ok: bool) -> Result<bool> {
        let failed = Tensor::<B::InnerBackend, 1>::from_floats(
            [f32::from(u8::from(!ok))],
            &self.peer.device,
        );
        let failed = self.timed(|| {
            read_floats(
                self.peer.all_reduce(failed, ReduceOperation::Sum)?,
                "peer status",
            )
        })?;
        Ok(failed[0] == 0.0)
    }

    fn take_exchange_seconds(&self) -> f64 {
        self.spent.replace(0.0)
    }
}

/// `count` devices of `device`'s kind for a data-parallel run: the first `count` of its kind
/// (`device` first is the caller's choice: pass the one with index 0) on a backend with
/// several, or `device` itself `count` times on a backend with one (a CPU: the peers are
/// threads that share it). More than the backend has is an error.
pub fn devices_like<B: Backend>(device: &B::Device, count: usize) -> Result<Vec<B::Device>> {
    let id = device.to_id();
    let available = B::device_count(id.type_id);
    match available {
        _ if count == 0 => Err(ClrError::invalid("devices", count, "at least 1")),
        0 | 1 => Ok(vec![device.clone(); count]),
        n if count <= n => Ok((0..count)
            .map(|i| B::Device::from_id(DeviceId::new(id.type_id, i as u16)))
            .collect()),
        n => Err(ClrError::invalid(
            "devices",
            count,
            format!("at most {n} (the devices of {device:?}'s kind)"),
        )),
    }
}

impl<B: TrainBackend> Pretrainer<B> {
    /// [`Pretrainer::run`] with every batch shared among `devices` (one thread each, the first
    /// on the calling thread with the hooks): each holds a replica of the model and optimisers
    /// and `batch_size / devices.len()` images of every batch; the gradients are summed over
    /// the devices before every optimiser step (InfoNCE's on the rows gathered from all of
    /// them, the manifold terms' per sample), so every replica takes the same step, the
    /// global batch's up to the batch-norm statistics, which are each device's own. The first
    /// device, whose model must be on `devices[0]`, writes the checkpoints (one model, with its
    /// own batch-norm running averages; it resumes on any number of devices) and calls the
    /// hooks; the logged figures are the devices' means, the feature spectrum the first
    /// device's. An error on one device stops all of them; it is returned as that device gave
    /// it.
    pub fn run_on(
        &mut self,
        data: &dyn ViewSource,
        checkpoints: &Path,
        hooks: &mut dyn PretrainHooks<B>,
        devices: &[B::Device],
    ) -> Result<()> {
        let parts = devices.len();
        check_devices(parts, self.config().batch_size)?;
        if parts == 1 {
            return self.run_part(data, checkpoints, Some(hooks), &devices[0], None);
        }
        let sync_bn = self.config().sync_batch_norm;
        let _turn = group_turn();
        let replicas = devices[1..]
            .iter()
            .map(|d| self.replica(d))
            .collect::<Result<Vec<Self>>>()?;
        std::thread::scope(|scope| {
            let others: Vec<_> = replicas
                .into_iter()
                .zip(1..)
                .map(|(mut replica, rank)| {
                    let device = &devices[rank];
                    scope.spawn(move || -> Result<()> {
                        let part = Part::new(Peer::<B>::join(rank, parts, device)?, sync_bn);
                        replica.run_part(data, checkpoints, None, device, Some(&part))
                    })
                })
                .collect();
            let own = Peer::<B>::join(0, parts, &devices[0]).and_then(|peer| {
                let part = Part::new(peer, sync_bn);
                self.run_part(data, checkpoints, Some(hooks), &devices[0], Some(&part))
            });
            let others = others.into_iter().map(|t| {
                t.join().unwrap_or_else(|_| {
                    Err(ClrError::Collective {
                        op: "training step",
                        reason: "a device's thread panicked".into(),
                    })
                })
            });
            // The error that caused the stop, rather than the others' PeerFailed.
            let mut outcome = own;
            for other in others {
                outcome = match (outcome, other) {
                    (Ok(()) | Err(ClrError::PeerFailed), Err(e))
                        if !matches!(e, ClrError::PeerFailed) =>
                    {
                        Err(e)
                    }
                    (Ok(()), Err(e)) => Err(e),
                    (kept, _) => kept,
                };
            }
            outcome
        })
    }
}

#[cfg(test)]
mod tests {
    use burn::module::Module;
    use burn::nn::{Linear, LinearConfig};
    use vlgo_core::testing::TestAutodiffBackend as AB;

    use super::*;
    use crate::info_nce::{InfoNceConfig, info_nce};

    /// The collective engine keeps one group per backend type and process: the tests that form
    /// one take turns.
    /// Runs `work` on `peers` threads, one peer each, and returns their results in rank order.
    fn on_peers<T: Send>(peers: usize, work: impl Fn(Peer<AB>) -> T + Sync) -> Vec<T> {
        let _turn = group_turn();
        std::thread::scope(|scope| {
            let threads: Vec<_> = (0..peers)
                .map(|rank| {
                    let work = &work;
                    scope.spawn(move || work(Peer::join(rank, peers, &Default::default()).unwrap()))
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        })
    }

    fn host<const D: usize>(t: Tensor<impl Backend, D>) -> Vec<f32> {
        t.into_data().convert::<f32>().into_vec().unwrap()
    }

    fn close(a: &[f32], b: &[f32], tol: f32) -> bool {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| (x - y).abs() <= tol * (1.0 + y.abs()))
    }

    /// A fixed batch: 8 rows of 3 values, no two alike.
    fn batch(device: &Device<AB>) -> Tensor<AB, 2> {
        let values: Vec<f32> = (0..24).map(|i| ((i * 7 % 11) as f32 - 5.0) / 4.0).collect();
        Tensor::<AB, 1>::from_floats(values.as_slice(), device).reshape([8, 3])
    }

    #[test]
    fn a_rank_outside_the_group_is_refused() {
        let e = Peer::<AB>::join(2, 2, &Default::default()).unwrap_err();
        assert!(e.to_string().contains("2 of 2 peers"), "{e}");
        assert!(Peer::<AB>::join(0, 0, &Default::default()).is_err());
    }

    /// InfoNCE on the gathered rows: every peer's gradient for its own rows is the one-process
    /// gradient's slice, so the sum over peers of the parameter gradients is the global one.
    #[test]
    fn gathered_rows_give_each_peer_the_global_losss_gradient() {
        let device = Default::default();
        let loss = |h0: Tensor<AB, 2>, h1: Tensor<AB, 2>| {
            info_nce(h0, h1, None, &InfoNceConfig::cosine()).unwrap()
        };
        // One process: views 0 and 1 of 4 images.
        let x = batch(&device).require_grad();
        let want_loss = loss(x.clone().narrow(0, 0, 4), x.clone().narrow(0, 4, 4));
        let want_grad = host(x.grad(&want_loss.backward()).unwrap());
        let want_loss = host(want_loss);
        // Two peers of 2 images each: peer p holds images 2p and 2p + 1 of both views.
        let got = on_peers(2, |peer| {
            let device = Default::default();
            let all = batch(&device);
            let r = peer.rank();
            let h0 = all.clone().narrow(0, 2 * r, 2).require_grad();
            let h1 = all.narrow(0, 4 + 2 * r, 2).require_grad();
            let l = loss(
                peer.all_gather_rows(h0.clone()).unwrap(),
                peer.all_gather_rows(h1.clone()).unwrap(),
            );
            let grads = l.backward();
            (
                host(l),
                host(h0.grad(&grads).unwrap()),
                host(h1.grad(&grads).unwrap()),
            )
        });
        for (rank, (l, g0, g1)) in got.iter().enumerate() {
            assert!(
                close(l, &want_loss, 1e-6),
                "peer {rank}: {l:?} vs {want_loss:?}"
            );
            let rows = |first: usize| &want_grad[first * 3..(first + 2) * 3];
            assert!(close(g0, rows(2 * rank), 1e-5), "peer {rank}: {g0:?}");
            assert!(close(g1, rows(4 + 2 * rank), 1e-5), "peer {rank}: {g1:?}");
        }
    }

    /// s = x_0 + x_1 and loss_p = sum((s w_p)^2): each x_p's gradient is sum_q 2 s w_q^2, the
    /// gradient of both peers' losses.
    #[test]
    fn the_differentiated_sum_carries_every_peers_gradient() {
        let got = on_peers(2, |peer| {
            let device = Default::default();
            let r = peer.rank() as f32;
            let x = Tensor::<AB, 2>::from_floats([[1.0 + r, -2.0], [0.5, 3.0 * r]], &device)
                .require_grad();
            let s = peer.all_reduce_sum(x.clone()).unwrap();
            let loss = (s.clone() * (r + 1.0)).square().sum();
            let grads = loss.backward();
            (host(s), host(x.grad(&grads).unwrap()))
        });
        let s = [3.0f32, -4.0, 1.0, 3.0];
        // w_0 = 1, w_1 = 2: sum_q 2 s w_q^2 = 10 s.
        let want: Vec<f32> = s.iter().map(|v| 10.0 * v).collect();
        for (rank, (sum, grad)) in got.iter().enumerate() {
            assert_eq!(sum, &s, "peer {rank}");
            assert!(
                close(grad, &want, 1e-6),
                "peer {rank}: {grad:?} vs {want:?}"
            );
        }
    }

    /// Replicas of one layer on their own halves of a batch: the averaged gradients are the
    /// one-process gradient of the mean of the two halves' losses, on both peers.
    #[test]
    fn averaged_gradients_are_the_mean_over_the_replicas() {
        let device = Default::default();
        let layer: Linear<AB> = LinearConfig::new(3, 2).init(&device);
        let loss = |layer: &Linear<AB>, x: Tensor<AB, 2>| layer.forward(x).tanh().sum();
        let x = batch(&device);
        let both =
            (loss(&layer, x.clone().narrow(0, 0, 4)) + loss(&layer, x.narrow(0, 4, 4))) / 2.0;
        let grads = GradientsParams::from_grads(both.backward(), &layer);
        let want = host(
            grads
                .get::<<AB as AutodiffBackend>::InnerBackend, 2>(layer.weight.id)
                .unwrap(),
        );
        let got = on_peers(2, |peer| {
            let layer = layer.clone().fork(&Default::default());
            let x = batch(&Default::default()).narrow(0, 4 * peer.rank(), 4);
            let grads = GradientsParams::from_grads(loss(&layer, x).backward(), &layer);
            let grads = peer.all_reduce_grads(grads, ReduceOperation::Mean).unwrap();
            host(
                grads
                    .get::<<AB as AutodiffBackend>::InnerBackend, 2>(layer.weight.id)
                    .unwrap(),
            )
        });
        for (rank, g) in got.iter().enumerate() {
            assert!(close(g, &want, 1e-6), "peer {rank}: {g:?} vs {want:?}");
        }
    }
}

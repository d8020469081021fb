//! EASY backfilling for exclusive queues: the first waiting job that
//! cannot start gets a reservation at the earliest time enough hosts of
//! its cluster are expected to be free (from the estimates of the jobs
//! holding them), and a later job starts now only if it fits in the free
//! hosts and either ends by then or leaves enough hosts for the
//! reservation. Without backfilling, the first job that cannot start keeps
//! every later one of its queue waiting (first come, first served).

use super::waiting::Waiting;
use super::walk::{take_free_where, Scratch, Walk};
use super::{JobView, Places};
use crate::ids::{HostId, JobId};
use crate::queue::Queue;

/// The reservation of an exclusive queue's first waiting job (EASY).
#[derive(Debug, Clone, Copy)]
pub(super) struct Reservation {
    cluster: usize,
    /// When the job is expected to start (µs).
    shadow: u64,
    /// Hosts of its cluster that will be free at `shadow` beyond what it needs.
    extra: usize,
}

impl Reservation {
    /// Whether a job of `n_needed` hosts of `cluster`, with `estimate`,
    /// may start now beside it: it ends by the reservation (`in_time`), or
    /// takes hosts the reservation spares.
    fn admits(&self, cluster: usize, n_needed: usize, estimate: Option<u64>, now: u64) -> Fit {
        let in_time = estimate.is_some_and(|estimate| now.saturating_add(estimate) <= self.shadow);
        let spare = cluster != self.cluster || n_needed <= self.extra;
        Fit { in_time, spare }
    }
}

/// How a job fits beside a reservation.
struct Fit {
    in_time: bool,
    spare: bool,
}

/// An exclusive queue's walk: its reservation, once made, and behind it
/// the queue's waiting jobs as kept (see [`Waiting`]), so that one that
/// cannot start is turned away from its kept need and estimate, with no
/// read of its record.
#[derive(Default)]
pub(super) struct Easy {
    reservation: Option<Reservation>,
    pub(super) kept: Option<Waiting>,
}

impl<V: JobView> Walk<'_, V> {
    /// Whether the walk passes over `job`, the `at`-th job behind the
    /// queue's started ones, from what the kept waiting jobs say of it:
    /// its cluster lacks the free hosts it needs, or it neither ends by the
    /// reservation nor leaves it enough hosts.
    pub(super) fn passed_over(&self, easy: &Easy, job: JobId, at: Option<usize>) -> bool {
        let (Some(held), Some(kept)) = (&easy.reservation, &easy.kept) else {
            return false;
        };
        let Some((_, info)) = at.and_then(|at| kept.at(at)) else {
            return false;
        };
        let could = info.places().each().any(|cluster| {
            let free = self.scratch.cluster_free.get(cluster).copied();
            let fit = held.admits(cluster, info.n_needed, info.estimate, self.now);
            free.unwrap_or(0) >= info.n_needed && (fit.in_time || fit.spare)
        });
        if could {
            return false;
        }
        debug_assert_eq!(kept.jobs[at.unwrap_or_default()], job);
        debug_assert!(
            !self.view.facts(job).started,
            "job {job} behind the started ones has started"
        );
        true
    }

    /// A waiting job of an exclusive queue (`hosts`: its own, if it has
    /// any): it starts if it can; the first that cannot gets the
    /// reservation if the queue backfills, and behind the reservation a job
    /// starts only if it does not delay it. False when first come, first
    /// served keeps the queue's later jobs waiting.
    pub(super) fn exclusive_waiting(
        &mut self,
        job: JobId,
        hosts: &[HostId],
        queue: &Queue,
        queue_idx: usize,
        easy: &mut Easy,
    ) -> bool {
        let bound = !hosts.is_empty();
        let Some(held) = &mut easy.reservation else {
            if self.take(job, hosts) > 0 {
                return true;
            }
            // The first job that cannot start: first come, first served
            // keeps every later job of the queue behind it, unless
            // backfilling can give it a reservation.
            let Some(made) = (queue.backfill && !bound)
                .then(|| reserve(job, self.view, self.now, self.scratch))
                .flatten()
            else {
                return false;
            };
            easy.reservation = Some(made);
            let scratch = &mut *self.scratch;
            if scratch.waiting.len() <= queue_idx {
                scratch.waiting.resize_with(queue_idx + 1, Waiting::default);
            }
            let mut waiting = std::mem::take(&mut scratch.waiting[queue_idx]);
            waiting.sync(queue, self.view);
            if cfg!(debug_assertions) {
                waiting.check(queue, self.view);
            }
            easy.kept = Some(waiting);
            return true;
        };
        if bound {
            return true;
        }
        let n_needed = self.view.need(job).1;
        let estimate = self.view.estimate(job);
        let (now, reserved) = (self.now, *held);
        let fits = |cluster: usize| {
            let fit = reserved.admits(cluster, n_needed, estimate, now);
            fit.in_time || fit.spare
        };
        let taken = take_free_where(
            job,
            self.view,
            self.busy,
            self.scratch,
            self.out,
            self.bind,
            fits,
        );
        if taken == 0 {
            return true;
        }
        self.free_hosts = self.free_hosts.saturating_sub(taken);
        let cluster = self.bind.last().map_or(usize::MAX, |(_, hosts)| {
            hosts
                .first()
                .map_or(usize::MAX, |host| self.scratch.host_cluster[host.idx()])
        });
        let fit = reserved.admits(cluster, n_needed, estimate, now);
        if !fit.in_time && cluster == held.cluster {
            held.extra -= n_needed;
        }
        true
    }
}

/// The reservation of a waiting job that cannot start now: the earliest
/// time enough hosts of its cluster are expected to be free, or `None`
/// when that depends on a job without an estimate.
fn reserve(
    job: JobId,
    view: &impl JobView,
    now: u64,
    scratch: &mut Scratch,
) -> Option<Reservation> {
    for taker in scratch.unwritten.drain(..) {
        for host in view.hosts(taker) {
            scratch.holder[host.idx()] = (taker, scratch.decision);
        }
    }
    let n_needed = view.need(job).1;
    let mut best: Option<Reservation> = None;
    for cluster in Places::of(view, job).each() {
        if Places::of(view, job).several() && !view.may_use(job, cluster) {
            continue;
        }
        let Some(made) = reserve_on(cluster, n_needed, view, now, scratch) else {
            continue;
        };
        if best.is_none_or(|best| made.shadow < best.shadow) {
            best = Some(made);
        }
    }
    best
}

/// The reservation of a job of `n_needed` hosts on `cluster`.
fn reserve_on(
    cluster: usize,
    n_needed: usize,
    view: &impl JobView,
    now: u64,
    scratch: &mut Scratch,
) -> Option<Reservation> {
    let hosts = view.cluster_hosts(cluster);
    if n_needed == 0 || n_needed > hosts.len() {
        return None;
    }
    let free_now = scratch.cluster_free.get(cluster).copied().unwrap_or(0);
    let mut ends = std::mem::take(&mut scratch.ends);
    ends.clear();
    ends.extend(
        hosts
            .iter()
            .filter(|host| scratch.is_taken(**host))
            .map(|host| {
                view.expected_end(scratch.holder[host.idx()].0)
                    .unwrap_or(u64::MAX)
                    .max(now)
            }),
    );
    ends.sort_unstable();
    scratch.ends = ends;
    let missing = n_needed.checked_sub(free_now)?;
    let shadow = *scratch.ends.get(missing.checked_sub(1)?)?;
    if shadow == u64::MAX {
        return None;
    }
    let released = scratch.ends.iter().filter(|end| **end <= shadow).count();
    Some(Reservation {
        cluster,
        shadow,
        extra: free_now + released - n_needed,
    })
}

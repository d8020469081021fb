//! A new daemon taking over the core of a killed one: the clients the
//! killed daemon served are gone with it, and a job whose processes could
//! not be found again is lost.
//!
//! An interactive job's scrun outlives the daemon and connects again
//! ([`Input::Reattach`](super::Input::Reattach)): until then the job is
//! *detached*, with no client and a deadline ([`Detached`]), and runs on
//! as the scheduler decides. A job whose scrun has not come back by the
//! deadline is killed, as one whose scrun went away. One that had not
//! started is held until then: its processes need the descriptors its
//! scrun sends again when it reattaches. A scrun that asks
//! after its job ended while it was away is told how it ended, from the
//! jobs the core remembers. Submissions still waiting for admission are
//! dropped: their scruns submit again.
#![forbid(unsafe_code)]

use std::rc::Rc;

use super::backlog::ClientChange;
use super::{Action, ClientEvent, Core, Rejection};
use crate::ids::{ClientToken, Cred, JobId, Tick};
use crate::job::{EndCause, Link, Phase};
use crate::sorted::SortedSet;
use crate::undo::UndoSet;

/// The jobs whose client is gone with a killed daemon, by the time their
/// scrun may take until it reattaches.
pub(super) type Detached = UndoSet<SortedSet<(Tick, JobId)>>;

/// Why a scrun cannot reattach to a job, as it is told.
fn refusal(job: JobId, why: &str) -> ClientEvent {
    ClientEvent::Rejected {
        kind: Rejection::Invalid,
        reason: format!("cannot reattach to job {job}: {why}"),
    }
}

impl Core {
    /// A new daemon took the core over: every client of the killed one is
    /// gone. Jobs with a client wait for it to reattach until `until`, but
    /// for those whose scrun the new daemon found gone (`gone`), which are
    /// killed at once; waiting submissions are dropped. Batch jobs, which
    /// have no client, go on as they were, waiting in the backlog or not;
    /// an interactive
    /// job of the backlog (one that waits for others) ends as when its
    /// scrun goes away, since its client's token is the killed daemon's.
    pub(super) fn clients_lost(
        &mut self,
        until: Tick,
        gone: &[JobId],
        now: Tick,
        out: &mut Vec<Action>,
    ) {
        self.logged.waiting.modify(|waiting| waiting.clear());
        let waiting_clients: Vec<ClientToken> = self
            .logged
            .backlog
            .entries
            .values()
            .filter_map(|entry| entry.link.client())
            .collect();
        for client in waiting_clients {
            self.backlog_client(
                client,
                ClientChange::End("because its scrun was lost with a killed scored"),
                now,
                out,
            );
        }
        let attached: Vec<(ClientToken, JobId)> = self
            .logged
            .by_client
            .iter()
            .map(|(client, job)| (*client, *job))
            .collect();
        for (client, job) in attached {
            self.logged.by_client.remove(&client);
            if let Some(record) = self.logged.jobs.get_mut(&job) {
                record.set_link(Link::Detached);
                if !record.is_ending() {
                    // One that has not started waits for the descriptors
                    // its scrun sends again.
                    record.awaits_client = !record.started();
                    let deadline = if gone.contains(&job) { now } else { until };
                    self.logged.detached.insert((deadline, job));
                }
            }
        }
    }

    /// The processes of `job` are gone and nothing says how they ended
    /// (the daemon that created them was killed, or what kept them): the
    /// job ends, lost, with `reason`.
    pub(super) fn processes_lost(
        &mut self,
        job: JobId,
        reason: String,
        now: Tick,
        out: &mut Vec<Action>,
    ) {
        let Some(record) = self.logged.jobs.get_mut(&job) else {
            return;
        };
        if record.phase() == Phase::Idle && !record.started() {
            return;
        }
        record.end_unless_ending(EndCause::Lost(super::cap_reason(reason)));
        self.processes_gone(job, now, out);
    }

    /// No daemon took `job` over within its keeper's wait: the keeper
    /// killed what was left of it. It ends killed for `reason` once its
    /// processes' ends, which follow, are in.
    pub(super) fn keeper_ended(&mut self, job: JobId, reason: String) {
        if let Some(record) = self.logged.jobs.get_mut(&job) {
            record.end_unless_ending(EndCause::Killed(super::cap_reason(reason)));
        }
    }

    /// A scrun asks to be `job`'s client again.
    pub(super) fn reattach(
        &mut self,
        client: ClientToken,
        cred: &Cred,
        job: JobId,
        out: &mut Vec<Action>,
    ) {
        let until = self.detached_until(job);
        if let Some(record) = self.logged.jobs.get_mut(&job) {
            let owner = record.owner.uid == cred.uid;
            let event = match until {
                _ if !owner => refusal(job, "it is not yours"),
                None if record.client().is_some() => refusal(job, "it has its scrun"),
                None if record.link().is_batch() => {
                    refusal(job, "it is a batch job, with no scrun")
                }
                None => refusal(job, "it has no scrun to reattach"),
                Some(until) => {
                    self.logged.detached.remove(&(until, job));
                    tracing::info!(job = %job, "its scrun reattached");
                    record.awaits_client = false;
                    record.set_link(Link::Client(client));
                    self.logged.by_client.insert(client, job);
                    ClientEvent::Reattached {
                        job,
                        started: record.started(),
                        held: record.owner_hold,
                        ranks: record.nprocs(),
                    }
                }
            };
            out.push(Action::notify(client, event));
            return;
        }
        // An interactive job that waited for other jobs (`-after=`) ended
        // with the daemon that held its client (`clients_lost`): say so.
        if let Some(early) = self.logged.ends.ended.iter().rev().find(|e| e.id == job) {
            let event = if early.uid == cred.uid {
                let reason = early
                    .fields
                    .iter()
                    .find_map(|(key, value)| (key == "reason").then(|| value.to_text()))
                    .unwrap_or_default();
                refusal(
                    job,
                    &format!("{}: {reason}", scored_proto::proto::ENDED_BEFORE_START),
                )
            } else {
                refusal(job, "it is not yours")
            };
            out.push(Action::notify(client, event));
            return;
        }
        let ended = self
            .logged
            .finished
            .iter()
            .rev()
            .find(|finished| finished.job.id == job)
            .map(Rc::clone);
        let event = match ended {
            Some(finished) if finished.job.owner.uid == cred.uid => {
                ClientEvent::Ended(Box::new(finished.ending.clone()))
            }
            Some(_) => refusal(job, "it is not yours"),
            None => refusal(job, "no such job"),
        };
        out.push(Action::notify(client, event));
    }

    /// Kills the detached jobs whose scrun did not come back by `now`.
    pub(super) fn expire_detached(&mut self, now: Tick, out: &mut Vec<Action>) {
        while let Some(&(deadline, job)) = self.logged.detached.first() {
            if deadline > now {
                break;
            }
            self.logged.detached.pop_first();
            // A job may have ended of itself while its scrun was away.
            if self.logged.jobs.contains_key(&job) {
                tracing::info!(job = %job, "its scrun did not come back after scored restarted; killing the job");
                self.begin_kill(job, EndCause::ClientGone, false, now, out);
            }
        }
    }

    /// Until when `job`'s scrun may reattach, if the job is detached (a
    /// walk of the detached jobs: reattaching is rare, and a field in
    /// every job record would cost every job).
    pub(super) fn detached_until(&self, job: JobId) -> Option<Tick> {
        (&self.logged.detached)
            .into_iter()
            .find(|(_, detached)| *detached == job)
            .map(|(until, _)| *until)
    }

    /// When the first detached job's scrun is out of time.
    pub(super) fn detached_deadline(&self) -> Option<Tick> {
        self.logged.detached.first().map(|(deadline, _)| *deadline)
    }
}

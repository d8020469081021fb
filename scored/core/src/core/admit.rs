//! Submission and admission: the checks a submission passes, the
//! placement that reserves its hosts, memory and disk, the clients that
//! wait for resources in submission order, and the launch data shared by
//! identical submissions.
#![forbid(unsafe_code)]

use std::rc::Rc;
use std::time::Duration;

use super::{
    command_line, queue_group_name, usage_limited, Action, ClientEvent, Core, JobEvent, Rejection,
    Waiter,
};
use crate::admission::{self, Ask, Decision, Placement};
use crate::ids::{ClientToken, Cred, JobId, Tick};
use crate::job::{Job, JobRequest, JobSpec, Launch, Life, Link, Submission, Usage};

impl Core {
    pub(super) fn default_queue(&self) -> u32 {
        if self.logged.queues.len() > 1 {
            1
        } else {
            self.logged.queues.len().saturating_sub(1) as u32
        }
    }

    pub(super) fn submit(
        &mut self,
        client: ClientToken,
        cred: Cred,
        user: Rc<str>,
        request: JobRequest,
        now: Tick,
        out: &mut Vec<Action>,
    ) {
        let reject = |kind, reason: String, out: &mut Vec<Action>| {
            out.push(Action::notify(
                client,
                ClientEvent::Rejected { kind, reason },
            ));
        };
        let duplicate = self.logged.by_client.contains_key(&client)
            || self
                .logged
                .waiting
                .iter()
                .any(|w| w.client() == Some(client));
        if duplicate {
            // The loop lets a connection submit once (its "one job only"
            // refusal), so this is a bug: the job that came first keeps its
            // client, and nothing is replaced.
            debug_assert!(!duplicate, "client {} submitted twice", client.0);
            tracing::error!(
                client = client.0,
                "a second submission from one client reached the core; ignored"
            );
            return;
        }
        if self.logged.config.daemon_uid != 0 && cred.uid != self.logged.config.daemon_uid {
            // A daemon that is not root cannot change credentials, so it
            // would run the job as itself.
            return reject(
                Rejection::Permission,
                format!(
                    "this scored runs as {} and can only run that user's jobs",
                    self.logged.config.daemon_user
                ),
                out,
            );
        }
        if self.shutting_down {
            return reject(
                Rejection::ShuttingDown,
                "scored is shutting down".into(),
                out,
            );
        }
        if let Some(problem) = &self.state_dir_problem {
            // The wire has no kind of its own for this; like a shutdown, the
            // daemon takes no jobs now, and the reason says why.
            return reject(
                Rejection::ShuttingDown,
                format!("scored cannot run jobs now: {problem}"),
                out,
            );
        }
        let to_backlog = request.batch.detach || !request.batch.after.is_empty();
        let waiter = Waiter {
            link: Link::Client(client),
            cred,
            user,
            request,
            submitted_at: now,
            held: false,
            id: None,
            submission: None,
        };
        if let Err((kind, reason)) = self.check_queue(&waiter) {
            return reject(kind, reason, out);
        }
        if to_backlog {
            return self.submit_to_backlog(client, waiter, now, out);
        }
        if let Err(reason) = self.check_budgets(&waiter, false) {
            tracing::info!(uid = waiter.cred.uid, %reason, "submission over a budget");
            return reject(Rejection::Resources, reason, out);
        }
        let decision = self.decide(&waiter);
        // Waiting jobs are admitted in submission order: a newcomer may not
        // take what they wait for. One that reserves nothing (no memory,
        // no disk, no job-count limit) takes nothing from them.
        let others_wait = !self.logged.waiting.is_empty() || self.backlog_ready_since().is_some();
        if others_wait
            && !matches!(&decision, Decision::Admit(placement) if self.reserves_nothing(placement))
        {
            if let Decision::TooBig(reason) = decision {
                return reject(Rejection::TooBig, reason, out);
            }
            let ahead = self.logged.waiting.len() + self.backlog_short();
            let reason = format!(
                "{ahead} job{} already wait{} for resources ahead of this one",
                if ahead == 1 { "" } else { "s" },
                if ahead == 1 { "s" } else { "" }
            );
            return self.short(waiter, reason, out);
        }
        match decision {
            Decision::Admit(placement) => self.admit(waiter, placement, now, out),
            Decision::TooBig(reason) => reject(Rejection::TooBig, reason, out),
            Decision::Short(reason) => self.short(waiter, reason, out),
        }
    }

    /// Whether admitting a job with this placement takes nothing that a
    /// waiting job could need.
    pub(super) fn reserves_nothing(&self, placement: &Placement) -> bool {
        placement.limits.memory.is_none()
            && placement.limits.disk.is_none()
            && self.limits[placement.cluster.idx()].jobs.is_none()
    }

    pub(super) fn short(&mut self, waiter: Waiter, reason: String, out: &mut Vec<Action>) {
        let Some(client) = waiter.client() else {
            return;
        };
        if waiter.request.wait {
            if let Err(reason) = self.check_budgets(&waiter, true) {
                tracing::info!(uid = waiter.cred.uid, %reason, "submission over a budget");
                out.push(Action::notify(
                    client,
                    ClientEvent::Rejected {
                        kind: Rejection::Resources,
                        reason,
                    },
                ));
                return;
            }
            self.logged.waiting.push_back(Rc::new(waiter));
            out.push(Action::notify(client, ClientEvent::Waiting(reason)));
        } else {
            // Resources are short now, not for ever: say how to wait.
            out.push(Action::notify(
                client,
                ClientEvent::Rejected {
                    kind: Rejection::Resources,
                    reason: format!("{reason} (scrun -wait waits until it fits)"),
                },
            ));
        }
    }

    pub(super) fn queue_of(&self, request: &JobRequest) -> u32 {
        request.priority.unwrap_or_else(|| self.default_queue())
    }

    pub(super) fn check_queue(&self, waiter: &Waiter) -> Result<(), (Rejection, String)> {
        let number = self.queue_of(&waiter.request);
        let Some(queue) = self.logged.queues.get(number as usize) else {
            return Err((
                Rejection::Invalid,
                format!(
                    "no queue {number}: queues are 0 to {}",
                    self.logged.queues.len().saturating_sub(1)
                ),
            ));
        };
        if !queue.enabled {
            return Err((
                Rejection::QueueDisabled,
                format!("queue {number} is disabled"),
            ));
        }
        if let Some(gid) = queue.group {
            if waiter.cred.uid != 0 && !waiter.cred.in_group(gid) {
                return Err((
                    Rejection::Permission,
                    format!(
                        "queue {number} is restricted to group {}; user {} (uid {}) is not a member",
                        queue_group_name(queue),
                        waiter.user,
                        waiter.cred.uid
                    ),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn decide(&self, waiter: &Waiter) -> Decision {
        let queue = &self.logged.queues[self.queue_of(&waiter.request) as usize];
        let ask = Ask {
            procs: waiter.request.procs,
            memory: waiter.request.memory,
            disk: waiter.request.disk,
        };
        admission::decide(
            ask,
            queue,
            &self.logged.topology,
            &self.limits,
            &self.logged.ledger,
        )
    }

    pub(super) fn admit(
        &mut self,
        waiter: Waiter,
        placement: Placement,
        now: Tick,
        out: &mut Vec<Action>,
    ) {
        let id = match waiter.id {
            Some(id) => id,
            None => {
                self.next_job += 1;
                JobId(self.next_job - 1)
            }
        };
        let queue = self.queue_of(&waiter.request);
        let submission = waiter.submission.clone().or_else(|| {
            (!waiter.request.batch.is_plain()).then(|| {
                Rc::new(Submission {
                    batch: waiter.request.batch.clone(),
                    first: id,
                })
            })
        });
        self.logged.ledger.reserve(&placement);
        let n_slots = placement.hosts.len();
        let job = Job {
            id,
            user: waiter.user,
            owner: waiter.cred,
            link_kind: waiter.link.parts().0,
            link_token: waiter.link.parts().1,
            submission,
            queue,
            queues_visited: smallvec::smallvec![queue],
            cluster: placement.cluster,
            hosts: placement.hosts,
            layout: placement.layout.into(),
            limits: placement.limits,
            estimate: waiter.request.time,
            operator_hold: false,
            owner_hold: waiter.held,
            awaits_client: false,
            life: Life::Queued,
            ending: None,
            submitted_at: waiter.submitted_at,
            admitted_at: now,
            run_time: Duration::ZERO,
            switches: 0,
            usage: Usage::default(),
            peak_memory: smallvec::smallvec![0; n_slots],
            peak_disk: 0,
            residency_base: Duration::ZERO,
            spec: JobSpec {
                joiner: waiter.request.joiner,
                procs: waiter.request.procs,
                launch: self.intern_launch(&waiter.request),
            },
        };
        let hosts = job
            .hosts
            .iter()
            .map(|host| self.logged.topology.host(*host).name.clone())
            .collect();
        let cluster = self.logged.topology.cluster(job.cluster).name.clone();
        if let Some(client) = job.client() {
            out.push(Action::notify(
                client,
                ClientEvent::Admitted {
                    job: id,
                    queue,
                    cluster,
                    hosts,
                    ranks: job.nprocs(),
                },
            ));
            self.logged.by_client.insert(client, id);
        }
        if self.logged.jobs.is_empty() {
            // Restart the slice cadence when the daemon leaves idleness, so
            // that the first job gets a whole slice.
            self.sched.restart_slices(now, self.logged.config.timeslice);
        }
        self.logged
            .queues
            .push_job(queue as usize, id, false, job.owner.uid);
        if self.journal.is_some() {
            let record = self.job_fields(&job, command_line(&job), job.state(), None, now, true);
            self.journal(JobEvent::Admitted {
                job: id,
                waited: now.since(job.submitted_at),
                record,
            });
        }
        if job.limits.cputime.is_some() {
            self.n_cputime_limited += 1;
        }
        if usage_limited(&job.limits) {
            self.n_usage_limited += 1;
        }
        self.logged.jobs.insert(id, job);
        self.order_by_usage(queue as usize, now);
    }

    /// Admits what waits for admission while resources allow, in the order
    /// it began to wait: the clients that wait (`-wait`) and the jobs of
    /// the backlog whose turn came, at most `ADMIT_PER_EVENT` of these.
    pub(super) fn admit_waiters(&mut self, now: Tick, out: &mut Vec<Action>) {
        *self.logged.backlog.more.get_mut() = false;
        let mut from_backlog = 0;
        loop {
            let client_since = self.logged.waiting.front().map(|front| front.submitted_at);
            let backlog_since = self.backlog_ready_since();
            let admitted = match (client_since, backlog_since) {
                (None, None) => break,
                (Some(client), Some(backlog)) if backlog < client => {
                    self.admit_from_backlog(Some(client), &mut from_backlog, now, out)
                }
                (None, Some(_)) => self.admit_from_backlog(None, &mut from_backlog, now, out),
                (Some(_), _) => self.admit_front_waiter(now, out),
            };
            if !admitted {
                break;
            }
        }
    }

    /// Admits (or refuses, or leaves waiting) the first client that waits;
    /// false if it must wait on.
    fn admit_front_waiter(&mut self, now: Tick, out: &mut Vec<Action>) -> bool {
        let Some(front) = self.logged.waiting.front() else {
            return false;
        };
        if let Err((kind, reason)) = self.check_queue(front) {
            let client = front.client();
            self.logged.waiting.pop_front();
            if let Some(client) = client {
                out.push(Action::notify(
                    client,
                    ClientEvent::Rejected { kind, reason },
                ));
            }
            return true;
        }
        match self.decide(front) {
            Decision::Admit(placement) => {
                let waiter = self.logged.waiting.pop_front().expect("front exists");
                let waiter = Rc::try_unwrap(waiter).unwrap_or_else(|shared| (*shared).clone());
                self.admit(waiter, placement, now, out);
                true
            }
            Decision::TooBig(reason) => {
                let client = front.client();
                self.logged.waiting.pop_front();
                if let Some(client) = client {
                    out.push(Action::notify(
                        client,
                        ClientEvent::Rejected {
                            kind: Rejection::TooBig,
                            reason,
                        },
                    ));
                }
                true
            }
            Decision::Short(_) => false,
        }
    }

    /// The packed launch data of a request, shared with any identical one.
    pub(super) fn intern_launch(&mut self, request: &JobRequest) -> Launch {
        let launch = Launch::pack_with(
            &request.stages,
            &request.env,
            &request.cwd,
            &request.inherited,
        );
        let key = launch_key(&launch);
        if let Some(existing) = self
            .logged
            .launches
            .get(&key)
            .and_then(|bucket| bucket.iter().find(|known| **known == launch))
        {
            return existing.clone();
        }
        match self.logged.launches.get_mut(&key) {
            Some(bucket) => bucket.push(launch.clone()),
            None => {
                self.logged.launches.insert(key, vec![launch.clone()]);
            }
        }
        launch
    }

    /// Drops the interner's copy once no unfinished job holds it (finished
    /// jobs keep theirs for listings). Held by the interner, the finishing
    /// job and no one else: 2 holders.
    pub(super) fn forget_launch(&mut self, launch: &Launch) {
        if launch.holders() > 2 {
            return;
        }
        let key = launch_key(launch);
        if let Some(bucket) = self.logged.launches.get_mut(&key) {
            bucket.retain(|known| !known.same(launch));
            if bucket.is_empty() {
                self.logged.launches.remove(&key);
            }
        }
    }
}

pub(super) fn launch_key(launch: &Launch) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    launch.hash(&mut hasher);
    hasher.finish()
}

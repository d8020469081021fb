//! The console's `kill`: the jobs it names (by id, or by owner and name),
//! who may end them, and a reply that says, job by job, what was done.
//!
//! Every number is a job id (`kill 63 64` ends jobs 63 and 64); a signal
//! comes with `-s`, or by name after the ids. A command that names a job
//! that does not exist or that its user may not kill, or a signal that
//! would stop or continue a job behind the scheduler's back, is refused
//! whole: nothing is done. A job that has no process to signal (not
//! admitted, not started, or already ending) gets no signal other than an
//! end, and the reply says so.
#![forbid(unsafe_code)]

use super::{Action, Core, JOB_CONTROL_SIGNALS, SIGKILL, SIGTERM};
use crate::ids::{Cred, JobId, Tick};
use crate::job::{EndCause, JobState, Phase};
use scored_proto::command::parse::signal_name;
use scored_proto::command::reply::Reply;
use scored_proto::command::JobFilter;
use scored_proto::units::format_duration;

/// A job `kill` names: admitted, or waiting in the backlog.
#[derive(Debug, Clone, Copy)]
enum Target {
    Admitted(JobId),
    Waiting(JobId),
}

impl Core {
    /// `kill`: ends (or signals) the jobs named by `ids`, or those that
    /// `filter` matches among the jobs `cred` may kill.
    pub(super) fn kill(
        &mut self,
        cred: &Cred,
        ids: &[u64],
        filter: &JobFilter,
        signal: Option<i32>,
        now: Tick,
        out: &mut Vec<Action>,
    ) -> Reply {
        if let Some(signal) = signal.filter(|signal| JOB_CONTROL_SIGNALS.contains(signal)) {
            let name = signal_name(signal);
            return Reply::error(match ids {
                [job] => format!(
                    "signal {name} would stop or continue job {job} behind the scheduler's back; \
                     use suspend {job} or resume {job}"
                ),
                _ => format!(
                    "signal {name} would stop or continue jobs behind the scheduler's back; \
                     use suspend and resume"
                ),
            });
        }
        if let Some(refusal) = self.unknown_user(filter) {
            return refusal;
        }
        let targets = match self.kill_targets(cred, ids, filter) {
            Ok(targets) => targets,
            Err(reply) => return reply,
        };
        let mut lines = Vec::with_capacity(targets.len());
        let mut done = 0;
        for target in targets {
            let (line, acted) = self.kill_one(cred, target, signal, now, out);
            lines.push(line);
            done += usize::from(acted);
        }
        let text = lines.join("\n");
        if done == 0 {
            // Nothing could be done to any of them: say so as an error.
            return Reply::error(text);
        }
        Reply::Done(text)
    }

    /// The jobs `kill` names, in the order given (by id) or of their ids
    /// (by filter), or the reply that refuses the whole command.
    fn kill_targets(
        &self,
        cred: &Cred,
        ids: &[u64],
        filter: &JobFilter,
    ) -> Result<Vec<Target>, Reply> {
        let operator = self.is_operator(cred);
        let mut targets = Vec::new();
        for &id in ids {
            let id = JobId(id);
            let (target, owner) = if let Some(job) = self.logged.jobs.get(&id) {
                (Target::Admitted(id), job.owner.uid)
            } else if let Some((entry, _)) = self
                .logged
                .backlog
                .entry_of(id)
                .filter(|_| self.logged.backlog.holds(id))
            {
                (Target::Waiting(id), entry.cred.uid)
            } else {
                return Err(self.no_job(id));
            };
            if !operator && owner != cred.uid {
                return Err(Reply::error(format!(
                    "permission denied: job {id} belongs to another user"
                )));
            }
            if !targets.iter().any(|known: &Target| known.id() == id) {
                targets.push(target);
            }
        }
        if ids.is_empty() {
            let mine = |uid: u32| operator || uid == cred.uid;
            if let Some(user) = filter.user.as_deref().filter(|_| !operator) {
                // Another user's jobs are not the caller's to kill.
                let by_user = JobFilter {
                    user: Some(user.to_string()),
                    ..JobFilter::default()
                };
                let owners = self
                    .logged
                    .jobs
                    .values()
                    .filter(|job| by_user.matches(&job.user, job.owner.uid, "", ""))
                    .map(|job| job.owner.uid)
                    .chain(
                        self.logged
                            .backlog
                            .entries
                            .values()
                            .filter(|entry| by_user.matches(&entry.user, entry.cred.uid, "", ""))
                            .map(|entry| entry.cred.uid),
                    );
                if owners.into_iter().any(|uid| uid != cred.uid) {
                    return Err(Reply::error(format!(
                        "permission denied: only root and the operator may kill another \
                         user's jobs (--user {user}); nothing was done"
                    )));
                }
            }
            for job in self.logged.jobs.values() {
                if mine(job.owner.uid)
                    && !job.is_ending()
                    && filter.matches(&job.user, job.owner.uid, &job.name(), "")
                {
                    targets.push(Target::Admitted(job.id));
                }
            }
            for entry in self.logged.backlog.entries.values() {
                if mine(entry.cred.uid)
                    && filter.matches(&entry.user, entry.cred.uid, &entry.name, "")
                {
                    targets.extend(
                        entry.waiting().map(|k| {
                            Target::Waiting(JobId(entry.submission.first.0 + u64::from(k)))
                        }),
                    );
                }
            }
            if targets.is_empty() {
                let mut what = Vec::new();
                if let Some(user) = &filter.user {
                    what.push(format!("of user {user}"));
                }
                if let Some(name) = &filter.name {
                    what.push(format!("named {name}"));
                }
                return Err(Reply::error(format!(
                    "no unfinished job {}{}; nothing was done",
                    what.join(" "),
                    if operator { "" } else { " of yours" }
                )));
            }
            targets.sort_by_key(|target| target.id());
        }
        Ok(targets)
    }

    /// Ends or signals one job; the reply's line for it, and whether
    /// something was done.
    fn kill_one(
        &mut self,
        cred: &Cred,
        target: Target,
        signal: Option<i32>,
        now: Tick,
        out: &mut Vec<Action>,
    ) -> (String, bool) {
        let id = target.id();
        let ends = matches!(signal, None | Some(SIGTERM) | Some(SIGKILL));
        let Target::Admitted(_) = target else {
            if !ends {
                return (
                    format!(
                        "job {id}: not sent SIG{}: it has no process, it is not admitted yet",
                        signal_name(signal.unwrap_or(SIGTERM))
                    ),
                    false,
                );
            }
            let by = self.killed_by(
                cred,
                self.logged
                    .backlog
                    .entry_of(id)
                    .map(|(entry, _)| entry.cred.uid),
            );
            self.kill_waiting(id, by, now, out);
            return (format!("job {id}: killed before it started"), true);
        };
        let record = &self.logged.jobs[&id];
        let by = self.killed_by(cred, Some(record.owner.uid));
        let unstarted = record.phase() == Phase::Idle && !record.started();
        let ending = record.state() == JobState::Ending;
        match signal {
            None | Some(SIGTERM) => {
                if ending {
                    return (format!("job {id}: already being killed"), false);
                }
                self.begin_kill(id, EndCause::Killed(by.to_string()), true, now, out);
                if unstarted {
                    return (format!("job {id}: killed before it started"), true);
                }
                (
                    format!(
                        "job {id}: killing (SIGTERM, then SIGKILL after {})",
                        format_duration(self.logged.config.kill_grace)
                    ),
                    true,
                )
            }
            Some(SIGKILL) => {
                let graceful = record.graceful_kill();
                if ending && !graceful {
                    return (format!("job {id}: already being killed"), false);
                }
                self.begin_kill(id, EndCause::Killed(by.to_string()), false, now, out);
                if unstarted {
                    return (format!("job {id}: killed before it started"), true);
                }
                (format!("job {id}: killed (SIGKILL)"), true)
            }
            Some(signal) => {
                let name = signal_name(signal);
                if ending {
                    return (
                        format!("job {id}: not sent SIG{name}: it is being killed"),
                        false,
                    );
                }
                if record.phase() == Phase::Idle {
                    return (
                        format!("job {id}: not sent SIG{name}: it has no process yet"),
                        false,
                    );
                }
                out.push(Action::Signal { job: id, signal });
                (format!("job {id}: sent SIG{name}"), true)
            }
        }
    }

    /// Who a kill is by, for the job's end: its owner, or an operator.
    fn killed_by(&self, cred: &Cred, owner: Option<u32>) -> &'static str {
        if self.is_operator(cred) && owner != Some(cred.uid) {
            "by an operator"
        } else {
            "by its owner"
        }
    }
}

impl Target {
    fn id(self) -> JobId {
        match self {
            Target::Admitted(id) | Target::Waiting(id) => id,
        }
    }
}

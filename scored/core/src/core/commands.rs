//! The console commands: what each one changes in the core and the reply
//! it gives. The state machine (`core.rs`) runs them; the table views they
//! answer with are in `views.rs`.
#![forbid(unsafe_code)]

use std::time::Duration;

use super::{queue_group_name, Action, ClientEvent, Core, Directory, JobEvent};
use crate::admission::ClusterLimits;
use crate::ids::{ClientToken, Cred, JobId, Tick};
use crate::job::Job;
use crate::queue::{Queue, DEFAULT_MPL};
use scored_proto::command::reply::{Reply, Value};
use scored_proto::command::{self, Command, QueueAction, QueueMode, Setting};
use scored_proto::units::{format_duration, format_size};

impl Core {
    /// Runs a console command for `cred` and answers `client`; what it
    /// changes comes out as actions, decided on with the rest of the batch.
    pub(super) fn console(
        &mut self,
        client: ClientToken,
        cred: &Cred,
        command: Command,
        now: Tick,
        out: &mut Vec<Action>,
    ) {
        // The directory is shared, so the command may change the rest of
        // the core while it reads names through it.
        let directory = std::rc::Rc::clone(&self.directory);
        let reply = self.run_command(cred, command, now, &*directory, out);
        if !reply.is_error() {
            // A command can change a queue's residency or move jobs.
            let live: Vec<JobId> = self.logged.live.iter().collect();
            for job in live {
                self.refresh_crossing(job);
            }
        }
        out.push(Action::notify(client, ClientEvent::Answer(reply)));
    }

    fn run_command(
        &mut self,
        cred: &Cred,
        command: Command,
        now: Tick,
        dir: &dyn Directory,
        out: &mut Vec<Action>,
    ) -> Reply {
        let operator = self.is_operator(cred);
        let needs_operator = command.is_changing()
            && !matches!(
                command,
                Command::Kill { .. } | Command::Suspend(_) | Command::Resume(_)
            );
        if needs_operator && !operator {
            return Reply::error(format!(
                "permission denied: '{}' changes the daemon and needs root or the operator",
                command::parse::render(&command)
            ));
        }
        if self.shutting_down
            && command.is_changing()
            && !matches!(command, Command::Kill { .. } | Command::Shutdown { .. })
        {
            return Reply::error("scored is shutting down: only kill and shutdown are accepted");
        }
        match command {
            Command::Help(topic) => match command::help::help(topic.as_deref()) {
                Ok(text) => Reply::Text(text),
                Err(unknown) => Reply::Error(unknown.to_string()),
            },
            Command::Status => self.status(now),
            Command::Hosts => self.hosts_table(),
            Command::Clusters => self.clusters_table(),
            Command::Queues => self.queues_table(),
            Command::Jobs { all, filter } => self.jobs_table(cred, all, &filter, now),
            Command::Job(id) => self.job_record(cred, JobId(id), now),
            // The event loop carries it out once the reply is known to be
            // allowed (rights, no shutdown under way).
            Command::Restart => Reply::Done("restarting in place".into()),
            // The journal is a file: the event loop answers this one.
            Command::History { .. } => Reply::error(
                "history reads the job journal, which only the running daemon keeps \
                     (and not with --no-journal)",
            ),
            Command::ClusterLimit { cluster, limits } => {
                self.cluster_limit(&cluster, &limits, now, out)
            }
            Command::QueueState { queue, action } => self.queue_state(queue, action, now, out),
            Command::QueueSet { queue, settings } => self.queue_set(queue, settings, now, dir, out),
            Command::Kill {
                jobs,
                filter,
                signal,
            } => self.kill(cred, &jobs, &filter, signal, now, out),
            Command::Suspend(job) => self.suspend_command(cred, JobId(job)),
            Command::Resume(job) => self.resume_command(cred, JobId(job)),
            Command::Move { job, queue } => self.move_command(JobId(job), queue, now),
            Command::Timeslice(None) => Reply::Record(vec![(
                "timeslice".into(),
                Value::Duration(self.logged.config.timeslice),
            )]),
            Command::Timeslice(Some(slice)) => {
                if slice < Duration::from_millis(1) {
                    return Reply::error("the time slice must be at least 1ms");
                }
                self.logged.config.get_mut().timeslice = slice;
                self.sched.restart_slices(now, slice);
                Reply::Done(format!("timeslice: {}", format_duration(slice)))
            }
            Command::Shutdown { now: kill } => {
                let plural = |n: usize| if n == 1 { "" } else { "s" };
                let before = self.logged.jobs.len();
                let killing = self.shutdown(kill, now, out);
                let finishing = before - killing;
                Reply::Done(if kill {
                    format!(
                        "shutting down now: killing {killing} job{}",
                        plural(killing)
                    )
                } else if killing == 0 {
                    format!(
                        "shutting down: waiting for {finishing} job{} to finish",
                        plural(finishing)
                    )
                } else {
                    format!(
                        "shutting down: waiting for {finishing} job{} to finish, killing {killing} held or unscheduled job{}",
                        plural(finishing),
                        plural(killing)
                    )
                })
            }
        }
    }

    /// `cluster C limit ...`.
    fn cluster_limit(
        &mut self,
        cluster: &command::ClusterRef,
        limits: &command::ClusterLimits,
        now: Tick,
        out: &mut Vec<Action>,
    ) -> Reply {
        let Some(id) = self.logged.topology.find_cluster(cluster) else {
            let line = command::parse::render(&command::Command::ClusterLimit {
                cluster: cluster.clone(),
                limits: limits.clone(),
            });
            return Reply::error(format!(
                "no cluster {} in '{line}': {}",
                describe_cluster_ref(cluster),
                self.describe_clusters()
            ));
        };
        let current = &mut self.limits[id.idx()];
        apply(&mut current.memory, limits.memory);
        apply(&mut current.disk, limits.disk);
        apply(&mut current.jobs, limits.jobs);
        let summary = describe_limits(current);
        let name = self.logged.topology.cluster(id).name.clone();
        let warnings = self.limit_warnings(id, limits);
        self.admit_waiters(now, out);
        Reply::Done(format!("cluster {name}: {summary}{warnings}"))
    }

    /// `queue Q enable|disable|activate|deactivate`.
    fn queue_state(
        &mut self,
        queue: u32,
        action: QueueAction,
        now: Tick,
        out: &mut Vec<Action>,
    ) -> Reply {
        let Some(record) = self.logged.queues.get_mut(queue as usize) else {
            return self.no_queue(queue);
        };
        match action {
            QueueAction::Enable => record.enabled = true,
            QueueAction::Disable => record.enabled = false,
            QueueAction::Activate => {
                record.enabled = true;
                record.activated = true;
            }
            QueueAction::Deactivate => record.activated = false,
        }
        let state = record.state_word();
        let scheduling = if record.activated {
            "scheduled"
        } else {
            "not scheduled"
        };
        self.admit_waiters(now, out);
        Reply::Done(format!("queue {queue}: {state} (jobs {scheduling})"))
    }

    /// `suspend ID`: the owner's or an operator's hold.
    fn suspend_command(&mut self, cred: &Cred, id: JobId) -> Reply {
        let job = id.0;
        let operator = self.is_operator(cred);
        if let Err(reply) = self.may_touch(cred, id) {
            return reply;
        }
        let record = self.logged.jobs.get_mut(&id).expect("checked");
        if record.is_ending() {
            return Reply::error(format!("job {job} is ending"));
        }
        let by = if operator {
            record.operator_hold = true;
            "operator"
        } else {
            record.owner_hold = true;
            "owner"
        };
        self.journal(JobEvent::Held { job: id, by });
        Reply::Done(format!("job {job}: held"))
    }

    /// `resume ID`: an operator releases any hold, an owner their own.
    fn resume_command(&mut self, cred: &Cred, id: JobId) -> Reply {
        let job = id.0;
        let operator = self.is_operator(cred);
        if let Err(reply) = self.may_touch(cred, id) {
            return reply;
        }
        let record = self.logged.jobs.get_mut(&id).expect("checked");
        if !record.held() {
            return Reply::error(format!("job {job} is not held"));
        }
        if operator {
            record.operator_hold = false;
            record.owner_hold = false;
        } else {
            if record.operator_hold {
                return Reply::error(format!(
                    "job {job} is held by an operator; only an operator can resume it"
                ));
            }
            record.owner_hold = false;
        }
        self.journal(JobEvent::Released(id));
        Reply::Done(format!("job {job}: released"))
    }

    /// `move ID Q`.
    fn move_command(&mut self, id: JobId, queue: u32, now: Tick) -> Reply {
        let job = id.0;
        if !self.logged.jobs.contains_key(&id) {
            return self.no_job(id);
        }
        if queue as usize >= self.logged.queues.len() {
            return self.no_queue(queue);
        }
        if self.logged.jobs[&id].queue == queue {
            return Reply::error(format!("job {job} is already in queue {queue}"));
        }
        let from = self.logged.jobs[&id].queue;
        self.move_job(id, queue, now);
        self.journal(JobEvent::Moved {
            job: id,
            from,
            to: queue,
            by: "operator",
        });
        Reply::Done(format!("job {job}: moved to queue {queue}"))
    }

    /// The answer to a command that needs an admitted job, for a job of
    /// the backlog.
    fn not_admitted(&self, id: JobId) -> Option<Reply> {
        let (entry, _) = self.logged.backlog.entry_of(id)?;
        self.logged.backlog.holds(id).then(|| {
            Reply::error(format!(
                "job {id} is not admitted yet ({}): kill ends it",
                entry.why()
            ))
        })
    }

    pub(super) fn no_job(&self, id: JobId) -> Reply {
        if let Some(reply) = self.not_admitted(id) {
            return reply;
        }
        if self.logged.finished.iter().any(|done| done.job.id == id)
            || self.logged.ends.ended.iter().any(|ended| ended.id == id)
            || self.logged.ends.outcome(id).is_some()
        {
            Reply::error(format!("job {id} has already ended"))
        } else {
            Reply::error(format!("no job {id}"))
        }
    }

    fn no_queue(&self, queue: u32) -> Reply {
        Reply::error(format!(
            "no queue {queue}: queues are 0 to {}",
            self.logged.queues.len().saturating_sub(1)
        ))
    }

    /// Whether `cred` may kill, hold or release job `id`: the operator or the owner.
    /// Warnings about cluster limits that were accepted but may not be
    /// meant: memory above the machine's, disk above the free space
    /// measured at start. Each is a line of its own, `warning: ...`.
    fn limit_warnings(&self, id: crate::ids::ClusterId, limits: &command::ClusterLimits) -> String {
        let mut text = String::new();
        if let (Some(Setting::Set(memory)), Some(machine)) =
            (&limits.memory, self.logged.config.machine_memory)
        {
            if *memory > machine {
                text.push_str(&format!(
                    "\nwarning: memory {} per host is more than this machine's memory ({}); accepted as given",
                    format_size(*memory),
                    format_size(machine)
                ));
            }
        }
        if let (Some(Setting::Set(disk)), Some(Some(free))) =
            (&limits.disk, self.logged.config.disk.get(id.idx()))
        {
            if disk > free {
                text.push_str(&format!(
                    "\nwarning: disk {} is more than the free space of the cluster's filesystems at start ({}); accepted as given",
                    format_size(*disk),
                    format_size(*free)
                ));
            }
        }
        text
    }

    fn may_touch(&self, cred: &Cred, id: JobId) -> Result<(), Reply> {
        let Some(job) = self.logged.jobs.get(&id) else {
            return Err(self.no_job(id));
        };
        if self.is_operator(cred) || job.owner.uid == cred.uid {
            Ok(())
        } else {
            Err(Reply::error(format!(
                "permission denied: job {id} belongs to another user"
            )))
        }
    }

    fn queue_set(
        &mut self,
        queue: u32,
        settings: command::QueueSettings,
        now: Tick,
        dir: &dyn Directory,
        out: &mut Vec<Action>,
    ) -> Reply {
        if queue as usize >= self.logged.queues.len() {
            return self.no_queue(queue);
        }
        // Resolve everything first, so that an error changes nothing.
        let group = match &settings.group {
            Some(Setting::Set(group)) => match dir.group(group) {
                Ok(resolved) => Some(Some(resolved)),
                Err(error) => return Reply::error(error.to_string()),
            },
            Some(Setting::Clear) => Some(None),
            None => None,
        };
        let started_in_order: Vec<JobId> = {
            let mut started: Vec<&Job> = self
                .logged
                .jobs
                .values()
                .filter(|job| job.queue == queue && job.started())
                .collect();
            started.sort_by_key(|job| job.first_run_at());
            started.into_iter().map(|job| job.id).collect()
        };
        let mut after = self.logged.queues[queue as usize].clone();
        if let Some(mode) = settings.mode {
            after.mode = mode;
        }
        match settings.mpl {
            Some(Setting::Set(level)) => after.mpl = Some(level),
            Some(Setting::Clear) => after.mpl = None,
            // `mode=gang` brings the mode's level unless one is given.
            None if settings.mode == Some(QueueMode::Gang) => after.mpl = Some(DEFAULT_MPL),
            None => {}
        }
        if after.starts_late() {
            // A queue that chooses a job's hosts when it starts (exclusive,
            // or gang with a level): jobs that have not started give back
            // the hosts admission chose.
            let unstarted: Vec<JobId> = self.logged.queues[queue as usize]
                .order()
                .filter(|job| {
                    self.logged
                        .jobs
                        .get(job)
                        .is_some_and(|record| !record.started())
                })
                .collect();
            for job in unstarted {
                self.unbind(job);
            }
        }
        let record = &mut self.logged.queues[queue as usize];
        if settings.mode.is_some() || settings.mpl.is_some() {
            record.set_mode(after.mode);
            record.set_mpl(after.mpl);
            for job in &started_in_order {
                record.mark_started(*job);
            }
        }
        if let Some(backfill) = settings.backfill {
            record.backfill = backfill;
        }
        if let Some(share) = settings.share {
            record.share = share;
        }
        match settings.fairshare {
            Some(Setting::Set(half_life)) => record.fairshare = Some(half_life),
            Some(Setting::Clear) => {
                record.fairshare = None;
                record.usage = Default::default();
            }
            None => {}
        }
        apply(&mut record.cputime, settings.cputime);
        apply(&mut record.residency, settings.residency);
        apply(&mut record.memory_pct, settings.memory);
        apply(&mut record.disk_pct, settings.disk);
        if let Some(group) = group {
            record.group = group.as_ref().map(|(gid, _)| *gid);
            self.group_names_set(queue, group.and_then(|(_, name)| name));
        }
        self.order_by_usage(queue as usize, now);
        self.admit_waiters(now, out);
        let record = &self.logged.queues[queue as usize];
        Reply::Done(format!("queue {queue}: {}", describe_queue(record)))
    }

    fn group_names_set(&mut self, queue: u32, name: Option<String>) {
        self.logged.queues[queue as usize].group_name = name;
    }
}

fn apply<T>(slot: &mut Option<T>, setting: Option<Setting<T>>) {
    match setting {
        Some(Setting::Set(value)) => *slot = Some(value),
        Some(Setting::Clear) => *slot = None,
        None => {}
    }
}

impl Core {
    /// The clusters there are, by index and name, for an error that names
    /// one that is not: `clusters are 0 (x86) and 1 (arm)`.
    fn describe_clusters(&self) -> String {
        /// Beyond this many, the range of indexes alone.
        const NAMED: usize = 8;
        let clusters = &self.logged.topology.clusters;
        let named: Vec<String> = clusters
            .iter()
            .enumerate()
            .map(|(idx, cluster)| format!("{idx} ({})", cluster.name))
            .collect();
        match named.as_slice() {
            [] => "there is no cluster".to_string(),
            [only] => format!("the only cluster is {only}"),
            [first @ .., last] if named.len() <= NAMED => {
                format!("clusters are {} and {last}", first.join(", "))
            }
            _ => format!("clusters are 0 to {}", clusters.len() - 1),
        }
    }
}

fn describe_cluster_ref(cluster: &command::ClusterRef) -> String {
    match cluster {
        command::ClusterRef::Index(idx) => idx.to_string(),
        command::ClusterRef::Name(name) => format!("'{name}'"),
    }
}

fn describe_limits(limits: &ClusterLimits) -> String {
    format!(
        "memory {} per host, disk {}, jobs {}",
        limits.memory.map_or("unlimited".into(), format_size),
        limits.disk.map_or("unlimited".into(), format_size),
        limits.jobs.map_or("unlimited".into(), |n| n.to_string()),
    )
}

fn describe_queue(queue: &Queue) -> String {
    let opt_duration = |value: Option<Duration>| value.map_or("none".to_string(), format_duration);
    let opt_pct = |value: Option<f64>| value.map_or("none".to_string(), |pct| format!("{pct}%"));
    format!(
        "mode={} cputime={} residency={} memory={} disk={} group={} backfill={} mpl={} share={} fairshare={}",
        queue.mode.as_str(),
        opt_duration(queue.cputime),
        opt_duration(queue.residency),
        opt_pct(queue.memory_pct),
        opt_pct(queue.disk_pct),
        if queue.group.is_some() {
            queue_group_name(queue)
        } else {
            "none".to_string()
        },
        if queue.backfill { "on" } else { "off" },
        queue
            .mpl
            .map_or("none".to_string(), |level| level.to_string()),
        queue.share.as_str(),
        opt_duration(queue.fairshare),
    )
}

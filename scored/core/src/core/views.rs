//! The console's views of the core: the tables and records of `status`,
//! `hosts`, `clusters`, `queues`, `jobs` and `job ID`, and the fields of a
//! job that the job journal and notifications share.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use super::backlog::batch_fields;
use super::{Core, Ending};
use crate::ids::{Cred, JobId, Tick};
use crate::job::{Job, JobState, Joiner};
use crate::queue::Queue;
use scored_proto::command::reply::{Reply, Table, Value};
use scored_proto::command::JobFilter;

impl Core {
    pub(super) fn status(&self, now: Tick) -> Reply {
        let mut counts: BTreeMap<&'static str, u64> = BTreeMap::new();
        for job in self.logged.jobs.values() {
            *counts.entry(job.state().as_str()).or_default() += 1;
        }
        let waiting: u32 = self
            .logged
            .backlog
            .entries
            .values()
            .map(|entry| entry.n_waiting())
            .sum();
        if waiting > 0 {
            counts.insert("waiting", u64::from(waiting));
        }
        let jobs_value = Value::Map(
            ["running", "stopped", "queued", "held", "ending", "waiting"]
                .iter()
                .map(|state| {
                    (
                        state.to_string(),
                        Value::Uint(counts.get(state).copied().unwrap_or(0)),
                    )
                })
                .collect(),
        );
        let mut recent: Vec<Duration> = self.switches.recent.iter().copied().collect();
        recent.sort_unstable();
        let median = recent.get(recent.len() / 2).copied();
        let reserved_memory: u64 = self.logged.ledger.host_memory.iter().sum();
        let reserved_disk: u64 = self.logged.ledger.cluster_disk.iter().sum();
        Reply::Record(vec![
            ("uptime".into(), Value::Duration(now.since(Tick::default()))),
            ("version".into(), Value::text(&self.build.0)),
            ("restarts".into(), Value::Uint(self.build.1)),
            (
                "state".into(),
                Value::text(match (&self.state_dir_problem, self.shutting_down) {
                    (_, true) => "shutting down".to_string(),
                    (Some(problem), false) => format!("not accepting jobs: {problem}"),
                    (None, false) => "accepting jobs".to_string(),
                }),
            ),
            (
                "timeslice".into(),
                Value::Duration(self.logged.config.timeslice),
            ),
            (
                "clusters".into(),
                Value::Map(vec![
                    (
                        "count".into(),
                        Value::Uint(self.logged.topology.clusters.len() as u64),
                    ),
                    (
                        "hosts".into(),
                        Value::Uint(self.logged.topology.hosts.len() as u64),
                    ),
                ]),
            ),
            (
                "queues".into(),
                Value::List(
                    self.logged
                        .queues
                        .iter()
                        .map(|queue| {
                            Value::text(format!("{}:{}", queue.number, queue.state_word()))
                        })
                        .collect(),
                ),
            ),
            ("jobs".into(), jobs_value),
            (
                "waiting".into(),
                Value::Uint(self.logged.waiting.len() as u64),
            ),
            (
                "finished".into(),
                Value::Uint(self.logged.finished.len() as u64),
            ),
            (
                "reserved".into(),
                Value::Map(vec![
                    ("memory".into(), Value::Size(reserved_memory)),
                    ("disk".into(), Value::Size(reserved_disk)),
                ]),
            ),
            ("switches".into(), Value::Uint(self.switches.count)),
            (
                "switch latency".into(),
                Value::Map(vec![
                    ("median".into(), Value::opt(median.map(Value::Duration))),
                    (
                        "max".into(),
                        Value::opt(
                            (!recent.is_empty()).then_some(Value::Duration(self.switches.max)),
                        ),
                    ),
                ]),
            ),
        ])
    }

    pub(super) fn hosts_table(&self) -> Reply {
        let mut table = Table::new(&[
            "host", "name", "cluster", "cpus", "cores", "speed", "memory", "jobs", "running",
            "state",
        ]);
        let mut admitted = vec![0u64; self.logged.topology.hosts.len()];
        for job in self.logged.jobs.values() {
            for host in &job.hosts {
                admitted[host.idx()] += 1;
            }
        }
        let mut running: Vec<Option<JobId>> = vec![None; self.logged.topology.hosts.len()];
        for job in &self.logged.live {
            for host in &self.logged.jobs[&job].hosts {
                running[host.idx()] = Some(job);
            }
        }
        for host in &self.logged.topology.hosts {
            let busy = running[host.id.idx()];
            table.push(vec![
                Value::Uint(u64::from(host.id.0)),
                Value::text(&host.name),
                Value::text(&self.logged.topology.cluster(host.cluster).name),
                Value::text(host.cpus.to_string()),
                Value::Uint(u64::from(host.cores)),
                Value::Float(host.speed),
                Value::Size(host.memory),
                Value::Uint(admitted[host.id.idx()]),
                Value::opt(busy.map(|job| Value::Uint(job.0))),
                Value::text(if busy.is_some() { "busy" } else { "idle" }),
            ]);
        }
        Reply::Table(table)
    }

    pub(super) fn clusters_table(&self) -> Reply {
        let mut table = Table::new(&[
            "cluster",
            "name",
            "hosts",
            "cores",
            "speed",
            "memory",
            "memory reserved",
            "disk",
            "disk reserved",
            "jobs",
            "jobs limit",
        ]);
        for cluster in &self.logged.topology.clusters {
            let limits = self.limits[cluster.id.idx()];
            let reserved_memory = cluster
                .hosts
                .iter()
                .map(|host| self.logged.ledger.host_memory[host.idx()])
                .max()
                .unwrap_or(0);
            table.push(vec![
                Value::Uint(u64::from(cluster.id.0)),
                Value::text(&cluster.name),
                Value::Uint(cluster.hosts.len() as u64),
                Value::Uint(u64::from(cluster.cores)),
                Value::Float(cluster.speed),
                Value::opt(limits.memory.map(Value::Size)),
                Value::Size(reserved_memory),
                Value::opt(limits.disk.map(Value::Size)),
                Value::Size(self.logged.ledger.cluster_disk[cluster.id.idx()]),
                Value::Uint(self.logged.ledger.cluster_jobs[cluster.id.idx()]),
                Value::opt(limits.jobs.map(Value::Uint)),
            ]);
        }
        Reply::Table(table)
    }

    pub(super) fn queues_table(&self) -> Reply {
        let mut table = Table::new(&[
            "queue",
            "state",
            "scheduled",
            "mode",
            "cputime",
            "residency",
            "memory",
            "disk",
            "group",
            "backfill",
            "mpl",
            "share",
            "fairshare",
            "queued",
            "running",
            "stopped",
            "held",
        ]);
        for queue in &self.logged.queues {
            let mut counts = [0u64; 4];
            for job in queue.order().filter_map(|id| self.logged.jobs.get(&id)) {
                match job.state() {
                    JobState::Queued => counts[0] += 1,
                    JobState::Running | JobState::Ending => counts[1] += 1,
                    JobState::Stopped => counts[2] += 1,
                    JobState::Held => counts[3] += 1,
                    JobState::Waiting | JobState::Done | JobState::Killed => {}
                }
            }
            table.push(vec![
                Value::Uint(u64::from(queue.number)),
                Value::text(queue.state_word()),
                Value::Bool(queue.activated),
                Value::text(queue.mode.as_str()),
                Value::opt(queue.cputime.map(Value::Duration)),
                Value::opt(queue.residency.map(Value::Duration)),
                Value::opt(queue.memory_pct.map(Value::Percent)),
                Value::opt(queue.disk_pct.map(Value::Percent)),
                Value::opt(queue.group.map(|_| Value::text(queue_group_name(queue)))),
                Value::text(if queue.backfill { "on" } else { "off" }),
                Value::opt(queue.mpl.map(|level| Value::Uint(u64::from(level)))),
                Value::text(queue.share.as_str()),
                Value::opt(queue.fairshare.map(Value::Duration)),
                Value::Uint(counts[0]),
                Value::Uint(counts[1]),
                Value::Uint(counts[2]),
                Value::Uint(counts[3]),
            ]);
        }
        Reply::Table(table)
    }

    /// Whether `cred` may see what a job runs and how it ended (its
    /// command, exit status and reason, which may name its files): its
    /// owner, root and operators may; other users see only who runs what
    /// where and when (id, user, queue, state, hosts, usage and times).
    /// Whether `cred` may see the job's command, exit status and reason:
    /// its owner, root and operators may (the journal's readers in the loop
    /// ask the same question).
    fn may_see_details(&self, cred: &Cred, job: &Job) -> bool {
        self.is_operator(cred) || job.owner.uid == cred.uid
    }

    /// The refusal of a `--user U` that names no user: neither the user
    /// database nor any job scored knows a user of that name (a number is
    /// a uid, and always stands).
    pub(super) fn unknown_user(&self, filter: &JobFilter) -> Option<Reply> {
        let user = filter.user.as_deref()?;
        if user.parse::<u32>().is_ok() {
            return None;
        }
        let named = |name: &str| name == user;
        let on_a_job = self.logged.jobs.values().any(|job| named(&job.user))
            || self
                .logged
                .backlog
                .entries
                .values()
                .any(|entry| named(&entry.user))
            || self
                .logged
                .finished
                .iter()
                .any(|done| named(&done.job.user));
        // A user of a job is known without asking the user database, whose
        // lookup may be slow (a network directory) and holds the loop.
        if on_a_job {
            return None;
        }
        match self.directory.has_user(user) {
            Ok(true) => None,
            Ok(false) => Some(Reply::error(format!("--user: no user named '{user}'"))),
            Err(error) => Some(Reply::error(format!(
                "--user: cannot look up user '{user}': {error}"
            ))),
        }
    }

    /// The `jobs` listing as `cred` may see it (`all`: with the finished
    /// jobs the core remembers): admitted jobs, then those of the backlog.
    pub fn jobs_table(&self, cred: &Cred, all: bool, filter: &JobFilter, now: Tick) -> Reply {
        if let Some(refusal) = self.unknown_user(filter) {
            return refusal;
        }
        let mut table = Table::new(&[
            "id", "user", "name", "queue", "state", "procs", "hosts", "cpu", "wall", "exit",
            "command", "reason",
        ]);
        let detail = |shown: bool, value: Value| if shown { value } else { Value::None };
        if all {
            for done in &self.logged.finished {
                let job = &done.job;
                if !filter.matches(&job.user, job.owner.uid, &job.name(), done.state.as_str()) {
                    continue;
                }
                let details = self.may_see_details(cred, job);
                table.push(vec![
                    Value::Uint(job.id.0),
                    Value::text(&*done.job.user),
                    Value::text(job.name()),
                    Value::Uint(u64::from(job.queue)),
                    Value::text(done.state.as_str()),
                    Value::Uint(u64::from(job.nprocs())),
                    Value::text(self.host_names(job).join(",")),
                    Value::Duration(job.usage.cpu),
                    Value::Duration(done.ending.accounting.wall),
                    detail(details, Value::Int(i64::from(done.ending.status))),
                    detail(details, Value::text(&done.command)),
                    detail(details, Value::text(&done.ending.reason)),
                ]);
            }
            for ended in &self.logged.ends.ended {
                let details = self.is_operator(cred) || ended.uid == cred.uid;
                let field = |key: &str| {
                    ended
                        .fields
                        .iter()
                        .find(|(known, _)| known == key)
                        .map_or(Value::None, |(_, value)| value.clone())
                };
                let text = |key: &str| field(key).to_text();
                if !filter.matches(&text("user"), ended.uid, &text("name"), &text("state")) {
                    continue;
                }
                table.push(vec![
                    field("id"),
                    field("user"),
                    field("name"),
                    field("queue"),
                    field("state"),
                    field("procs"),
                    Value::text(""),
                    field("cpu"),
                    field("wall"),
                    detail(details, field("exit")),
                    detail(details, field("command")),
                    detail(details, field("reason")),
                ]);
            }
        }
        for job in self.logged.jobs.values() {
            let name = job.name();
            if !filter.matches(&job.user, job.owner.uid, &name, job.state().as_str()) {
                continue;
            }
            table.push(vec![
                Value::Uint(job.id.0),
                Value::text(&*job.user),
                Value::text(name),
                Value::Uint(u64::from(job.queue)),
                Value::text(job.state().as_str()),
                Value::Uint(u64::from(job.nprocs())),
                Value::text(self.host_names(job).join(",")),
                Value::Duration(job.usage.cpu),
                Value::Duration(
                    job.first_run_at()
                        .map_or(Duration::ZERO, |first| now.since(first)),
                ),
                Value::None,
                detail(
                    self.may_see_details(cred, job),
                    Value::text(command_line(job)),
                ),
                Value::None,
            ]);
        }
        for entry in self.logged.backlog.entries.values() {
            let state = JobState::Waiting.as_str();
            if !filter.matches(&entry.user, entry.cred.uid, &entry.name, state) {
                continue;
            }
            let details = self.is_operator(cred) || entry.cred.uid == cred.uid;
            let why = entry.why();
            let queue = self.entry_queue(entry);
            let procs = entry
                .request
                .as_deref()
                .map_or(0, |request| match request.procs {
                    crate::job::ProcRequest::Hosts(_) => 0,
                    _ => u64::from(request.procs_total()),
                });
            for k in entry.waiting() {
                table.push(vec![
                    Value::Uint(entry.submission.first.0 + u64::from(k)),
                    Value::text(&*entry.user),
                    Value::text(&*entry.name),
                    Value::Uint(u64::from(queue)),
                    Value::text(JobState::Waiting.as_str()),
                    Value::Uint(procs),
                    Value::text(""),
                    Value::Duration(Duration::ZERO),
                    Value::Duration(Duration::ZERO),
                    Value::None,
                    detail(details, Value::text(&*entry.command)),
                    Value::text(&why),
                ]);
            }
        }
        Reply::Table(table)
    }

    fn host_names(&self, job: &Job) -> Vec<String> {
        job.hosts
            .iter()
            .map(|host| self.logged.topology.host(*host).name.clone())
            .collect()
    }

    pub(super) fn job_record(&self, cred: &Cred, id: JobId, now: Tick) -> Reply {
        if let Some((entry, k)) = self.logged.backlog.entry_of(id) {
            if self.logged.backlog.holds(id) {
                let details = self.is_operator(cred) || entry.cred.uid == cred.uid;
                return Reply::Record(self.entry_fields(entry, k, None, now, details));
            }
        }
        if let Some(ended) = self.logged.ends.ended.iter().find(|ended| ended.id == id) {
            let details = self.is_operator(cred) || ended.uid == cred.uid;
            let mut fields = ended.fields.clone();
            if !details {
                for (key, value) in &mut fields {
                    if ["command", "exit", "reason", "output", "error"].contains(&key.as_str()) {
                        *value = Value::None;
                    }
                }
            }
            return Reply::Record(fields);
        }
        let (job, command, state, ending, end_time) = match self.logged.jobs.get(&id) {
            Some(job) => (job, command_line(job), job.state(), None, now),
            None => match self.logged.finished.iter().find(|done| done.job.id == id) {
                Some(done) => (
                    &done.job,
                    done.command.clone(),
                    done.state,
                    Some(&done.ending),
                    done.ended_at,
                ),
                None => return Reply::error(format!("no job {id}")),
            },
        };
        let details = self.may_see_details(cred, job);
        Reply::Record(self.job_fields(job, command, state, ending, end_time, details))
    }

    /// The facts `job ID` shows (and the journal keeps) about a job; without
    /// `details`, its command, exit status and reason are left out (shown as
    /// none), as they are to users other than its owner, root and operators.
    pub(super) fn job_fields(
        &self,
        job: &Job,
        command: String,
        state: JobState,
        ending: Option<&Ending>,
        end_time: Tick,
        details: bool,
    ) -> Vec<(String, Value)> {
        let wall = job
            .first_run_at()
            .map_or(Duration::ZERO, |first| end_time.since(first));
        let host_names = self.host_names(job);
        let mut fields = vec![
            ("id".to_string(), Value::Uint(job.id.0)),
            ("user".into(), Value::text(&*job.user)),
            ("uid".into(), Value::Uint(u64::from(job.owner.uid))),
            ("state".into(), Value::text(state.as_str())),
            ("queue".into(), Value::Uint(u64::from(job.queue))),
            (
                "queues".into(),
                Value::List(
                    job.queues_visited
                        .iter()
                        .map(|q| Value::Uint(u64::from(*q)))
                        .collect(),
                ),
            ),
            (
                "cluster".into(),
                Value::text(&self.logged.topology.cluster(job.cluster).name),
            ),
            (
                "hosts".into(),
                Value::List(host_names.iter().map(Value::text).collect()),
            ),
            ("procs".into(), Value::Uint(u64::from(job.nprocs()))),
            (
                "command".into(),
                if details {
                    Value::text(command)
                } else {
                    Value::None
                },
            ),
            (
                "held".into(),
                Value::text(match (job.operator_hold, job.owner_hold) {
                    (true, _) => "by an operator",
                    (false, true) => "by its owner",
                    (false, false) => "no",
                }),
            ),
            ("cpu".into(), Value::Duration(job.usage.cpu)),
            ("wall".into(), Value::Duration(wall)),
            ("run".into(), Value::Duration(job.run_time_at(end_time))),
            (
                "stopped".into(),
                Value::Duration(job.stopped_time(end_time)),
            ),
            (
                "wait".into(),
                Value::Duration(
                    job.first_run_at()
                        .unwrap_or(end_time)
                        .since(job.submitted_at),
                ),
            ),
            ("switches".into(), Value::Uint(job.switches)),
            (
                "memory".into(),
                Value::Map(
                    host_names
                        .iter()
                        .zip(job.usage.memory.iter().chain(std::iter::repeat(&0)))
                        .map(|(host, used)| (host.clone(), Value::Size(*used)))
                        .collect(),
                ),
            ),
            (
                "peak memory".into(),
                Value::Map(
                    host_names
                        .iter()
                        .zip(&job.peak_memory)
                        .map(|(host, peak)| (host.clone(), Value::Size(*peak)))
                        .collect(),
                ),
            ),
            ("disk".into(), Value::Size(job.usage.disk)),
            ("peak disk".into(), Value::Size(job.peak_disk)),
            (
                "cputime limit".into(),
                Value::opt(job.limits.cputime.map(Value::Duration)),
            ),
            (
                "memory limit".into(),
                Value::opt(job.limits.memory.map(Value::Size)),
            ),
            (
                "disk limit".into(),
                Value::opt(job.limits.disk.map(Value::Size)),
            ),
            (
                "residency".into(),
                Value::Duration(job.usage.cpu.saturating_sub(job.residency_base)),
            ),
        ];
        fields.extend(batch_fields(
            &job.name(),
            job.link().is_batch(),
            job.output_paths(),
            job.array(),
            job.submission
                .as_ref()
                .map_or(&[][..], |submission| &submission.batch.after),
            details,
        ));
        if let Some(why) = self.wait_reason(job, state) {
            fields.push(("waits".into(), Value::text(why)));
        }
        if let Some(ending) = ending {
            if details {
                fields.push(("exit".into(), Value::Int(i64::from(ending.status))));
                fields.push(("reason".into(), Value::text(&ending.reason)));
            } else {
                fields.push(("exit".into(), Value::None));
                fields.push(("reason".into(), Value::None));
            }
        }
        fields
    }
}

impl Core {
    /// Why a job that has not started, or is held, does not run now, in
    /// words for its owner and the operators (`job ID` shows it as
    /// `waits`, scrun says it when the job has waited a while); `None` for
    /// a job that runs, is switched out or has ended.
    pub(super) fn wait_reason(&self, job: &Job, state: JobState) -> Option<String> {
        if !matches!(state, JobState::Queued | JobState::Held) {
            return None;
        }
        if job.operator_hold {
            return Some("because an operator holds it".into());
        }
        if job.owner_hold {
            return Some("because its owner holds it".into());
        }
        let queue = self
            .logged
            .queues
            .iter()
            .find(|queue| queue.number == job.queue)?;
        if !queue.activated {
            return Some(format!("because queue {} is deactivated", job.queue));
        }
        let mut holders: Vec<String> = self
            .sched
            .active()
            .iter()
            .filter(|id| **id != job.id)
            .filter_map(|id| self.logged.jobs.get(id))
            .filter(|other| other.hosts.iter().any(|host| job.hosts.contains(host)))
            .map(|other| other.id.to_string())
            .collect();
        holders.truncate(8);
        Some(match holders.as_slice() {
            [] => "for its hosts".to_string(),
            [one] => format!("for its hosts, which job {one} holds"),
            many => format!("for its hosts, which jobs {} hold", many.join(", ")),
        })
    }
}

pub(super) fn queue_group_name(queue: &Queue) -> String {
    match (&queue.group_name, queue.group) {
        (Some(name), Some(gid)) => format!("{name}({gid})"),
        (_, Some(gid)) => gid.to_string(),
        _ => "-".to_string(),
    }
}

pub(super) fn command_line(job: &Job) -> String {
    stages_line(&job.spec.launch.stages(), job.spec.joiner)
}

/// A command line of stages as listings show it: joined by `::` or `==`,
/// cut to 60 characters.
pub(super) fn stages_line(stages: &[Vec<std::ffi::OsString>], joiner: Joiner) -> String {
    let sep = match joiner {
        Joiner::Sequence => " :: ",
        Joiner::Pipe => " == ",
    };
    let text = stages
        .iter()
        .map(|argv| {
            argv.iter()
                .map(|arg| arg.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join(sep);
    const MAX: usize = 60;
    if text.chars().count() > MAX {
        let mut short: String = text.chars().take(MAX - 3).collect();
        short.push_str("...");
        short
    } else {
        text
    }
}

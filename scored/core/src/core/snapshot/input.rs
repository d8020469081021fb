//! The core's inputs as data, for the daemon's log of what it fed the core
//! since its last snapshot: after a crash the next daemon restores the
//! snapshot and feeds the logged inputs again, with their ticks, and the
//! core (a function of its inputs) comes back to where it was.
//!
//! Like the snapshot's types, these are the boundary: the core's own types
//! carry no serde derives (STYLE 1.8). A console command travels as its
//! canonical text (`command::parse::render`, which `parse_line` reads
//! back to the same command); a submission as the request parts the
//! snapshot keeps for a waiting client ([`RequestSnapshot`]).
#![forbid(unsafe_code)]

use std::rc::Rc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::restore::{cred_in, from_us, status_in};
use super::{
    cred_out, status_out, us, CredSnapshot, RequestSnapshot, RestoreError, StatusSnapshot,
};
use crate::core::{Input, Outcome};
use crate::ids::{ClientToken, JobId, Tick};
use crate::job::Usage;
use scored_proto::command::parse::render;
use scored_proto::command::parse_line;

/// One input to the core, as the daemon's log keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "in", rename_all = "snake_case")]
pub enum InputRecord {
    /// [`Input::StateDir`].
    StateDir {
        /// The problem, or `None` once it works again.
        problem: Option<String>,
    },
    /// [`Input::Submit`].
    Submit {
        /// The submitting connection.
        client: u64,
        /// Its credentials.
        cred: CredSnapshot,
        /// Its user's name.
        user: String,
        /// The job.
        request: Box<RequestSnapshot>,
    },
    /// [`Input::KnownEnd`].
    KnownEnd {
        /// The job.
        job: u64,
        /// Its owner.
        owner: u32,
        /// How it failed; none for a success.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<String>,
    },
    /// [`Input::ClientGone`].
    ClientGone {
        /// The connection.
        client: u64,
    },
    /// [`Input::Hold`].
    Hold {
        /// The connection.
        client: u64,
    },
    /// [`Input::Release`].
    Release {
        /// The connection.
        client: u64,
    },
    /// [`Input::Interrupt`].
    Interrupt {
        /// The connection.
        client: u64,
    },
    /// [`Input::Deliver`].
    Deliver {
        /// The connection.
        client: u64,
        /// The signal.
        signal: i32,
    },
    /// [`Input::Stopped`].
    Stopped {
        /// The job.
        job: u64,
    },
    /// [`Input::RankExited`].
    RankExited {
        /// The job.
        job: u64,
        /// The rank's stage.
        stage: usize,
        /// The rank.
        rank: u32,
        /// How it ended.
        status: StatusSnapshot,
    },
    /// [`Input::SpawnFailed`].
    SpawnFailed {
        /// The job.
        job: u64,
        /// What failed.
        message: String,
        /// The status.
        status: i32,
    },
    /// [`Input::ProcessesGone`].
    ProcessesGone {
        /// The job.
        job: u64,
    },
    /// [`Input::EndedAway`].
    EndedAway {
        /// The job.
        job: u64,
        /// How long ago (µs).
        ago_us: u64,
    },
    /// [`Input::StopFailed`].
    StopFailed {
        /// The job.
        job: u64,
        /// Why.
        reason: String,
    },
    /// [`Input::Usage`].
    Usage {
        /// The job.
        job: u64,
        /// CPU time, µs.
        cpu_us: u64,
        /// Memory per host.
        memory: Vec<u64>,
        /// Disk use.
        disk: u64,
        /// Of `disk`, the program files.
        #[serde(default)]
        programs: u64,
    },
    /// [`Input::FinalUsage`].
    FinalUsage {
        /// The job.
        job: u64,
        /// CPU time, µs.
        cpu_us: u64,
        /// Peak memory per host slot.
        peak_memory: Vec<u64>,
        /// Disk use.
        disk: u64,
    },
    /// [`Input::SwitchMeasured`].
    SwitchMeasured {
        /// The switch.
        id: u64,
        /// Its latency, µs.
        latency_us: u64,
    },
    /// [`Input::Tick`].
    Tick,
    /// [`Input::Console`].
    Console {
        /// Who gets the reply.
        client: u64,
        /// Who asks.
        cred: CredSnapshot,
        /// The command, in canonical console syntax.
        line: String,
    },
    /// [`Input::Shutdown`].
    Shutdown {
        /// Kill the jobs.
        now: bool,
    },
    /// [`Input::Takeover`].
    Takeover {
        /// Until when a scrun may reattach (µs).
        reattach_until: u64,
        /// Jobs whose scrun was found gone.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        gone: Vec<u64>,
    },
    /// [`Input::KeeperEnded`].
    KeeperEnded {
        /// The job.
        job: u64,
        /// Why.
        reason: String,
    },
    /// [`Input::ProcessesLost`].
    ProcessesLost {
        /// The job.
        job: u64,
        /// What happened.
        reason: String,
    },
    /// [`Input::Reattach`].
    Reattach {
        /// The connection.
        client: u64,
        /// Its credentials.
        cred: CredSnapshot,
        /// The job.
        job: u64,
    },
}

impl InputRecord {
    /// The record of `input`.
    pub fn of(input: &Input) -> InputRecord {
        match input {
            Input::StateDir(problem) => InputRecord::StateDir {
                problem: problem.clone(),
            },
            Input::Submit {
                client,
                cred,
                user,
                request,
            } => InputRecord::Submit {
                client: client.0,
                cred: cred_out(cred),
                user: user.to_string(),
                request: Box::new(RequestSnapshot::of(request)),
            },
            Input::KnownEnd {
                job,
                owner,
                outcome,
            } => InputRecord::KnownEnd {
                job: job.0,
                owner: *owner,
                failure: match outcome {
                    Outcome::Success => None,
                    Outcome::Failure(how) => Some(how.clone()),
                },
            },
            Input::ClientGone(client) => InputRecord::ClientGone { client: client.0 },
            Input::Hold(client) => InputRecord::Hold { client: client.0 },
            Input::Release(client) => InputRecord::Release { client: client.0 },
            Input::Interrupt(client) => InputRecord::Interrupt { client: client.0 },
            Input::Deliver { client, signal } => InputRecord::Deliver {
                client: client.0,
                signal: *signal,
            },
            Input::Stopped(job) => InputRecord::Stopped { job: job.0 },
            Input::RankExited {
                job,
                stage,
                rank,
                status,
            } => InputRecord::RankExited {
                job: job.0,
                stage: *stage,
                rank: *rank,
                status: status_out(*status),
            },
            Input::SpawnFailed {
                job,
                message,
                status,
            } => InputRecord::SpawnFailed {
                job: job.0,
                message: message.clone(),
                status: *status,
            },
            Input::ProcessesGone(job) => InputRecord::ProcessesGone { job: job.0 },
            Input::EndedAway { job, ago } => InputRecord::EndedAway {
                job: job.0,
                ago_us: ago.as_micros() as u64,
            },
            Input::StopFailed { job, reason } => InputRecord::StopFailed {
                job: job.0,
                reason: reason.clone(),
            },
            Input::Usage { job, usage } => InputRecord::Usage {
                job: job.0,
                cpu_us: us(usage.cpu),
                memory: usage.memory.to_vec(),
                disk: usage.disk,
                programs: usage.programs,
            },
            Input::FinalUsage {
                job,
                cpu,
                peak_memory,
                disk,
            } => InputRecord::FinalUsage {
                job: job.0,
                cpu_us: us(*cpu),
                peak_memory: peak_memory.clone(),
                disk: *disk,
            },
            Input::SwitchMeasured { id, latency } => InputRecord::SwitchMeasured {
                id: *id,
                latency_us: us(*latency),
            },
            Input::Tick => InputRecord::Tick,
            Input::Console {
                client,
                cred,
                command,
            } => InputRecord::Console {
                client: client.0,
                cred: cred_out(cred),
                line: render(command),
            },
            Input::Shutdown { now } => InputRecord::Shutdown { now: *now },
            Input::Takeover {
                reattach_until,
                gone,
            } => InputRecord::Takeover {
                reattach_until: reattach_until.0,
                gone: gone.iter().map(|job| job.0).collect(),
            },
            Input::KeeperEnded { job, reason } => InputRecord::KeeperEnded {
                job: job.0,
                reason: reason.clone(),
            },
            Input::ProcessesLost { job, reason } => InputRecord::ProcessesLost {
                job: job.0,
                reason: reason.clone(),
            },
            Input::Reattach { client, cred, job } => InputRecord::Reattach {
                client: client.0,
                cred: cred_out(cred),
                job: job.0,
            },
        }
    }

    /// The input again; an error names what does not read back.
    pub fn into_input(self) -> Result<Input, RestoreError> {
        Ok(match self {
            InputRecord::StateDir { problem } => Input::StateDir(problem),
            InputRecord::Submit {
                client,
                cred,
                user,
                request,
            } => Input::Submit {
                client: ClientToken(client),
                cred: cred_in(cred),
                user: Rc::from(user.as_str()),
                request: Box::new((*request).into_request()?),
            },
            InputRecord::KnownEnd {
                job,
                owner,
                failure,
            } => Input::KnownEnd {
                job: JobId(job),
                owner,
                outcome: failure.map_or(Outcome::Success, Outcome::Failure),
            },
            InputRecord::ClientGone { client } => Input::ClientGone(ClientToken(client)),
            InputRecord::Hold { client } => Input::Hold(ClientToken(client)),
            InputRecord::Release { client } => Input::Release(ClientToken(client)),
            InputRecord::Interrupt { client } => Input::Interrupt(ClientToken(client)),
            InputRecord::Deliver { client, signal } => Input::Deliver {
                client: ClientToken(client),
                signal,
            },
            InputRecord::Stopped { job } => Input::Stopped(JobId(job)),
            InputRecord::RankExited {
                job,
                stage,
                rank,
                status,
            } => Input::RankExited {
                job: JobId(job),
                stage,
                rank,
                status: status_in(&status),
            },
            InputRecord::SpawnFailed {
                job,
                message,
                status,
            } => Input::SpawnFailed {
                job: JobId(job),
                message,
                status,
            },
            InputRecord::ProcessesGone { job } => Input::ProcessesGone(JobId(job)),
            InputRecord::EndedAway { job, ago_us } => Input::EndedAway {
                job: JobId(job),
                ago: std::time::Duration::from_micros(ago_us),
            },
            InputRecord::StopFailed { job, reason } => Input::StopFailed {
                job: JobId(job),
                reason,
            },
            InputRecord::Usage {
                job,
                cpu_us,
                memory,
                disk,
                programs,
            } => Input::Usage {
                job: JobId(job),
                usage: Usage {
                    cpu: from_us(cpu_us),
                    memory: memory.into(),
                    disk,
                    programs,
                },
            },
            InputRecord::FinalUsage {
                job,
                cpu_us,
                peak_memory,
                disk,
            } => Input::FinalUsage {
                job: JobId(job),
                cpu: from_us(cpu_us),
                peak_memory,
                disk,
            },
            InputRecord::SwitchMeasured { id, latency_us } => Input::SwitchMeasured {
                id,
                latency: Duration::from_micros(latency_us),
            },
            InputRecord::Tick => Input::Tick,
            InputRecord::Console { client, cred, line } => {
                let command = match parse_line(&line) {
                    Ok(Some(command)) => command,
                    _ => return Err(RestoreError::Input("a console line does not parse")),
                };
                Input::Console {
                    client: ClientToken(client),
                    cred: cred_in(cred),
                    command: Box::new(command),
                }
            }
            InputRecord::Shutdown { now } => Input::Shutdown { now },
            InputRecord::Takeover {
                reattach_until,
                gone,
            } => Input::Takeover {
                reattach_until: Tick(reattach_until),
                gone: gone.into_iter().map(JobId).collect(),
            },
            InputRecord::KeeperEnded { job, reason } => Input::KeeperEnded {
                job: JobId(job),
                reason,
            },
            InputRecord::ProcessesLost { job, reason } => Input::ProcessesLost {
                job: JobId(job),
                reason,
            },
            InputRecord::Reattach { client, cred, job } => Input::Reattach {
                client: ClientToken(client),
                cred: cred_in(cred),
                job: JobId(job),
            },
        })
    }
}

//! The event loop's part of keeping jobs across restarts: the job journal
//! (records appended after each event, `history`, `jobs all` and `job ID`
//! of finished jobs), and the in-place restart (`restart`, SIGUSR2, a
//! panic caught around an event), which hands the daemon's whole state to
//! a new image of the binary in the same process and takes it over there.
//!
//! Kept apart from the loop's own work (connections, signals, the core's
//! actions) so that the two can change independently; it never blocks
//! longer than writing the state and the new binary's check take.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use mio::net::UnixStream;
use mio::{Interest, Token};

use super::{queue_reply, Connection, Daemon, Event, FIRST_CLIENT};
use crate::actuator::{Actuator, JobStdio};
use crate::command;
use crate::core::{Core, Input};
use crate::ids::{Cred, JobId, Tick};
use crate::journal::Journal;
use crate::proto::Reply;

/// What an in-place restart needs to know.
#[derive(Debug, Clone)]
pub struct RestartSetup {
    /// The binary to execute: the path scored was started from (not
    /// /proc/self/exe, which names the old file once it is replaced).
    pub exe: PathBuf,
    /// The arguments scored was started with.
    pub args: Vec<std::ffi::OsString>,
    /// The state directory (the handover file goes there).
    pub state_dir: PathBuf,
    /// In-place restarts so far.
    pub restarts: u64,
}

impl<A: Actuator> Daemon<A> {
    /// Lets the daemon restart in place (`restart`, SIGUSR2, a caught panic).
    pub fn with_restart(mut self, setup: RestartSetup) -> Daemon<A> {
        self.restart = Some(setup);
        self
    }

    /// Takes over the connections an earlier image of this process handed
    /// over, with the core's clock carrying on from `tick_us`.
    pub fn resume(
        mut self,
        snapshot: crate::handover::ConnectionsSnapshot,
        tick_us: u64,
    ) -> io::Result<Daemon<A>> {
        use crate::actuator::sys::adopt_descriptor;
        let now = Instant::now();
        self.start = now
            .checked_sub(Duration::from_micros(tick_us))
            .unwrap_or(now);
        let mut shared: HashMap<RawFd, Rc<OwnedFd>> = HashMap::new();
        for record in snapshot.connections {
            let token = Token(record.token);
            let stream = std::os::unix::net::UnixStream::from(adopt_descriptor(record.fd)?);
            stream.set_nonblocking(true)?;
            let mut stream = UnixStream::from_std(stream);
            let writing = !record.output.is_empty();
            let interest = if writing {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            self.poll
                .registry()
                .register(&mut stream, token, interest)?;
            let fds = record
                .fds
                .into_iter()
                .map(adopt_descriptor)
                .collect::<io::Result<Vec<_>>>()?;
            let mut take = |raw: RawFd| -> io::Result<Rc<OwnedFd>> {
                if let Some(fd) = shared.get(&raw) {
                    return Ok(fd.clone());
                }
                // The previous image already kept one descriptor per open
                // file description; comparing each with the pool again
                // (kcmp) would cost a restart time quadratic in the jobs.
                let fd = Rc::new(adopt_descriptor(raw)?);
                shared.insert(raw, fd.clone());
                Ok(fd)
            };
            let stdio = match record.stdio {
                Some([stdin, stdout, stderr]) => {
                    // A standard descriptor the client had closed is -1.
                    let mut standard = |raw: RawFd| (raw >= 0).then(|| take(raw)).transpose();
                    Some(JobStdio {
                        stdin: standard(stdin)?,
                        stdout: standard(stdout)?,
                        stderr: standard(stderr)?,
                        controlling_terminal: record.controlling_terminal,
                        inherited: record
                            .inherited
                            .iter()
                            .map(|&(target, raw)| Ok((target, take(raw)?)))
                            .collect::<io::Result<_>>()?,
                    })
                }
                None => None,
            };
            let (pid, uid, gid, groups) = record.cred;
            let privileged = self.core.is_privileged(uid);
            // A request begun before the restart gets the whole timeout again.
            if !record.input.is_empty() {
                self.partial.insert(token, Instant::now());
            }
            self.connections.insert(
                token,
                Box::new(Connection {
                    stream,
                    cred: Cred {
                        pid,
                        uid,
                        gid,
                        groups,
                    },
                    user: Rc::from(record.user.as_str()),
                    input: {
                        let mut input = crate::proto::FrameBuffer::new();
                        input.extend(&record.input);
                        input
                    },
                    output: record.output.into(),
                    fds,
                    stdio,
                    submitted: record.submitted,
                    closing: record.closing,
                    writing,
                    paused: record.paused,
                    privileged,
                    counted: (0, 0),
                }),
            );
            if record.paused {
                self.maybe_paused.insert(token);
            }
            // The per-user totals are rebuilt from the connections.
            self.per_user.entry(uid).or_default().connections += 1;
            self.recount(token);
            self.dirty.push(token);
        }
        self.next_token = snapshot.next_token.max(FIRST_CLIENT);
        self.served_a_job = snapshot.served_a_job;
        self.terminations = snapshot.terminations;
        if let Some((token, json)) = snapshot.reply_to {
            let restarts = self.restart.as_ref().map_or(0, |setup| setup.restarts);
            let text = format!(
                "restarted in place: version {}, restart {restarts}",
                crate::version::version()
            );
            if let Some(conn) = self.connections.get_mut(&Token(token)) {
                queue_reply(
                    conn,
                    &Reply::Console {
                        ok: true,
                        json: json.then(|| serde_json::json!({ "ok": true, "message": text })),
                        text: format!("{text}\n"),
                    },
                );
            }
        }
        tracing::info!(
            connections = self.connections.len(),
            jobs = self.core.n_jobs(),
            since_handover_us = self.tick().0.saturating_sub(tick_us),
            "took over from the previous image"
        );
        self.flush_all();
        Ok(self)
    }

    /// Carries out a restart that was asked for. On success this process
    /// is a new image and this function does not return; on failure the
    /// daemon carries on unchanged and says why.
    ///
    /// While a job's processes are still being created a batch at a time
    /// (its pipes and plan cannot be handed over), the restart waits for
    /// the launch to finish, up to [`LAUNCH_WAIT`]; it is retried after
    /// each event meanwhile. A launch that does not finish by then (one
    /// switched out, or held) makes the restart fail with that reason.
    pub(super) fn restart_in_place(&mut self, requester: Option<(Token, bool)>) {
        if self.actuator.launching() {
            let since = match self.recovery.restart_wait {
                Some(since) => since,
                None => {
                    tracing::info!("the restart waits for a launch to finish");
                    *self.recovery.restart_wait.insert(Instant::now())
                }
            };
            if since.elapsed() < LAUNCH_WAIT {
                self.pending_restart = Some(requester);
                return;
            }
        }
        self.recovery.restart_wait = None;
        let asked = Instant::now();
        let Err(reason) = self.hand_over(requester);
        tracing::error!(%reason, elapsed_us = asked.elapsed().as_micros() as u64, "in-place restart failed; carrying on");
        if let Some((token, json)) = requester {
            if let Some(conn) = self.connections.get_mut(&token) {
                let message = format!("restart failed, scored carries on: {reason}");
                queue_reply(
                    conn,
                    &Reply::Console {
                        ok: false,
                        text: format!("error: {message}\n"),
                        json: json.then(|| serde_json::json!({ "error": message })),
                    },
                );
                self.dirty.push(token);
            }
        }
        self.flush_all();
    }

    /// Writes the handover, has the new binary check it, and executes it.
    fn hand_over(
        &mut self,
        requester: Option<(Token, bool)>,
    ) -> Result<std::convert::Infallible, String> {
        use crate::actuator::sys;
        use crate::handover::{self, ConnectionSnapshot, ConnectionsSnapshot, Handover};
        let began = Instant::now();
        let setup = self
            .restart
            .clone()
            .ok_or("this scored cannot restart in place")?;
        if self.core.shutting_down() {
            return Err("scored is shutting down".to_string());
        }
        let (actuator, mut fds) = self
            .actuator
            .handover()
            .map_err(|error| error.to_string())?;
        fds.push(self.listener.as_raw_fd());
        let mut connections = Vec::new();
        for (token, conn) in &self.connections {
            fds.push(conn.stream.as_raw_fd());
            let pending: Vec<RawFd> = conn.fds.iter().map(AsRawFd::as_raw_fd).collect();
            fds.extend(&pending);
            let raw = |fd: &Option<Rc<OwnedFd>>| fd.as_ref().map_or(-1, |fd| fd.as_raw_fd());
            let stdio = conn
                .stdio
                .as_ref()
                .map(|stdio| [raw(&stdio.stdin), raw(&stdio.stdout), raw(&stdio.stderr)]);
            fds.extend(stdio.iter().flatten().filter(|fd| **fd >= 0));
            let inherited: Vec<(RawFd, RawFd)> = conn.stdio.as_ref().map_or(Vec::new(), |stdio| {
                stdio
                    .inherited
                    .iter()
                    .map(|(target, fd)| (*target, fd.as_raw_fd()))
                    .collect()
            });
            fds.extend(inherited.iter().map(|(_, fd)| *fd));
            connections.push(ConnectionSnapshot {
                token: token.0,
                fd: conn.stream.as_raw_fd(),
                cred: (
                    conn.cred.pid,
                    conn.cred.uid,
                    conn.cred.gid,
                    conn.cred.groups.clone(),
                ),
                user: conn.user.to_string(),
                input: conn.input.pending().to_vec(),
                output: conn.output.iter().copied().collect(),
                fds: pending,
                stdio,
                inherited,
                controlling_terminal: conn
                    .stdio
                    .as_ref()
                    .is_some_and(|stdio| stdio.controlling_terminal),
                submitted: conn.submitted,
                closing: conn.closing,
                paused: conn.paused,
            });
        }
        fds.sort_unstable();
        fds.dedup();
        let handover = Handover {
            format: handover::FORMAT,
            version: crate::version::version(),
            restarts: setup.restarts + 1,
            tick_us: self.tick().0,
            core: self.core.snapshot(),
            actuator,
            connections: ConnectionsSnapshot {
                listener: self.listener.as_raw_fd(),
                next_token: self.next_token,
                served_a_job: self.served_a_job,
                terminations: self.terminations,
                reply_to: requester.map(|(token, json)| (token.0, json)),
                connections,
            },
            journal_recent: self.journal.as_ref().map(Journal::recent_records),
        };
        let path = handover::write(&setup.state_dir, &handover)
            .map_err(|error| format!("cannot write the state for the new scored: {error}"))?;
        let written = began.elapsed();
        let remove = |path: &std::path::Path| {
            let _ = std::fs::remove_file(path);
        };
        // The new binary reads the state in a process of its own first: if
        // it cannot, nothing has changed here.
        let check = crate::actuator::check_handover(&setup.exe, &setup.args, &path);
        let checked = began.elapsed();
        let output = match check {
            Ok(output) => output,
            Err(error) => {
                remove(&path);
                return Err(format!("cannot run {}: {error}", setup.exe.display()));
            }
        };
        if !output.status.success() {
            remove(&path);
            let said = String::from_utf8_lossy(&output.stderr);
            let said = said.trim().lines().last().unwrap_or("").trim();
            return Err(format!(
                "{} cannot take over ({}){}",
                setup.exe.display(),
                output.status,
                if said.is_empty() {
                    String::new()
                } else {
                    format!(": {said}")
                }
            ));
        }
        // The interval timer survives execve and SIGALRM's default action
        // would end the new image before it installs its handler.
        if let Err(error) = sys::set_alarm(Duration::ZERO) {
            remove(&path);
            return Err(format!("cannot disarm the alarm: {error}"));
        }
        let restore = |fds: &[RawFd]| {
            for fd in fds {
                let _ = sys::set_cloexec(*fd);
            }
        };
        for fd in &fds {
            if let Err(error) = sys::keep_on_exec(*fd) {
                restore(&fds);
                remove(&path);
                return Err(format!("cannot keep descriptor {fd} open: {error}"));
            }
        }
        let to_c = |text: &std::ffi::OsStr| {
            std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(text))
                .map_err(|_| format!("{} contains a NUL byte", text.to_string_lossy()))
        };
        let mut argv = vec![to_c(setup.exe.as_os_str())?];
        for arg in &setup.args {
            argv.push(to_c(arg)?);
        }
        argv.push(to_c(std::ffi::OsStr::new("--resume"))?);
        argv.push(to_c(path.as_os_str())?);
        tracing::info!(
            exe = %setup.exe.display(),
            jobs = self.core.n_jobs(),
            connections = self.connections.len(),
            state_written_us = written.as_micros() as u64,
            checked_us = checked.saturating_sub(written).as_micros() as u64,
            "restarting in place"
        );
        // A binary just installed may still be open for writing in a
        // process that has not yet closed or exec'd it (ETXTBSY): try
        // again for up to 200 ms before giving up.
        let mut attempts = 0;
        let error = loop {
            match nix::unistd::execv(&argv[0], &argv) {
                Ok(never) => match never {},
                Err(nix::errno::Errno::ETXTBSY) if attempts < 20 => {
                    attempts += 1;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(error) => break error,
            }
        };
        restore(&fds);
        remove(&path);
        Err(format!("cannot execute {}: {error}", setup.exe.display()))
    }

    /// Keeps the job journal: the core's job events are appended to it
    /// after each event, and `history`, `jobs all` and `job ID` read it.
    pub fn with_journal(mut self, journal: Journal) -> Daemon<A> {
        self.core.record_journal();
        self.journal = Some(journal);
        self
    }

    /// Appends what the core recorded to the journal. It runs after the
    /// actions of an event are carried out, so never between the stops and
    /// the continues of a switch.
    pub(super) fn write_journal(&mut self) {
        let Some(journal) = &mut self.journal else {
            return;
        };
        let events = self.core.take_journal();
        if events.is_empty() {
            return;
        }
        if journal.wants_rotation() {
            let now = Tick(self.start.elapsed().as_micros() as u64);
            let open = self.core.open_records(now);
            if let Err(error) = journal.rotate(self.core.next_job_id(), open) {
                tracing::error!(%error, "cannot rotate the job journal");
            }
        }
        if let Err(error) = journal.record(events) {
            tracing::error!(%error, "cannot write to the job journal");
        }
    }

    /// Answers the console commands that read the journal: `history`, and
    /// `jobs all` and `job ID` for jobs that ended before this daemon's
    /// memory of them. `None`: the core answers.
    pub(super) fn journal_command(
        &mut self,
        command: &command::Command,
        json: bool,
        now: Tick,
        cred: &Cred,
    ) -> Option<Reply> {
        let journal = self.journal.as_mut()?;
        let console = |reply: command::reply::Reply, json: bool| Reply::Console {
            ok: !reply.is_error(),
            text: reply.to_text(),
            json: json.then(|| reply.to_json()),
        };
        // The command, exit status and reason of another user's job are
        // shown only to root and operators, as `job ID` does.
        let operator = self.core.is_operator(cred);
        let may_see = |record: &serde_json::Value| {
            operator || record["uid"].as_u64() == Some(u64::from(cred.uid))
        };
        match command {
            command::Command::History { user, since } => {
                let uid = match user.as_deref().map(resolve_user) {
                    None => None,
                    Some(Ok(uid)) => Some(uid),
                    Some(Err(message)) => {
                        return Some(console(command::reply::Reply::error(message), json))
                    }
                };
                let (mut records, left_out) = journal.history(uid, *since);
                for record in &mut records {
                    if !may_see(record) {
                        crate::journal::redact(record);
                    }
                }
                let table = crate::journal::history_table(&records);
                let mut text = command::reply::Reply::Table(table).to_text();
                if left_out > 0 {
                    text.push_str(&crate::journal::left_out_note(left_out));
                }
                Some(Reply::Console {
                    ok: true,
                    text,
                    json: json.then(|| serde_json::Value::Array(records)),
                })
            }
            command::Command::Jobs { all: true } => {
                let reply = self.core.jobs_table(cred, false, now);
                let command::reply::Reply::Table(current) = reply else {
                    return None;
                };
                let mut table = command::reply::Table {
                    columns: current.columns.clone(),
                    rows: Vec::new(),
                };
                journal.recent_rows(&mut table, &may_see);
                table.rows.extend(current.rows);
                Some(console(command::reply::Reply::Table(table), json))
            }
            command::Command::Job(id) if self.core.job(crate::ids::JobId(*id)).is_none() => {
                let mut record = journal.ended(*id)?;
                if !may_see(&record) {
                    crate::journal::redact(&mut record);
                }
                Some(console(
                    command::reply::Reply::Record(crate::journal::record_fields(&record)),
                    json,
                ))
            }
            _ => None,
        }
    }

    /// `handle_event`, with a panic (a bug) caught: it is logged with the
    /// event that caused it, and the daemon restarts in place from the
    /// core as it was before that event (its checkpoint), with the
    /// processes brought back in line with it, so that the jobs and their
    /// clients outlive the bug. If the restart cannot happen the daemon
    /// carries on from that state.
    pub(super) fn handle_event_guarded(&mut self, event: Event) {
        let client = match event {
            Event::Client(token) => Some(token),
            _ => None,
        };
        let held_before = self.held_answers.len();
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.handle_event(event)));
        if outcome.is_ok() {
            self.recovery.event_done(&mut self.core);
        }
        if let Err(panic) = outcome {
            // Described only now: formatting every event cost an
            // admission 2,400 instructions.
            let described = format!("{event:?}");
            let message = panic
                .downcast_ref::<&str>()
                .map(|text| text.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".to_string());
            tracing::error!(
                event = %described,
                panic = %message,
                "a bug: scored panicked handling an event; restarting in place"
            );
            self.pending_restart = None;
            // Answers held for stops under way go with the connections'
            // output; the new image knows nothing of them otherwise. Those
            // the lost event made are not sent: its request is not applied.
            self.held_answers.truncate(held_before);
            self.release_answers(true);
            // The request that hit the bug is consumed: tell its client, in
            // the output that the new image will write.
            if let Some(conn) = client.and_then(|token| self.connections.get_mut(&token)) {
                queue_reply(
                    conn,
                    &Reply::Error {
                        message: format!(
                            "scored hit a bug handling this request ({message}) and restarted in place"
                        ),
                    },
                );
                conn.closing = true;
            }
            self.recover();
            self.restart_in_place(None);
        }
    }

    /// After a caught panic: the core goes back to its checkpoint, and the
    /// processes are brought in line with it (see `reconcile`). A panic
    /// while doing so leaves the restored core as it is.
    fn recover(&mut self) {
        let facts = std::mem::take(&mut self.recovery.facts);
        if !self.recovery.committed || !self.core.rollback() {
            return;
        }
        self.switch_starts.clear();
        self.recovery.replaying = true;
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.reconcile(facts)));
        self.recovery.replaying = false;
        if outcome.is_err() {
            tracing::error!("a bug: scored panicked again bringing the processes in line with the restored state");
        }
        self.recovery.changed = true;
        self.recovery.event_done(&mut self.core);
    }

    /// Makes the processes agree with the restored core, whatever part of
    /// the lost event's actions the actuator carried out:
    /// - processes of a job the core does not hold as having any (a job it
    ///   does not know, or one it holds as not started or between `::`
    ///   stages) were created by the lost event: they are killed and
    ///   reaped, and what they report is dropped;
    /// - what the kernel reported during the lost event about the other
    ///   jobs (ranks that exited, processes gone, a failed launch or stop)
    ///   is fed to the core again, as it happened;
    /// - every job the core holds as running is continued (thawed and sent
    ///   SIGCONT), and every job it holds as stopped or stopping is stopped
    ///   again and confirmed, as at any switch.
    ///
    /// A signal the lost event delivered cannot be taken back: a job sent
    /// SIGTERM by it handles the signal (or dies of it, and its end is
    /// reported through the normal reaping), but the core does not carry
    /// on a kill it never decided.
    fn reconcile(&mut self, facts: Vec<Input>) {
        use crate::job::Phase;
        let mut discard = Vec::new();
        for (job, busy) in self.actuator.known_jobs() {
            match self.core.job(job) {
                None => discard.push((job, true)),
                Some(record) if record.phase() == Phase::Idle && busy => {
                    discard.push((job, !record.started()));
                }
                Some(_) => {}
            }
        }
        let mut inputs = Vec::new();
        if !discard.is_empty() {
            tracing::warn!(jobs = ?discard.iter().map(|(job, _)| job.0).collect::<Vec<_>>(), "killing processes the restored state does not know");
            self.actuator.discard_jobs(&discard, &mut inputs);
        }
        let discarded: std::collections::BTreeSet<JobId> =
            discard.iter().map(|(job, _)| *job).collect();
        let replayed: Vec<Input> = facts
            .into_iter()
            .filter(|input| {
                crate::actuator::input_job(input).is_some_and(|job| !discarded.contains(&job))
            })
            .collect();
        tracing::info!(
            facts = replayed.len(),
            "restored the state before the event; reporting again what the kernel said during it"
        );
        let mut first = replayed;
        first.extend(inputs);
        self.feed(first);
        let mut confirmations = Vec::new();
        let jobs: Vec<(JobId, Phase)> = self.core.jobs().map(|job| (job.id, job.phase())).collect();
        for (job, phase) in jobs {
            match phase {
                Phase::Running => self.actuator.cont(job),
                Phase::Stopping | Phase::Stopped => self.actuator.stop(job, &mut confirmations),
                Phase::Idle => {}
            }
        }
        self.actuator
            .await_stops(super::STOP_WAIT, &mut confirmations);
        self.feed(confirmations);
    }
}

/// How long an in-place restart waits for launches in progress.
const LAUNCH_WAIT: Duration = Duration::from_secs(10);

/// What the loop keeps to recover from a panic: the core's commit after
/// the last event that changed it (`Core::commit`, which the core can roll
/// back to), and what the kernel has reported since (inputs that cannot be
/// asked for again: a reaped rank's status is gone from the kernel once
/// read).
#[derive(Default)]
pub(super) struct Recovery {
    /// The core holds a commit to roll back to.
    committed: bool,
    /// The core may have changed since the checkpoint.
    pub(super) changed: bool,
    /// The kernel's reports during the current event.
    facts: Vec<Input>,
    /// Recovering: the reports fed again are not kept again.
    replaying: bool,
    /// Since when a restart has waited for launches to finish.
    restart_wait: Option<Instant>,
}

impl Recovery {
    /// Keeps the reports among `inputs` that came from the processes.
    pub(super) fn note(&mut self, inputs: &[Input]) {
        if self.replaying || checkpoints_off() {
            return;
        }
        self.facts
            .extend(inputs.iter().filter(|input| is_fact(input)).cloned());
    }

    /// An event was handled to its end: the core's state is the one to
    /// come back to.
    pub(super) fn event_done(&mut self, core: &mut Core) {
        self.facts.clear();
        if checkpoints_off() {
            return;
        }
        if self.changed || !self.committed {
            core.commit();
            self.committed = true;
            self.changed = false;
        }
    }
}

/// `SCORED_NO_CHECKPOINT=1` (read once): keep no checkpoint, so that a
/// panic restarts from the state at the panic. It exists so that the
/// benchmark can measure what the checkpoint costs, in the same run.
fn checkpoints_off() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| std::env::var_os("SCORED_NO_CHECKPOINT").is_some_and(|value| value == "1"))
}

/// A report from the processes that the core must hear once and the
/// kernel will not give again. Stop confirmations are asked for again
/// instead, and usage is sampled again at the next slice.
fn is_fact(input: &Input) -> bool {
    matches!(
        input,
        Input::RankExited { .. }
            | Input::ProcessesGone(_)
            | Input::FinalUsage { .. }
            | Input::SpawnFailed { .. }
            | Input::StopFailed { .. }
    )
}

/// The test-only way to make scored panic, from the environment variable
/// `SCORED_TEST_PANIC_ON` that only the end-to-end tests set (read once):
/// `LINE` panics when the console line is received, `after:LINE` once the
/// core has applied it and its actions were carried out (before the
/// reply), `mid-switch:FILE` in a switch that stops several jobs, after
/// the first was stopped and before the next is, and `after-exit:FILE`
/// once a rank's exit has been reaped and before the core hears of it;
/// the last two when FILE exists (it is removed first, so that each panic
/// is asked for by creating it).
#[derive(Debug)]
pub(super) enum PanicHook {
    On(String),
    After(String),
    MidSwitch(PathBuf),
    AfterExit(PathBuf),
}

pub(super) fn panic_hook() -> Option<&'static PanicHook> {
    static HOOK: std::sync::OnceLock<Option<PanicHook>> = std::sync::OnceLock::new();
    HOOK.get_or_init(|| {
        let value = std::env::var("SCORED_TEST_PANIC_ON").ok()?;
        Some(if let Some(line) = value.strip_prefix("after:") {
            PanicHook::After(line.to_string())
        } else if let Some(file) = value.strip_prefix("mid-switch:") {
            PanicHook::MidSwitch(PathBuf::from(file))
        } else if let Some(file) = value.strip_prefix("after-exit:") {
            PanicHook::AfterExit(PathBuf::from(file))
        } else {
            PanicHook::On(value)
        })
    })
    .as_ref()
}

/// Panics if the hook asks for it on receiving `line`.
pub(super) fn panic_on_line(line: &str) {
    if let Some(PanicHook::On(trigger)) = panic_hook() {
        if trigger == line {
            panic!("injected panic on the console line {line:?} (SCORED_TEST_PANIC_ON)");
        }
    }
}

/// Whether the hook asks for a panic once `line` has been applied.
pub(super) fn panics_after_line(line: &str) -> bool {
    matches!(panic_hook(), Some(PanicHook::After(trigger)) if trigger == line)
}

/// Panics if the hook asks for it once `line` has been applied.
pub(super) fn panic_after_line(line: &str) {
    if let Some(PanicHook::After(trigger)) = panic_hook() {
        if trigger == line {
            panic!(
                "injected panic after applying the console line {line:?} (SCORED_TEST_PANIC_ON)"
            );
        }
    }
}

/// Panics if the hook asks for it in the middle of a switch.
pub(super) fn panic_mid_switch() {
    if let Some(PanicHook::MidSwitch(file)) = panic_hook() {
        if std::fs::remove_file(file).is_ok() {
            panic!("injected panic in the middle of a switch (SCORED_TEST_PANIC_ON)");
        }
    }
}

/// A user named on the console (a name or a uid): its uid.
fn resolve_user(user: &str) -> Result<u32, String> {
    if let Ok(uid) = user.parse::<u32>() {
        return Ok(uid);
    }
    match nix::unistd::User::from_name(user) {
        Ok(Some(found)) => Ok(found.uid.as_raw()),
        Ok(None) => Err(format!("no user named '{user}'")),
        Err(error) => Err(format!("cannot look up user '{user}': {error}")),
    }
}
/// The listening socket an earlier image of this process handed over.
pub fn adopt_listener(fd: RawFd) -> io::Result<std::os::unix::net::UnixListener> {
    Ok(std::os::unix::net::UnixListener::from(
        crate::actuator::sys::adopt_descriptor(fd)?,
    ))
}

/// Panics if the hook asks for it once a rank's exit is among `inputs`.
pub(super) fn panic_after_exit(inputs: &[Input]) {
    if let Some(PanicHook::AfterExit(file)) = panic_hook() {
        let exited = inputs
            .iter()
            .any(|input| matches!(input, Input::RankExited { .. }));
        if exited && std::fs::remove_file(file).is_ok() {
            panic!("injected panic after reaping a rank (SCORED_TEST_PANIC_ON)");
        }
    }
}

//! The in-place restart (`restart`, SIGUSR2, or a panic caught around an
//! event): the daemon's whole state handed to a new image of the binary in
//! the same process, and taken over there. It never blocks longer than
//! writing the state and the new binary's check take.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use mio::net::UnixStream;
use mio::{Interest, Token};

use super::connection::ClientSocket;
use super::{queue_reply, Connection, Daemon, FIRST_CLIENT};
use crate::actuator::{Actuator, JobStdio, PmiFds};
use crate::closer::{self, UserFd};
use crate::journal::Journal;
use scored_core::ids::Cred;
use scored_proto::proto::Reply;

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
        use crate::sys::adopt_descriptor;
        let now = Instant::now();
        self.start = now
            .checked_sub(Duration::from_micros(tick_us))
            .unwrap_or(now);
        let mut shared: HashMap<RawFd, Rc<UserFd>> = HashMap::new();
        for record in snapshot.connections {
            let token = Token(record.token);
            let (pid, uid, gid, groups) = record.cred;
            let stream = std::os::unix::net::UnixStream::from(adopt_descriptor(record.fd)?);
            stream.set_nonblocking(true)?;
            let mut stream = ClientSocket::new(UnixStream::from_std(stream), uid);
            let writing = !record.output.is_empty();
            let interest = if writing {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            self.poll
                .registry()
                .register(&mut *stream, token, interest)?;
            let adopt = |raw: RawFd| adopt_descriptor(raw).map(|fd| UserFd::new(fd, uid));
            let fds = record
                .fds
                .into_iter()
                .map(adopt)
                .collect::<io::Result<Vec<_>>>()?;
            let mut take = |raw: RawFd| -> io::Result<Rc<UserFd>> {
                if let Some(fd) = shared.get(&raw) {
                    return Ok(fd.clone());
                }
                // The previous image already kept one descriptor per open
                // file description; comparing each with the pool again
                // (kcmp) would cost a restart time quadratic in the jobs.
                let fd = Rc::new(adopt(raw)?);
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
                        pmi: PmiFds::new(
                            record.pmi.0,
                            record
                                .pmi
                                .1
                                .iter()
                                .map(|&raw| (raw >= 0).then(|| adopt(raw)).transpose())
                                .collect::<io::Result<_>>()?,
                        )
                        .with_pmix(record.pmix.clone())
                        .with_port(record.pmi_port),
                    })
                }
                None => None,
            };
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
                        let mut input = scored_proto::proto::FrameBuffer::new();
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
            if !privileged {
                self.plain_connections += 1;
            }
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
    /// Nothing is waited for: the jobs' processes, those being created
    /// included, stay with their keepers, which the new image takes over.
    pub(super) fn restart_in_place(&mut self, requester: Option<(Token, bool)>) {
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
        use crate::handover::{self, ConnectionSnapshot, ConnectionsSnapshot, Handover};
        use crate::sys;
        let began = Instant::now();
        let setup = self
            .restart
            .clone()
            .ok_or("this scored cannot restart in place")?;
        if self.core.shutting_down() {
            return Err("scored is shutting down".to_string());
        }
        // The new image writes its snapshot from the handover; until it
        // has, what is on disk is what this image fed its core.
        self.write_durable();
        let (actuator, mut fds) = self
            .actuator
            .handover()
            .map_err(|error| error.to_string())?;
        fds.push(self.listener.as_raw_fd());
        let (closer, closer_fds) = closer::hand_over();
        fds.extend(closer_fds);
        let mut connections = Vec::new();
        for (token, conn) in &self.connections {
            fds.push(conn.stream.as_raw_fd());
            let pending: Vec<RawFd> = conn.fds.iter().map(AsRawFd::as_raw_fd).collect();
            fds.extend(&pending);
            let raw = |fd: &Option<Rc<UserFd>>| fd.as_ref().map_or(-1, |fd| fd.as_raw_fd());
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
            let pmi = conn.stdio.as_ref().map_or((0, Vec::new()), |stdio| {
                (stdio.pmi.per_stage(), stdio.pmi.raw())
            });
            fds.extend(pmi.1.iter().filter(|fd| **fd >= 0));
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
                pmi,
                pmix: conn
                    .stdio
                    .as_ref()
                    .and_then(|stdio| stdio.pmi.pmix().map(str::to_string)),
                pmi_port: conn.stdio.as_ref().is_some_and(|stdio| stdio.pmi.port()),
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
            closer: Some(closer),
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
}

/// The listening socket an earlier image of this process handed over.
pub fn adopt_listener(fd: RawFd) -> io::Result<std::os::unix::net::UnixListener> {
    Ok(std::os::unix::net::UnixListener::from(
        crate::sys::adopt_descriptor(fd)?,
    ))
}

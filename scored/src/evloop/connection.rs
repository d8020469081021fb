//! Client connections: accepting them, reading and answering their
//! framed requests with a buffer each way, passing the descriptors of a
//! submission on, and telling clients what the core says about their jobs.

use std::collections::VecDeque;
use std::io::{self, IoSliceMut, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::time::Instant;

use mio::net::UnixStream;
use mio::{Interest, Token};
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};

use super::fds::check_job_terminal;
use super::peer::peer_cred;
use super::{
    faults, spare_descriptor, ConsoleAsk, Daemon, MAX_OUTPUT, MAX_PENDING_FDS, PAUSE_OUTPUT,
    SCM_MAX_FD,
};
use crate::actuator::{Actuator, JobStdio};
use crate::closer::{self, UserFd};
use scored_core::core::{ClientEvent, Input};
use scored_core::ids::{ClientToken, Cred};
use scored_core::job::JobRequest;
use scored_proto::command;
use scored_proto::proto::{self, Reply, Request};

/// A client's socket, let go of through the closer (`crate::closer`):
/// messages it has not read may carry descriptors, and a close here would
/// be the last close of each. A socket read to its end (the client shut
/// its side) holds no message and can receive none, and no one else holds
/// the daemon's end of it: its close here releases nothing of the user's
/// and returns at once, so it is closed here, without a batch of the
/// closer (a fork) after every job's scrun exits. One that goes to the
/// closer is shut down first, both ways: the client sees the end of what
/// it was sent (a refusal, its last reply) at once, not when the closer
/// gets round to the batch, which under load can take seconds.
pub(super) struct ClientSocket {
    /// `None` only while it is being dropped.
    stream: Option<UnixStream>,
    uid: u32,
    /// A read returned its end.
    drained: bool,
}

impl ClientSocket {
    /// The socket of a client of user `uid` (`u32::MAX` before it is known).
    pub(super) fn new(stream: UnixStream, uid: u32) -> ClientSocket {
        ClientSocket {
            stream: Some(stream),
            uid,
            drained: false,
        }
    }

    /// A read returned the end of the stream: nothing is left in it.
    pub(super) fn drained(&mut self) {
        self.drained = true;
    }
}

impl std::ops::Deref for ClientSocket {
    type Target = UnixStream;

    fn deref(&self) -> &UnixStream {
        match &self.stream {
            Some(stream) => stream,
            None => unreachable!("a client's socket is there until it is dropped"),
        }
    }
}

impl std::ops::DerefMut for ClientSocket {
    fn deref_mut(&mut self) -> &mut UnixStream {
        match &mut self.stream {
            Some(stream) => stream,
            None => unreachable!("a client's socket is there until it is dropped"),
        }
    }
}

impl Drop for ClientSocket {
    fn drop(&mut self) {
        if let Some(stream) = self.stream.take() {
            if self.drained {
                drop(stream);
            } else {
                // A shutdown of the daemon's own end of a Unix socket
                // changes its state only: it asks no one anything, and
                // what waits in it stays for the closer.
                let _ = stream.shutdown(std::net::Shutdown::Both);
                closer::discard(OwnedFd::from(stream), self.uid);
            }
        }
    }
}

pub(super) struct Connection {
    pub(super) stream: ClientSocket,
    pub(super) cred: Cred,
    pub(super) user: Rc<str>,
    pub(super) input: proto::FrameBuffer,
    pub(super) output: VecDeque<u8>,
    pub(super) fds: Vec<UserFd>,
    pub(super) stdio: Option<JobStdio>,
    pub(super) submitted: bool,
    /// Close once the output is flushed.
    pub(super) closing: bool,
    /// Writable interest is registered.
    pub(super) writing: bool,
    /// Reading was skipped because too many replies wait: resume once they
    /// are written (the socket will not say it is readable again).
    pub(super) paused: bool,
    /// Root, the daemon's user or an operator: not held to the per-user limits.
    pub(super) privileged: bool,
    /// The input and output lengths last counted in the user's totals
    /// (each under 4 GiB: input is bounded by `MAX_REQUEST`, output by
    /// `MAX_REPLY` per reply and the pause), as `u32` to keep an idle
    /// connection small; since when a request is partial is in
    /// `Daemon::partial`.
    pub(super) counted: (u32, u32),
}

impl<A: Actuator> Daemon<A> {
    pub(super) fn notify(&mut self, client: ClientToken, event: ClientEvent) {
        let token = Token(client.0 as usize);
        self.dirty.push(token);
        let Some(conn) = self.connections.get_mut(&token) else {
            return;
        };
        let mut ended = None;
        let (reply, last) = match event {
            ClientEvent::Waiting(reason) => (Reply::Waiting { reason }, false),
            ClientEvent::Accepted { job, count, waits } => (
                Reply::Accepted {
                    job: job.0,
                    count,
                    waits,
                },
                false,
            ),
            ClientEvent::Admitted {
                job,
                queue,
                cluster,
                hosts,
                ranks,
            } => (
                Reply::Admitted {
                    job: job.0,
                    queue,
                    cluster,
                    hosts,
                    ranks,
                },
                false,
            ),
            ClientEvent::Rejected { kind, reason } => (Reply::Rejected { reason, kind }, true),
            ClientEvent::Started(job) => (
                Reply::Started {
                    job: job.0,
                    winch: true,
                    signals: true,
                },
                false,
            ),
            ClientEvent::Held(job) => (Reply::Held { job: job.0 }, false),
            ClientEvent::Reattached {
                job,
                started,
                held,
                ranks,
            } => (
                Reply::Reattached {
                    job: job.0,
                    started,
                    held,
                    ranks,
                },
                false,
            ),
            ClientEvent::Answer(reply) => return self.answer(token, reply),
            ClientEvent::Ended(ending) => {
                ended = Some(ending.job);
                (
                    Reply::Ended {
                        job: ending.job.0,
                        kind: ending.kind,
                        status: ending.status,
                        reason: ending.reason.clone(),
                        signal: ending.signal,
                        accounting: ending.accounting.to_proto(self.core.topology()),
                    },
                    true,
                )
            }
        };
        queue_reply(conn, &reply);
        if last {
            // The job's story is told; the descriptors are not needed any
            // more. While its keeper still holds its own copies, the
            // daemon's close here is not the last (no closer's batch).
            match (conn.stdio.take(), ended) {
                (Some(stdio), Some(job)) if self.actuator.keeper_holds_stdio(job) => {
                    stdio.close_beside_keeper_copies()
                }
                (stdio, _) => drop(stdio),
            }
        }
        self.recount(token);
    }

    /// Sends a console client the core's answer to its command.
    pub(super) fn answer(&mut self, token: Token, reply: command::reply::Reply) {
        let ask = self
            .console_asks
            .iter()
            .position(|(asker, _)| *asker == token)
            .and_then(|idx| self.console_asks.remove(idx))
            .map(|(_, ask)| ask);
        let Some(ask) = ask else {
            tracing::error!(
                client = token.0,
                "an answer to a console command nobody asked"
            );
            return;
        };
        if ask.restart && !reply.is_error() {
            self.pending_restart = Some(Some((token, ask.json)));
            return;
        }
        let reply = Reply::Console {
            ok: !reply.is_error(),
            text: reply.to_text(),
            json: ask.json.then(|| reply.to_json()),
        };
        // Sent at the end of the feed (`release_answers`), once the stops
        // the batch asked for are confirmed.
        self.held_answers.push((token, reply));
    }

    /// Sends the held answers once no stop is pending (or now, if `now`).
    /// A command that switched jobs (`suspend`, `queue Q deactivate`, ...)
    /// is so answered once the switch is done, as a program that stops
    /// processes itself returns from waitpid: whoever reads the answer
    /// finds the stopped processes stopped and the entering ones running.
    /// The loop does not wait for it: a stop confirmed later (after
    /// `STOP_WAIT`) releases the answers at the end of that event.
    pub(super) fn release_answers(&mut self, now: bool) {
        if self.held_answers.is_empty() || (!now && self.actuator.pending_stops() > 0) {
            return;
        }
        for (token, reply) in std::mem::take(&mut self.held_answers) {
            self.send_answer(token, &reply);
        }
    }

    pub(super) fn send_answer(&mut self, token: Token, reply: &Reply) {
        self.dirty.push(token);
        let Some(conn) = self.connections.get_mut(&token) else {
            return;
        };
        queue_reply(conn, reply);
        self.recount(token);
    }

    pub(super) fn accept(&mut self) {
        // The spare is back once a descriptor is free again (the closer
        // took a refused socket that waited for it).
        if self.spare_fd.is_none() {
            self.spare_fd = spare_descriptor();
        }
        loop {
            let (stream, _) = match self.listener.accept() {
                Ok(pair) => pair,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    self.accept_waits = false;
                    return;
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) if matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    // Out of descriptors: give up the spare one for a moment
                    // to accept the client and tell it so, rather than leave
                    // it waiting in the backlog with no answer.
                    if self.spare_fd.take().is_none() {
                        self.accept_later(&error);
                        return;
                    }
                    // accept() fails with EMFILE before it looks for a
                    // client, so only a successful accept says one waited.
                    let refused = match self.listener.accept() {
                        Ok((stream, _)) => {
                            let uid = peer_cred(&stream).map_or(u32::MAX, |cred| cred.uid);
                            let mut stream = ClientSocket::new(stream, uid);
                            let frame = proto::encode(&Reply::Error {
                                message: "scored has run out of descriptors; try again later"
                                    .into(),
                            });
                            let _ = stream.write(&frame);
                            tracing::warn!("connection refused: out of descriptors");
                            true
                        }
                        // No client waited; or the number the spare freed
                        // was taken (a reader thread opens /proc files).
                        Err(error) => {
                            if error.kind() == io::ErrorKind::WouldBlock {
                                self.accept_waits = false;
                            } else {
                                self.accept_later(&error);
                            }
                            false
                        }
                    };
                    // The refused socket went to the closer's queue: sent
                    // now, its number is free again for the spare.
                    closer::flush();
                    self.spare_fd = spare_descriptor();
                    if !refused {
                        return;
                    }
                    continue;
                }
                Err(error) => {
                    self.accept_later(&error);
                    return;
                }
            };
            // Credentials first: the limits depend on who connects.
            let cred = match peer_cred(&stream) {
                Ok(cred) => cred,
                Err(error) => {
                    tracing::warn!(%error, "cannot read a client's credentials; closing it");
                    closer::discard(OwnedFd::from(stream), u32::MAX);
                    continue;
                }
            };
            let mut stream = ClientSocket::new(stream, cred.uid);
            let privileged = self.core.is_privileged(cred.uid);
            if let Err(message) = self.admit_connection(cred.uid, privileged) {
                let frame = proto::encode(&Reply::Error {
                    message: message.clone(),
                });
                let _ = stream.write(&frame);
                tracing::warn!(uid = cred.uid, %message, "connection refused");
                continue;
            }
            let token = Token(self.next_token);
            self.next_token += 1;
            if let Err(error) =
                self.poll
                    .registry()
                    .register(&mut *stream, token, Interest::READABLE)
            {
                tracing::warn!(%error, "cannot watch a client");
                continue;
            }
            let user = self.user_name(cred.uid);
            let cred_uid = cred.uid;
            tracing::debug!(
                client = token.0,
                uid = cred.uid,
                pid = cred.pid,
                "client connected"
            );
            self.connections.insert(
                token,
                Box::new(Connection {
                    stream,
                    cred,
                    user,
                    input: proto::FrameBuffer::new(),
                    output: VecDeque::new(),
                    fds: Vec::new(),
                    stdio: None,
                    submitted: false,
                    closing: false,
                    writing: false,
                    paused: false,
                    privileged,
                    counted: (0, 0),
                }),
            );
            self.per_user.entry(cred_uid).or_default().connections += 1;
            if !privileged {
                self.plain_connections += 1;
            }
        }
    }

    /// Leaves the clients in the backlog to the next try (`run`), saying
    /// why once for each time they start to wait.
    fn accept_later(&mut self, error: &io::Error) {
        if !self.accept_waits {
            tracing::warn!(%error, "cannot accept clients for now; they wait in the backlog");
        }
        self.accept_waits = true;
    }

    pub(super) fn client_ready(&mut self, token: Token, inputs: &mut Vec<Input>) {
        self.serve_client(token, inputs);
        self.recount(token);
        self.check_user_budget(token, inputs);
    }

    pub(super) fn serve_client(&mut self, token: Token, inputs: &mut Vec<Input>) {
        self.dirty.push(token);
        let user_output_full = self.user_output_full(token);
        // A user at the descriptor budget is read only as far as no
        // descriptor comes with what is read (see `budget.rs`).
        let no_descriptors = self
            .connections
            .get(&token)
            .filter(|conn| !conn.privileged)
            .and_then(|conn| self.descriptor_budget(conn.cred.uid, 1).err());
        let Some(conn) = self.connections.get_mut(&token) else {
            return;
        };
        // Write first: replies that leave make room to read more requests.
        if flush(conn).is_err() {
            self.close(token, inputs);
            return;
        }
        let mut gone = false;
        conn.paused = conn.output.len() >= PAUSE_OUTPUT || user_output_full;
        if conn.paused {
            self.maybe_paused.insert(token);
        }
        if !conn.closing && !conn.paused {
            match read_available(conn, &mut self.read_chunk, no_descriptors.as_deref()) {
                Ok(open) => gone = !open,
                Err(error) => {
                    let message = error.to_string();
                    tracing::info!(client = token.0, %message, "dropping a client");
                    queue_reply(conn, &Reply::Error { message });
                    conn.closing = true;
                }
            }
        }
        if !conn.closing {
            self.process_requests(token, inputs);
        }
        let Some(conn) = self.connections.get_mut(&token) else {
            return;
        };
        if gone {
            self.close(token, inputs);
            return;
        }
        if flush(conn).is_err() || (conn.closing && conn.output.is_empty()) {
            self.close(token, inputs);
        }
    }

    /// Connections that stopped being read because of unread replies and
    /// whose replies have since been written.
    pub(super) fn resumable(&mut self) -> Vec<Token> {
        let connections = &self.connections;
        self.maybe_paused
            .retain(|token| connections.get(token).is_some_and(|conn| conn.paused));
        self.maybe_paused
            .iter()
            .filter(|token| {
                self.connections[token].output.len() < PAUSE_OUTPUT
                    && !self.user_output_full(**token)
            })
            .copied()
            .collect()
    }

    pub(super) fn process_requests(&mut self, token: Token, inputs: &mut Vec<Input>) {
        loop {
            let turn_over = self.turn_over();
            let Some(conn) = self.connections.get_mut(&token) else {
                return;
            };
            if conn.closing {
                return;
            }
            if conn.output.len() >= PAUSE_OUTPUT {
                // The rest waits until the client has read its replies.
                conn.paused = true;
                self.maybe_paused.insert(token);
                return;
            }
            if !conn.input.is_empty() && turn_over {
                // The user's turn is over: the rest at the next wakeup.
                self.deferred.insert(token);
                return;
            }
            let request: Request = match conn.input.decode(proto::MAX_REQUEST) {
                Ok(Some(request)) => request,
                Ok(None) => {
                    if conn.input.is_empty() {
                        conn.input.shrink_if_empty();
                        self.partial.remove(&token);
                    } else {
                        self.partial.entry(token).or_insert_with(Instant::now);
                    }
                    return;
                }
                Err(error) => {
                    tracing::info!(client = token.0, %error, "malformed request; closing the connection");
                    queue_reply(
                        conn,
                        &Reply::Error {
                            message: error.to_string(),
                        },
                    );
                    conn.closing = true;
                    return;
                }
            };
            // A whole request arrived: what follows it starts a new one.
            self.partial.remove(&token);
            if let Some((left, _)) = &mut self.turn {
                *left = left.saturating_sub(1);
            }
            self.request(token, request, inputs);
        }
    }

    pub(super) fn request(&mut self, token: Token, request: Request, inputs: &mut Vec<Input>) {
        let client = ClientToken(token.0 as u64);
        let conn = self.connections.get_mut(&token).expect("caller checked");
        match request {
            Request::Submit { version, submit } => {
                // Held until the event's end, or the launch's.
                self.actuator.launch_coming();
                let conn = self.connections.get_mut(&token).expect("caller checked");
                if let Err(message) = same_version(version) {
                    return refuse(conn, message);
                }
                if conn.submitted {
                    return refuse(conn, "a connection may submit one job only".into());
                }
                let (privileged, uid) = (conn.privileged, conn.cred.uid);
                if !privileged {
                    if let Err(reason) = self.descriptor_budget(uid, 0) {
                        let conn = self.connections.get_mut(&token).expect("caller checked");
                        queue_reply(
                            conn,
                            &Reply::Rejected {
                                reason,
                                kind: proto::RejectKind::Resources,
                            },
                        );
                        conn.closing = true;
                        return;
                    }
                }
                let conn = self.connections.get_mut(&token).expect("caller checked");
                if conn.fds.len() != submit.descriptor_count() {
                    return refuse(conn, format!(
                        "this submission must carry {} descriptors (the standard ones not closed, then the {} passed, then {} for PMI), it carried {}",
                        submit.descriptor_count(),
                        submit.fds.len(),
                        submit.pmi_fd_count(),
                        conn.fds.len()
                    ));
                }
                let wants_terminal = submit.options.pty;
                let detach = submit.options.batch.detach;
                let (closed, numbers) = (submit.closed_stdio.clone(), submit.fds.clone());
                let pmi_ranks = submit.pmi_ranks as usize;
                let pmix = submit.pmix_namespace.clone();
                let pmi_port = submit.pmi_port;
                // The boundary: the one validator of a submission (the
                // protocol crate's, which scrun runs too), and the only
                // way to the core's request.
                let request = match JobRequest::try_from(submit) {
                    Ok(request) => request,
                    Err(error) => {
                        queue_reply(
                            conn,
                            &Reply::Rejected {
                                reason: error.to_string(),
                                kind: proto::RejectKind::Invalid,
                            },
                        );
                        conn.closing = true;
                        return;
                    }
                };
                let fds = std::mem::take(&mut conn.fds);
                if detach {
                    // A batch job has no client: no descriptor (the
                    // validator let none come), and nothing kept here.
                    conn.submitted = true;
                    self.served_a_job = true;
                    self.idle_since = Instant::now();
                    inputs.extend(self.known_ends(&request));
                    inputs.push(Input::Submit {
                        client,
                        cred: self.connections[&token].cred.clone(),
                        user: self.connections[&token].user.clone(),
                        request: Box::new(request),
                    });
                    return;
                }
                let Some(stdio) = super::descriptors::job_stdio(
                    fds,
                    &closed,
                    &numbers,
                    pmi_ranks,
                    pmix,
                    wants_terminal,
                    &mut self.fd_pool,
                ) else {
                    return refuse(conn, "descriptors went missing".into());
                };
                if let (true, Some(stdin)) = (wants_terminal, &stdio.stdin) {
                    if let Err(reason) = check_job_terminal(stdin) {
                        queue_reply(
                            conn,
                            &Reply::Rejected {
                                reason,
                                kind: proto::RejectKind::Invalid,
                            },
                        );
                        conn.closing = true;
                        return;
                    }
                }
                let pmi = stdio.pmi.clone().with_port(pmi_port);
                conn.stdio = Some(JobStdio { pmi, ..stdio });
                conn.submitted = true;
                self.served_a_job = true;
                self.idle_since = Instant::now();
                // How the jobs it depends on ended, for those that ended
                // before the core's memory of them: from the journal.
                inputs.extend(self.known_ends(&request));
                let Some(conn) = self.connections.get_mut(&token) else {
                    return;
                };
                inputs.push(Input::Submit {
                    client,
                    cred: conn.cred.clone(),
                    user: conn.user.clone(),
                    request: Box::new(request),
                });
            }
            Request::Console {
                version,
                line,
                json,
            } => {
                if version != proto::VERSION {
                    return refuse(conn, format!("protocol version {version} is not {}; use matching sc_console and scored", proto::VERSION));
                }
                // Test hook: the end-to-end tests make scored panic on a
                // console line of their choice, to check that a panic loses
                // no job. Only the test harness sets the variable.
                faults::panic_on_line(&line);
                let parsed = command::parse_line(&line);
                let mut ended = Vec::new();
                if let Ok(Some(command)) = &parsed {
                    let cred = conn.cred.clone();
                    if let Some(reply) = self.journal_command(command, json, self.tick(), &cred) {
                        if let Some(conn) = self.connections.get_mut(&token) {
                            queue_reply(conn, &reply);
                        }
                        return;
                    }
                    // The jobs it names that ended before the core's
                    // memory of them: from the journal, so that the reply
                    // says they ended rather than that they never were.
                    ended = self.named_ends(command);
                }
                let Some(conn) = self.connections.get_mut(&token) else {
                    return;
                };
                let reply = match parsed {
                    Ok(None) => command::reply::Reply::Done(String::new()),
                    Ok(Some(command)) => {
                        // An input like any other: the core answers with
                        // `ClientEvent::Answer` once the batch is decided.
                        let restart = command == command::Command::Restart;
                        if faults::panics_after_line(&line) {
                            self.panic_after = Some(line.clone());
                        }
                        self.console_asks
                            .push_back((token, ConsoleAsk { json, restart }));
                        inputs.append(&mut ended);
                        inputs.push(Input::Console {
                            client,
                            cred: conn.cred.clone(),
                            command: Box::new(command),
                        });
                        return;
                    }
                    Err(error) => command::reply::Reply::error(error.to_string()),
                };
                queue_reply(
                    conn,
                    &Reply::Console {
                        ok: !reply.is_error(),
                        text: reply.to_text(),
                        json: json.then(|| reply.to_json()),
                    },
                );
            }
            Request::Hold => inputs.push(Input::Hold(client)),
            Request::Release => inputs.push(Input::Release(client)),
            Request::Kill => inputs.push(Input::Interrupt(client)),
            Request::Winch => inputs.push(Input::Deliver {
                client,
                signal: libc::SIGWINCH,
            }),
            Request::Signal { signal } if proto::PASSED_SIGNALS.contains(&signal) => {
                inputs.push(Input::Deliver { client, signal })
            }
            Request::Signal { signal } => refuse(
                conn,
                format!(
                    "signal {signal} cannot be passed to a job (scrun passes SIGHUP, SIGINT, SIGQUIT, SIGPIPE, SIGTERM and SIGWINCH)"
                ),
            ),
            Request::Reattach { version, reattach } => {
                if let Err(message) = same_version(version) {
                    return refuse(conn, message);
                }
                if conn.submitted {
                    return refuse(conn, "a connection may submit or reattach one job only".into());
                }
                if let Err(why) = reattach.check() {
                    return refuse(conn, format!("reattach to job {}: {why}", reattach.job));
                }
                if conn.fds.len() != reattach.descriptor_count() {
                    return refuse(
                        conn,
                        format!(
                            "this reattach must carry {} descriptors, it carried {}",
                            reattach.descriptor_count(),
                            conn.fds.len()
                        ),
                    );
                }
                if reattach.descriptors {
                    let fds = std::mem::take(&mut conn.fds);
                    let Some(stdio) = super::descriptors::job_stdio(
                        fds,
                        &reattach.closed_stdio,
                        &reattach.fds,
                        reattach.pmi_ranks as usize,
                        reattach.pmix_namespace.clone(),
                        reattach.pty,
                        &mut self.fd_pool,
                    ) else {
                        return refuse(conn, "descriptors went missing".into());
                    };
                    let pmi = stdio.pmi.clone().with_port(reattach.pmi_port);
                    conn.stdio = Some(JobStdio { pmi, ..stdio });
                }
                conn.submitted = true;
                self.idle_since = Instant::now();
                inputs.push(Input::Reattach {
                    client,
                    cred: conn.cred.clone(),
                    job: scored_core::ids::JobId(reattach.job),
                });
            }
        }
    }

    pub(super) fn close(&mut self, token: Token, inputs: &mut Vec<Input>) {
        self.partial.remove(&token);
        if let Some(mut conn) = self.connections.remove(&token) {
            let uid = conn.cred.uid;
            if !conn.privileged {
                self.plain_connections = self.plain_connections.saturating_sub(1);
            }
            if let Some(usage) = self.per_user.get_mut(&uid) {
                usage.connections = usage.connections.saturating_sub(1);
                usage.input = usage.input.saturating_sub(conn.counted.0 as usize);
                usage.output = usage.output.saturating_sub(conn.counted.1 as usize);
                if usage.connections == 0 {
                    self.per_user.remove(&uid);
                }
            }
            let _ = self.poll.registry().deregister(&mut *conn.stream);
            tracing::debug!(client = token.0, "client gone");
            inputs.push(Input::ClientGone(ClientToken(token.0 as u64)));
        }
    }

    /// Writes to the clients that have something to send (and only them:
    /// ten thousand idle clients cost nothing here).
    pub(super) fn flush_all(&mut self) {
        let mut tokens = std::mem::take(&mut self.dirty);
        tokens.sort_unstable();
        tokens.dedup();
        let mut inputs = Vec::new();
        for token in tokens {
            let Some(conn) = self.connections.get_mut(&token) else {
                continue;
            };
            let failed = flush(conn).is_err();
            if failed || (conn.closing && conn.output.is_empty()) || conn.output.len() > MAX_OUTPUT
            {
                self.close(token, &mut inputs);
                continue;
            }
            let want_write = !conn.output.is_empty();
            if !want_write {
                // Give the memory of a drained buffer back: a queued job's
                // connection then costs only its bookkeeping.
                conn.output = VecDeque::new();
            }
            if want_write != conn.writing {
                let interest = if want_write {
                    Interest::READABLE | Interest::WRITABLE
                } else {
                    Interest::READABLE
                };
                if self
                    .poll
                    .registry()
                    .reregister(&mut *conn.stream, token, interest)
                    .is_ok()
                {
                    conn.writing = want_write;
                }
            }
            self.recount(token);
        }
        if !inputs.is_empty() {
            self.feed(inputs);
        }
    }
}

/// A job's request (submit or reattach) speaks this daemon's protocol
/// version, or the refusal says which one it spoke.
fn same_version(version: u32) -> Result<(), String> {
    if version == proto::VERSION {
        return Ok(());
    }
    Err(format!(
        "protocol version {version} is not {}; use matching scrun and scored",
        proto::VERSION
    ))
}

pub(super) fn refuse(conn: &mut Connection, message: String) {
    tracing::info!(uid = conn.cred.uid, %message, "refusing a request");
    queue_reply(conn, &Reply::Error { message });
    conn.closing = true;
}

pub(super) fn queue_reply(conn: &mut Connection, reply: &Reply) {
    let frame = proto::encode(reply);
    conn.output.extend(frame);
}

/// Writes what the socket takes; `Err` means the client is gone.
pub(super) fn flush(conn: &mut Connection) -> io::Result<()> {
    while !conn.output.is_empty() {
        let (head, _) = conn.output.as_slices();
        match conn.stream.write(head) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(written) => {
                conn.output.drain(..written);
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// Reads until the socket would block, collecting bytes and descriptors.
/// Returns `Ok(false)` when the client closed its end.
///
/// With `no_descriptors` (why the client's user may not pass more), it
/// first looks at what waits (`MSG_PEEK` without room for descriptors,
/// which takes none: the kernel drops only its own extra references to
/// them, never the last), fails with that message if descriptors come
/// with it, and else reads exactly the bytes it saw, which carry none.
pub(super) fn read_available(
    conn: &mut Connection,
    chunk: &mut [u8],
    no_descriptors: Option<&str>,
) -> io::Result<bool> {
    let uid = conn.cred.uid;
    loop {
        let mut take = chunk.len();
        if let Some(why) = no_descriptors {
            let mut iov = [IoSliceMut::new(&mut *chunk)];
            let peeked = match recvmsg::<()>(
                conn.stream.as_raw_fd(),
                &mut iov,
                None,
                MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_PEEK,
            ) {
                Ok(message) => message,
                Err(nix::errno::Errno::EAGAIN) => return Ok(true),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(nix::errno::Errno::ECONNRESET) => return Ok(false),
                Err(error) => return Err(io::Error::from(error)),
            };
            if peeked.flags.contains(MsgFlags::MSG_CTRUNC) {
                return Err(io::Error::new(io::ErrorKind::InvalidData, why.to_string()));
            }
            if peeked.bytes == 0 {
                conn.stream.drained();
                return Ok(false);
            }
            take = peeked.bytes;
        }
        let mut control = nix::cmsg_space!([RawFd; SCM_MAX_FD]);
        let (len, fds, truncated) =
            {
                let mut iov = [IoSliceMut::new(&mut chunk[..take])];
                let message = match recvmsg::<()>(
                    conn.stream.as_raw_fd(),
                    &mut iov,
                    Some(&mut control),
                    MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC,
                ) {
                    Ok(message) => message,
                    Err(nix::errno::Errno::EAGAIN) => return Ok(true),
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(nix::errno::Errno::ECONNRESET) => return Ok(false),
                    Err(error) => return Err(io::Error::from(error)),
                };
                let mut fds = Vec::new();
                if let Ok(cmsgs) = message.cmsgs() {
                    for cmsg in cmsgs {
                        if let ControlMessageOwned::ScmRights(raw) = cmsg {
                            fds.extend(raw.into_iter().map(|fd| {
                                UserFd::new(crate::sys::own_received_descriptor(fd), uid)
                            }));
                        }
                    }
                }
                (
                    message.bytes,
                    fds,
                    message.flags.contains(MsgFlags::MSG_CTRUNC),
                )
            };
        if truncated {
            // The kernel could not hand over every descriptor: more than a
            // submission carries, or no room left in our table.
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "descriptors could not be received: too many in one message, or scored is out of file descriptors",
            ));
        }
        conn.fds.extend(fds);
        if conn.fds.len() > MAX_PENDING_FDS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "too many descriptors sent ({}): a submission carries at most its 3 standard ones, {} others and {} for PMI",
                    conn.fds.len(),
                    proto::MAX_INHERITED_FDS,
                    proto::MAX_PMI_FDS
                ),
            ));
        }
        if len == 0 {
            conn.stream.drained();
            return Ok(false);
        }
        conn.input.extend(&chunk[..len]);
        // Refuse an oversized frame as soon as its length is known, before
        // buffering it.
        if let Err(error) = proto::frame_len(conn.input.pending(), proto::MAX_REQUEST) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                error.to_string(),
            ));
        }
        if conn.input.len() > proto::MAX_REQUEST + 4 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "request too large",
            ));
        }
    }
}

//! One run of scrun, from a parsed command line to an exit status:
//! build the request, block signals, reach scored (or start a private
//! one), submit with the standard descriptors (and the ranks' PMI
//! connections), follow the session, and clean up.
//!
//! This is the only module that decides the order of those steps; the
//! steps themselves live in [`crate::submit`], [`crate::signals`],
//! [`crate::single`] and [`crate::session`].
#![forbid(unsafe_code)]

use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use scored_proto::client::{self, Connection, SocketSource};
use scored_proto::exitcode;
use scored_proto::proto::{Request, WireBytes};
use scrun::cli::Invocation;
use scrun::pmi::pmix::OPENMPI_DIRECT_LAUNCH;
use scrun::pmi::Mode;

use crate::caller::Caller;
use crate::error::{chain, Fatal};
use crate::pmi_server::PmiServer;
use crate::pmix_server::PmixServer;
use crate::report::Final;
use crate::session::{self, PtySide};
use crate::signals::Signals;
use crate::single::{self, PrivatePaths};
use crate::terminal::{Pty, Relay};

/// How scrun ends: its exit status, or the signal it ends by (with the
/// status to use should that signal not end it).
pub struct Outcome {
    /// The exit status.
    pub code: i32,
    /// The signal to end by, reset to its default disposition.
    pub reraise: Option<nix::sys::signal::Signal>,
}

impl From<i32> for Outcome {
    fn from(code: i32) -> Outcome {
        Outcome {
            code,
            reraise: None,
        }
    }
}

/// Runs the job and returns how scrun ends. Everything scrun has to say
/// is already on stderr, and its terminal restored, when this returns.
pub fn run(invocation: &Invocation) -> Outcome {
    // Read before scrun changes anything, so that the job gets what the
    // caller gave scrun.
    let caller = crate::caller::read();
    // The request is built first, so that a job too large to send never
    // starts a private daemon.
    let mut request = match crate::submit::build(invocation, &caller) {
        Ok(request) => request,
        Err(fatal) => return report_fatal(&fatal),
    };
    // Blocked before connecting, so that an early Ctrl-C is read from the
    // signalfd rather than killing scrun between submission and the loop.
    let signals = match Signals::block(&caller.ignored_signals) {
        Ok(signals) => signals,
        Err(errno) => {
            return report_fatal(&Fatal::with_source(
                exitcode::INTERNAL,
                "cannot block signals",
                io::Error::from(errno),
            ))
        }
    };
    let (path, source) = client::socket_path(invocation.options.scored.clone());
    let (mut connection, reached) =
        match connect(&path, source, &signals, invocation.options.verbose) {
            Ok(connected) => connected,
            Err(fatal) => return report_fatal(&fatal),
        };
    // With -pty, the job gets the slave of a new pty as stdin, stdout and
    // stderr, and scrun relays between its own terminal and the master.
    let pty = if invocation.options.pty {
        match Pty::open() {
            Ok(pty) => Some(pty),
            Err(error) => {
                return report_fatal(&Fatal::with_source(
                    exitcode::INTERNAL,
                    "-pty: cannot open a pseudo-terminal",
                    error,
                ))
            }
        }
    } else {
        None
    };
    // With PMIx, libpmix's server in this process (started after the
    // private daemon, if any: libpmix runs a thread of its own), and its
    // variables in every rank's environment. `auto` does without it where
    // it cannot be had.
    let pmix = match start_pmix(invocation, &mut request) {
        Ok(pmix) => pmix,
        Err(fatal) => return report_fatal(&fatal),
    };
    let mut pmix = pmix;
    // With PMI, one socketpair per rank of each stage: the ranks' ends go
    // with the submission, scrun serves the others until the job ends.
    let pmi_ranks = match &request {
        Request::Submit { submit, .. } => submit.pmi_ranks as usize,
        _ => 0,
    };
    let (mut pmi, rank_ends) = if pmi_ranks > 0 {
        match PmiServer::create(invocation.options.mpi, pmi_ranks, invocation.stages.len()) {
            Ok((server, ends)) => (Some(server), ends),
            Err(error) => {
                return report_fatal(&Fatal::with_source(
                    exitcode::INTERNAL,
                    "cannot create the ranks' PMI connections",
                    error,
                ))
            }
        }
    } else {
        (None, Vec::new())
    };
    let sent = submit(
        &mut connection,
        &request,
        &path,
        pty.as_ref(),
        &caller,
        &rank_ends,
    );
    // Until the job starts, scrun keeps its copies of what it sent (the
    // pty's slave, the ranks' PMI ends): a daemon that dies before then
    // takes its own with it, and the one that takes the job over needs
    // them again. Once the job has started they are let go, so that the
    // end of a rank is the end of its connection.
    let mut rejoin = Rejoin {
        reached,
        signals: &signals,
        verbose: invocation.options.verbose,
        caller: &caller,
        layout: match &request {
            Request::Submit { submit, .. } => scored_proto::proto::Reattach {
                job: 0,
                descriptors: true,
                closed_stdio: submit.closed_stdio.clone(),
                fds: submit.fds.clone(),
                pmi_ranks: submit.pmi_ranks,
                stages: submit.stages.len() as u32,
                pty: submit.options.pty,
                pmix_namespace: submit.pmix_namespace.clone(),
            },
            _ => scored_proto::proto::Reattach {
                job: 0,
                descriptors: false,
                closed_stdio: Vec::new(),
                fds: Vec::new(),
                pmi_ranks: 0,
                stages: 0,
                pty: false,
                pmix_namespace: None,
            },
        },
        rank_ends,
    };
    let window = invocation.options.reattach;
    let verbose = invocation.options.verbose;
    let end = match sent {
        Ok(()) => match pty {
            Some(pty) => {
                let mut side = PtySide {
                    relay: Relay::new(pty),
                    raw: None,
                    started: false,
                };
                let end = session::run(
                    &mut connection,
                    &signals,
                    invocation.options.stat,
                    Some(&mut side),
                    pmi.as_mut(),
                    pmix.as_mut(),
                    &mut rejoin,
                    window,
                    verbose,
                );
                // Dropping the side restores scrun's terminal before
                // anything more is said on it.
                drop(side);
                end
            }
            None => session::run(
                &mut connection,
                &signals,
                invocation.options.stat,
                None,
                pmi.as_mut(),
                pmix.as_mut(),
                &mut rejoin,
                window,
                verbose,
            ),
        },
        Err(fatal) => Final {
            stderr: format!("scrun: {}\n", chain(&fatal)),
            code: fatal.code(),
            reraise: None,
        },
    };
    let _ = io::stderr().lock().write_all(end.stderr.as_bytes());
    // Closing the connection is what tells scored we are gone: a job still
    // running (after a second interrupt) is killed.
    connection.shutdown();
    drop(connection);
    Outcome {
        code: end.code,
        reraise: end.reraise,
    }
}

/// Starts the job's PMIx server if `-mpi=` asks for one and the job's
/// rank count is known, and puts into `request` what its ranks need: the
/// server's variables (replacing any `PMIX_*` of an outer launcher) and
/// the namespace. `-mpi=pmix` without libpmix is an error (status 69);
/// `auto` then serves PMI-1 and PMI-2 alone (and says so with `-verbose`).
fn start_pmix(invocation: &Invocation, request: &mut Request) -> Result<Option<PmixServer>, Fatal> {
    let ranks = crate::submit::pmix_ranks(invocation)?;
    if ranks == 0 {
        return Ok(None);
    }
    let (server, launch) = match PmixServer::create(ranks, invocation.stages.len()) {
        Ok(started) => started,
        Err(why) if invocation.options.mpi == Mode::Pmix => {
            return Err(Fatal::new(
                exitcode::UNREACHABLE,
                format!("-mpi=pmix: {why}"),
            ))
        }
        Err(why) => {
            if invocation.options.verbose {
                session::say(&format!(
                    "no PMIx for this job, PMI-1 and PMI-2 only: {why}"
                ));
            }
            return Ok(None);
        }
    };
    if let Request::Submit { submit, .. } = request {
        submit
            .env
            .retain(|(key, _)| !key.as_bytes().starts_with(b"PMIX_"));
        submit.env.extend(
            launch
                .env
                .iter()
                .map(|(key, value)| (WireBytes::from_os(key), WireBytes::from_os(value))),
        );
        for (key, value) in OPENMPI_DIRECT_LAUNCH {
            if !submit
                .env
                .iter()
                .any(|(name, _)| name.as_bytes() == key.as_bytes())
            {
                submit.env.push((key.into(), value.into()));
            }
        }
        submit.pmix_namespace = Some(launch.namespace);
    }
    crate::submit::check_size(request)?;
    Ok(Some(server))
}

/// The daemon scrun reached: a socket, or the user's private daemon
/// (which scrun starts again if it died).
enum Reached {
    /// The daemon listening at this socket.
    Socket(PathBuf),
    /// The user's private daemon; the path is the default socket where
    /// no daemon answered.
    Private(PrivatePaths, PathBuf),
}

/// Connects to scored: at the socket named by `-scored=` or
/// `SCORED_SOCKET` if one is, else at the default socket, and when no
/// daemon answers there, to the user's private daemon, which is started
/// if it does not run (see [`crate::single`]).
fn connect(
    path: &Path,
    source: SocketSource,
    signals: &Signals,
    verbose: bool,
) -> Result<(Connection, Reached), Fatal> {
    match client::connect_default(path, source) {
        Ok((connection, reached)) => Ok((connection, Reached::Socket(reached))),
        Err(error) if source == SocketSource::Default && client::means_no_daemon(&error) => {
            let uid = nix::unistd::geteuid().as_raw();
            let paths = PrivatePaths::new(std::env::var_os("XDG_RUNTIME_DIR").as_deref(), uid);
            let connection = single::connect(&paths, path, signals, verbose)?;
            Ok((connection, Reached::Private(paths, path.to_path_buf())))
        }
        Err(error) => Err(Fatal::with_source(
            exitcode::UNREACHABLE,
            format!("cannot reach scored at {}", path.display()),
            error,
        )),
    }
}

/// What scrun needs to reach its daemon again and ask for its job back.
struct Rejoin<'a> {
    reached: Reached,
    signals: &'a Signals,
    verbose: bool,
    caller: &'a Caller,
    /// The descriptors' layout of the submission.
    layout: scored_proto::proto::Reattach,
    /// The ranks' PMI ends, until the job starts.
    rank_ends: Vec<OwnedFd>,
}

impl session::Reconnect for Rejoin<'_> {
    fn reconnect(
        &mut self,
        job: u64,
        descriptors: bool,
        pty: Option<&Pty>,
    ) -> io::Result<Connection> {
        let mut connection = match &self.reached {
            Reached::Socket(path) => Connection::connect(path)?,
            // The private daemon is started again if it died: it takes
            // its jobs over as any scored does.
            Reached::Private(paths, default) => {
                single::connect(paths, default, self.signals, self.verbose)
                    .map_err(|fatal| io::Error::other(chain(&fatal)))?
            }
        };
        let mut reattach = self.layout.clone();
        reattach.job = job;
        reattach.descriptors = descriptors && self.layout.descriptors;
        if !reattach.descriptors {
            reattach.closed_stdio.clear();
            reattach.fds.clear();
            reattach.pmi_ranks = 0;
        }
        let request = Request::Reattach {
            version: scored_proto::proto::VERSION,
            reattach: reattach.clone(),
        };
        if reattach.descriptors {
            let fds = descriptors_to_send(pty, self.caller, &self.rank_ends);
            connection.send_with_fds(&request, &fds)?;
        } else {
            connection.send(&request)?;
        }
        Ok(connection)
    }

    fn started(&mut self) {
        self.rank_ends.clear();
    }
}

/// The descriptors of a submission, in the order the protocol gives:
/// stdin, stdout and stderr (scrun's own that were not closed, or with
/// `-pty` the pty's slave as all three), then the other descriptors scrun
/// inherited, then the ranks' ends of their PMI connections.
fn descriptors_to_send<'a>(
    pty: Option<&'a Pty>,
    caller: &'a Caller,
    pmi: &'a [OwnedFd],
) -> Vec<std::os::fd::BorrowedFd<'a>> {
    let mut fds = match pty.and_then(Pty::slave) {
        Some(slave) => vec![slave, slave, slave],
        None => [0, 1, 2]
            .into_iter()
            .filter(|fd| !caller.closed_stdio.contains(fd))
            .map(crate::sys::borrow)
            .collect(),
    };
    fds.extend(caller.descriptors.iter().map(|&fd| crate::sys::borrow(fd)));
    fds.extend(pmi.iter().map(AsFd::as_fd));
    fds
}

/// Sends the submission with its descriptors attached, in the order the
/// protocol gives (`Submit::descriptor_count`): stdin, stdout and stderr
/// (scrun's own that were not closed, or with `-pty` the pty's slave as
/// all three), then the other descriptors scrun inherited, then the
/// ranks' ends of their PMI connections.
fn submit(
    connection: &mut Connection,
    request: &Request,
    path: &Path,
    pty: Option<&Pty>,
    caller: &Caller,
    pmi: &[OwnedFd],
) -> Result<(), Fatal> {
    let fds = descriptors_to_send(pty, caller, pmi);
    match connection.send_with_fds(request, &fds) {
        Ok(()) => Ok(()),
        // scored hung up while we were sending, which it does after an
        // `Error` reply; the session reads that reply, or reports the
        // lost connection.
        Err(error)
            if matches!(
                error.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            ) =>
        {
            Ok(())
        }
        Err(error) => Err(Fatal::with_source(
            exitcode::INTERNAL,
            format!("cannot send the job to scored at {}", path.display()),
            error,
        )),
    }
}

/// Prints a failure of scrun itself and returns how scrun ends: with its
/// status, or silently by the signal that interrupted it.
pub fn report_fatal(fatal: &Fatal) -> Outcome {
    if fatal.signal().is_none() {
        session::say(&chain(fatal));
    }
    Outcome {
        code: fatal.code(),
        reraise: fatal.signal(),
    }
}

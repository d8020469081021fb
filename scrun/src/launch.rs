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
use scored_proto::settings::{self, ClientSettings};
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
use crate::spawner::SpawnedSide;
use crate::submit::{PmiRoute, PmixWorlds};
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
    // A scrun started for a spawn first takes its parent's socket off its
    // standard input, so that the job gets /dev/null there instead.
    let mut spawned = match crate::spawner::child_side() {
        Ok(spawned) => spawned,
        Err(message) => return report_fatal(&Fatal::new(exitcode::USAGE, message)),
    };
    run_job(invocation, &mut spawned)
}

/// [`run`], for a job spawned by another's rank when `spawned` says so:
/// its parent hears why the job could not be submitted.
fn run_job(invocation: &Invocation, spawned: &mut Option<SpawnedSide>) -> Outcome {
    // Read before scrun changes anything, so that the job gets what the
    // caller gave scrun.
    let caller = crate::caller::read();
    // The request is built first, so that a job too large to send never
    // starts a private daemon.
    let mut request = match crate::submit::build(invocation, &caller) {
        Ok(request) => request,
        Err(fatal) => return refuse(spawned, &fatal),
    };
    // Output files the user may not create are refused before anything
    // is sent, and so before anything is created.
    if let Err(fatal) = check_output(invocation) {
        return refuse(spawned, &fatal);
    }
    // Blocked before connecting, so that an early Ctrl-C is read from the
    // signalfd rather than killing scrun between submission and the loop.
    let signals = match Signals::block(&caller.ignored_signals) {
        Ok(signals) => signals,
        Err(errno) => {
            return refuse(
                spawned,
                &Fatal::with_source(
                    exitcode::INTERNAL,
                    "cannot block signals",
                    io::Error::from(errno),
                ),
            )
        }
    };
    let settings = match settings::read() {
        Ok(settings) => settings,
        Err(error) => {
            return refuse(
                spawned,
                &Fatal::new(
                    exitcode::UNREACHABLE,
                    format!("cannot tell where scored is: {error}"),
                ),
            )
        }
    };
    let (path, source) = client::socket_path(invocation.options.scored.clone(), &settings);
    let (mut connection, reached) = match connect(
        &path,
        source,
        &settings,
        &signals,
        invocation.options.verbose,
    ) {
        Ok(connected) => connected,
        Err(fatal) => return refuse(spawned, &fatal),
    };
    if invocation.options.batch.detach {
        // No descriptor goes with it: the job has no client.
        let sent = connection.send(&request).map_err(|error| {
            Fatal::with_source(
                exitcode::INTERNAL,
                format!("cannot send the job to scored at {}", path.display()),
                error,
            )
        });
        let end = sent.and_then(|()| crate::batch::follow(&mut connection));
        connection.shutdown();
        return match end {
            Ok(code) => code.into(),
            Err(fatal) => refuse(spawned, &fatal),
        };
    }
    // With -pty, the job gets the slave of a new pty as stdin, stdout and
    // stderr, and scrun relays between its own terminal and the master.
    let pty = if invocation.options.pty {
        match Pty::open() {
            Ok(pty) => Some(pty),
            Err(error) => {
                return refuse(
                    spawned,
                    &Fatal::with_source(
                        exitcode::INTERNAL,
                        "-pty: cannot open a pseudo-terminal",
                        error,
                    ),
                )
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
        Err(fatal) => return refuse(spawned, &fatal),
    };
    let mut pmix = pmix;
    // With PMI, one socketpair per rank of each stage: the ranks' ends go
    // with the submission, scrun serves the others until the job ends.
    // Where the rank count is known only once placed (or is over what
    // descriptors carry), PMI-1 at a loopback port instead.
    let (mut pmi, rank_ends) = match start_pmi(invocation, &mut request) {
        Ok(started) => started,
        Err(error) => {
            return refuse(
                spawned,
                &Fatal::with_source(
                    exitcode::INTERNAL,
                    "cannot create the ranks' PMI connections",
                    error,
                ),
            )
        }
    };
    if let Some(server) = pmi.as_mut() {
        // The children's scrun goes to the daemon this one reached,
        // the user's private one included.
        server.serve_spawns(match &reached {
            Reached::Socket(socket) => socket.clone(),
            Reached::Private(paths, _) => paths.socket.clone(),
        });
        if let Some(side) = spawned.take() {
            server.spawned(side);
        }
    }
    if let Request::Submit { submit, .. } = &mut request {
        submit
            .env
            .retain(|(key, _)| key.as_bytes() != crate::spawner::SPAWN_ENV.as_bytes());
    }
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
                pmi_port: submit.pmi_port,
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
                pmi_port: false,
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
    // The jobs its ranks spawned end with it; a spawning parent that
    // still waits hears why this job was not admitted.
    if let Some(server) = pmi.as_mut() {
        server.refused(&end.stderr);
        server.end_spawned();
    }
    // Closing the connection is what tells scored we are gone: a job still
    // running (after a second interrupt) is killed.
    connection.shutdown();
    drop(connection);
    Outcome {
        code: end.code,
        reraise: end.reraise,
    }
}

/// Checks as the user that the job's output files can be created in the
/// working directory (see [`crate::batch::check_output`]).
fn check_output(invocation: &Invocation) -> Result<(), Fatal> {
    let given = &invocation.options.batch;
    // A batch job without -output= writes to the default file, which is
    // checked as one given would be.
    let defaulted;
    let batch = if given.detach && given.output.is_none() {
        defaulted = scored_proto::batch::BatchOptions {
            output: Some(scored_proto::batch::DEFAULT_OUTPUT.into()),
            ..given.clone()
        };
        &defaulted
    } else {
        given
    };
    if batch.output.is_none() && batch.error.is_none() {
        return Ok(());
    }
    let cwd = crate::submit::working_dir()?;
    let name = match &batch.name {
        Some(name) => name.clone(),
        None => scored_proto::batch::default_name(
            invocation
                .stages
                .first()
                .and_then(|stage| stage.first())
                .map_or(&[][..], |program| program.as_encoded_bytes()),
        ),
    };
    let index = batch.array.map(|spec| spec.first);
    crate::batch::check_output(batch, &name, index, &cwd)
}

/// The job's PMI-1 and PMI-2 server, as `request` asks: one socketpair
/// per rank of each stage (the ranks' ends returned, to go with the
/// submission), or a loopback port that `request`'s environment names
/// (`PMI_PORT`, replacing an outer launcher's `PMI_*`).
fn start_pmi(
    invocation: &Invocation,
    request: &mut Request,
) -> io::Result<(Option<PmiServer>, Vec<OwnedFd>)> {
    let Request::Submit { submit, .. } = request else {
        return Ok((None, Vec::new()));
    };
    let (mode, stages) = (invocation.options.mpi, invocation.stages.len());
    if submit.pmi_ranks > 0 {
        let (server, ends) = PmiServer::create(mode, submit.pmi_ranks as usize, stages)?;
        return Ok((Some(server), ends));
    }
    if !submit.pmi_port {
        return Ok((None, Vec::new()));
    }
    let ranks = match crate::submit::pmi_route(invocation) {
        Ok(PmiRoute::Port(ranks)) => ranks,
        _ => None,
    };
    let (server, port) = PmiServer::listen(mode, ranks, stages)?;
    submit.env.retain(|(key, _)| {
        !matches!(
            key.as_bytes(),
            b"PMI_PORT" | b"PMI_ID" | b"PMI_FD" | b"PMI_RANK" | b"PMI_SIZE"
        )
    });
    submit.env.push((
        "PMI_PORT".into(),
        format!("127.0.0.1:{port}").as_str().into(),
    ));
    Ok((Some(server), Vec::new()))
}

/// Starts the job's PMIx server if `-mpi=` asks for one (for the ranks
/// of each stage, or those scored places for `-hosts=`), and puts into `request` what its ranks need: the
/// server's variables (replacing any `PMIX_*` of an outer launcher) and
/// the namespace. libpmix itself starts only if a rank connects.
/// `-mpi=pmix` without libpmix is an error (status 69) before the job
/// runs; with `auto` a missing libpmix is found, and said, when a rank asks.
fn start_pmix(invocation: &Invocation, request: &mut Request) -> Result<Option<PmixServer>, Fatal> {
    let ranks = match crate::submit::pmix_worlds(invocation)? {
        PmixWorlds::None => return Ok(None),
        PmixWorlds::Ranks(ranks) => Some(ranks),
        PmixWorlds::Placed => None,
    };
    let explicit = invocation.options.mpi == Mode::Pmix;
    let verbose = invocation.options.verbose;
    let (server, launch) =
        match PmixServer::create(ranks, invocation.stages.len(), explicit, verbose) {
            Ok(started) => started,
            Err(why) if explicit => {
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
/// `SCORED_SOCKET` if one is, else at the socket of the system-wide
/// setting or the default socket, and when no daemon answers there, to
/// the user's private daemon, which is started if it does not run (see
/// [`crate::single`]), unless the setting forbids it. Falling back from a
/// shared daemon the user meant (the configured socket, or the shared
/// socket left by a daemon that stopped) is said on stderr.
fn connect(
    path: &Path,
    source: SocketSource,
    settings: &ClientSettings,
    signals: &Signals,
    verbose: bool,
) -> Result<(Connection, Reached), Fatal> {
    match client::connect_default(path, source) {
        // The user's own private daemon at its socket (a plain user's
        // default socket is that one): it is started again if it dies,
        // as one this scrun started would be.
        Ok((connection, reached))
            if matches!(source, SocketSource::Default | SocketSource::Configured)
                && settings.private =>
        {
            let uid = nix::unistd::geteuid().as_raw();
            let paths = PrivatePaths::new(std::env::var_os("XDG_RUNTIME_DIR").as_deref(), uid);
            if reached == paths.socket {
                Ok((connection, Reached::Private(paths, path.to_path_buf())))
            } else {
                Ok((connection, Reached::Socket(reached)))
            }
        }
        Ok((connection, reached)) => Ok((connection, Reached::Socket(reached))),
        Err(error)
            if matches!(source, SocketSource::Default | SocketSource::Configured)
                && client::means_no_daemon(&error) =>
        {
            let shared = match source {
                SocketSource::Configured => Some(path.to_path_buf()),
                _ => client::dead_shared_socket(source),
            };
            if let (false, Some(file)) = (settings.private, &settings.file) {
                return Err(Fatal::new(
                    exitcode::UNREACHABLE,
                    format!(
                        "no scored answers at {}, and {} allows no private scored \
                         (private = false): ask the operator to start it",
                        shared.as_deref().unwrap_or(path).display(),
                        file.display()
                    ),
                ));
            }
            if let Some(shared) = &shared {
                session::say(&format!(
                    "no scored answers at {}; the job runs on a private scored of yours, \
                     without the shared daemon's queues and limits",
                    shared.display()
                ));
            }
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

/// [`report_fatal`], telling a spawning parent too.
fn refuse(spawned: &mut Option<SpawnedSide>, fatal: &Fatal) -> Outcome {
    if let Some(side) = spawned.as_mut() {
        side.refused(&chain(fatal));
    }
    report_fatal(fatal)
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

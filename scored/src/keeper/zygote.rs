//! The zygote: a fork of scored taken at the very start of `main`, before
//! its heap holds jobs, that forks a keeper for each job on scored's
//! request. Each keeper is forked as scored's own child
//! (`sys::fork_sibling`), so that scored learns of its death and inherits
//! its orphans, and costs only the pages it writes of the zygote's small
//! memory; forking scored itself for every job would pin copies of
//! whatever scored's heap holds by then, and executing a binary would put
//! an exec on every launch.
//!
//! The zygote leads a session of its own (a terminal's signals to scored's
//! process group never reach it or the keepers), keeps nothing of scored's
//! but its socket, and ends when scored's end of it closes (scored exited,
//! died or executed a new image, which makes a zygote of its own).
#![forbid(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{receive, send, socket_pair};
use crate::sys;

/// scored's request for a keeper: the message carries the keeper's end of
/// its socket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MakeKeeper {
    /// The job.
    pub job: u64,
    /// Where the keeper binds its socket for a scored that takes over.
    pub sockets: PathBuf,
    /// How long it waits for a scored once its own has gone.
    pub wait_ms: u64,
}

/// scored's handle on its zygote.
#[derive(Debug)]
pub struct Zygote {
    socket: OwnedFd,
    pid: i32,
}

impl Zygote {
    /// Forks the zygote. In the zygote this never returns: it serves until
    /// scored's end of the socket closes, then exits.
    pub fn start() -> io::Result<Zygote> {
        let (ours, theirs) = socket_pair()?;
        match sys::fork_process()? {
            Some(pid) => {
                drop(theirs);
                Ok(Zygote { socket: ours, pid })
            }
            None => {
                drop(ours);
                serve(theirs)
            }
        }
    }

    /// The zygote's pid (a child of scored, reaped as any).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Asks for a keeper of `job`; returns scored's end of its socket. The
    /// keeper says who it is (`FromKeeper::Hello`) on it once it runs.
    pub fn make(&self, request: &MakeKeeper) -> io::Result<OwnedFd> {
        let (ours, theirs) = socket_pair()?;
        let raw = [theirs.as_raw_fd()];
        // A request is a few hundred bytes: the zygote's buffer full means
        // it is stuck, and the launch fails rather than waiting.
        if !send(self.socket.as_fd(), request, &raw)? {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "the zygote does not take requests",
            ));
        }
        Ok(ours)
    }
}

/// The zygote's life: a session of its own, the daemon's priority, nothing
/// open but `socket` and the standard streams, then one keeper per request.
fn serve(socket: OwnedFd) -> ! {
    super::retitle("scored zygote");
    let _ = nix::unistd::setsid();
    let _ = crate::actuator::elevate_priority();
    let _ = sys::close_from_3_except(&[], socket.as_raw_fd(), false);
    let mut buffer = vec![0u8; super::MAX_MESSAGE];
    loop {
        let request = match wait_readable(&socket)
            .and_then(|()| receive::<MakeKeeper>(socket.as_fd(), &mut buffer))
        {
            Ok(Some(request)) => request,
            Ok(None) => continue,
            Err(error) if error.kind() == io::ErrorKind::InvalidData => {
                tracing::error!(%error, "the zygote got a request it cannot read");
                continue;
            }
            // scored is gone (or executed a new image): so is the zygote.
            Err(_) => sys::exit_now(0),
        };
        let (request, mut fds) = request;
        let Some(keeper_end) = fds.pop() else {
            tracing::error!(job = request.job, "a keeper request without its socket");
            continue;
        };
        drop(fds);
        match sys::fork_sibling() {
            Ok(Some(_)) => drop(keeper_end),
            Ok(None) => {
                drop(socket);
                super::life::run(
                    request.job,
                    keeper_end,
                    request.sockets,
                    Duration::from_millis(request.wait_ms),
                )
            }
            Err(error) => {
                tracing::error!(job = request.job, %error, "cannot fork a keeper");
                // Its socket closes: scored sees the keeper gone at once.
                drop(keeper_end);
            }
        }
    }
}

/// Blocks until `socket` is readable (or closed).
fn wait_readable(socket: &OwnedFd) -> io::Result<()> {
    let mut fds = [nix::poll::PollFd::new(
        socket.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    match nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE) {
        Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(()),
        Err(errno) => Err(errno.into()),
    }
}

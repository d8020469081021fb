//! The closer process: this binary again, named `scored-closer`, started
//! by the daemon with its end of the socket and nothing else of the
//! daemon's. It never holds a user's descriptor itself: for each batch
//! the daemon sends, it reads only the batch's first bytes (`MSG_PEEK`,
//! which installs no descriptor), then forks a child that receives the
//! batch, says how many it got, waits for the batch's release pipe to
//! reach its end (the daemon's own copies are then gone) and exits; the
//! exit closes the batch. The closer reports each batch closed once its
//! child is reaped. The files the daemon wants synced (its own) are
//! received by the closer itself and synced in a child of its own.
#![forbid(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::io::IoSliceMut;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};

use super::{FORK_RETRY, RELEASE, SCM_MAX_FD, SYNC};
use crate::sys;

/// The closer's command name (`argv[0]`), which tells the binary to be
/// the closer, and `ps` to show it apart from the daemon.
pub(super) const CLOSER_NAME: &std::ffi::CStr = c"scored-closer";

/// Whether this process was started as the closer (see [`serve_inherited`]).
pub fn invoked_as_closer() -> bool {
    std::env::args_os()
        .next()
        .is_some_and(|arg0| arg0.as_encoded_bytes() == CLOSER_NAME.to_bytes())
}

/// The closer process, started by the daemon (`actuator::spawn_closer`)
/// with its end of the socket as descriptor 3 and nothing else of the
/// daemon's: serves until the daemon is gone, and returns the exit status.
pub fn serve_inherited() -> i32 {
    match sys::adopt_descriptor(3) {
        Ok(socket) => serve(socket),
        Err(_) => 1,
    }
}

/// What the next message on the socket is, read without taking it.
enum Next {
    /// The daemon's files to sync.
    Sync,
    /// A batch of user `uid`'s descriptors; `release` if its last one is
    /// a release pipe.
    Batch { uid: u32, release: bool },
    /// Nothing yet.
    Nothing,
    /// The daemon is gone.
    Gone,
}

fn peek(socket: &OwnedFd) -> Next {
    let mut payload = [0u8; SYNC.len()];
    loop {
        // recv(2) passes no control buffer: the descriptors the message
        // carries stay in it, installed nowhere.
        return match nix::sys::socket::recv(
            socket.as_raw_fd(),
            &mut payload,
            MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT,
        ) {
            Ok(0) => Next::Gone,
            Ok(n) if n == SYNC.len() && payload == *SYNC => Next::Sync,
            Ok(n) => {
                let uid = u32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]);
                let flags = u32::from_le_bytes([payload[4], payload[5], payload[6], payload[7]]);
                Next::Batch {
                    uid,
                    release: n == SYNC.len() && flags & RELEASE != 0,
                }
            }
            Err(Errno::EINTR) => continue,
            Err(Errno::EAGAIN) => Next::Nothing,
            Err(_) => Next::Gone,
        };
    }
}

/// Receives the next message with the descriptors it carries; `None`
/// when there is none or the socket failed.
fn receive(socket: &OwnedFd, control: &mut Vec<u8>) -> Option<Vec<OwnedFd>> {
    let mut payload = [0u8; SYNC.len()];
    let mut iov = [IoSliceMut::new(&mut payload)];
    let message = loop {
        match recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut *control),
            MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(message) => break message,
            Err(Errno::EINTR) => {}
            Err(_) => return None,
        }
    };
    let mut fds = Vec::new();
    if let Ok(cmsgs) = message.cmsgs() {
        for cmsg in cmsgs {
            if let ControlMessageOwned::ScmRights(raw) = cmsg {
                fds.extend(raw.into_iter().map(sys::own_received_descriptor));
            }
        }
    }
    Some(fds)
}

/// Forks the child that takes the next message, a batch of a user's:
/// its pid and how many descriptors of the user's it took, once it has
/// taken them (`None` if the fork failed). The child keeps nothing of the
/// closer's but the batch, waits for the release pipe (the batch's last
/// descriptor, when `release`) to reach its end, and exits.
fn hand_to_child(
    socket: &OwnedFd,
    signals: &impl AsFd,
    control: &mut Vec<u8>,
    release: bool,
) -> Option<(i32, u32)> {
    let (said_read, said_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok()?;
    match sys::fork_process() {
        Ok(Some(pid)) => {
            drop(said_write);
            let mut said = [0u8; 4];
            let mut got = 0;
            // The child says at once (or dies): this never waits long.
            while got < said.len() {
                match nix::unistd::read(&said_read, &mut said[got..]) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(Errno::EINTR) => {}
                    Err(_) => break,
                }
            }
            let n = if got == said.len() {
                u32::from_le_bytes(said)
            } else {
                0
            };
            Some((pid, n))
        }
        Ok(None) => {
            drop(said_read);
            let mut batch = receive(socket, control).unwrap_or_default();
            // The closer's own descriptors go at once (a socket and a
            // signalfd, which close at once): a child that waits keeps
            // nothing that tells the daemon the closer lives.
            let _ = sys::close(socket.as_raw_fd());
            let _ = sys::close(signals.as_fd().as_raw_fd());
            let released = if release { batch.pop() } else { None };
            let n = batch.len() as u32;
            let _ = nix::unistd::write(&said_write, &n.to_le_bytes());
            drop(said_write);
            // The closes of the user's descriptors (this exit) at normal
            // priority.
            let _ = sys::set_scheduler(None, false);
            if let Some(release) = released {
                let mut byte = [0u8; 1];
                // The end of the pipe: the daemon's copies of the batch
                // are gone, so this exit makes the last close of each.
                loop {
                    match nix::unistd::read(&release, &mut byte) {
                        Ok(0) => break,
                        Ok(_) | Err(Errno::EINTR) => {}
                        Err(_) => break,
                    }
                }
            }
            // An exiting process never lingers on a socket (the kernel
            // skips SO_LINGER for a task that exits), and whatever else
            // a close waits for holds this child alone.
            sys::exit_now(0)
        }
        Err(_) => None,
    }
}

/// The closer process: hands each batch of one user's descriptors to a
/// child that takes it and exits once released, and reports each batch
/// closed once its child is reaped. Returns (and so exits) when the
/// daemon's end is closed: the daemon is gone.
fn serve(socket: OwnedFd) -> i32 {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use nix::sys::signal::{SigSet, Signal};
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};

    // Refused where the daemon got no real-time priority either (its
    // user may not have it): the closer runs at normal priority then.
    // Its children start at its priority, so that the one that syncs
    // does not wait behind the jobs either. Set before its name, so that
    // a process named the closer has its priority.
    let _ = sys::set_scheduler(Some(super::CLOSER_PRIORITY), false);
    // Started from /proc/self/exe, whose name the kernel took as its own.
    let _ = nix::sys::prctl::set_name(CLOSER_NAME);
    // Children's ends through a signalfd; every other signal as for any
    // process, so that root can end the closer like any other.
    let mut children_set = SigSet::empty();
    children_set.add(Signal::SIGCHLD);
    if children_set.thread_set_mask().is_err() {
        return 1;
    }
    let Ok(signals) = SignalFd::with_flags(
        &children_set,
        SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC,
    ) else {
        return 1;
    };
    let mut children: HashMap<i32, (u32, u32)> = HashMap::new();
    let mut reports: VecDeque<[u8; 8]> = VecDeque::new();
    // The child syncing files, and the files to sync once it is done.
    let mut syncer: Option<i32> = None;
    let mut to_sync: Vec<OwnedFd> = Vec::new();
    let mut control = nix::cmsg_space!([RawFd; SCM_MAX_FD]);
    // A fork failed: the socket is read again after FORK_RETRY.
    let mut fork_failed = false;
    loop {
        // Forked while no user's descriptor is held here (none ever is),
        // so that the child, which waits for the disk, keeps none.
        if syncer.is_none() && !to_sync.is_empty() {
            match sys::fork_process() {
                Ok(Some(pid)) => {
                    syncer = Some(pid);
                    // The child syncs them; these copies, of the daemon's
                    // own files, close at once.
                    to_sync.clear();
                }
                Ok(None) => {
                    for file in to_sync.drain(..) {
                        let _ = std::fs::File::from(file).sync_data();
                    }
                    sys::exit_now(0)
                }
                Err(_) => fork_failed = true,
            }
        }
        while let Ok(Some(_)) = signals.read_signal() {}
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, ..)) => {
                    if syncer == Some(pid.as_raw()) {
                        syncer = None;
                    }
                    if let Some((uid, n)) = children.remove(&pid.as_raw()) {
                        let mut report = [0u8; 8];
                        report[..4].copy_from_slice(&uid.to_le_bytes());
                        report[4..].copy_from_slice(&n.to_le_bytes());
                        reports.push_back(report);
                    }
                }
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(_) => {}
            }
        }
        while let Some(report) = reports.front() {
            match nix::sys::socket::send(
                socket.as_raw_fd(),
                report,
                MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
            ) {
                Ok(_) => {
                    reports.pop_front();
                }
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => break,
                Err(_) => return 0,
            }
        }
        let mut socket_events = PollFlags::empty();
        if !fork_failed {
            socket_events |= PollFlags::POLLIN;
        }
        if !reports.is_empty() {
            socket_events |= PollFlags::POLLOUT;
        }
        let mut fds = [
            PollFd::new(socket.as_fd(), socket_events),
            PollFd::new(signals.as_fd(), PollFlags::POLLIN),
        ];
        let timeout = if fork_failed {
            PollTimeout::from(FORK_RETRY.as_millis() as u16)
        } else {
            PollTimeout::NONE
        };
        match poll(&mut fds, timeout) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => return 1,
        }
        fork_failed = false;
        loop {
            match peek(&socket) {
                Next::Gone => {
                    // The daemon is gone; the children go on with what
                    // they hold.
                    return 0;
                }
                Next::Nothing => break,
                Next::Sync => match receive(&socket, &mut control) {
                    Some(files) => add_files(&mut to_sync, files),
                    None => return 0,
                },
                Next::Batch { uid, release } => {
                    match hand_to_child(&socket, &signals, &mut control, release) {
                        Some((pid, n)) => {
                            children.insert(pid, (uid, n));
                        }
                        None => {
                            fork_failed = true;
                            break;
                        }
                    }
                }
            }
        }
    }
}

/// Adds `files` to those waiting for a sync, each file once (a sync
/// asked for again while one runs adds nothing): the list holds as many
/// descriptors as the daemon has files to sync, however long a sync
/// takes.
fn add_files(to_sync: &mut Vec<OwnedFd>, files: Vec<OwnedFd>) {
    let identity = |fd: &OwnedFd| {
        nix::sys::stat::fstat(fd)
            .ok()
            .map(|stat| (stat.st_dev, stat.st_ino))
    };
    for file in files {
        let id = identity(&file);
        if id.is_none() || !to_sync.iter().any(|held| identity(held) == id) {
            to_sync.push(file);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_waits_for_its_sync_once_however_often_it_is_asked() {
        let dir = std::env::temp_dir().join(format!("scored-closer-sync-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let open = |name: &str| {
            OwnedFd::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(dir.join(name))
                    .unwrap(),
            )
        };
        let mut to_sync = Vec::new();
        add_files(&mut to_sync, vec![open("journal"), open("state.log")]);
        add_files(&mut to_sync, vec![open("journal")]);
        add_files(&mut to_sync, vec![open("journal"), open("state.log")]);
        assert_eq!(to_sync.len(), 2);
        add_files(&mut to_sync, vec![open("journal.1")]);
        assert_eq!(to_sync.len(), 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

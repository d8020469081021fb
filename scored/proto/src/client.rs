//! The client side of the protocol, shared by scrun and sc_console: finding
//! the daemon's socket, connecting, and exchanging frames (with descriptors
//! for a submission).
//!
//! Blocking I/O on purpose: each client talks to one daemon and has nothing
//! else to do while it waits, except scrun, which polls the descriptor
//! returned by [`Connection::as_fd`] together with its signals.
#![forbid(unsafe_code)]

use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};

use crate::proto::{self, FrameError, Reply, Request};

/// Where a socket path came from, which decides what a failure to connect means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketSource {
    /// An explicit flag or option (`--socket`, `scored=`).
    Explicit,
    /// The `SCORED_SOCKET` environment variable.
    Environment,
    /// The clients' system-wide setting (`[client] socket` of
    /// `/etc/scored/scored.toml`, see [`crate::settings`]).
    Configured,
    /// The default location (`paths::default_socket`, scored(8) FILES).
    Default,
}

/// Picks the socket: the explicit path, else `SCORED_SOCKET`, else the
/// socket of the system-wide setting, else the default.
pub fn socket_path(
    explicit: Option<PathBuf>,
    settings: &crate::settings::ClientSettings,
) -> (PathBuf, SocketSource) {
    if let Some(path) = explicit {
        return (path, SocketSource::Explicit);
    }
    if let Some(path) = std::env::var_os("SCORED_SOCKET").filter(|value| !value.is_empty()) {
        return (PathBuf::from(path), SocketSource::Environment);
    }
    if let Some(path) = &settings.socket {
        return (path.clone(), SocketSource::Configured);
    }
    let uid = nix::unistd::geteuid().as_raw();
    let runtime = std::env::var("XDG_RUNTIME_DIR").ok();
    (
        crate::paths::default_socket(uid, runtime.as_deref()),
        SocketSource::Default,
    )
}

/// The shared daemon's socket, for a client that found no daemon at its
/// own default socket: a plain user's clients turn to the root daemon,
/// which serves every user of the machine, before scrun starts a private
/// one. None for root, whose default socket is that one already, and for
/// a socket named by a flag or `SCORED_SOCKET`, which is used alone.
pub fn shared_socket(uid: u32, source: SocketSource) -> Option<PathBuf> {
    (source == SocketSource::Default && uid != 0).then(|| PathBuf::from(crate::paths::ROOT_SOCKET))
}

/// Root's private daemon's socket, for a console of root's that found no
/// daemon at its default socket (the shared one): scrun starts that
/// private daemon for root when no shared one runs, where a plain user's
/// default socket is the private one already. None for anyone else, and
/// for a socket named by a flag, `SCORED_SOCKET` or the setting.
pub fn roots_private_socket(source: SocketSource) -> Option<PathBuf> {
    (source == SocketSource::Default && nix::unistd::geteuid().is_root()).then(|| {
        let runtime = std::env::var("XDG_RUNTIME_DIR").ok();
        crate::paths::private_socket(0, runtime.as_deref())
    })
}

/// The shared daemon's socket when it is there as a file although nothing
/// answered at it (a shared daemon that died or was stopped), for a client
/// that found no daemon at its default socket: scrun says so before it falls back to a
/// private daemon, since the user meant the shared one.
pub fn dead_shared_socket(source: SocketSource) -> Option<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    if source != SocketSource::Default {
        return None;
    }
    let shared = Path::new(crate::paths::ROOT_SOCKET);
    std::fs::symlink_metadata(shared)
        .ok()?
        .file_type()
        .is_socket()
        .then(|| shared.to_path_buf())
}

/// Whether a failure to connect means that no daemon runs at the socket
/// (nothing at the path, or a stale socket), which is when a client tries
/// the next place: the shared daemon, then scrun's private one.
pub fn means_no_daemon(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(code) if code == nix::errno::Errno::ENOENT as i32
            || code == nix::errno::Errno::ECONNREFUSED as i32
    )
}

/// Connects to the daemon at `path`; when none runs there and the path is
/// the default one, to the shared daemon (see [`shared_socket`]). Returns
/// the connection and the socket it reached; a failure is that of `path`
/// (and `None` tells the caller nothing answered at either).
pub fn connect_default(
    path: &Path,
    source: SocketSource,
) -> Result<(Connection, PathBuf), io::Error> {
    match Connection::connect(path) {
        Ok(connection) => Ok((connection, path.to_path_buf())),
        Err(error) if means_no_daemon(&error) => {
            let uid = nix::unistd::geteuid().as_raw();
            match shared_socket(uid, source) {
                Some(shared) => match Connection::connect(&shared) {
                    Ok(connection) => Ok((connection, shared)),
                    Err(_) => Err(error),
                },
                None => Err(error),
            }
        }
        Err(error) => Err(error),
    }
}

/// The most [`Connection::read_available`] reads at once: a page or two
/// of the stack, where a reply to scrun is a few hundred bytes (a larger
/// buffer would be zeroed and its pages faulted in at every launch).
pub const AVAILABLE_CHUNK: usize = 8 * 1024;

/// A connection to the daemon.
pub struct Connection {
    stream: UnixStream,
    buffer: proto::FrameBuffer,
}

impl Connection {
    /// Connects to the daemon's socket, after checking that nobody but the
    /// caller or root could have put it there, and before sending anything,
    /// that the daemon runs as root or as the caller (see [`check_socket`]
    /// and [`check_server`]). A missing socket is the usual `NotFound` or
    /// `ConnectionRefused`, so that scrun may start a private daemon; a
    /// refusal is `PermissionDenied` with a message naming the path.
    pub fn connect(path: &Path) -> io::Result<Connection> {
        let me = nix::unistd::geteuid().as_raw();
        check_socket(path, me)?;
        let stream = UnixStream::connect(path)?;
        check_server(&stream, path, me)?;
        Ok(Connection {
            stream,
            buffer: proto::FrameBuffer::new(),
        })
    }

    /// Sends a request.
    pub fn send(&mut self, request: &Request) -> io::Result<()> {
        match self.stream.write_all(&proto::encode(request)) {
            Ok(()) => Ok(()),
            Err(error) => Err(self.explain(error)),
        }
    }

    /// A write that failed because scored closed the connection: scored
    /// says why before it closes one (a limit on connections, say), so the
    /// reason is read and returned in place of the bare broken pipe.
    fn explain(&mut self, error: io::Error) -> io::Error {
        if !matches!(
            error.kind(),
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
        ) {
            return error;
        }
        match self.recv() {
            Ok(Reply::Error { message }) => {
                io::Error::new(io::ErrorKind::ConnectionRefused, message)
            }
            _ => error,
        }
    }

    /// Sends a request with descriptors attached (SCM_RIGHTS).
    pub fn send_with_fds(&mut self, request: &Request, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        let frame = proto::encode(request);
        let raw: Vec<RawFd> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
        let control = [ControlMessage::ScmRights(&raw)];
        // The descriptors travel with the first chunk; the rest of the frame
        // follows as plain bytes.
        let sent = sendmsg::<()>(
            self.stream.as_raw_fd(),
            &[IoSlice::new(&frame)],
            &control,
            MsgFlags::empty(),
            None,
        )
        .map_err(|error| self.explain(io::Error::from(error)))?;
        match self.stream.write_all(&frame[sent..]) {
            Ok(()) => Ok(()),
            Err(error) => Err(self.explain(error)),
        }
    }

    /// Waits for the next reply; the end of the connection is an
    /// `UnexpectedEof` error.
    pub fn recv(&mut self) -> io::Result<Reply> {
        loop {
            if let Some(reply) = self.try_decode()? {
                return Ok(reply);
            }
            let mut chunk = [0u8; 64 * 1024];
            let len = match self.stream.read(&mut chunk) {
                Ok(len) => len,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            };
            if len == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "scored closed the connection",
                ));
            }
            self.buffer.extend(&chunk[..len]);
        }
    }

    /// Reads what is available without blocking (call when the descriptor
    /// is readable) and returns a complete reply if one arrived. `Ok(None)`
    /// means more bytes are needed; the end of the connection is an error.
    ///
    /// One `recv` with `MSG_DONTWAIT` into a chunk of [`AVAILABLE_CHUNK`]
    /// bytes: the socket stays blocking for [`Connection::recv`], and a
    /// reply longer than a chunk is read over several calls, each when the
    /// descriptor is readable again.
    pub fn read_available(&mut self) -> io::Result<Option<Reply>> {
        if let Some(reply) = self.try_decode()? {
            return Ok(Some(reply));
        }
        let mut chunk = [0u8; AVAILABLE_CHUNK];
        let result =
            nix::sys::socket::recv(self.stream.as_raw_fd(), &mut chunk, MsgFlags::MSG_DONTWAIT);
        match result {
            Ok(0) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "scored closed the connection",
            )),
            Ok(len) => {
                self.buffer.extend(&chunk[..len]);
                self.try_decode()
            }
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => Ok(None),
            Err(errno) => Err(io::Error::from(errno)),
        }
    }

    /// A reply already buffered, if any.
    pub fn try_decode(&mut self) -> io::Result<Option<Reply>> {
        self.buffer
            .decode(proto::MAX_REPLY)
            .map_err(|error: FrameError| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("bad reply from scored: {error}"),
                )
            })
    }

    /// Runs one console line; returns whether it succeeded, its text and its JSON.
    pub fn console(
        &mut self,
        line: &str,
        json: bool,
    ) -> io::Result<(bool, String, Option<serde_json::Value>)> {
        self.send(&Request::Console {
            version: proto::VERSION,
            line: line.to_string(),
            json,
        })?;
        match self.recv()? {
            Reply::Console { ok, text, json } => Ok((ok, text, json)),
            Reply::Error { message } => Err(io::Error::new(io::ErrorKind::InvalidData, message)),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "scored answered a console line with a job message",
            )),
        }
    }

    /// The socket, for polling.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }

    /// Closes the writing half (the daemon then sees the client leave).
    pub fn shutdown(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

fn refuse(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, message)
}

/// Refuses a socket that another user could have planted: the socket
/// (links resolved) must belong to `me` or root, and so must its directory,
/// which nobody else may write unless it is sticky (as /tmp, where others
/// cannot remove or rename what is ours). Otherwise whoever owns the
/// directory could put a socket of their own there and receive the
/// client's terminal and environment.
pub fn check_socket(path: &Path, me: u32) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let real = std::fs::canonicalize(path)?;
    let dir = real.parent().unwrap_or(Path::new("/"));
    let dir_meta = std::fs::metadata(dir)?;
    let someone_else = |uid: u32| uid != me && uid != 0;
    if someone_else(dir_meta.uid()) {
        return Err(refuse(format!(
            "refusing the socket {}: its directory {} belongs to uid {}, not to you (uid {me}) or root",
            path.display(),
            dir.display(),
            dir_meta.uid()
        )));
    }
    let mode = dir_meta.mode() & 0o7777;
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(refuse(format!(
            "refusing the socket {}: its directory {} is writable by other users (mode {mode:o})",
            path.display(),
            dir.display()
        )));
    }
    let meta = std::fs::metadata(&real)?;
    if someone_else(meta.uid()) {
        return Err(refuse(format!(
            "refusing the socket {}: it belongs to uid {}, not to you (uid {me}) or root",
            path.display(),
            meta.uid()
        )));
    }
    Ok(())
}

/// Refuses a daemon that runs as neither root nor `me`, by the kernel's
/// word (SO_PEERCRED), before anything is sent to it.
pub fn check_server(stream: &UnixStream, path: &Path, me: u32) -> io::Result<()> {
    let peer = nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(io::Error::from)?;
    let uid = peer.uid();
    if uid != me && uid != 0 {
        return Err(refuse(format!(
            "refusing scored at {}: it runs as uid {uid}, not as you (uid {me}) or root",
            path.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_plain_users_default_socket_gives_way_to_the_shared_one() {
        let shared = Some(PathBuf::from(crate::paths::ROOT_SOCKET));
        assert_eq!(shared_socket(1000, SocketSource::Default), shared);
        assert_eq!(shared_socket(0, SocketSource::Default), None);
        assert_eq!(shared_socket(1000, SocketSource::Explicit), None);
        assert_eq!(shared_socket(1000, SocketSource::Environment), None);
    }

    #[test]
    fn only_a_missing_or_stale_socket_means_no_daemon() {
        let errno = |code| io::Error::from_raw_os_error(code as i32);
        assert!(means_no_daemon(&errno(nix::errno::Errno::ENOENT)));
        assert!(means_no_daemon(&errno(nix::errno::Errno::ECONNREFUSED)));
        assert!(!means_no_daemon(&errno(nix::errno::Errno::EACCES)));
        assert!(!means_no_daemon(&errno(nix::errno::Errno::ENOTSOCK)));
    }

    #[test]
    fn a_reply_longer_than_a_chunk_is_read_whole_without_blocking() {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let mut connection = Connection {
            stream: ours,
            buffer: proto::FrameBuffer::new(),
        };
        // Nothing sent yet: no reply, and no wait for one.
        assert!(connection.read_available().unwrap().is_none());
        let message = "m".repeat(3 * AVAILABLE_CHUNK);
        theirs
            .write_all(&proto::encode(&Reply::Error {
                message: message.clone(),
            }))
            .unwrap();
        let mut reads = 0;
        let reply = loop {
            reads += 1;
            if let Some(reply) = connection.read_available().unwrap() {
                break reply;
            }
            assert!(reads < 10, "the reply never completed");
        };
        assert!(matches!(reply, Reply::Error { message: m } if m == message));
        assert!(reads > 1, "read in one chunk");
        assert!(connection.read_available().unwrap().is_none());
        drop(theirs);
        let end = connection.read_available().unwrap_err();
        assert_eq!(end.kind(), io::ErrorKind::UnexpectedEof);
    }
}

//! The listening socket: created where no other daemon listens, with the
//! permissions that let every local user connect and nobody replace it.

use std::io;
use std::path::PathBuf;

/// Why the daemon's socket could not be bound.
#[derive(Debug)]
pub enum BindError {
    /// A file system call on `path` failed (`doing`: what was tried).
    Io {
        /// What was tried: `create`, `inspect`, ...
        doing: &'static str,
        /// The path it was tried on.
        path: PathBuf,
        /// What the kernel said.
        source: io::Error,
    },
    /// The socket's directory belongs to someone else.
    DirectoryOwner {
        /// The socket path asked for.
        path: PathBuf,
        /// The directory's owner.
        uid: u32,
    },
    /// The socket's directory is writable by other users and not sticky.
    DirectoryWritable {
        /// The socket path asked for.
        path: PathBuf,
        /// Its directory, which others may write.
        dir: PathBuf,
    },
    /// Something other than a socket is at the path.
    NotSocket(PathBuf),
    /// A socket of another user is at the path.
    SocketOwner {
        /// The socket path asked for.
        path: PathBuf,
        /// The uid that owns the socket there.
        uid: u32,
    },
    /// A daemon answers on the socket.
    InUse(PathBuf),
}

impl std::fmt::Display for BindError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BindError::Io {
                doing,
                path,
                source,
            } => write!(f, "cannot {doing} {}: {source}", path.display()),
            BindError::DirectoryOwner { path, uid } => write!(
                f,
                "refusing {}: its directory belongs to uid {uid}",
                path.display()
            ),
            BindError::DirectoryWritable { path, dir } => write!(
                f,
                "refusing {}: its directory {} is writable by other users",
                path.display(),
                dir.display()
            ),
            BindError::NotSocket(path) => write!(
                f,
                "refusing {}: it exists and is not a socket",
                path.display()
            ),
            BindError::SocketOwner { path, uid } => {
                write!(f, "refusing {}: it belongs to uid {uid}", path.display())
            }
            BindError::InUse(path) => write!(
                f,
                "another scored is already listening on {}",
                path.display()
            ),
        }
    }
}

impl std::error::Error for BindError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BindError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Binds the daemon's socket safely: the directory is created if missing
/// and must not be writable by other users (unless sticky); an existing
/// path must be a socket of ours that nobody answers on (a stale socket is
/// replaced, a live daemon is refused).
pub fn bind(
    path: &std::path::Path,
    uid: u32,
) -> Result<std::os::unix::net::UnixListener, BindError> {
    use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
    let show = path.display();
    let io_error = |doing: &'static str, path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| BindError::Io {
            doing,
            path,
            source,
        }
    };
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.exists() {
        let mode = if uid == 0 { 0o755 } else { 0o700 };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(&parent)
            .map_err(io_error("create", &parent))?;
    }
    let dir = std::fs::metadata(&parent).map_err(io_error("inspect", &parent))?;
    let mode = dir.permissions().mode();
    if dir.uid() != uid && dir.uid() != 0 {
        return Err(BindError::DirectoryOwner {
            path: path.to_path_buf(),
            uid: dir.uid(),
        });
    }
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(BindError::DirectoryWritable {
            path: path.to_path_buf(),
            dir: parent,
        });
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            if !meta.file_type().is_socket() {
                return Err(BindError::NotSocket(path.to_path_buf()));
            }
            if meta.uid() != uid {
                return Err(BindError::SocketOwner {
                    path: path.to_path_buf(),
                    uid: meta.uid(),
                });
            }
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(BindError::InUse(path.to_path_buf()));
            }
            std::fs::remove_file(path).map_err(io_error("remove the stale socket", path))?;
            tracing::info!(path = %show, "replaced a stale socket");
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(io_error("inspect", path)(error)),
    }
    let listener =
        std::os::unix::net::UnixListener::bind(path).map_err(io_error("listen on", path))?;
    // Every local user may connect (read-only commands are open to all and
    // identity comes from the kernel); a user's own daemon stays private.
    let mode = if uid == 0 { 0o666 } else { 0o600 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(io_error("set the permissions of", path))?;
    Ok(listener)
}

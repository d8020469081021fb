//! Default locations of the daemon's socket and state directory: as root
//! `/run/scored/scored.sock` and `/var/scored`, else per user (scored(8),
//! FILES).
//!
//! Pure: the caller passes the uid and the environment values it read.
#![forbid(unsafe_code)]

use std::path::PathBuf;

/// The socket a root daemon listens on by default.
pub const ROOT_SOCKET: &str = "/run/scored/scored.sock";
/// The state directory of a root daemon.
pub const ROOT_STATE_DIR: &str = "/var/scored";

/// The default socket: `/run/scored/scored.sock` for root, else
/// `$XDG_RUNTIME_DIR/scored.sock`, else `/tmp/scored-$UID/scored.sock`.
pub fn default_socket(uid: u32, xdg_runtime_dir: Option<&str>) -> PathBuf {
    if uid == 0 {
        return PathBuf::from(ROOT_SOCKET);
    }
    private_socket(uid, xdg_runtime_dir)
}

/// The socket of the private daemon scrun starts for user `uid` (root
/// included) when no shared one answers: `$XDG_RUNTIME_DIR/scored.sock`,
/// else `/tmp/scored-$UID/scored.sock`.
pub fn private_socket(uid: u32, xdg_runtime_dir: Option<&str>) -> PathBuf {
    match xdg_runtime_dir {
        Some(dir) if dir.starts_with('/') => PathBuf::from(dir).join("scored.sock"),
        _ => PathBuf::from(format!("/tmp/scored-{uid}/scored.sock")),
    }
}

/// The default state directory: `/var/scored` for root, else
/// `$XDG_STATE_HOME/scored`, else `$HOME/.local/state/scored`, else
/// `/tmp/scored-$UID/state`.
pub fn default_state_dir(uid: u32, xdg_state_home: Option<&str>, home: Option<&str>) -> PathBuf {
    if uid == 0 {
        return PathBuf::from(ROOT_STATE_DIR);
    }
    match (xdg_state_home, home) {
        (Some(dir), _) if dir.starts_with('/') => PathBuf::from(dir).join("scored"),
        (_, Some(home)) if home.starts_with('/') => PathBuf::from(home).join(".local/state/scored"),
        _ => PathBuf::from(format!("/tmp/scored-{uid}/state")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_user_defaults() {
        assert_eq!(
            default_socket(0, Some("/run/user/0")),
            PathBuf::from(ROOT_SOCKET)
        );
        assert_eq!(
            default_socket(1000, Some("/run/user/1000")),
            PathBuf::from("/run/user/1000/scored.sock")
        );
        assert_eq!(
            default_socket(1000, None),
            PathBuf::from("/tmp/scored-1000/scored.sock")
        );
        assert_eq!(
            default_socket(1000, Some("relative")),
            PathBuf::from("/tmp/scored-1000/scored.sock")
        );
        assert_eq!(
            default_state_dir(0, None, None),
            PathBuf::from(ROOT_STATE_DIR)
        );
        assert_eq!(
            default_state_dir(5, None, Some("/home/u")),
            PathBuf::from("/home/u/.local/state/scored")
        );
    }
}

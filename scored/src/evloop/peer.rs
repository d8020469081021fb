//! Who is at the other end of a connection: the peer's credentials from
//! the kernel (`SO_PEERCRED`, and its groups), and names of users and
//! groups from the system's databases.

use std::io;
use std::os::fd::AsRawFd;

use mio::net::UnixStream;

use scored_core::core::{Directory, GroupError};
use scored_core::ids::Cred;
use scored_proto::command::GroupRef;

/// Names from the system's user and group databases.
pub struct SystemDirectory;

impl Directory for SystemDirectory {
    fn group(&self, group: &GroupRef) -> Result<(u32, Option<String>), GroupError> {
        match group {
            GroupRef::Gid(gid) => {
                let name = nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(*gid))
                    .ok()
                    .flatten()
                    .map(|g| g.name);
                Ok((*gid, name))
            }
            GroupRef::Name(name) => match nix::unistd::Group::from_name(name) {
                Ok(Some(group)) => Ok((group.gid.as_raw(), Some(group.name))),
                Ok(None) => Err(GroupError::NotFound { name: name.clone() }),
                Err(error) => Err(GroupError::Lookup {
                    name: name.clone(),
                    source: Box::new(error),
                }),
            },
        }
    }

    fn has_user(&self, name: &str) -> Result<bool, String> {
        nix::unistd::User::from_name(name)
            .map(|user| user.is_some())
            .map_err(|error| error.to_string())
    }
}

/// The name of a user, or its number.
pub fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |user| user.name)
}

/// The peer's credentials (SO_PEERCRED) and supplementary groups (SO_PEERGROUPS).
pub(super) fn peer_cred(stream: &UnixStream) -> io::Result<Cred> {
    let creds = nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials)?;
    Ok(Cred {
        pid: creds.pid(),
        uid: creds.uid(),
        gid: creds.gid(),
        groups: crate::sys::peer_groups(stream.as_raw_fd()),
    })
}

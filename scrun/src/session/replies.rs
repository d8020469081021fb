//! The replies scrun reads from scored between two waits, and the one line
//! a connection broken (rather than closed) is worth when scrun does not
//! wait quietly for its daemon to come back.

use std::io;

use scored_proto::client::Connection;

use super::{Action, Event, Session};
use crate::error::describe_io;

/// Reads every complete reply that has arrived, then the connection's end if it came.
pub(super) fn read_replies(connection: &mut Connection, events: &mut Vec<Event>) {
    loop {
        match connection.read_available() {
            Ok(Some(reply)) => events.push(Event::Reply(reply)),
            Ok(None) => return,
            Err(error) if error.kind() == io::ErrorKind::InvalidData => {
                events.push(Event::Garbled(error.to_string()));
                return;
            }
            Err(error) => {
                if error.kind() != io::ErrorKind::UnexpectedEof {
                    events.push(Event::Broken(describe_io(&error)));
                }
                events.push(Event::Lost);
                return;
            }
        }
    }
}

impl Session {
    /// A broken connection (reset, say) ends like a closed one; its cause
    /// is worth one line, since a reset usually means scored died, unless
    /// scrun waits quietly for the daemon to come back (without `-v`).
    pub(super) fn on_broken(&self, why: String) -> Vec<Action> {
        let waits = self.job.is_some() && !self.reattach.is_zero();
        if waits && !self.verbose {
            return Vec::new();
        }
        vec![Action::Say(format!("connection to scored: {why}"))]
    }
}

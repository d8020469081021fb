//! The replies scrun reads from scored between two waits, and the one line
//! a connection broken (rather than closed) is worth.

use std::io;

use scored_proto::client::Connection;

use super::{say, Event};
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
                    note_broken(&error);
                }
                events.push(Event::Lost);
                return;
            }
        }
    }
}

/// A broken connection (reset, say) ends like a closed one; its cause is
/// worth one line, since a reset usually means scored died.
fn note_broken(error: &io::Error) {
    say(&format!("connection to scored: {}", describe_io(error)));
}

//! What one user may hold of the daemon: connections (with a reserve for
//! root, the daemon's user and operators), descriptors, bytes of
//! unanswered requests and of unread replies, and time to finish a
//! request. A client over its user's budget is cut off rather than let it
//! starve the others.
//!
//! Descriptors: what scored holds for a user (its connections, the
//! descriptors its clients passed, and those let go of that the closer has
//! not closed yet, see `crate::closer`) is at most
//! `--max-descriptors-per-user`, and for all users other than root and
//! the operators together at most [`plain_descriptor_limit`]. A user at
//! the budget has no connection accepted, and a connection of theirs whose
//! next message carries descriptors is closed without receiving them
//! (`connection::read_available` looks with `MSG_PEEK` first, which takes
//! none); a submission that took them past it is refused. So one read
//! (at most 253 descriptors, SCM_MAX_FD) is the most a user can go over,
//! and root and the other users always find descriptors left.

use std::time::Instant;

use mio::Token;

use super::{
    flush, queue_reply, user_name, Daemon, MAX_CONNECTIONS, PRIVILEGED_RESERVE, RESERVED_FDS,
    USER_INPUT_BUDGET, USER_OUTPUT_BUDGET,
};
use crate::actuator::Actuator;
use crate::closer;
use scored_core::core::Input;
use scored_proto::proto::Reply;

/// What one user's connections hold, for the per-user limits.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct UserUse {
    pub(super) connections: usize,
    pub(super) input: usize,
    pub(super) output: usize,
}

impl<A: Actuator> Daemon<A> {
    /// Whether a new connection of `uid` may be served: the table has
    /// room, and for a plain user, room in the users' share (the table less
    /// the reserve, counting only plain users' connections, so that root's
    /// and the operators' own connections never shrink it) and under the
    /// per-user limit. The error says which limit, for the client.
    pub(super) fn admit_connection(&self, uid: u32, privileged: bool) -> Result<(), String> {
        let total = self.connections.len();
        let limit = self.config.max_connections;
        if total >= limit {
            return Err(format!(
                "scored serves at most {limit} connections at once; try again later"
            ));
        }
        if privileged {
            return Ok(());
        }
        let reserve = PRIVILEGED_RESERVE.min(limit / 2);
        if self.plain_connections >= limit - reserve {
            return Err(format!(
                "scored serves at most {} connections at once for users other than root and the \
                 operators ({reserve} more are kept for them); try again later",
                limit - reserve
            ));
        }
        self.descriptor_budget(uid, 1)?;
        let held = self.per_user.get(&uid).map_or(0, |usage| usage.connections);
        let per_user = self.config.max_connections_per_user;
        if held >= per_user {
            return Err(format!(
                "user {} already holds {held} connections to scored, the most one user may \
                 hold at once (--max-connections-per-user {per_user}); close some and try again",
                user_name(uid)
            ));
        }
        Ok(())
    }

    /// The descriptors scored holds for `uid` (see the module doc).
    pub(super) fn descriptors_of(&self, uid: u32) -> usize {
        self.per_user.get(&uid).map_or(0, |usage| usage.connections) + closer::held(uid)
    }

    /// Whether user `uid` (other than root and the operators) may make
    /// scored hold `adding` more descriptors; the error names the budget.
    pub(super) fn descriptor_budget(&self, uid: u32, adding: usize) -> Result<(), String> {
        let held = self.descriptors_of(uid);
        let budget = self.config.max_descriptors_per_user;
        if held + adding > budget {
            return Err(format!(
                "user {} holds {held} descriptors in scored (its connections, the descriptors \
                 its jobs passed and those being closed), and one user may hold at most {budget} \
                 (--max-descriptors-per-user); end some jobs and try again",
                user_name(uid)
            ));
        }
        let all =
            self.plain_connections + closer::held_where(|other| !self.core.is_privileged(other));
        let most = self.config.max_plain_descriptors;
        if all + adding > most {
            return Err(format!(
                "scored holds {all} descriptors for users other than root and the operators, \
                 the most it holds for them ({most}); try again later"
            ));
        }
        Ok(())
    }

    /// Brings the user's totals up to date with what the connection buffers now.
    pub(super) fn recount(&mut self, token: Token) {
        let Some(conn) = self.connections.get_mut(&token) else {
            return;
        };
        let clamp = |len: usize| u32::try_from(len).unwrap_or(u32::MAX);
        let now = (clamp(conn.input.len()), clamp(conn.output.len()));
        let before = std::mem::replace(&mut conn.counted, now);
        if let Some(usage) = self.per_user.get_mut(&conn.cred.uid) {
            usage.input = (usage.input + now.0 as usize).saturating_sub(before.0 as usize);
            usage.output = (usage.output + now.1 as usize).saturating_sub(before.1 as usize);
        }
    }

    /// Whether the replies waiting for the user of `token` (a plain user)
    /// fill that user's budget, so that no more of their requests are served.
    pub(super) fn user_output_full(&self, token: Token) -> bool {
        let Some(conn) = self.connections.get(&token) else {
            return false;
        };
        !conn.privileged
            && self
                .per_user
                .get(&conn.cred.uid)
                .is_some_and(|usage| usage.output >= USER_OUTPUT_BUDGET)
    }

    /// Closes the connection of a plain user whose incomplete requests,
    /// over all of their connections, exceed the user's budget.
    pub(super) fn check_user_budget(&mut self, token: Token, inputs: &mut Vec<Input>) {
        let Some(conn) = self.connections.get_mut(&token) else {
            return;
        };
        if conn.privileged || conn.closing || conn.input.is_empty() {
            return;
        }
        let held = self
            .per_user
            .get(&conn.cred.uid)
            .map_or(0, |usage| usage.input);
        if held <= USER_INPUT_BUDGET {
            return;
        }
        let message = format!(
            "user {} has {} KiB of unfinished requests on its connections to scored, more than \
             the {} KiB one user may have; closing this connection",
            conn.user,
            held >> 10,
            USER_INPUT_BUDGET >> 10
        );
        tracing::warn!(client = token.0, uid = conn.cred.uid, %message, "dropping a client");
        self.drop_with_error(token, message, inputs);
    }

    /// Tells a client why it is dropped (if its socket takes it) and
    /// closes the connection now, freeing what it buffered.
    pub(super) fn drop_with_error(
        &mut self,
        token: Token,
        message: String,
        inputs: &mut Vec<Input>,
    ) {
        if let Some(conn) = self.connections.get_mut(&token) {
            queue_reply(conn, &Reply::Error { message });
            let _ = flush(conn);
        }
        self.close(token, inputs);
    }

    /// Closes the connections that began a request longer than the
    /// request timeout ago and have not finished it.
    pub(super) fn cut_slow_requests(&mut self, now: Instant, inputs: &mut Vec<Input>) {
        let timeout = self.config.request_timeout;
        let late: Vec<Token> = self
            .partial
            .iter()
            .filter(|(_, since)| now.saturating_duration_since(**since) >= timeout)
            .map(|(token, _)| *token)
            .collect();
        for token in late {
            let message = format!(
                "an incomplete request waited more than {} for its end; closing the connection",
                scored_proto::units::format_duration(timeout)
            );
            tracing::info!(client = token.0, %message, "dropping a client");
            self.drop_with_error(token, message, inputs);
        }
    }
}

/// Descriptors kept, beyond [`RESERVED_FDS`], for root, the daemon's user
/// and the operators, whatever other users hold.
const PRIVILEGED_FDS: u64 = 1024;

/// The most descriptors scored holds for all users other than root and
/// the operators together, out of `fd_limit`: the limit less what is kept
/// for the daemon and for them (at least half of it).
pub fn plain_descriptor_limit(fd_limit: u64) -> usize {
    fd_limit
        .saturating_sub(RESERVED_FDS + PRIVILEGED_FDS)
        .max(fd_limit / 2) as usize
}

/// How many connections fit in `fd_limit` descriptors, capped at
/// [`MAX_CONNECTIONS`]. A connection needs its socket; the three descriptors
/// of a job are shared among jobs that pass the same open files (see
/// `FdPool`), and when the table does fill up, a submission is refused
/// with a clear message instead.
pub fn connection_limit(fd_limit: u64) -> usize {
    fd_limit
        .saturating_sub(RESERVED_FDS)
        .clamp(16, MAX_CONNECTIONS as u64) as usize
}

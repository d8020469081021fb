//! Exit statuses of scrun, scored and sc_console, in one place.
//!
//! **API boundary.** scripts test these numbers; they are documented in
//! scrun(1), scored(8) and sc_console(8). scrun passes a job's own status
//! through (its first failing rank's code, or 128 + N for signal N), so its
//! own failures use the sysexits(3) range, which programs rarely return.
#![forbid(unsafe_code)]

/// Success.
pub const OK: i32 = 0;
/// scrun: the command line or `SCORE_OPTIONS` is wrong (EX_USAGE).
pub const USAGE: i32 = 64;
/// scrun, sc_console: no daemon answered at the socket (EX_UNAVAILABLE).
pub const UNREACHABLE: i32 = 69;
/// scrun, sc_console: the daemon broke the protocol or failed internally (EX_SOFTWARE).
pub const INTERNAL: i32 = 70;
/// scrun: admission was rejected (too big, queue disabled, not allowed, resources short).
pub const REJECTED: i32 = 75;
/// scrun: the job was killed for exceeding a limit (CPU time, memory, disk).
pub const LIMIT: i32 = 76;
/// scrun: a program exists but could not be executed (as the shell does).
pub const NOT_EXECUTABLE: i32 = 126;
/// scrun: a program was not found (as the shell does).
pub const NOT_FOUND: i32 = 127;
/// scored, sc_console: a configuration, hosts file, rc file or command failed.
pub const FAILURE: i32 = 1;
/// scored, sc_console: an unknown or malformed flag (reported by the flag parser).
pub const BAD_FLAG: i32 = 2;
/// The status a process killed by signal `signal` reports, as the shell does.
pub fn from_signal(signal: i32) -> i32 {
    128 + signal
}

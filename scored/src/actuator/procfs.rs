//! Reading processes from /proc: state, parentage, CPU times and memory.
//!
//! The parser is pure and tested on text; the readers are thin. A file
//! whose read can wait on its process (`stat`, `environ`) is read by
//! [`reader`], with a deadline; `status` is read directly.
#![forbid(unsafe_code)]

pub mod reader;

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::sync::{LazyLock, Mutex, PoisonError};

/// The fields of `/proc/PID/stat` the actuator uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// Process id.
    pub pid: i32,
    /// One-letter state: R, S, D, T, t, Z, X, ...
    pub state: u8,
    /// Parent process id.
    pub ppid: i32,
    /// Process group id.
    pub pgrp: i32,
    /// Session id.
    pub session: i32,
    /// User + system time of the process, in clock ticks.
    pub own_ticks: u64,
    /// User + system time of its waited-for children, in clock ticks.
    pub children_ticks: u64,
    /// Start time after boot, in clock ticks (identifies a process across pid reuse).
    pub start: u64,
    /// Resident set size in pages.
    pub rss_pages: u64,
    /// The CPU it runs on, or last ran on.
    pub processor: u32,
}

impl Stat {
    /// Whether the process cannot run user code: stopped, traced, dead or a zombie.
    pub fn is_stopped(&self) -> bool {
        matches!(self.state, b'T' | b't' | b'Z' | b'X' | b'x')
    }

    /// Whether the process is a zombie or dead.
    pub fn is_dead(&self) -> bool {
        matches!(self.state, b'Z' | b'X' | b'x')
    }
}

/// Parses the text of `/proc/PID/stat`. The command name may contain
/// spaces and parentheses, so fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid: i32 = text[..open].trim().parse().ok()?;
    let fields: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // fields[0] is field 3 (state) of proc(5).
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    let signed = |n: usize| -> Option<i32> { fields.get(n - 3)?.parse().ok() };
    Some(Stat {
        pid,
        state: *fields.first()?.as_bytes().first()?,
        ppid: signed(4)?,
        pgrp: signed(5)?,
        session: signed(6)?,
        own_ticks: field(14)? + field(15)?,
        children_ticks: field(16)? + field(17)?,
        start: field(22)?,
        rss_pages: field(24)?,
        processor: field(39)
            .and_then(|cpu| u32::try_from(cpu).ok())
            .unwrap_or(0),
    })
}

/// Reads `/proc/PID/stat`, or `None` if the process is gone.
///
/// The read waits while the process holds its exec lock (a flush of a
/// FUSE file in the middle of its execve, for as long as the server
/// likes), so it is made by [`reader`] with a deadline. A read given up
/// on yields what `/proc/PID/status` says (state, parent, group, session,
/// memory), which never waits, with the times and the start time last
/// read for that pid (0 if none was), so that the process is still seen,
/// as sleeping uninterruptibly.
pub fn read_stat(pid: i32) -> Option<Stat> {
    match reader::within_deadline(pid, move || read_stat_now(pid)) {
        Some(stat) => remember(pid, stat),
        None => read_status(pid),
    }
}

/// [`read_stat`] of each of `pids`, in one hand-over to the reader.
pub fn read_stats(pids: &[i32]) -> Vec<Option<Stat>> {
    let read = reader::each_within_deadline(pids, read_stat_now);
    pids.iter()
        .zip(read)
        .map(|(&pid, read)| match read {
            Some(stat) => remember(pid, stat),
            None => read_status(pid),
        })
        .collect()
}

/// Keeps `stat` as the last read of `pid` (forgets it if gone).
fn remember(pid: i32, stat: Option<Stat>) -> Option<Stat> {
    let mut known = known();
    match stat {
        Some(stat) => {
            if known.len() >= MOST_KNOWN {
                known.clear();
            }
            known.insert(pid, stat);
        }
        None => {
            known.remove(&pid);
        }
    }
    stat
}

/// What `/proc/PID/status` says of a process now (its state, parent,
/// group, session and resident size), with the times, start time and
/// processor of its last stat read: read directly, since `status` never
/// waits, where a state is all that is needed now (a stop's
/// confirmation).
pub fn read_status(pid: i32) -> Option<Stat> {
    status_from_file(pid, &open_status(pid)?)
}

fn open_status(pid: i32) -> Option<fs::File> {
    fs::File::open(format!("/proc/{pid}/status")).ok()
}

/// [`read_status`] through a descriptor of the file kept open from one
/// read of the pid to the next, as a stop's confirmation reads the same
/// ranks at every switch: a read of an open file costs half of an open,
/// read and close. The file follows its process, not the pid: once the
/// process is reaped its reads fail, and the pid's file is opened anew.
pub fn read_status_kept(pid: i32) -> Option<Stat> {
    let mut kept = kept_status();
    if let Some(file) = kept.get(&pid) {
        if let Some(stat) = status_from_file(pid, file) {
            return Some(stat);
        }
        kept.remove(&pid);
    }
    let file = open_status(pid)?;
    let stat = status_from_file(pid, &file)?;
    if kept.len() >= MOST_KEPT {
        kept.clear();
    }
    kept.insert(pid, file);
    Some(stat)
}

/// Forgets the kept status file of `pid` (see [`read_status_kept`]).
pub fn forget_status(pid: i32) {
    kept_status().remove(&pid);
}

/// The [`Stat`] of an open status file, read from its start: the kernel
/// writes the file anew for a read at offset 0, and one that returns less
/// than it asked for has read all of it.
fn status_from_file(pid: i32, file: &fs::File) -> Option<Stat> {
    let mut buffer = [0u8; 4096];
    let mut len = 0;
    while len < buffer.len() {
        match file.read_at(&mut buffer[len..], len as u64) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if len < buffer.len() {
                    break;
                }
            }
            Err(_) => return None,
        }
    }
    let text = std::str::from_utf8(&buffer[..len]).ok()?;
    let last = known().get(&pid).copied();
    stat_from_status(pid, text, last)
}

/// How many status files [`read_status_kept`] keeps open: a few for each
/// job small enough to have its stops confirmed from /proc.
const MOST_KEPT: usize = 64;

/// The status files kept open, by pid.
fn kept_status() -> std::sync::MutexGuard<'static, HashMap<i32, fs::File>> {
    static KEPT: LazyLock<Mutex<HashMap<i32, fs::File>>> = LazyLock::new(Default::default);
    KEPT.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How many pids' last stat [`read_stat`] keeps.
const MOST_KNOWN: usize = 1 << 15;

/// The last stat read of each pid.
fn known() -> std::sync::MutexGuard<'static, HashMap<i32, Stat>> {
    static KNOWN: LazyLock<Mutex<HashMap<i32, Stat>>> = LazyLock::new(Default::default);
    KNOWN.lock().unwrap_or_else(PoisonError::into_inner)
}

fn read_stat_now(pid: i32) -> Option<Stat> {
    let mut buffer = [0u8; 1024];
    let mut file = fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    let len = file.read(&mut buffer).ok()?;
    parse_stat(std::str::from_utf8(&buffer[..len]).ok()?)
}

/// A [`Stat`] from the text of `/proc/PID/status`: its state, parent,
/// group, session and resident size, with the times, start and processor
/// of `last` (the last stat read of that pid), or 0.
pub fn stat_from_status(pid: i32, text: &str, last: Option<Stat>) -> Option<Stat> {
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let first =
        |name: &str| -> Option<i32> { field(name)?.split_whitespace().next()?.parse().ok() };
    let kib: u64 = field("VmRSS")
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let last = last.filter(|last| last.pid == pid);
    Some(Stat {
        pid,
        state: *field("State")?.as_bytes().first()?,
        ppid: first("PPid")?,
        pgrp: first("NSpgid")?,
        session: first("NSsid")?,
        own_ticks: last.map_or(0, |last| last.own_ticks),
        children_ticks: last.map_or(0, |last| last.children_ticks),
        start: last.map_or(0, |last| last.start),
        rss_pages: kib / 4,
        processor: last.map_or(0, |last| last.processor),
    })
}

/// The pid of the process tracing this one (`TracerPid` of
/// `/proc/PID/status`), 0 when none; `None` if it cannot be read.
pub fn parse_tracer(text: &str) -> Option<i32> {
    text.lines()
        .find_map(|line| line.strip_prefix("TracerPid:"))
        .and_then(|pid| pid.trim().parse().ok())
}

/// Reads the tracer of a process (see [`parse_tracer`]).
pub fn read_tracer(pid: i32) -> Option<i32> {
    parse_tracer(&fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

/// Whether SIGSTOP is pending for the process, from the text of
/// `/proc/PID/status` (the `SigPnd` and `ShdPnd` masks, bit N-1 for signal N).
pub fn parse_stop_pending(text: &str) -> bool {
    let bit = 1u64 << (libc::SIGSTOP - 1);
    text.lines()
        .filter_map(|line| {
            line.strip_prefix("SigPnd:")
                .or_else(|| line.strip_prefix("ShdPnd:"))
        })
        .filter_map(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .any(|mask| mask & bit != 0)
}

/// Whether the process cannot run user code before it stops: it is stopped
/// (or dead), or it sleeps uninterruptibly with SIGSTOP pending. The second
/// case is a parent blocked in vfork() while its child is stopped: it
/// cannot stop until the child execs, and the child cannot exec until it
/// is continued; it runs no user code either way, since a pending stop is
/// acted on before the return to user mode.
pub fn cannot_run(stat: &Stat) -> bool {
    stat.is_stopped()
        || (stat.state == b'D'
            && fs::read_to_string(format!("/proc/{}/status", stat.pid))
                .is_ok_and(|text| parse_stop_pending(&text)))
}

/// The real uid in the text of `/proc/PID/status`.
pub fn parse_real_uid(text: &str) -> Option<u32> {
    text.lines()
        .find_map(|line| line.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Whether `entries` (the NUL-separated text of `/proc/PID/environ`) sets
/// `SCORE_JOBID` to `job`.
pub fn environ_names_job(entries: &[u8], job: u64) -> bool {
    let wanted = format!("SCORE_JOBID={job}");
    entries
        .split(|&byte| byte == 0)
        .any(|entry| entry == wanted.as_bytes())
}

/// Whether process `pid` runs as `uid` and its environment names job `job`:
/// how an orphan that lost its ancestry is attributed to its job.
pub fn is_orphan_of(pid: i32, uid: u32, job: u64) -> bool {
    let owner = fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|text| parse_real_uid(&text));
    // Read by the reader: reading a process's environment waits while
    // the process holds its exec lock. One that cannot be read in time is
    // not attributed now.
    owner == Some(uid)
        && reader::within_deadline(pid, move || fs::read(format!("/proc/{pid}/environ")).ok())
            .flatten()
            .is_some_and(|entries| environ_names_job(&entries, job))
}

/// Every process on the machine, for attribution when no cgroup is available.
pub fn all_processes() -> Vec<Stat> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let pids: Vec<i32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .collect();
    read_stats(&pids).into_iter().flatten().collect()
}

/// Parses a cgroup `cgroup.procs` file: one pid per line.
pub fn parse_pids(text: &str) -> Vec<i32> {
    text.lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

/// How many threads the calling process has (the entries of
/// /proc/self/task) but [`reader`]'s, which only read /proc files;
/// `None` where /proc cannot be read.
pub fn thread_count() -> Option<usize> {
    let threads = fs::read_dir("/proc/self/task").ok()?;
    Some(
        threads
            .filter_map(Result::ok)
            .filter(|thread| {
                fs::read_to_string(thread.path().join("comm"))
                    .is_ok_and(|comm| comm.trim_end() != reader::THREAD_NAME)
            })
            .count(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tracer_is_read_from_the_status() {
        let status = "Name:\tprog\nState:\tt (tracing stop)\nTgid:\t42\nPid:\t42\nPPid:\t1\nTracerPid:\t4711\nUid:\t0\t0\t0\t0\n";
        assert_eq!(parse_tracer(status), Some(4711));
        assert_eq!(parse_tracer("Name:\tprog\nTracerPid:\t0\n"), Some(0));
        assert_eq!(parse_tracer("Name:\tprog\n"), None);
        assert_eq!(read_tracer(std::process::id() as i32), Some(0));
    }

    #[test]
    fn a_stat_from_the_status_keeps_what_was_last_read_of_the_same_pid() {
        let status = "Name:\tsh\nState:\tD (disk sleep)\nTgid:\t4242\nNgid:\t0\nPid:\t4242\nPPid:\t17\nNStgid:\t4242\nNSpid:\t4242\nNSpgid:\t4240\nNSsid:\t4239\nVmRSS:\t    1000 kB\n";
        let text = "4242 (sh) S 17 4240 4239 0 -1 0 0 0 0 0 7 3 2 1 20 0 1 0 123456 1000000 250 0 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let last = parse_stat(text);
        let stat = stat_from_status(4242, status, last).expect("parses");
        assert_eq!(
            (stat.state, stat.ppid, stat.pgrp, stat.session),
            (b'D', 17, 4240, 4239)
        );
        assert_eq!(
            (stat.start, stat.own_ticks, stat.rss_pages),
            (123456, 10, 250)
        );
        let unknown = stat_from_status(4243, status, last).expect("parses");
        assert_eq!(
            (unknown.start, unknown.own_ticks, unknown.state),
            (0, 0, b'D')
        );
        assert_eq!(stat_from_status(4242, "Name:\tsh\n", last), None);
        let own = read_stat(std::process::id() as i32).expect("this process");
        assert_eq!(own.ppid, std::os::unix::process::parent_id() as i32);
    }

    #[test]
    fn parses_names_with_spaces_and_parentheses() {
        let text = "4242 (my (odd) prog) T 1 4242 4240 0 -1 4194560 100 0 0 0 7 3 2 1 20 0 1 0 123456 1000000 250 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let stat = parse_stat(text).expect("parses");
        assert_eq!(stat.pid, 4242);
        assert_eq!(stat.state, b'T');
        assert_eq!(stat.ppid, 1);
        assert_eq!(stat.pgrp, 4242);
        assert_eq!(stat.session, 4240);
        assert_eq!(stat.own_ticks, 10);
        assert_eq!(stat.children_ticks, 3);
        assert_eq!(stat.start, 123456);
        assert_eq!(stat.rss_pages, 250);
        assert_eq!(stat.processor, 1);
        assert!(stat.is_stopped());
    }

    #[test]
    fn a_pending_stop_is_read_from_either_mask() {
        let status = |sig: &str, shd: &str| {
            format!("Name:\ttestprog\nState:\tD (disk sleep)\nSigQ:\t1/63\nSigPnd:\t{sig}\nShdPnd:\t{shd}\nSigBlk:\tfffffffffffbfeff\n")
        };
        assert!(parse_stop_pending(&status(
            "0000000000000000",
            "0000000000050000"
        )));
        assert!(parse_stop_pending(&status(
            "0000000000040000",
            "0000000000000000"
        )));
        assert!(!parse_stop_pending(&status(
            "0000000000010000",
            "0000000000010000"
        )));
        assert!(!parse_stop_pending("garbage"));
    }

    #[test]
    fn orphans_are_recognised_by_uid_and_environment() {
        let status = "Name:\tx\nUid:\t1001\t0\t0\t0\nGid:\t100\t100\t100\t100\n";
        assert_eq!(parse_real_uid(status), Some(1001));
        assert_eq!(parse_real_uid("Name:\tx\n"), None);
        let environ = b"PATH=/bin\0SCORE_JOBID=12\0SCORE_RANK=0\0";
        assert!(environ_names_job(environ, 12));
        assert!(!environ_names_job(environ, 1));
        assert!(!environ_names_job(b"SCORE_JOBID=123\0", 12));
    }

    #[test]
    fn garbage_is_none() {
        for text in ["", "1", "1 (x", "x (y) R", "1 (y) R 2 3"] {
            assert_eq!(parse_stat(text), None, "{text}");
        }
    }

    #[test]
    fn a_kept_status_file_reads_its_process_anew_until_it_is_reaped() {
        // Killed and reaped however the test ends.
        struct Sleeper(std::process::Child);
        impl Drop for Sleeper {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let mut child = Sleeper(
            std::process::Command::new("sleep")
                .arg("30")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("spawn sleep"),
        );
        let pid = child.0.id() as i32;
        let state = || read_status_kept(pid).map(|stat| stat.state);
        let until = |wanted: fn(Option<u8>) -> bool| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !wanted(state()) {
                assert!(std::time::Instant::now() < deadline, "state {:?}", state());
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        };
        until(|state| state == Some(b'S'));
        assert!(kept_status().contains_key(&pid));
        // One open file says what its process does at each read.
        let file = fs::File::open(format!("/proc/{pid}/status")).expect("open status");
        let read = || status_from_file(pid, &file).map(|stat| stat.state);
        assert_eq!(read(), Some(b'S'));
        let signal = |signal| nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
        signal(nix::sys::signal::Signal::SIGSTOP).expect("stop");
        until(|state| state == Some(b'T'));
        assert_eq!(read(), Some(b'T'));
        signal(nix::sys::signal::Signal::SIGCONT).expect("continue");
        until(|state| state == Some(b'S'));
        child.0.kill().expect("kill");
        child.0.wait().expect("reap");
        assert_eq!(read(), None);
        assert_eq!(state(), None);
        assert!(!kept_status().contains_key(&pid));
        forget_status(pid);
    }

    #[test]
    fn reads_itself() {
        let me = read_stat(std::process::id() as i32).expect("own stat");
        assert_eq!(me.pid, std::process::id() as i32);
        assert!(!me.is_stopped());
    }
}

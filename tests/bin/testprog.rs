//! scored-testprog: small, predictable job programs for the end-to-end tests.
//!
//! ```text
//! scored-testprog spin SECS            burn CPU for SECS seconds of CPU time (0: forever)
//! scored-testprog work MILLIONS        do a fixed amount of work (MILLIONS million iterations), then exit
//! scored-testprog alloc SIZE SECS      touch SIZE bytes of memory, then sleep SECS
//! scored-testprog write PATH SIZE SECS write SIZE bytes to PATH in 1M steps, then sleep SECS
//! scored-testprog ignore-term SECS     ignore SIGTERM and sleep SECS
//! scored-testprog escape SECS          fork a child that calls setsid() and spins; print its pid
//! scored-testprog forks SECS           fork short-lived children as fast as possible for SECS
//! scored-testprog env                  print the SCORE_* environment
//! scored-testprog keyring              print `keyring ID`, the serial of its session keyring
//! scored-testprog ptrace-resume PID... seize each process with ptrace and resume it 30ms
//!                                      after each of its stops, without SIGCONT
//! scored-testprog connect PATH N SECS  open N connections to the socket PATH and hold them SECS;
//!                                      print `open N`, then `refused K` and each refusal's text
//! scored-testprog partial PATH N BYTES SECS  the same, each connection first sending the header
//!                                      of a 1 MiB request and BYTES of it, and no more
//! scored-testprog flood PATH N LINE SECS  open N connections to the socket PATH and, for SECS,
//!                                      keep 8 console requests LINE outstanding on each,
//!                                      reading the replies as they come; print `served K`
//! scored-testprog watch SECS A B       at the daemon's priority, for SECS, sample whether
//!                                      processes of both comma-separated pid lists A and B
//!                                      run at once; print each such sample, then `samples N`
//!                                      and `both K`
//! scored-testprog tally SECS A B       at the daemon's priority, every 2 ms for SECS, read
//!                                      whether process A runs (`R`, its cgroup not freezing)
//!                                      and B runs (`R`); print `samples N`, `a K`, `b K` and
//!                                      `both K`, or `gone` if either ended
//! scored-testprog ask PATH LINE        on one connection to the socket PATH, at the daemon's
//!                                      priority, send the console request LINE and wait for
//!                                      its answer, every 10 ms until stdin ends; print
//!                                      `asked N`, then `slowest MICROS` (or `unanswered TEXT`)
//! ```
//!
//! It prints `pid PID` on stdout first (except `env`), so tests can find it.

use std::io::Write;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |idx: usize| args.get(idx).cloned().unwrap_or_default();
    let secs = |idx: usize| arg(idx).parse::<f64>().unwrap_or(0.0);
    let mode = arg(0);
    if mode == "ignore-term" {
        // Before the pid is printed, so that a test that read the pid may
        // rely on the signal being ignored.
        // SAFETY: installing SIG_IGN for SIGTERM has no preconditions.
        unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
    }
    if mode != "env" {
        println!("pid {}", std::process::id());
        let _ = std::io::stdout().flush();
    }
    match mode.as_str() {
        "spin" => spin_cpu(secs(1)),
        "work" => {
            let millions = arg(1).parse::<u64>().unwrap_or(0);
            let mut x = 0u64;
            for _ in 0..millions {
                for _ in 0..1_000_000 {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            println!("done {x}");
        }
        "alloc" => {
            let size = scored_proto::units::parse_size(&arg(1)).expect("size");
            let mut memory = vec![0u8; size as usize];
            for idx in (0..memory.len()).step_by(4096) {
                memory[idx] = 1;
            }
            std::hint::black_box(&memory);
            sleep(secs(2));
        }
        "write" => {
            let size = scored_proto::units::parse_size(&arg(2)).expect("size");
            let mut file = std::fs::File::create(arg(1)).expect("create");
            let chunk = vec![7u8; 1 << 20];
            let mut written = 0u64;
            while written < size {
                let len = chunk.len().min((size - written) as usize);
                file.write_all(&chunk[..len]).expect("write");
                written += len as u64;
            }
            file.sync_all().ok();
            sleep(secs(3));
        }
        "ignore-term" => sleep(secs(1)),
        "escape" => {
            // The child says through a pipe when it leads its own session,
            // so that its pid is printed only once it has escaped.
            let mut ready = [0 as libc::c_int; 2];
            // SAFETY: pipe writes two descriptors into the array it is given.
            if unsafe { libc::pipe(ready.as_mut_ptr()) } != 0 {
                panic!("pipe: {}", std::io::Error::last_os_error());
            }
            // SAFETY: the program is single-threaded here; the child only
            // calls setsid, write and close, and spins.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                // SAFETY: setsid has no preconditions; write and close are
                // given the pipe's own descriptor and a one-byte buffer.
                unsafe {
                    libc::setsid();
                    libc::write(ready[1], b"s".as_ptr().cast(), 1);
                    libc::close(ready[1]);
                    libc::close(ready[0]);
                }
                spin_cpu(0.0);
                std::process::exit(0);
            }
            let mut byte = 0u8;
            // SAFETY: read fills the one-byte buffer it is given from the
            // pipe's read end; both ends are then closed.
            unsafe {
                libc::close(ready[1]);
                libc::read(ready[0], (&mut byte as *mut u8).cast(), 1);
                libc::close(ready[0]);
            }
            println!("child {pid}");
            let _ = std::io::stdout().flush();
            sleep(secs(1));
        }
        "forks" => {
            let end = Instant::now() + Duration::from_secs_f64(secs(1));
            let mut count = 0u64;
            while Instant::now() < end {
                if let Ok(mut child) = std::process::Command::new("true").spawn() {
                    let _ = child.wait();
                    count += 1;
                }
            }
            println!("forked {count}");
        }
        "env" => {
            let mut vars: Vec<(String, String)> = std::env::vars()
                .filter(|(key, _)| key.starts_with("SCORE_"))
                .collect();
            vars.sort();
            for (key, value) in vars {
                println!("{key}={value}");
            }
        }
        "connect" => hold_connections(&arg(1), arg(2).parse().unwrap_or(0), 0, secs(3)),
        "partial" => hold_connections(
            &arg(1),
            arg(2).parse().unwrap_or(0),
            arg(3).parse().unwrap_or(0),
            secs(4),
        ),
        "flood" => flood(&arg(1), arg(2).parse().unwrap_or(0), &arg(3), secs(4)),
        "ask" => ask(&arg(1), &arg(2)),
        "tally" => tally(
            secs(1),
            arg(2).parse().unwrap_or(0),
            arg(3).parse().unwrap_or(0),
        ),
        "watch" => watch(secs(1), &pid_list(&arg(2)), &pid_list(&arg(3))),
        "ptrace-resume" => ptrace_resume(&args[1..]),
        "keyring" => match session_keyring() {
            Some(id) => println!("keyring {id}"),
            None => println!("keyring none"),
        },
        other => {
            eprintln!("scored-testprog: unknown mode '{other}'");
            std::process::exit(2);
        }
    }
}

/// Keeps `n` connections busy with pipelined console requests `line` for
/// `seconds`, eight outstanding on each, and prints how many replies came.
fn flood(path: &str, n: usize, line: &str, seconds: f64) {
    use scored_proto::proto::{self, Request};
    use std::io::Read;
    use std::os::unix::net::UnixStream;
    let frame = proto::encode(&Request::Console {
        version: proto::VERSION,
        line: line.to_string(),
        json: false,
    });
    let mut streams: Vec<(UnixStream, usize, Vec<u8>)> = Vec::new();
    for _ in 0..n {
        let Ok(stream) = UnixStream::connect(path) else {
            break;
        };
        let _ = stream.set_nonblocking(true);
        streams.push((stream, 0, Vec::new()));
    }
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let mut served = 0usize;
    let mut chunk = vec![0u8; 64 * 1024];
    while Instant::now() < end {
        for (stream, outstanding, buffer) in &mut streams {
            while *outstanding < 8 {
                if stream.write_all(&frame).is_err() {
                    break;
                }
                *outstanding += 1;
            }
            while let Ok(len) = stream.read(&mut chunk) {
                if len == 0 {
                    break;
                }
                buffer.extend_from_slice(&chunk[..len]);
            }
            // Count whole frames and drop them.
            while buffer.len() >= 4 {
                let len = u32::from_be_bytes([buffer[0], buffer[1], buffer[2], buffer[3]]) as usize;
                if buffer.len() < 4 + len {
                    break;
                }
                buffer.drain(..4 + len);
                *outstanding = outstanding.saturating_sub(1);
                served += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    println!("served {served}");
}

/// Raises this process to the daemon's real-time priority (SCHED_FIFO 10,
/// not inherited by children), where it may have it: an observer of the
/// daemon that waited for a CPU behind a loaded machine's processes would
/// count that wait as the daemon's.
fn at_daemon_priority() {
    let param = libc::sched_param { sched_priority: 10 };
    // SAFETY: sched_setscheduler reads the parameter it is given; a
    // refusal leaves the policy as it was.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &param) };
}

fn pid_list(text: &str) -> Vec<i32> {
    text.split(',').filter_map(|pid| pid.parse().ok()).collect()
}

/// How many of `pids` run their own code: runnable (`R`) and not held
/// (a process with a SIGSTOP pending, or in a freezing cgroup, may show
/// `R` on a loaded machine while it can only stop or freeze).
fn running(pids: &[i32]) -> usize {
    pids.iter()
        .filter(|pid| {
            scored_tests::proc_stat(**pid).is_some_and(|stat| stat.state == 'R')
                && !scored_tests::held(**pid)
        })
        .count()
}

/// Samples, for `seconds`, whether processes of `a` and of `b` run at
/// once, and prints each sample that saw it, then how many samples were
/// taken and how many saw it. A sample reads `a`, then `b`, then `a`
/// again, and counts only when `a` ran at both ends: the reads of /proc
/// are not atomic, and a switch completed between the reads of `a` and
/// `b` would look like overlap. A sample that took 20 ms or more (well
/// under the shortest time slice the tests use, so that no switch and
/// switch back can fall within one) says nothing and is not counted. It
/// runs at the daemon's priority, in a process of its own: a thread of
/// the test's process stalls behind the other tests' forks and
/// allocations, and at normal priority waits for a CPU on a loaded
/// machine, so that too few samples were quick enough.
fn watch(seconds: f64, a: &[i32], b: &[i32]) {
    const SAMPLE_BOUND: Duration = Duration::from_millis(20);
    at_daemon_priority();
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let (mut both, mut samples) = (0u64, 0u64);
    while Instant::now() < end {
        let started = Instant::now();
        let seen = running(a) > 0 && running(b) > 0 && running(a) > 0;
        if started.elapsed() < SAMPLE_BOUND {
            samples += 1;
            if seen {
                both += 1;
                let states = |pids: &[i32]| -> Vec<String> {
                    pids.iter()
                        .map(|pid| {
                            let state =
                                scored_tests::proc_stat(*pid).map_or('-', |stat| stat.state);
                            format!("{pid} {state} held {}", scored_tests::held(*pid))
                        })
                        .collect()
                };
                println!("at once: {:?} and {:?}", states(a), states(b));
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    println!("samples {samples}");
    println!("both {both}");
}

/// Reads, every 2 ms for `seconds`, whether `a` and `b` run, and prints
/// how many samples saw each run and both at once. `a`'s freezer is read
/// first: a freeze that begins between the reads counts as `a` running,
/// never the other way round; a process of a freezing cgroup shows `R`
/// until it gets a CPU to enter the freezer, and runs none of its code by
/// then. At the daemon's priority, in a process of its own, so that the
/// samples are evenly spread on a loaded machine (see [`watch`]).
fn tally(seconds: f64, a: i32, b: i32) {
    at_daemon_priority();
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let (mut samples, mut a_running, mut b_running, mut both) = (0u32, 0u32, 0u32, 0u32);
    while Instant::now() < end {
        let a_freezing = scored_tests::freezing(a);
        let (Some(a_stat), Some(b_stat)) = (scored_tests::proc_stat(a), scored_tests::proc_stat(b))
        else {
            println!("gone");
            std::process::exit(1);
        };
        samples += 1;
        let a_runs = a_stat.state == 'R' && !a_freezing;
        let b_runs = b_stat.state == 'R';
        a_running += u32::from(a_runs);
        b_running += u32::from(b_runs);
        both += u32::from(a_runs && b_runs);
        std::thread::sleep(Duration::from_millis(2));
    }
    println!("samples {samples}");
    println!("a {a_running}");
    println!("b {b_running}");
    println!("both {both}");
}

/// Asks the console request `line` on one connection to `path` again and
/// again, 10 ms apart, until stdin ends, and prints how many were asked
/// and the slowest answer (`unanswered` and what came, if one was not a
/// successful console reply within 60 s). It times the daemon, not this
/// program: a process of its own (a thread of the test's process stalls
/// behind the other tests' forks and allocations), at the daemon's
/// real-time priority where it may have it, so that a loaded machine's
/// queue for the CPU is not counted as the daemon's delay.
fn ask(path: &str, line: &str) {
    use scored_proto::proto::{self, Reply, Request};
    use std::io::Read;
    use std::os::unix::net::UnixStream;
    use std::sync::atomic::{AtomicBool, Ordering};
    at_daemon_priority();
    static DONE: AtomicBool = AtomicBool::new(false);
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        DONE.store(true, Ordering::SeqCst);
    });
    let frame = proto::encode(&Request::Console {
        version: proto::VERSION,
        line: line.to_string(),
        json: false,
    });
    let mut stream = UnixStream::connect(path).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let (mut asked, mut slowest) = (0u64, Duration::ZERO);
    let mut chunk = [0u8; 4096];
    while !DONE.load(Ordering::SeqCst) {
        let started = Instant::now();
        stream.write_all(&frame).expect("write");
        let mut bytes = Vec::new();
        let reply = loop {
            if let Ok(Some(reply)) = proto::decode::<Reply>(&mut bytes, proto::MAX_REPLY) {
                break Some(reply);
            }
            match stream.read(&mut chunk) {
                Ok(len) if len > 0 => bytes.extend_from_slice(&chunk[..len]),
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                _ => break None,
            }
        };
        if !matches!(reply, Some(Reply::Console { ok: true, .. })) {
            println!("unanswered {reply:?} after {:?}", started.elapsed());
            std::process::exit(1);
        }
        slowest = slowest.max(started.elapsed());
        asked += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("asked {asked}");
    println!("slowest {}", slowest.as_micros());
}

/// Opens `n` connections to a Unix socket, then reports which of them the
/// daemon refused (it writes an error frame and closes), then holds the
/// others open for `seconds`, then reports again (`closed K`: closed by the
/// daemon meanwhile).
fn hold_connections(path: &str, n: usize, partial: usize, seconds: f64) {
    use std::os::unix::net::UnixStream;
    // Room for the connections: up to the hard descriptor limit.
    // SAFETY: an all-zero rlimit is valid and getrlimit/setrlimit only
    // read and write it.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
    // Each connection with what the daemon sent on it so far.
    let mut streams: Vec<(UnixStream, Vec<u8>)> = Vec::new();
    for _ in 0..n {
        match UnixStream::connect(path) {
            Ok(mut stream) => {
                if partial > 0 {
                    // The header of a request of 1 MiB, then part of it.
                    let mut bytes = (1u32 << 20).to_be_bytes().to_vec();
                    bytes.resize(4 + partial, b' ');
                    let _ = stream.write_all(&bytes);
                }
                streams.push((stream, Vec::new()));
            }
            Err(error) => {
                println!("connect failed: {error}");
                break;
            }
        }
    }
    println!("open {}", streams.len());
    let _ = std::io::stdout().flush();
    sleep(0.5);
    let mut refused = closed_by_daemon(&mut streams);
    // Partial requests of megabytes take the daemon several wakeups to
    // read (each user gets a share of each wakeup), longer on a loaded
    // machine: the first refusal is waited for, up to 10 s.
    let deadline = Instant::now() + Duration::from_secs(10);
    while partial > 0 && refused.is_empty() && Instant::now() < deadline {
        sleep(0.1);
        refused = closed_by_daemon(&mut streams);
    }
    println!("refused {}", refused.len());
    for text in &refused {
        println!("said {text}");
    }
    let _ = std::io::stdout().flush();
    sleep(seconds);
    let closed = closed_by_daemon(&mut streams);
    println!("closed {}", closed.len());
}

/// Reads what the daemon sent on each connection, without blocking; takes
/// out the connections it closed and returns, for each, the payloads of
/// the frames it sent before closing, as text (one line).
///
/// A connection that the daemon closed while bytes written on it were
/// still unread there (the client wrote on while the daemon dropped it)
/// reads as its frames, then one `ECONNRESET`, then end of file: the
/// reset is a close too, and the frames read before it are its message.
/// What a connection received is also kept from one call to the next,
/// for a read that falls between the daemon's error and its close.
fn closed_by_daemon(streams: &mut Vec<(std::os::unix::net::UnixStream, Vec<u8>)>) -> Vec<String> {
    use std::io::Read;
    let mut said = Vec::new();
    streams.retain_mut(|(stream, received)| {
        let _ = stream.set_nonblocking(true);
        let mut chunk = [0u8; 4096];
        loop {
            match stream.read(&mut chunk) {
                Ok(0) => break,
                Ok(len) => received.extend_from_slice(&chunk[..len]),
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => return true,
                // Closed with our bytes unread: the frames are in `received`.
                Err(_) => break,
            }
        }
        said.push(frames_text(received));
        false
    });
    said
}

/// The payloads of the length-prefixed frames in `bytes`, as one line of
/// text; a trailing incomplete frame is shown as such.
fn frames_text(bytes: &[u8]) -> String {
    let mut texts = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let Some(header) = rest.get(..4) else {
            texts.push(format!("(an incomplete frame header: {rest:?})"));
            break;
        };
        let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let Some(payload) = rest.get(4..4 + len) else {
            texts.push(format!(
                "(an incomplete frame of {len} bytes: {})",
                String::from_utf8_lossy(&rest[4..])
            ));
            break;
        };
        texts.push(String::from_utf8_lossy(payload).replace('\n', " "));
        rest = &rest[4 + len..];
    }
    if texts.is_empty() {
        "(closed without a message)".to_string()
    } else {
        texts.join(" | ")
    }
}

/// The serial of the calling process's session keyring
/// (`keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0)`), or
/// `None` where the kernel has no keys.
pub fn session_keyring() -> Option<i64> {
    const KEYCTL_GET_KEYRING_ID: libc::c_long = 0;
    const KEY_SPEC_SESSION_KEYRING: libc::c_long = -3;
    // SAFETY: keyctl with these arguments takes integers only.
    let id = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_GET_KEYRING_ID,
            KEY_SPEC_SESSION_KEYRING,
            0 as libc::c_long,
        )
    };
    (id > 0).then_some(id as i64)
}

fn spin_cpu(seconds: f64) {
    let mut x = 0u64;
    loop {
        for _ in 0..1_000_000 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        if seconds > 0.0 && cpu_time() >= seconds {
            return;
        }
    }
}

fn cpu_time() -> f64 {
    // SAFETY: an all-zero timespec is valid and clock_gettime writes into it.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `ts` is valid and writable.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn sleep(seconds: f64) {
    if seconds > 0.0 {
        std::thread::sleep(Duration::from_secs_f64(seconds));
    }
}

/// Seizes each process with ptrace; passes on every signal it gets, and
/// resumes it 30 ms after each of its stops, as a user's own tracer may:
/// the stop is seen and reported, then undone without any SIGCONT. Prints
/// `seized N` once it holds them all; ends when they are gone.
fn ptrace_resume(pids: &[String]) {
    let pids: Vec<libc::pid_t> = pids.iter().filter_map(|pid| pid.parse().ok()).collect();
    for &pid in &pids {
        // SAFETY: PTRACE_SEIZE takes no address or data pointer.
        let ret = unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, 0usize, 0usize) };
        if ret != 0 {
            panic!("PTRACE_SEIZE {pid}: {}", std::io::Error::last_os_error());
        }
    }
    println!("seized {}", pids.len());
    let _ = std::io::stdout().flush();
    let mut left = pids.len();
    while left > 0 {
        let mut status = 0;
        // SAFETY: waitpid writes the status into the integer it is given.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::__WALL) };
        if pid < 0 {
            break;
        }
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            left -= 1;
            continue;
        }
        if !libc::WIFSTOPPED(status) {
            continue;
        }
        let signal = libc::WSTOPSIG(status);
        let group_stop = status >> 16 == libc::PTRACE_EVENT_STOP;
        let pass = if group_stop {
            std::thread::sleep(Duration::from_millis(30));
            0
        } else {
            // A signal on its way: delivered as it came (a SIGSTOP then
            // stops the process, which its parent is told).
            signal
        };
        // SAFETY: PTRACE_CONT takes no address; its data is a signal number.
        unsafe { libc::ptrace(libc::PTRACE_CONT, pid, 0usize, pass as usize) };
    }
}

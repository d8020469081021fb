//! What may hold the loop: journal reads on a full journal, `status`
//! while other clients flood them, the journal's sync, a name lookup.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use super::scale::read_frame;
use crate::{hosts_file, median, ms, row, scaled, Row};
use scored_tests::*;

/// Median and max of `rounds` requests of `line` on one connection.
pub(crate) fn request_times(stream: &mut UnixStream, line: &str, rounds: usize) -> (f64, f64) {
    let frame = scored_proto::proto::encode(&scored_proto::proto::Request::Console {
        version: scored_proto::proto::VERSION,
        line: line.to_string(),
        json: true,
    });
    let mut samples = Vec::new();
    for _ in 0..rounds {
        let start = Instant::now();
        stream.write_all(&frame).expect("send");
        read_frame(stream);
        samples.push(start.elapsed().as_secs_f64());
    }
    let max = samples.iter().copied().fold(0.0, f64::max);
    (median(&mut samples), max)
}

pub(crate) fn blocking(rows: &mut Vec<Row>) {
    let mut daemon = Daemon::builder()
        .log("scored=info")
        .hosts(&hosts_file(2, 1))
        .start();
    let (status_alone, _) = {
        let mut stream = UnixStream::connect(&daemon.socket).expect("connect");
        request_times(&mut stream, "status", 50)
    };
    daemon.stop();
    let state = daemon.sandbox.path.join("state");
    let n_jobs = write_full_journal(&state, 16 << 20);
    let started = Instant::now();
    daemon.start_again();
    let start_up = started.elapsed().as_secs_f64();
    rows.push(row(
        &format!("start-up with a full journal (2 files of 16M, {n_jobs} jobs)"),
        ms(start_up),
        "-".into(),
        "-".into(),
        "before the loop runs",
    ));
    let mut stream = UnixStream::connect(&daemon.socket).expect("connect");
    let rounds = scaled(20, 5) as usize;
    for (line, what) in [
        ("history", "`history` (every job)"),
        (
            "history --user 4000000",
            "`history --user` of a user with no jobs",
        ),
        ("job 1", "`job 1` (oldest job, in journal.1)"),
        ("job 999999999", "`job ID` of an id never used"),
    ] {
        let (median_time, max_time) = request_times(&mut stream, line, rounds);
        rows.push(row(
            &format!("{what}, full journal ({n_jobs} jobs)"),
            format!("{} (max {})", ms(median_time), ms(max_time)),
            format!("{} (`status`)", ms(status_alone)),
            format!("{:.0}×", median_time / status_alone),
            "blocks the loop that long",
        ));
    }
    // Six clients flood the journal reads; one more asks for `status`.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flooders: Vec<_> = ["history --user 4000000", "job 999999999", "history"]
        .into_iter()
        .cycle()
        .take(6)
        .map(|line| {
            let socket = daemon.socket.clone();
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut stream = UnixStream::connect(&socket).expect("connect");
                let mut n_answers = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    request_times(&mut stream, line, 1);
                    n_answers += 1;
                }
                n_answers
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let (flooded_median, flooded_max) = request_times(&mut stream, "status", rounds * 5);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let n_answers: u64 = flooders
        .into_iter()
        .map(|flooder| flooder.join().expect("flooder"))
        .sum();
    rows.push(row(
        "`status` while 6 clients flood `history` and `job ID`, full journal",
        format!(
            "{} (max {}, {n_answers} flood answers)",
            ms(flooded_median),
            ms(flooded_max)
        ),
        format!("{} (`status` alone)", ms(status_alone)),
        format!("{:.0}×", flooded_median / status_alone),
        "bounded",
    ));
    drop(stream);
    drop(daemon);

    // The journal's sync at a job's end: fdatasync after a record's write,
    // on a file in the same file system as the benchmark's state dirs.
    let dir = std::env::temp_dir().join(format!("scored-bench-sync-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let mut file = std::fs::File::create(dir.join("journal")).expect("file");
    let line = [b'x'; 1100];
    let mut samples = Vec::new();
    for _ in 0..scaled(100, 20) {
        file.write_all(&line).expect("write");
        let start = Instant::now();
        file.sync_data().expect("fdatasync");
        samples.push(start.elapsed().as_secs_f64());
    }
    let _ = std::fs::remove_dir_all(&dir);
    let sync_max = samples.iter().copied().fold(0.0, f64::max);
    rows.push(row(
        "fdatasync of a journal record (the sync at a job's end)",
        format!("{} (max {})", ms(median(&mut samples)), ms(sync_max)),
        "-".into(),
        "-".into(),
        "at most once per 100 ms",
    ));

    // The user-name lookup on a connection from a uid not seen before.
    let mut samples = Vec::new();
    for _ in 0..scaled(1000, 100) {
        let start = Instant::now();
        let _ = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(65534));
        samples.push(start.elapsed().as_secs_f64());
    }
    rows.push(row(
        "user-name lookup (getpwuid through NSS, this machine's files)",
        ms(median(&mut samples)),
        "-".into(),
        "-".into(),
        "once per uid",
    ));
}

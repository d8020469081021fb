//! What may block the event loop. A local user must not be able
//! to hold the loop (and with it every switch and every other client) by
//! asking for what costs the daemon the most to answer: `history` and
//! `job ID` on a journal of the default size.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use scored_tests::*;

/// One console request on an open connection; the reply's JSON.
fn ask(stream: &mut UnixStream, line: &str) -> serde_json::Value {
    let frame = scored_proto::proto::encode(&scored_proto::proto::Request::Console {
        version: scored_proto::proto::VERSION,
        line: line.to_string(),
        json: true,
    });
    stream.write_all(&frame).expect("send a console request");
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).expect("reply length");
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut body).expect("reply body");
    serde_json::from_slice(&body).expect("a JSON reply")
}

#[test]
fn the_console_answers_while_other_clients_flood_journal_reads() {
    let mut daemon = Daemon::builder().hosts(&two_hosts()).start();
    daemon.stop();
    // Two files of the default rotation size (16M), as a long-lived daemon
    // leaves them: about 30,000 ended jobs.
    let n_jobs = write_full_journal(&daemon.sandbox.path.join("state"), 16 << 20);
    daemon.start_again();

    // What the flood asks for costs a full read of both files when answered
    // by reading them: a user with no jobs, a job id that never ended, and
    // every ended job.
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let flooders: Vec<_> = [
        "history --user 4000000",
        "job 999999999",
        "history --since 2000-01-01",
    ]
    .into_iter()
    .cycle()
    .take(6)
    .map(|line| {
        let socket = daemon.socket.clone();
        let stop = Arc::clone(&stop);
        let answered = Arc::clone(&answered);
        std::thread::spawn(move || {
            let mut stream = UnixStream::connect(&socket).expect("connect");
            while !stop.load(Ordering::Relaxed) {
                ask(&mut stream, line);
                answered.fetch_add(1, Ordering::Relaxed);
            }
        })
    })
    .collect();

    let mut console = UnixStream::connect(&daemon.socket).expect("connect");
    let mut slowest = Duration::ZERO;
    let start = Instant::now();
    let mut n_status = 0;
    while start.elapsed() < Duration::from_secs(4) {
        let asked = Instant::now();
        let reply = ask(&mut console, "status");
        slowest = slowest.max(asked.elapsed());
        assert_eq!(reply["ok"], true, "status failed: {reply}");
        n_status += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    eprintln!(
        "status: slowest {slowest:?} over {n_status} requests, {} journal reads answered",
        answered.load(Ordering::Relaxed)
    );
    for flooder in flooders {
        flooder.join().expect("flooder");
    }
    assert!(
        answered.load(Ordering::Relaxed) >= 3,
        "the flood was not answered"
    );
    // Generous: reading the journal whole takes a third of a second per
    // request in a release build (seconds in a debug one), so one such
    // request from each flooder would exceed it.
    assert!(
        slowest < Duration::from_millis(1500),
        "status took {slowest:?} at worst over {n_status} requests while \
         {} journal reads were answered",
        answered.load(Ordering::Relaxed)
    );

    // history lists the last 1,000 jobs and says how many it left out.
    let mut stream = UnixStream::connect(&daemon.socket).expect("connect");
    let reply = ask(&mut stream, "history");
    let records = reply["json"]
        .as_array()
        .expect("history's JSON is an array");
    assert_eq!(records.len(), 1000);
    assert_eq!(records.last().expect("a record")["id"], n_jobs);
    let text = reply["text"].as_str().expect("text");
    assert!(
        text.contains(&format!(
            "({} earlier jobs not listed: at most 1000 are; narrow with --since or --user)",
            n_jobs - 1000
        )),
        "{text}"
    );
    // An old job is still found, by id, in the rotated file.
    let reply = ask(&mut stream, "job 1");
    assert_eq!(reply["ok"], true, "{reply}");
    assert_eq!(reply["json"]["id"], 1);
    assert_eq!(reply["json"]["state"], "done");
}

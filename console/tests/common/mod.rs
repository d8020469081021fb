//! Shared by the binary tests: a sandbox directory per test and a fake
//! scored in a thread, answering console frames on a Unix socket, so the
//! tests of sc_console do not depend on the real daemon.
#![forbid(unsafe_code)]
// Each test binary uses a different part of this module.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use scored_proto::proto::{self, Reply, Request};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A fresh directory under the system temp dir (Unix socket paths must stay
/// short), removed at the end.
pub struct Sandbox {
    /// The sandbox directory, removed when dropped.
    pub dir: PathBuf,
}

impl Sandbox {
    /// A new, empty directory named after the test.
    pub fn new(name: &str) -> Sandbox {
        let dir = std::env::temp_dir().join(format!(
            "sc_console-{name}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the sandbox directory");
        Sandbox { dir }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A daemon that knows jobs 7 and 12 and queues 0, 1 and 2, fails `kill 9`
/// (`error: no job 9`), closes the connection on `shutdown now`, takes a
/// second to answer `clusters`, and answers every other line with `done:
/// LINE`. It records the lines it was sent, in order.
pub fn fake_daemon(path: &Path) -> Arc<Mutex<Vec<String>>> {
    let listener = UnixListener::bind(path).expect("bind the fake daemon's socket");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let log = Arc::clone(&log);
            std::thread::spawn(move || serve(stream, &log));
        }
    });
    seen
}

fn serve(mut stream: UnixStream, log: &Mutex<Vec<String>>) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while let Ok(Some(request)) = proto::decode::<Request>(&mut buffer, proto::MAX_REQUEST) {
            let Request::Console { line, json, .. } = request else {
                return;
            };
            log.lock().expect("log lock").push(line.clone());
            // Like a daemon that dies: the connection closes unanswered.
            if line == "shutdown now" {
                return;
            }
            // A slow answer, for what is typed meanwhile.
            if line == "clusters" {
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
            if stream
                .write_all(&proto::encode(&answer(&line, json)))
                .is_err()
            {
                return;
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(len) => buffer.extend_from_slice(&chunk[..len]),
        }
    }
}

fn answer(line: &str, json: bool) -> Reply {
    let (ok, text, value) = match line {
        "kill 9" => (
            false,
            "error: no job 9\n".to_string(),
            serde_json::json!({"error": "no job 9"}),
        ),
        "jobs" => (
            true,
            "ID  USER  STATE\n 7  op    running\n12  op    queued\n".to_string(),
            serde_json::json!([
                {"id": 7, "user": "op", "state": "running"},
                {"id": 12, "user": "op", "state": "queued"},
            ]),
        ),
        "queues" => (
            true,
            "QUEUE  STATE\n    0  active\n    1  active\n    2  active\n".to_string(),
            serde_json::json!([{"queue": 0}, {"queue": 1}, {"queue": 2}]),
        ),
        other => (
            true,
            format!("done: {other}\n"),
            serde_json::json!({"ok": true, "message": format!("done: {other}")}),
        ),
    };
    Reply::Console {
        ok,
        text,
        json: json.then_some(value),
    }
}

//! A file on a FUSE file system whose server sits on `FLUSH`: the kernel
//! asks a FUSE server to flush at every close(2) of a descriptor of its
//! file (`fuse_flush`, from `filp_close`), not only at the last, so every
//! process that lets go of a copy (by close, exec or exit) waits for the
//! answer, uninterruptibly once the server has read the question. Any
//! user who may mount FUSE (a setuid `fusermount3`) can hand root's daemon
//! such a file as a job's output.
//!
//! The server, a thread of the test, mounts itself with mount(2) on a new
//! directory holding one file, `file` (mode 0666, open to every user),
//! answers what opening, writing and closing it need (`INIT`, `LOOKUP`,
//! `GETATTR`, `SETATTR`, `OPEN`, `WRITE`, `RELEASE`) and keeps what is
//! written. A `FLUSH` is answered at once, except, once the test has
//! named root's daemon ([`FlushFile::hold_daemon`]), one asked by a
//! process of root's that serves every user: the daemon itself, its
//! closer (`scored-closer`) and their children that are not a job's
//! keeper (or one of its threads) or the zygote; those wait until the
//! test releases them, or for ever. A job's own processes (its keeper, its ranks, its scrun) are
//! answered: what they wait for is their user's business.
//!
//! Dropping it answers what waits, unmounts the directory (lazily) and
//! closes the connection, so that nothing waits on it afterwards, even
//! when the test failed.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::harness::hung::{parent_of, reply};

const FUSE_LOOKUP: u32 = 1;
const FUSE_FORGET: u32 = 2;
const FUSE_GETATTR: u32 = 3;
const FUSE_SETATTR: u32 = 4;
const FUSE_OPEN: u32 = 14;
const FUSE_WRITE: u32 = 16;
const FUSE_RELEASE: u32 = 18;
const FUSE_FLUSH: u32 = 25;
const FUSE_INIT: u32 = 26;
const FUSE_INTERRUPT: u32 = 36;
const FUSE_BATCH_FORGET: u32 = 42;
/// The size of `struct fuse_in_header`.
const IN_HEADER: usize = 40;
/// The size of `struct fuse_write_in`, before the data.
const WRITE_IN: usize = 40;
/// `FOPEN_DIRECT_IO`: writes reach the server as they are made.
const FOPEN_DIRECT_IO: u32 = 1;
/// The file's node id (the root's is 1).
const FILE_NODE: u64 = 2;

/// What the server thread and the test share.
#[derive(Default)]
struct Shared {
    /// The daemon whose processes' flushes wait, once named.
    daemon: Option<u32>,
    /// Every flush waits, whoever asks.
    everyone: bool,
    /// Flushes wait no more.
    released: bool,
    /// The flushes waiting: their request ids and processes.
    held: Vec<(u64, u32)>,
    /// Every process whose flush waited.
    held_ever: Vec<u32>,
    /// Flushes asked so far, answered or not.
    flushes: usize,
    /// What was written to the file.
    written: Vec<u8>,
}

/// A FUSE file whose server sits on the flushes of root's shared
/// processes.
pub struct FlushFile {
    dir: PathBuf,
    device: Arc<OwnedFd>,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    server: Option<JoinHandle<()>>,
}

impl FlushFile {
    /// Mounts the file system on a new directory `dir` and serves it;
    /// `None` (with the reason printed) where FUSE cannot be mounted (not
    /// root, no `/dev/fuse`, no `fuse` file system).
    pub fn mount(dir: &Path) -> Option<FlushFile> {
        if !crate::is_root() {
            println!("mounting FUSE needs root");
            return None;
        }
        let fuse_known = std::fs::read_to_string("/proc/filesystems").is_ok_and(|text| {
            text.lines()
                .any(|line| line.split_whitespace().last() == Some("fuse"))
        });
        if !fuse_known {
            println!("the kernel has no fuse file system");
            return None;
        }
        std::fs::create_dir(dir).expect("create the mount point");
        let device = super::hung::mount_fuse(dir, c"scored-test-flush", "40000")?;
        let device = Arc::new(device);
        let shared = Arc::new(Mutex::new(Shared::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let server = {
            let (device, shared, stop) = (device.clone(), shared.clone(), stop.clone());
            std::thread::spawn(move || serve(&device, &shared, &stop))
        };
        Some(FlushFile {
            dir: dir.to_path_buf(),
            device,
            shared,
            stop,
            server: Some(server),
        })
    }

    /// The file.
    pub fn path(&self) -> PathBuf {
        self.dir.join("file")
    }

    /// From now on, the flushes of daemon `pid`'s shared processes wait.
    pub fn hold_daemon(&self, pid: u32) {
        self.shared.lock().expect("lock").daemon = Some(pid);
    }

    /// How many flushes wait.
    /// Sits on every flush, whoever asks (a job's processes too), until
    /// [`FlushFile::release`].
    pub fn hold_every_flush(&self) {
        self.shared.lock().expect("lock").everyone = true;
    }

    pub fn held(&self) -> usize {
        self.shared.lock().expect("lock").held.len()
    }

    /// The processes whose flushes waited, with their names, for messages.
    pub fn held_processes(&self) -> String {
        let pids = self.shared.lock().expect("lock").held_ever.clone();
        pids.iter()
            .map(|pid| {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                format!("{pid} ({})", comm.trim())
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// How many flushes were asked, answered or not.
    pub fn flushes(&self) -> usize {
        self.shared.lock().expect("lock").flushes
    }

    /// What was written to the file.
    pub fn written(&self) -> String {
        String::from_utf8_lossy(&self.shared.lock().expect("lock").written).into_owned()
    }

    /// Answers every waiting flush and holds no more.
    pub fn release(&self) {
        let held = {
            let mut shared = self.shared.lock().expect("lock");
            shared.released = true;
            std::mem::take(&mut shared.held)
        };
        for (unique, _) in held {
            reply(&self.device, unique, 0, &[]);
        }
    }
}

impl Drop for FlushFile {
    fn drop(&mut self) {
        self.release();
        super::hung::unmount_fuse(&self.dir);
        self.stop.store(true, Ordering::SeqCst);
        if let Some(server) = self.server.take() {
            let _ = server.join();
        }
        // The last copy of the connection's descriptor closes with `self`:
        // the kernel then fails whatever still asks.
    }
}

/// Whether `pid` is one of root's processes that serve every user: daemon
/// `daemon` itself, its closer and their children, but for a job's keeper
/// (and its threads and the children they clone for ranks, which keep
/// the spawner thread's name) and the zygote, known by the names they
/// give themselves (a closer's children keep its name).
fn serves_everyone(pid: u32, daemon: u32) -> bool {
    if pid == daemon {
        return true;
    }
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let comm = comm.trim();
    if comm == "scored-closer" {
        return true;
    }
    let per_job = ["scored keeper", "scored spawner", "scored zygote"];
    parent_of(pid) == Some(daemon) && !per_job.iter().any(|name| comm.starts_with(name))
}

/// `struct fuse_attr` of the root (a directory) or of the file.
fn attr(node: u64, size: u64) -> [u8; 88] {
    let mut out = [0u8; 88];
    out[0..8].copy_from_slice(&node.to_ne_bytes());
    out[8..16].copy_from_slice(&size.to_ne_bytes());
    let (mode, nlink) = if node == FILE_NODE {
        (libc::S_IFREG | 0o666, 1u32)
    } else {
        (libc::S_IFDIR | 0o755, 2u32)
    };
    out[60..64].copy_from_slice(&mode.to_ne_bytes());
    out[64..68].copy_from_slice(&nlink.to_ne_bytes());
    out[80..84].copy_from_slice(&4096u32.to_ne_bytes());
    out
}

/// `struct fuse_attr_out`: valid for an hour, then the attributes.
fn attr_out(node: u64, size: u64) -> [u8; 104] {
    let mut out = [0u8; 104];
    out[0..8].copy_from_slice(&3600u64.to_ne_bytes());
    out[16..].copy_from_slice(&attr(node, size));
    out
}

/// The server: answers until told to stop or the connection ends.
fn serve(device: &OwnedFd, shared: &Mutex<Shared>, stop: &AtomicBool) {
    let mut buffer = vec![0u8; 256 * 1024];
    while !stop.load(Ordering::SeqCst) {
        let mut fds = [nix::poll::PollFd::new(
            device.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(20u8)) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            Err(_) => return,
        }
        let n = match nix::unistd::read(device, &mut buffer) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR | nix::errno::Errno::ENOENT) => continue,
            Err(_) => return,
        };
        if n < IN_HEADER {
            continue;
        }
        let word = |at: usize| u32::from_ne_bytes(buffer[at..at + 4].try_into().expect("4"));
        let long = |at: usize| u64::from_ne_bytes(buffer[at..at + 8].try_into().expect("8"));
        let opcode = word(4);
        let unique = long(8);
        let node = long(16);
        let pid = word(32);
        let size = || shared.lock().expect("lock").written.len() as u64;
        match opcode {
            FUSE_INIT => {
                // fuse_init_out: the kernel's major and minor, then
                // max_readahead, flags, max_background,
                // congestion_threshold, max_write, time_gran, and the rest
                // zero.
                let mut out = [0u8; 64];
                out[0..4].copy_from_slice(&word(IN_HEADER).to_ne_bytes());
                out[4..8].copy_from_slice(&word(IN_HEADER + 4).to_ne_bytes());
                out[16..18].copy_from_slice(&1u16.to_ne_bytes());
                out[18..20].copy_from_slice(&1u16.to_ne_bytes());
                out[20..24].copy_from_slice(&4096u32.to_ne_bytes());
                out[24..28].copy_from_slice(&1u32.to_ne_bytes());
                reply(device, unique, 0, &out);
            }
            FUSE_LOOKUP => {
                let name = &buffer[IN_HEADER..n];
                let name = name.split(|byte| *byte == 0).next().unwrap_or_default();
                if node == 1 && name == b"file" {
                    // fuse_entry_out: node, generation, entry and
                    // attribute validity (an hour), then the attributes.
                    let mut out = [0u8; 128];
                    out[0..8].copy_from_slice(&FILE_NODE.to_ne_bytes());
                    out[16..24].copy_from_slice(&3600u64.to_ne_bytes());
                    out[24..32].copy_from_slice(&3600u64.to_ne_bytes());
                    out[40..].copy_from_slice(&attr(FILE_NODE, size()));
                    reply(device, unique, 0, &out);
                } else {
                    reply(device, unique, -libc::ENOENT, &[]);
                }
            }
            FUSE_GETATTR | FUSE_SETATTR => reply(device, unique, 0, &attr_out(node, size())),
            FUSE_OPEN => {
                // fuse_open_out: file handle 1, direct I/O.
                let mut out = [0u8; 16];
                out[0..8].copy_from_slice(&1u64.to_ne_bytes());
                out[8..12].copy_from_slice(&FOPEN_DIRECT_IO.to_ne_bytes());
                reply(device, unique, 0, &out);
            }
            FUSE_WRITE => {
                let length = word(IN_HEADER + 16) as usize;
                let start = IN_HEADER + WRITE_IN;
                let data = &buffer[start..(start + length).min(n)];
                shared.lock().expect("lock").written.extend_from_slice(data);
                // fuse_write_out: the size written.
                let mut out = [0u8; 8];
                out[0..4].copy_from_slice(&(data.len() as u32).to_ne_bytes());
                reply(device, unique, 0, &out);
            }
            FUSE_FLUSH => {
                let mut state = shared.lock().expect("lock");
                state.flushes += 1;
                let hold = !state.released
                    && (state.everyone
                        || state
                            .daemon
                            .is_some_and(|daemon| serves_everyone(pid, daemon)));
                if hold {
                    state.held.push((unique, pid));
                    state.held_ever.push(pid);
                } else {
                    drop(state);
                    reply(device, unique, 0, &[]);
                }
            }
            FUSE_RELEASE => reply(device, unique, 0, &[]),
            // A waiting process got a signal: its flush still waits (the
            // kernel waits for the answer to a flush it has sent).
            FUSE_INTERRUPT | FUSE_FORGET | FUSE_BATCH_FORGET => {}
            _ => reply(device, unique, -libc::ENOSYS, &[]),
        }
    }
}

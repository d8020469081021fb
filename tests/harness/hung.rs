//! A directory on a file system whose server hangs: a FUSE mount served
//! by a thread of the test, as a user's job may have its working
//! directory on a network or FUSE file system whose server stopped
//! answering. Until the test releases it, a process that changes into the
//! directory waits in the kernel (the access check of `chdir` is a
//! question to the server), unless it is a child of the test process (a
//! client the test starts there), or until a fatal signal interrupts it
//! (a stop, as on a hung hard-mounted NFS, leaves it waiting); every other
//! question is answered at once.
//!
//! The server answers the few questions a directory's life needs (`INIT`,
//! `ACCESS`, `GETATTR`; no entries inside) and refuses the rest. Dropping
//! it releases what it holds, unmounts the directory and closes the
//! connection, so that nothing waits on it afterwards.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

const FUSE_GETATTR: u32 = 3;
const FUSE_FORGET: u32 = 2;
const FUSE_INIT: u32 = 26;
const FUSE_ACCESS: u32 = 34;
const FUSE_INTERRUPT: u32 = 36;
const FUSE_BATCH_FORGET: u32 = 42;
/// The size of `struct fuse_in_header`.
const IN_HEADER: usize = 40;

/// What the server thread and the test share.
struct Shared {
    /// Access checks of processes other than the test's children wait.
    holding: bool,
    /// The access checks waiting: their request ids and processes.
    held: Vec<(u64, u32)>,
}

/// A FUSE directory whose access checks wait until the test releases them.
pub struct HungDir {
    path: PathBuf,
    device: Arc<OwnedFd>,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    server: Option<JoinHandle<()>>,
}

impl HungDir {
    /// Mounts the file system on a new directory `path` (open to every
    /// user) and serves it; `None` (with the reason printed) where FUSE
    /// cannot be mounted (no `/dev/fuse`, or no right to mount).
    pub fn mount(path: &Path) -> Option<HungDir> {
        std::fs::create_dir(path).expect("create the mount point");
        let device = mount_fuse(path, c"scored-test-hung", "40755")?;
        let device = Arc::new(device);
        let shared = Arc::new(Mutex::new(Shared {
            holding: true,
            held: Vec::new(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let server = {
            let (device, shared, stop) = (device.clone(), shared.clone(), stop.clone());
            std::thread::spawn(move || serve(&device, &shared, &stop))
        };
        Some(HungDir {
            path: path.to_path_buf(),
            device,
            shared,
            stop,
            server: Some(server),
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many processes wait.
    pub fn held(&self) -> usize {
        self.shared.lock().expect("lock").held.len()
    }

    /// Answers every waiting question and holds no more.
    pub fn release(&self) {
        let held = {
            let mut shared = self.shared.lock().expect("lock");
            shared.holding = false;
            std::mem::take(&mut shared.held)
        };
        for (unique, _) in held {
            reply(&self.device, unique, 0, &[]);
        }
    }
}

impl Drop for HungDir {
    fn drop(&mut self) {
        self.release();
        unmount_fuse(&self.path);
        self.stop.store(true, Ordering::SeqCst);
        if let Some(server) = self.server.take() {
            let _ = server.join();
        }
        // The last copy of the connection's descriptor closes with `self`:
        // the kernel then fails whatever still asks.
    }
}

/// Detaches the FUSE file system mounted on `path` (lazily: whatever
/// still uses it keeps it until it lets go).
pub(crate) fn unmount_fuse(path: &Path) {
    let target = CString::new(path.as_os_str().as_bytes()).expect("path");
    // SAFETY: a NUL-terminated path that outlives the call.
    unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
}

/// Opens `/dev/fuse` and mounts a FUSE file system named `source` on
/// `path` (its root of mode `rootmode`, in octal, open to every user);
/// the device to serve it through, or `None` with the reason printed.
pub(crate) fn mount_fuse(path: &Path, source: &std::ffi::CStr, rootmode: &str) -> Option<OwnedFd> {
    let device = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        Ok(file) => OwnedFd::from(file),
        Err(error) => {
            println!("cannot open /dev/fuse: {error}");
            return None;
        }
    };
    let target = CString::new(path.as_os_str().as_bytes()).expect("path");
    let options = CString::new(format!(
        "fd={},rootmode={rootmode},user_id=0,group_id=0,allow_other",
        device.as_raw_fd()
    ))
    .expect("options");
    // SAFETY: every pointer is a NUL-terminated string that outlives
    // the call; mount(2) takes no other memory.
    let mounted = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            c"fuse".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            options.as_ptr().cast(),
        )
    };
    if mounted != 0 {
        println!(
            "cannot mount a FUSE file system: {}",
            std::io::Error::last_os_error()
        );
        return None;
    }
    Some(device)
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
        let opcode = word(4);
        let unique = u64::from_ne_bytes(buffer[8..16].try_into().expect("8"));
        let pid = word(32);
        match opcode {
            FUSE_INIT => {
                // fuse_init_out: the kernel's major and minor, then
                // max_readahead, flags, max_background,
                // congestion_threshold, max_write, time_gran, max_pages and
                // the rest zero.
                let mut out = [0u8; 64];
                out[0..4].copy_from_slice(&word(IN_HEADER).to_ne_bytes());
                out[4..8].copy_from_slice(&word(IN_HEADER + 4).to_ne_bytes());
                out[16..18].copy_from_slice(&1u16.to_ne_bytes());
                out[18..20].copy_from_slice(&1u16.to_ne_bytes());
                out[20..24].copy_from_slice(&4096u32.to_ne_bytes());
                out[24..28].copy_from_slice(&1u32.to_ne_bytes());
                reply(device, unique, 0, &out);
            }
            FUSE_ACCESS => {
                let mut state = shared.lock().expect("lock");
                if state.holding && parent_of(pid) != Some(std::process::id()) {
                    state.held.push((unique, pid));
                } else {
                    drop(state);
                    reply(device, unique, 0, &[]);
                }
            }
            FUSE_GETATTR => {
                // fuse_attr_out: valid for 1 s, then fuse_attr of the
                // root: ino 1, mode directory 0755, nlink 2.
                let mut out = [0u8; 104];
                out[0..8].copy_from_slice(&1u64.to_ne_bytes());
                out[16..24].copy_from_slice(&1u64.to_ne_bytes());
                out[16 + 60..16 + 64].copy_from_slice(&(libc::S_IFDIR | 0o755).to_ne_bytes());
                out[16 + 64..16 + 68].copy_from_slice(&2u32.to_ne_bytes());
                out[16 + 80..16 + 84].copy_from_slice(&4096u32.to_ne_bytes());
                reply(device, unique, 0, &out);
            }
            FUSE_INTERRUPT => {
                // A waiting process got a signal. As a hung network file
                // system, only a fatal one ends its wait (its question is
                // answered EINTR); a stop, say, leaves it waiting.
                let target =
                    u64::from_ne_bytes(buffer[IN_HEADER..IN_HEADER + 8].try_into().expect("8"));
                let mut state = shared.lock().expect("lock");
                let found = state.held.iter().position(|held| held.0 == target);
                if let Some(at) = found.filter(|at| being_killed(state.held[*at].1)) {
                    state.held.remove(at);
                    drop(state);
                    reply(device, target, -libc::EINTR, &[]);
                }
            }
            FUSE_FORGET | FUSE_BATCH_FORGET => {}
            _ => reply(device, unique, -libc::ENOSYS, &[]),
        }
    }
}

/// Process `pid` has a SIGKILL pending (or is gone).
pub(crate) fn being_killed(pid: u32) -> bool {
    crate::harness::procs::signal_pending(pid as i32, libc::SIGKILL).unwrap_or(true)
}

/// The parent of process `pid` (which waits in the kernel for an answer,
/// so its id is still its own), from `/proc/PID/status`. Not from
/// `/proc/PID/stat`: a process that asks in the middle of its execve (the
/// close of its close-on-exec descriptors flushes each FUSE file) makes
/// every reader of its `stat` sleep uninterruptibly until the exec is
/// done, so a server that read it before answering would never answer,
/// and every `ps` of the machine would hang with it.
pub(crate) fn parent_of(pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("PPid:"))?
        .trim()
        .parse()
        .ok()
}

/// Writes the answer to request `unique`: `error` (0 or a negated errno)
/// and `body`.
pub(crate) fn reply(device: &OwnedFd, unique: u64, error: i32, body: &[u8]) {
    let mut out = Vec::with_capacity(16 + body.len());
    out.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
    out.extend_from_slice(&error.to_ne_bytes());
    out.extend_from_slice(&unique.to_ne_bytes());
    out.extend_from_slice(body);
    // A request interrupted meanwhile is answered ENOENT: nothing to do.
    let _ = nix::unistd::write(device, &out);
}

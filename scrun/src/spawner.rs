//! Spawned jobs (`MPI_Comm_spawn` through PMI-1 or PMI-2): each spawn is a
//! job of its own, submitted by a scrun that this scrun starts, as the
//! same user, so that scored admits it under that user's budgets, and
//! served by that scrun's PMI server with a key-value space of its own.
//!
//! The parent side ([`Spawner`]) finds the program, starts
//! `scrun -nodes=N,mpi=MODE -- PROGRAM ARGS` with [`SPAWN_ENV`] holding
//! the spawner's kvs name and the key-values put for the children, and
//! `PMI_SPAWNED=1` in its environment (which its ranks inherit), its
//! standard input one end of a socketpair. The child scrun
//! ([`child_side`]) takes that end for itself, puts /dev/null in its
//! place, and writes `admitted` on it once scored admits the job, or
//! `refused` and why if it ends first: the rank's spawn is answered then,
//! with rc 0, or with an error saying why.
//! The spawned job ends with its parent: scrun ends its child scruns
//! when its own job ends, and a child scrun gets SIGTERM if its parent
//! dies (`PR_SET_PDEATHSIG`).
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use scrun::pmi::spawn::Spawn;
use scrun::pmi::Mode;

/// The variable through which a scrun learns that it runs a spawned job.
pub const SPAWN_ENV: &str = "SCRUN_PMI_SPAWN";
/// The most spawned jobs of one job that are not yet answered or still
/// run: a rank spawning in a loop meets this bound before scored's.
pub const MAX_LIVE: usize = 32;
/// How long a child scrun has to end its job after SIGTERM before it is
/// killed (its job is then killed by scored, as its connection closes).
const END_GRACE: Duration = Duration::from_secs(5);
/// How long scrun waits for the status of a child scrun that closed its
/// socket without saying it was admitted.
const EXIT_WAIT: Duration = Duration::from_millis(500);
/// The message a child scrun sends once admitted.
const ADMITTED: &[u8] = b"admitted\n";
/// The start of the message a child scrun sends if its job was refused,
/// before the reason.
const REFUSED: &[u8] = b"refused ";
/// The most bytes read from a child scrun's socket.
const MAX_NOTICE: usize = 512;

struct Spawned {
    child: Child,
    /// The socket on which the child scrun says it was admitted, until it
    /// says it or ends.
    notify: Option<UnixStream>,
    /// The world and rank waiting for the answer.
    who: (usize, usize),
    got: Vec<u8>,
}

/// The spawned jobs of one job.
pub struct Spawner {
    scored: PathBuf,
    mode: Mode,
    live: Vec<Spawned>,
}

impl Spawner {
    /// Spawns through the scored at `scored`, whose child jobs serve `mode`.
    pub fn new(scored: PathBuf, mode: Mode) -> Spawner {
        Spawner {
            scored,
            mode,
            live: Vec::new(),
        }
    }

    /// Starts the child scrun for `spawn` of rank `who`, whose world is
    /// named `spawner`; the answer comes from [`Spawner::service`].
    pub fn launch(
        &mut self,
        who: (usize, usize),
        spawn: &Spawn,
        spawner: &str,
    ) -> Result<(), String> {
        self.reap();
        if self.live.len() >= MAX_LIVE {
            return Err(format!(
                "more than {MAX_LIVE} spawned jobs of one job at once"
            ));
        }
        let wdir = spawn.wdir.as_deref().map(Path::new);
        if let Some(dir) = wdir {
            if !dir.is_dir() {
                return Err(format!(
                    "wdir {} is not a directory",
                    scrun::pmi::wire::excerpt(dir.as_os_str().as_encoded_bytes())
                ));
            }
        }
        let program = find_program(&spawn.execname, spawn.path.as_deref(), wdir)?;
        let announce = serde_json::json!({
            "spawner": spawner,
            "parent": std::process::id(),
            "preput": spawn.preput,
        });
        let (ours, theirs) = UnixStream::pair()
            .map_err(|error| format!("cannot create the spawn's socket: {error}"))?;
        ours.set_nonblocking(true)
            .map_err(|error| format!("cannot create the spawn's socket: {error}"))?;
        let exe = std::env::current_exe()
            .map_err(|error| format!("cannot find scrun's own program: {error}"))?;
        let mut command = Command::new(exe);
        command
            .arg(format!("-nodes={},mpi={}", spawn.nprocs, self.mode.name()))
            .arg("--")
            .arg(&program)
            .args(&spawn.args)
            .env(SPAWN_ENV, announce.to_string())
            .env("SCORED_SOCKET", &self.scored)
            .env("PMI_SPAWNED", "1")
            .env_remove("SCORE_OPTIONS")
            .stdin(Stdio::from(OwnedFd::from(theirs)));
        if let Some(dir) = wdir {
            command.current_dir(dir);
        }
        let child = command
            .spawn()
            .map_err(|error| format!("cannot start scrun for the spawn: {error}"))?;
        self.live.push(Spawned {
            child,
            notify: Some(ours),
            who,
            got: Vec::new(),
        });
        Ok(())
    }

    /// The sockets to poll, each with its index for [`Spawner::service`].
    pub fn poll_fds(&self) -> Vec<(usize, BorrowedFd<'_>)> {
        self.live
            .iter()
            .enumerate()
            .filter_map(|(idx, spawned)| Some((idx, spawned.notify.as_ref()?.as_fd())))
            .collect()
    }

    /// Reads what child scrun `idx` said; returns the rank waiting and its
    /// answer once there is one: the children's kvs name, or why not.
    pub fn service(&mut self, idx: usize) -> Option<((usize, usize), Result<String, String>)> {
        let spawned = self.live.get_mut(idx)?;
        let notify = spawned.notify.as_mut()?;
        let mut chunk = [0u8; 64];
        let ended = loop {
            match notify.read(&mut chunk) {
                Ok(0) => break true,
                Ok(n) if spawned.got.len() + n <= MAX_NOTICE => {
                    spawned.got.extend_from_slice(&chunk[..n])
                }
                Ok(_) => break true,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break false,
                Err(_) => break true,
            }
        };
        if spawned.got == ADMITTED {
            spawned.notify = None;
            let kvsname = format!("scrun_{}_0", spawned.child.id());
            return Some((spawned.who, Ok(kvsname)));
        }
        if !ended {
            return None;
        }
        spawned.notify = None;
        // The child scrun closed its socket as it exits: its status comes
        // within moments (or is left out).
        let deadline = Instant::now() + EXIT_WAIT;
        let status = loop {
            match spawned.child.try_wait() {
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Ok(Some(status)) => break format!(" (its scrun ended with {status})"),
                _ => break String::new(),
            }
        };
        let reason = spawned
            .got
            .strip_prefix(REFUSED)
            .and_then(|rest| rest.split(|&b| b == b'\n').next())
            .map(|line| {
                let line = String::from_utf8_lossy(line);
                format!(": {}", line.escape_debug())
            })
            .unwrap_or_default();
        Some((
            spawned.who,
            Err(format!("the spawned job was not admitted{reason}{status}")),
        ))
    }

    /// Forgets the child scruns that ended (answered already).
    fn reap(&mut self) {
        self.live.retain_mut(|spawned| {
            spawned.notify.is_some() || !matches!(spawned.child.try_wait(), Ok(Some(_)))
        });
    }

    /// Ends every spawned job: SIGTERM to its scrun, which ends its job,
    /// then SIGKILL after a grace (scored kills a job whose scrun is gone).
    pub fn end_all(&mut self) {
        self.reap();
        for spawned in &self.live {
            let _ = kill(Pid::from_raw(spawned.child.id() as i32), Signal::SIGTERM);
        }
        let deadline = Instant::now() + END_GRACE;
        while Instant::now() < deadline && !self.live.is_empty() {
            self.live
                .retain_mut(|spawned| !matches!(spawned.child.try_wait(), Ok(Some(_))));
            std::thread::sleep(Duration::from_millis(20));
        }
        for spawned in &mut self.live {
            let _ = spawned.child.kill();
            let _ = spawned.child.wait();
        }
        self.live.clear();
    }
}

/// The program of a spawn: `execname` with a `/` as it is (from `wdir`),
/// else found in the `path` directory, else on `PATH`; executable.
fn find_program(
    execname: &str,
    path: Option<&str>,
    wdir: Option<&Path>,
) -> Result<PathBuf, String> {
    let runnable = |candidate: &Path| {
        let full = match wdir {
            Some(dir) if candidate.is_relative() => dir.join(candidate),
            _ => candidate.to_path_buf(),
        };
        full.is_file() && nix::unistd::access(&full, nix::unistd::AccessFlags::X_OK).is_ok()
    };
    let found = if execname.contains('/') {
        Some(PathBuf::from(execname)).filter(|p| runnable(p))
    } else {
        let dirs: Vec<PathBuf> = match path {
            Some(dir) => vec![PathBuf::from(dir)],
            None => std::env::var_os("PATH")
                .map(|paths| std::env::split_paths(&paths).collect())
                .unwrap_or_default(),
        };
        dirs.into_iter()
            .filter(|dir| !dir.as_os_str().is_empty())
            .map(|dir| dir.join(execname))
            .find(|p| runnable(p))
    };
    found.ok_or_else(|| {
        format!(
            "cannot spawn {}: no such program, or not executable",
            scrun::pmi::wire::excerpt(execname.as_bytes())
        )
    })
}

/// What a scrun started for a spawn learns from its parent.
pub struct SpawnedSide {
    /// The kvs name of the spawning world.
    pub spawner: String,
    /// The key-values its space starts with.
    pub preput: Vec<(String, String)>,
    /// Where to say `admitted`.
    notify: Option<OwnedFd>,
}

impl SpawnedSide {
    /// Tells the parent scrun that scored admitted the job (once).
    pub fn admitted(&mut self) {
        if let Some(fd) = self.notify.take() {
            let mut stream = UnixStream::from(fd);
            let _ = stream.write_all(ADMITTED);
        }
    }

    /// Tells the parent scrun why the job ends unadmitted: the first line
    /// of scrun's last words (nothing if it was admitted).
    pub fn refused(&mut self, why: &str) {
        if let Some(fd) = self.notify.take() {
            let line = why.lines().next().unwrap_or_default();
            let line = line.strip_prefix("scrun: ").unwrap_or(line);
            let mut notice = REFUSED.to_vec();
            notice.extend(line.bytes().take(MAX_NOTICE - REFUSED.len() - 1));
            notice.push(b'\n');
            let mut stream = UnixStream::from(fd);
            let _ = stream.write_all(&notice);
        }
    }
}

/// If this scrun was started for a spawn: takes the parent's socket from
/// standard input (leaving /dev/null there), and asks for SIGTERM should
/// the parent die. Call it first, before the caller's state is read.
pub fn child_side() -> Result<Option<SpawnedSide>, String> {
    let Some(announce) = std::env::var_os(SPAWN_ENV) else {
        return Ok(None);
    };
    let bad = || format!("{SPAWN_ENV} is scrun's own, set by a spawning scrun");
    let announce: serde_json::Value = announce
        .to_str()
        .and_then(|text| serde_json::from_str(text).ok())
        .ok_or_else(bad)?;
    let spawner = announce["spawner"].as_str().ok_or_else(bad)?.to_string();
    let parent = announce["parent"].as_i64().ok_or_else(bad)?;
    let preput = serde_json::from_value::<Vec<(String, String)>>(announce["preput"].clone())
        .map_err(|_| bad())?;
    let stdin = std::io::stdin();
    let is_socket = nix::sys::stat::fstat(stdin.as_fd()).is_ok_and(|stat| {
        nix::sys::stat::SFlag::from_bits_truncate(stat.st_mode) & nix::sys::stat::SFlag::S_IFMT
            == nix::sys::stat::SFlag::S_IFSOCK
    });
    if !is_socket {
        return Err(bad());
    }
    let notify = stdin
        .as_fd()
        .try_clone_to_owned()
        .map_err(|error| format!("cannot keep the spawning scrun's socket: {error}"))?;
    let null = std::fs::File::open("/dev/null")
        .map_err(|error| format!("cannot open /dev/null: {error}"))?;
    nix::unistd::dup2_stdin(&null)
        .map_err(|errno| format!("cannot put /dev/null on standard input: {errno}"))?;
    nix::sys::prctl::set_pdeathsig(Signal::SIGTERM)
        .map_err(|errno| format!("cannot ask for the parent's death signal: {errno}"))?;
    if i64::from(nix::unistd::getppid().as_raw()) != parent {
        return Err("the spawning scrun has ended".to_string());
    }
    Ok(Some(SpawnedSide {
        spawner,
        preput,
        notify: Some(notify),
    }))
}

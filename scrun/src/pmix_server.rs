//! The imperative shell of scrun's PMIx server: the directory, the
//! namespaces and the environment of the job's ranks, the start of
//! libpmix when a rank first connects, and the job's end when a rank
//! aborts or dies, around libpmix ([`crate::pmix_sys`]) and the pure
//! [`scrun::pmi::pmix`].
//!
//! [`PmixServer::create`] costs a job next to nothing: a directory of
//! the user's own (mode 0700) for the server's files, a loopback port,
//! and a thread waiting on it. The ranks are told that port, with what
//! libpmix would tell them ([`served_env`]). Only when a rank connects
//! does the thread start libpmix (its components, the machine's
//! topology: tens of milliseconds of CPU time) on a port of its own,
//! register one namespace per stage, and then relay each rank's
//! connection to it, so that a job that is not MPI never pays for
//! PMIx. A connection from another user's socket is closed before it
//! reaches libpmix (the kernel's table of TCP sockets names each end's
//! owner); libpmix checks the rest (the namespace, which carries 128
//! random bits that only the ranks' environments hold, and the rank).
//!
//! The session's loop polls [`PmixServer::poll_fd`] and calls
//! [`PmixServer::service`], which returns the end of the job a rank
//! asked for (abort) or caused (its death before finalize, or a server
//! that cannot start), once. Everything lives as long as scrun's
//! session, whatever happens to its connection to scored.
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::io::Read;
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use scored_proto::proto::MAX_PMI_FDS;
use scrun::pmi::pmix::{env_differences, job_attributes, served_env, tcp_owner, RankEnd, Ranks};

use crate::pmi_server::PmiEnd;
use crate::pmix_sys::{self, Library};

/// A PMIx server, started or not, and the state of the job's ranks.
pub struct PmixServer {
    /// One per stage, once the rank count is known.
    worlds: Vec<Ranks>,
    stages: usize,
    /// The rank count, for the thread that registers the namespaces.
    size: Arc<Size>,
    dir: PathBuf,
    ended: bool,
    /// The read end of the pipe the server's threads wake the loop by.
    wake: OwnedFd,
    /// Why the server could not start, once a rank needed it.
    failure: Arc<Mutex<Option<String>>>,
}

/// What a job's submission carries for PMIx.
pub struct PmixLaunch {
    /// `Submit::pmix_namespace`.
    pub namespace: String,
    /// The variables every rank gets, over the caller's.
    pub env: Vec<(OsString, OsString)>,
}

/// 128 random bits in hex, from the kernel.
fn random_hex() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut file| file.read_exact(&mut bytes))
        .map_err(|error| format!("cannot read /dev/urandom: {error}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The machine's name, as OpenMPI's ranks see it.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// The connections relayed at once beyond one per rank: room for a rank
/// that reconnects, never a thread per connection a flood opens.
const SPARE_CONNECTIONS: usize = 16;

/// The stack of a relaying thread: it only copies through a small buffer.
const RELAY_STACK: usize = 64 * 1024;

/// The ranks of each stage: known at once, or once scored has placed a
/// `-hosts=` job (its `Admitted` reply, before the ranks exist).
#[derive(Default)]
struct Size {
    ranks: Mutex<Option<u32>>,
    known: Condvar,
}

/// How long a rank's first connection waits for the rank count (which
/// scored gives before the ranks exist, in `Admitted` or `Reattached`;
/// a daemon of an older protocol may give none).
const SIZE_WAIT: Duration = Duration::from_secs(30);

impl Size {
    fn set(&self, ranks: u32) {
        *self.ranks.lock().unwrap_or_else(|e| e.into_inner()) = Some(ranks);
        self.known.notify_all();
    }

    fn get(&self) -> Option<u32> {
        *self.ranks.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait(&self) -> Option<u32> {
        let guard = self.ranks.lock().unwrap_or_else(|e| e.into_inner());
        let (guard, _) = self
            .known
            .wait_timeout_while(guard, SIZE_WAIT, |ranks| ranks.is_none())
            .unwrap_or_else(|e| e.into_inner());
        *guard
    }
}

/// What the waiting thread needs to start libpmix and relay to it.
struct Lazy {
    listener: TcpListener,
    dir: PathBuf,
    /// The server's own namespace.
    server: String,
    /// The job's namespaces, one per stage, and the ranks of each.
    namespaces: Vec<String>,
    size: Arc<Size>,
    hostname: String,
    /// What the ranks were told, to compare with what libpmix says.
    served: Vec<(String, String)>,
    verbose: bool,
    wake: OwnedFd,
    failure: Arc<Mutex<Option<String>>>,
}

impl PmixServer {
    /// Makes the server for `stages` worlds of `ranks` ranks (`None`: as
    /// many as [`PmixServer::placed`] says), to start when a rank
    /// connects, or says why it cannot. With `check`, libpmix
    /// is loaded at once, so that its absence is said before the job runs
    /// (`-mpi=pmix`); with `verbose`, what libpmix tells ranks beyond what
    /// they were told is said when it starts.
    pub fn create(
        ranks: Option<u32>,
        stages: usize,
        check: bool,
        verbose: bool,
    ) -> Result<(PmixServer, PmixLaunch), String> {
        if check {
            Library::load()?;
        }
        let secret = random_hex()?;
        let pid = std::process::id();
        let namespace = format!("scrun.{pid}.{secret}");
        let dir = std::env::temp_dir().join(format!("scrun-pmix-{pid}-{}", &secret[..8]));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
        // Dropped (and the directory with it) on any failure below.
        let (read, write) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
                .map_err(|errno| format!("cannot create a pipe: {}", errno.desc()))?;
        let mut this = PmixServer {
            worlds: Vec::new(),
            stages,
            size: Arc::default(),
            dir,
            ended: false,
            wake: read,
            failure: Arc::new(Mutex::new(None)),
        };
        if let Some(ranks) = ranks {
            this.placed(ranks);
        }
        let listener = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
            .map_err(|error| format!("cannot listen on the loopback interface: {error}"))?;
        let port = listener
            .local_addr()
            .map_err(|error| format!("cannot read the PMIx port: {error}"))?
            .port();
        let tmpdir = this
            .dir
            .to_str()
            .ok_or_else(|| format!("{} is not UTF-8", this.dir.display()))?
            .to_string();
        let server = format!("scrun.{pid}.server");
        let hostname = hostname();
        let served = served_env(&server, port, &tmpdir, &hostname);
        // libpmix reads its components from the environment when it
        // starts: the hash store only, which `served_env` names (the
        // shared-memory stores make files and segments for every job).
        // No other thread runs yet in scrun.
        std::env::set_var("PMIX_MCA_gds", "hash");
        let lazy = Lazy {
            listener,
            dir: this.dir.clone(),
            server,
            namespaces: (0..stages)
                .map(|stage| format!("{namespace}.{stage}"))
                .collect(),
            size: Arc::clone(&this.size),
            hostname,
            served: served.clone(),
            verbose,
            wake: write,
            failure: Arc::clone(&this.failure),
        };
        std::thread::Builder::new()
            .name("pmix".to_string())
            .spawn(move || lazy.serve())
            .map_err(|error| format!("cannot start the PMIx thread: {error}"))?;
        let env = served
            .into_iter()
            .map(|(key, value)| (OsString::from(key), OsString::from(value)))
            .collect();
        Ok((this, PmixLaunch { namespace, env }))
    }

    /// The job's stages have `ranks` ranks each, as placed; told once.
    pub fn placed(&mut self, ranks: u32) {
        if !self.worlds.is_empty() || ranks == 0 {
            return;
        }
        self.worlds = (0..self.stages)
            .map(|_| Ranks::new(ranks as usize))
            .collect();
        self.size.set(ranks);
    }

    /// The descriptor to poll for the ranks' news.
    pub fn poll_fd(&self) -> Option<BorrowedFd<'_>> {
        (!self.ended).then(|| self.wake.as_fd())
    }

    /// Takes what the ranks did; returns how the job ends if a rank ended it.
    pub fn service(&mut self) -> Option<PmiEnd> {
        let mut sink = [0u8; 64];
        while matches!(nix::unistd::read(&self.wake, &mut sink), Ok(n) if n > 0) {}
        if let Some(why) = self
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            self.ended = true;
            return Some(PmiEnd {
                code: scored_proto::exitcode::UNREACHABLE,
                message: format!("a rank asked for PMIx, which cannot be served: {why}"),
            });
        }
        let mut end = None;
        for event in pmix_sys::take_events() {
            let Some(world) = self.worlds.get_mut(event.world) else {
                continue;
            };
            let Some(ended) = world.event(event.rank, event.event) else {
                continue;
            };
            let prefix = if self.worlds.len() > 1 {
                format!("stage {}: ", event.world + 1)
            } else {
                String::new()
            };
            end.get_or_insert(match ended {
                RankEnd::Abort {
                    rank,
                    code,
                    message,
                } => PmiEnd {
                    code: code.rem_euclid(256),
                    message: format!(
                        "{prefix}rank {rank} called abort with exit code {code}{}",
                        message
                            .map(|m| format!(": {}", m.escape_debug()))
                            .unwrap_or_default()
                    ),
                },
                RankEnd::Fault { rank, message } => PmiEnd {
                    code: scored_proto::exitcode::FAILURE,
                    message: format!("{prefix}rank {rank} {message}"),
                },
            });
        }
        if end.is_some() {
            self.ended = true;
        }
        end
    }
}

impl Drop for PmixServer {
    fn drop(&mut self) {
        // The server's files; the server itself ends with the process.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Lazy {
    /// Waits for the ranks' connections, starts libpmix at the first one
    /// of this user's, and relays each to it; for the life of the process.
    fn serve(self) {
        let uid = nix::unistd::geteuid().as_raw();
        let open = Arc::new(AtomicUsize::new(0));
        let mut upstream: Option<Result<SocketAddr, ()>> = None;
        loop {
            let (client, peer) = match self.listener.accept() {
                Ok(accepted) => accepted,
                Err(_) => {
                    // Out of descriptors, most likely: let ranks end.
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            // Before placement, the most ranks PMI serves a job.
            let ranks = self.size.get().map_or(MAX_PMI_FDS, |ranks| ranks as usize);
            let budget = self.namespaces.len() * ranks + SPARE_CONNECTIONS;
            if !owned_by(&client, peer, uid) || open.load(Ordering::Relaxed) >= budget {
                continue;
            }
            let address = match upstream.get_or_insert_with(|| self.start()) {
                Ok(address) => *address,
                Err(()) => continue,
            };
            let Ok(server) = TcpStream::connect(address) else {
                continue;
            };
            relay(client, server, &open);
        }
    }

    /// Starts libpmix and registers the job's namespaces; returns where it
    /// listens. A failure is told to scrun's loop, which ends the job.
    fn start(&self) -> Result<SocketAddr, ()> {
        self.try_start().map_err(|why| {
            *self.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
            let _ = nix::unistd::write(&self.wake, &[1]);
        })
    }

    fn try_start(&self) -> Result<SocketAddr, String> {
        let ranks = self
            .size
            .wait()
            .ok_or("scored has not told scrun how many ranks the job has")?;
        let library = Library::load()?;
        let wake = self
            .wake
            .try_clone()
            .map_err(|error| format!("cannot duplicate a pipe: {error}"))?;
        let server = library.start(&self.dir, &self.server, wake)?;
        // The universe is the stage's ranks, as PMI says and mpirun does.
        let attrs = job_attributes(ranks, ranks, &self.hostname);
        for namespace in &self.namespaces {
            server.register(namespace, ranks, &attrs)?;
        }
        let given: Vec<(String, String)> = server
            .fork_env(&self.namespaces[0], 0)?
            .into_iter()
            .map(|(key, value)| {
                (
                    key.to_string_lossy().into_owned(),
                    value.to_string_lossy().into_owned(),
                )
            })
            .collect();
        let uri = given
            .iter()
            .find(|(key, _)| key == "PMIX_SERVER_URI41")
            .map(|(_, uri)| uri.clone())
            .ok_or("libpmix gives no PMIX_SERVER_URI41")?;
        let address = uri
            .split_once(";tcp4://")
            .and_then(|(_, address)| address.parse::<SocketAddr>().ok())
            .ok_or_else(|| format!("libpmix listens where scrun cannot relay: {uri}"))?;
        if self.verbose {
            // The port differs by design: the ranks reach libpmix's
            // through scrun's.
            let differences: Vec<String> = env_differences(&given, &self.served)
                .into_iter()
                .filter(|pair| !pair.starts_with("PMIX_SERVER_URI"))
                .collect();
            if !differences.is_empty() {
                crate::session::say(&format!(
                    "libpmix tells its ranks more than they were told: {}",
                    differences.join(" ")
                ));
            }
        }
        Ok(address)
    }
}

/// Whether the socket at `peer` belongs to this user.
pub(crate) fn owned_by(client: &TcpStream, peer: SocketAddr, uid: u32) -> bool {
    let (SocketAddr::V4(peer), Ok(SocketAddr::V4(local))) = (peer, client.local_addr()) else {
        return false;
    };
    std::fs::read_to_string("/proc/net/tcp")
        .ok()
        .and_then(|table| tcp_owner(&table, peer, local))
        == Some(uid)
}

/// Copies between a rank's connection and libpmix's, both ways, each on
/// a thread of its own, until both ends have closed; counted in `open`.
fn relay(client: TcpStream, server: TcpStream, open: &Arc<AtomicUsize>) {
    /// One connection relayed; uncounted when both threads are done.
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::Relaxed);
        }
    }
    let (Ok(client2), Ok(server2), Ok(spare)) =
        (client.try_clone(), server.try_clone(), client.try_clone())
    else {
        return;
    };
    open.fetch_add(1, Ordering::Relaxed);
    let counted = Arc::new(Counted(Arc::clone(open)));
    for (from, to) in [(client, server), (server2, client2)] {
        let counted = Arc::clone(&counted);
        let started = std::thread::Builder::new()
            .name("pmix-relay".to_string())
            .stack_size(RELAY_STACK)
            .spawn(move || {
                let (mut from, mut to) = (from, to);
                let _ = std::io::copy(&mut from, &mut to);
                let _ = to.shutdown(Shutdown::Write);
                let _ = from.shutdown(Shutdown::Read);
                drop(counted);
            });
        if started.is_err() {
            // The rank sees its connection close, and libpmix the rank go
            // when the other direction's copy ends.
            let _ = spare.shutdown(Shutdown::Both);
            return;
        }
    }
}

//! The imperative shell of scrun's PMIx server: the directory, the
//! namespaces and the environment of the job's ranks, and the job's end
//! when a rank aborts or dies, around libpmix ([`crate::pmix_sys`]) and
//! the pure [`scrun::pmi::pmix`].
//!
//! [`PmixServer::create`] starts libpmix in this process (it listens on
//! the loopback interface, as PMIx 4 does), in a directory of the user's
//! own (mode 0700) for its files, registers one namespace per stage, and
//! gives the variables every rank needs beside its `PMIX_NAMESPACE` and
//! `PMIX_RANK`, which scored sets. The namespace carries 128 random bits:
//! a client must name it to be served, and only the ranks' environments
//! (readable by the user and root alone) hold it. The session's loop
//! polls [`PmixServer::poll_fd`] and calls [`PmixServer::service`], which
//! returns the end of the job a rank asked for (abort) or caused (its
//! death before finalize), once. Everything lives as long as scrun's
//! session, whatever happens to its connection to scored.
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;

use scrun::pmi::pmix::{job_attributes, RankEnd, Ranks};

use crate::pmi_server::PmiEnd;
use crate::pmix_sys::{Library, Server};

/// A running PMIx server and the state of the job's ranks.
pub struct PmixServer {
    server: Option<Server>,
    worlds: Vec<Ranks>,
    dir: PathBuf,
    ended: bool,
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

impl PmixServer {
    /// Starts the server for `stages` worlds of `ranks` ranks, or says why
    /// it cannot (libpmix missing, or failing).
    pub fn create(ranks: u32, stages: usize) -> Result<(PmixServer, PmixLaunch), String> {
        let library = Library::load()?;
        let secret = random_hex()?;
        let namespace = format!("scrun.{}.{secret}", std::process::id());
        let dir = std::env::temp_dir().join(format!(
            "scrun-pmix-{}-{}",
            std::process::id(),
            &secret[..8]
        ));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
        let mut this = PmixServer {
            server: None,
            worlds: Vec::new(),
            dir,
            ended: false,
        };
        let server = library.start(&this.dir)?;
        // The universe is the stage's ranks, as PMI says and mpirun does.
        let attrs = job_attributes(ranks, ranks, &hostname());
        for stage in 0..stages {
            server.register(&format!("{namespace}.{stage}"), ranks, &attrs)?;
            this.worlds.push(Ranks::new(ranks as usize));
        }
        let env = server
            .fork_env(&format!("{namespace}.0"), 0)?
            .into_iter()
            .filter(|(key, _)| key != "PMIX_NAMESPACE" && key != "PMIX_RANK")
            .collect();
        this.server = Some(server);
        Ok((this, PmixLaunch { namespace, env }))
    }

    /// The descriptor to poll for the ranks' news.
    pub fn poll_fd(&self) -> Option<BorrowedFd<'_>> {
        if self.ended {
            return None;
        }
        self.server.as_ref().map(Server::wake_fd)
    }

    /// Takes what the ranks did; returns how the job ends if a rank ended it.
    pub fn service(&mut self) -> Option<PmiEnd> {
        let server = self.server.as_ref()?;
        let mut end = None;
        for event in server.take_events() {
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

//! One PMI world: the ranks of one stage of a job, their key-value space
//! and their barrier, driven by the bytes each rank sends.
//!
//! [`World::received`] and [`World::closed`] turn what a rank did into
//! [`Effect`]s: replies to write back, or the end of the job (a rank's
//! `abort`, or a fault of a rank named in the message). Pure: no
//! descriptor, no clock. Every buffer and table is bounded by [`Limits`];
//! a rank over a limit on the key-value space gets an error reply, a rank
//! that is not speaking PMI ends the job.
#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use super::names::{NameError, Names, Publisher};
use super::spawn::{self, Spawn};
use super::wire::{encode, excerpt, Command, Decoder, Wire, WireError};
use super::Mode;

/// The bounds of one world, documented in scrun(1), section MPI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest key, in bytes.
    pub key: usize,
    /// The longest value, in bytes.
    pub value: usize,
    /// The most keys one rank may put (job and node attributes together).
    pub keys_per_rank: usize,
    /// The most bytes of keys and values in the world.
    pub bytes: usize,
}

/// The limits scrun applies.
pub const LIMITS: Limits = Limits {
    key: 64,
    value: 1024,
    keys_per_rank: 256,
    bytes: 1 << 20,
};

/// The longest kvs name (`kvsname_max`).
const KVSNAME_MAX: usize = 256;

/// What the caller must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Write these bytes to the rank.
    Send {
        /// The rank.
        rank: usize,
        /// A whole reply.
        bytes: Vec<u8>,
    },
    /// The rank called abort: end the job with this status.
    Abort {
        /// The rank.
        rank: usize,
        /// The exit code it gave.
        code: i32,
        /// Its message, if it sent one.
        message: Option<String>,
    },
    /// The rank asks for new processes (`MPI_Comm_spawn`): start them,
    /// then answer with [`World::spawn_result`].
    Spawn {
        /// The rank.
        rank: usize,
        /// What to start.
        spawn: Spawn,
    },
    /// The rank broke the protocol or left the world: end the job.
    Fault {
        /// The rank.
        rank: usize,
        /// What it did, as a sentence without the rank.
        message: String,
    },
}

/// Where a rank stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Nothing received yet (a program that does not use PMI stays here).
    Fresh,
    /// Initialized (`init` or `fullinit`).
    Active,
    /// Said `finalize`.
    Finalized,
    /// Its connection ended after `finalize`, or before saying anything.
    Gone,
}

#[derive(Debug)]
struct Rank {
    decoder: Decoder,
    stage: Stage,
    /// The rank never said anything before its connection ended.
    silent_end: bool,
    keys: usize,
    in_barrier: bool,
    /// A node attribute the rank waits for (`info-getnodeattr` with `wait`).
    waiting_for: Option<String>,
    /// The PMI-1 spawn blocks received so far, until the last.
    spawn_blocks: Vec<Command>,
    /// A spawn of the rank's waits for its answer.
    spawning: bool,
}

/// One world: a stage's ranks and their key-value space.
#[derive(Debug)]
pub struct World {
    size: usize,
    kvsname: String,
    mode: Mode,
    ranks: Vec<Rank>,
    kvs: BTreeMap<String, String>,
    node: BTreeMap<String, String>,
    bytes: usize,
    ended: bool,
    /// The job's published names, shared by its worlds, and this world's
    /// stage among them.
    names: Rc<RefCell<Names>>,
    stage: usize,
    /// The kvs name of the world that spawned this one, if one did.
    spawner: Option<String>,
}

impl World {
    /// A world of `size` ranks whose key-value space is named `kvsname`,
    /// serving the wire formats `mode` allows.
    pub fn new(size: usize, kvsname: String, mode: Mode) -> World {
        World {
            size,
            kvsname,
            mode,
            ranks: (0..size)
                .map(|_| Rank {
                    decoder: Decoder::new(),
                    stage: Stage::Fresh,
                    silent_end: false,
                    keys: 0,
                    in_barrier: false,
                    waiting_for: None,
                    spawn_blocks: Vec::new(),
                    spawning: false,
                })
                .collect(),
            kvs: BTreeMap::new(),
            node: BTreeMap::new(),
            bytes: 0,
            ended: false,
            names: Rc::new(RefCell::new(Names::new())),
            stage: 0,
            spawner: None,
        }
    }

    /// The world was started by a spawn of the world named `spawner`;
    /// its key-value space starts with `preput` (within the limits).
    pub fn set_spawner(&mut self, spawner: String, preput: &[(String, String)]) {
        for (key, value) in preput.iter().take(spawn::MAX_PREPUT) {
            let bytes = key.len() + value.len();
            if self.bytes + bytes <= LIMITS.bytes && !self.kvs.contains_key(key) {
                self.bytes += bytes;
                self.kvs.insert(key.clone(), value.clone());
            }
        }
        self.spawner = Some(spawner);
    }

    /// The kvs name.
    pub fn kvsname(&self) -> &str {
        &self.kvsname
    }

    /// The answer to the spawn `rank` waits for: the new processes' kvs
    /// name, or why they were not started.
    pub fn spawn_result(&mut self, rank: usize, result: Result<String, String>) -> Vec<Effect> {
        let mut out = Vec::new();
        if self.ended || rank >= self.size || !self.ranks[rank].spawning {
            return out;
        }
        self.ranks[rank].spawning = false;
        let wire = self.ranks[rank].decoder.wire().unwrap_or(Wire::V1);
        let name = match wire {
            Wire::V1 => "spawn_result",
            Wire::V2 => "spawn-response",
        };
        out.push(match (result, wire) {
            (Ok(_), Wire::V1) => self.reply(rank, wire, name, &[("rc", "0")]),
            (Ok(jobid), Wire::V2) => {
                self.reply(rank, wire, name, &[("rc", "0"), ("jobid", &jobid)])
            }
            (Err(message), _) => self.error(rank, wire, name, &message),
        });
        out
    }

    /// The same world, stage `stage` of a job whose worlds share `names`
    /// (a name one stage publishes, another finds).
    pub fn sharing_names(mut self, names: Rc<RefCell<Names>>, stage: usize) -> World {
        self.names = names;
        self.stage = stage;
        self
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The world has ended the job (abort or fault): it takes no more input.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Bytes of keys and values stored.
    pub fn kvs_bytes(&self) -> usize {
        self.bytes
    }

    /// Bytes the rank's decoder holds (the caller bounds its reads by it).
    pub fn buffered(&self, rank: usize) -> usize {
        self.ranks.get(rank).map_or(0, |r| r.decoder.buffered())
    }

    /// `bytes` arrived from `rank`.
    pub fn received(&mut self, rank: usize, bytes: &[u8]) -> Vec<Effect> {
        let mut out = Vec::new();
        if self.ended || rank >= self.size {
            return out;
        }
        self.ranks[rank].decoder.push(bytes);
        loop {
            match self.ranks[rank].decoder.next_command() {
                Ok(Some((wire, command))) => self.command(rank, wire, command, &mut out),
                Ok(None) => break,
                Err(error) => {
                    self.fault(rank, garbage(&error), &mut out);
                }
            }
            if self.ended {
                break;
            }
        }
        out
    }

    /// The connection of `rank` ended (the rank and what it started closed it).
    pub fn closed(&mut self, rank: usize) -> Vec<Effect> {
        let mut out = Vec::new();
        if self.ended || rank >= self.size {
            return out;
        }
        let r = &mut self.ranks[rank];
        match r.stage {
            Stage::Active => {
                let message = if r.in_barrier {
                    "ended its PMI connection while waiting at the barrier".to_string()
                } else {
                    "ended its PMI connection without finalize (did it exit or crash inside MPI?)"
                        .to_string()
                };
                self.fault(rank, message, &mut out);
            }
            Stage::Fresh => {
                r.stage = Stage::Gone;
                r.silent_end = true;
                self.check_barrier(&mut out);
            }
            Stage::Finalized | Stage::Gone => r.stage = Stage::Gone,
        }
        out
    }

    /// Ends the world for a fault of `rank` (the caller's own finding,
    /// such as a rank that does not read its replies).
    pub fn fault(&mut self, rank: usize, message: String, out: &mut Vec<Effect>) {
        if !self.ended {
            self.ended = true;
            out.push(Effect::Fault { rank, message });
        }
    }

    fn reply(&self, rank: usize, wire: Wire, cmd: &str, attrs: &[(&str, &str)]) -> Effect {
        Effect::Send {
            rank,
            bytes: encode(wire, cmd, attrs),
        }
    }

    /// An error reply: PMI-1 values end at a space, so the message has none.
    fn error(&self, rank: usize, wire: Wire, cmd: &str, message: &str) -> Effect {
        match wire {
            Wire::V1 => {
                let message = message.replace(' ', "_");
                self.reply(rank, wire, cmd, &[("rc", "-1"), ("msg", &message)])
            }
            Wire::V2 => self.reply(rank, wire, cmd, &[("rc", "-1"), ("errmsg", message)]),
        }
    }

    fn command(&mut self, rank: usize, wire: Wire, command: Command, out: &mut Vec<Effect>) {
        let stage = self.ranks[rank].stage;
        if stage == Stage::Fresh && !matches!(command.cmd.as_str(), "init" | "fullinit") {
            let message = format!(
                "sent {} before init on its PMI descriptor",
                excerpt(command.cmd.as_bytes())
            );
            return self.fault(rank, message, out);
        }
        match (wire, command.cmd.as_str()) {
            (Wire::V1, "init") => self.init(rank, &command, out),
            (Wire::V2, "fullinit") => self.fullinit(rank, &command, out),
            (_, "abort") => {
                let code = command
                    .get("exitcode")
                    .and_then(|code| code.trim().parse::<i32>().ok())
                    .unwrap_or(1);
                let message = command
                    .get("message")
                    .or_else(|| command.get("msg"))
                    .filter(|message| !message.is_empty())
                    .map(|message| message.chars().take(1024).collect());
                self.ended = true;
                out.push(Effect::Abort {
                    rank,
                    code,
                    message,
                });
            }
            (Wire::V1, "get_maxes") => {
                let (kvsname, key, value) = (
                    KVSNAME_MAX.to_string(),
                    LIMITS.key.to_string(),
                    LIMITS.value.to_string(),
                );
                out.push(self.reply(
                    rank,
                    wire,
                    "maxes",
                    &[
                        ("rc", "0"),
                        ("kvsname_max", &kvsname),
                        ("keylen_max", &key),
                        ("vallen_max", &value),
                    ],
                ));
            }
            (Wire::V1, "get_universe_size") => {
                let size = self.size.to_string();
                out.push(self.reply(rank, wire, "universe_size", &[("rc", "0"), ("size", &size)]));
            }
            (Wire::V1, "get_appnum") => {
                out.push(self.reply(rank, wire, "appnum", &[("rc", "0"), ("appnum", "0")]));
            }
            (Wire::V1, "get_my_kvsname") => {
                out.push(self.reply(
                    rank,
                    wire,
                    "my_kvsname",
                    &[("rc", "0"), ("kvsname", &self.kvsname)],
                ));
            }
            (Wire::V2, "job-getid") => {
                out.push(self.reply(
                    rank,
                    wire,
                    "job-getid-response",
                    &[("rc", "0"), ("jobid", &self.kvsname)],
                ));
            }
            (Wire::V1, "put") => {
                let result = self.put(rank, &command, false);
                out.push(match result {
                    Ok(()) => {
                        self.reply(rank, wire, "put_result", &[("rc", "0"), ("msg", "success")])
                    }
                    Err(message) => self.error(rank, wire, "put_result", &message),
                });
            }
            (Wire::V2, "kvs-put") => {
                let result = self.put(rank, &command, false);
                out.push(match result {
                    Ok(()) => self.reply(rank, wire, "kvs-put-response", &[("rc", "0")]),
                    Err(message) => self.error(rank, wire, "kvs-put-response", &message),
                });
            }
            (Wire::V2, "info-putnodeattr") => {
                let result = self.put(rank, &command, true);
                match result {
                    Ok(()) => {
                        out.push(self.reply(
                            rank,
                            wire,
                            "info-putnodeattr-response",
                            &[("rc", "0")],
                        ));
                        self.wake_node_waiters(&command, out);
                    }
                    Err(message) => {
                        out.push(self.error(rank, wire, "info-putnodeattr-response", &message))
                    }
                }
            }
            (Wire::V1, "get") => {
                let key = command.get("key").unwrap_or_default();
                let effect = match self.lookup(key) {
                    Some(value) => self.reply(
                        rank,
                        wire,
                        "get_result",
                        &[("rc", "0"), ("msg", "success"), ("value", &value)],
                    ),
                    None => {
                        let message = format!("key {} not found", excerpt(key.as_bytes()));
                        self.error(rank, wire, "get_result", &message)
                    }
                };
                out.push(effect);
            }
            (Wire::V2, "kvs-get" | "info-getjobattr") => {
                let response = format!("{}-response", command.cmd);
                let key = command.get("key").unwrap_or_default();
                let effect = match self.lookup(key) {
                    Some(value) => self.reply(
                        rank,
                        wire,
                        &response,
                        &[("rc", "0"), ("found", "TRUE"), ("value", &value)],
                    ),
                    None => self.reply(rank, wire, &response, &[("rc", "0"), ("found", "FALSE")]),
                };
                out.push(effect);
            }
            (Wire::V2, "info-getnodeattr") => {
                let key = command.get("key").unwrap_or_default().to_string();
                match self.node.get(&key) {
                    Some(value) => out.push(self.reply(
                        rank,
                        wire,
                        "info-getnodeattr-response",
                        &[("rc", "0"), ("found", "TRUE"), ("value", value)],
                    )),
                    None if command.get("wait") == Some("TRUE") => {
                        // Answered when a rank puts it; a rank waits for
                        // one key at a time, as the call blocks.
                        self.ranks[rank].waiting_for = Some(key);
                    }
                    None => out.push(self.reply(
                        rank,
                        wire,
                        "info-getnodeattr-response",
                        &[("rc", "0"), ("found", "FALSE")],
                    )),
                }
            }
            (Wire::V1, "barrier_in") | (Wire::V2, "kvs-fence") => {
                self.ranks[rank].in_barrier = true;
                self.check_barrier(out);
            }
            (Wire::V1, "finalize") | (Wire::V2, "finalize") => {
                let r = &mut self.ranks[rank];
                r.stage = Stage::Finalized;
                r.in_barrier = false;
                let name = if wire == Wire::V1 {
                    "finalize_ack"
                } else {
                    "finalize-response"
                };
                out.push(self.reply(rank, wire, name, &[("rc", "0")]));
                self.check_barrier(out);
            }
            (Wire::V1, "publish_name") | (Wire::V2, "name-publish") => {
                let name = command
                    .get("service")
                    .or_else(|| command.get("name"))
                    .unwrap_or_default();
                let port = command.get("port").unwrap_or_default();
                let who = Publisher {
                    world: self.stage,
                    rank,
                };
                let result = if port.contains(['\n', '\0']) {
                    // A PMI-1 reply is one line.
                    Err(NameError::Limit(
                        "a port holds no newline or NUL".to_string(),
                    ))
                } else {
                    self.names.borrow_mut().publish(who, name, port.to_string())
                };
                out.push(self.name_reply(rank, wire, &command.cmd, result, None));
            }
            (Wire::V1, "unpublish_name") | (Wire::V2, "name-unpublish") => {
                let name = command
                    .get("service")
                    .or_else(|| command.get("name"))
                    .unwrap_or_default();
                let who = Publisher {
                    world: self.stage,
                    rank,
                };
                let result = self.names.borrow_mut().unpublish(who, name);
                out.push(self.name_reply(rank, wire, &command.cmd, result, None));
            }
            (Wire::V1, "lookup_name") | (Wire::V2, "name-lookup") => {
                let name = command
                    .get("service")
                    .or_else(|| command.get("name"))
                    .unwrap_or_default();
                let port = self.names.borrow().lookup(name).cloned();
                let result = match &port {
                    Some(_) => Ok(()),
                    None => Err(NameError::NotFound(name.to_string())),
                };
                out.push(self.name_reply(rank, wire, &command.cmd, result, port.as_deref()));
            }
            (Wire::V1, "spawn") => self.spawn_v1(rank, command, out),
            (Wire::V2, "spawn") => {
                let result = spawn::from_v2(&command);
                self.start_spawn(rank, wire, result, out);
            }
            (Wire::V2, "job-connect" | "job-disconnect") => {
                let name = format!("{}-response", command.cmd);
                let message = format!("{} is not supported by scrun's PMI", command.cmd);
                out.push(self.error(rank, wire, &name, &message));
            }
            (_, other) => {
                let message = format!(
                    "sent the unknown PMI command {} on its PMI descriptor",
                    excerpt(other.as_bytes())
                );
                self.fault(rank, message, out);
            }
        }
    }

    /// A PMI-1 spawn block: gathered until the last of the spawn's blocks.
    fn spawn_v1(&mut self, rank: usize, block: Command, out: &mut Vec<Effect>) {
        let position = spawn::v1_block_position(&block);
        let blocks = &mut self.ranks[rank].spawn_blocks;
        let result = match position {
            Ok((so_far, total)) if so_far == blocks.len() + 1 => {
                blocks.push(block);
                if so_far < total {
                    return;
                }
                spawn::from_v1(&std::mem::take(blocks))
            }
            Ok((so_far, total)) => {
                blocks.clear();
                Err(format!(
                    "spawn block {so_far} of {total} out of order (MPICH sends them in order)"
                ))
            }
            Err(message) => {
                blocks.clear();
                Err(message)
            }
        };
        self.start_spawn(rank, Wire::V1, result, out);
    }

    /// Asks the caller to start a spawn, or refuses it.
    fn start_spawn(
        &mut self,
        rank: usize,
        wire: Wire,
        result: Result<Spawn, String>,
        out: &mut Vec<Effect>,
    ) {
        let name = match wire {
            Wire::V1 => "spawn_result",
            Wire::V2 => "spawn-response",
        };
        match result {
            _ if self.ranks[rank].spawning => out.push(self.error(
                rank,
                wire,
                name,
                "a spawn while the rank's previous spawn waits for its answer",
            )),
            Ok(spawn) => {
                self.ranks[rank].spawning = true;
                out.push(Effect::Spawn { rank, spawn });
            }
            Err(message) => out.push(self.error(rank, wire, name, &message)),
        }
    }

    /// The reply to a name command: `publish_result` and the like (PMI-1),
    /// `name-publish-response` and the like (PMI-2), with the port found.
    fn name_reply(
        &self,
        rank: usize,
        wire: Wire,
        cmd: &str,
        result: Result<(), NameError>,
        port: Option<&str>,
    ) -> Effect {
        let name = match wire {
            Wire::V1 => format!("{}_result", cmd.trim_end_matches("_name")),
            Wire::V2 => format!("{cmd}-response"),
        };
        match (result, port) {
            (Ok(()), Some(port)) => match wire {
                Wire::V1 => self.reply(rank, wire, &name, &[("rc", "0"), ("port", port)]),
                Wire::V2 => self.reply(
                    rank,
                    wire,
                    &name,
                    &[
                        ("rc", "0"),
                        ("found", "TRUE"),
                        ("port", port),
                        ("value", port),
                    ],
                ),
            },
            (Ok(()), None) => match wire {
                Wire::V1 => self.reply(rank, wire, &name, &[("rc", "0"), ("msg", "success")]),
                Wire::V2 => self.reply(rank, wire, &name, &[("rc", "0")]),
            },
            (Err(error), _) => self.error(rank, wire, &name, &error.to_string()),
        }
    }

    /// PMI-1 `init`, which MPICH's PMI-2 client also opens with.
    fn init(&mut self, rank: usize, command: &Command, out: &mut Vec<Effect>) {
        let version = command.get("pmi_version").unwrap_or_default();
        let allowed = match version {
            "1" => self.mode != Mode::Pmi2,
            "2" => self.mode != Mode::Pmi1,
            _ => false,
        };
        if !allowed {
            let message = match version {
                "1" | "2" => format!(
                    "sent init for PMI-{version}, but scrun serves {} (-mpi=)",
                    self.mode.describe()
                ),
                other => format!(
                    "sent init for PMI version {}, which scrun does not serve",
                    excerpt(other.as_bytes())
                ),
            };
            out.push(self.reply(
                rank,
                Wire::V1,
                "response_to_init",
                &[("rc", "-1"), ("pmi_version", "1"), ("pmi_subversion", "1")],
            ));
            return self.fault(rank, message, out);
        }
        let subversion = if version == "2" { "0" } else { "1" };
        out.push(self.reply(
            rank,
            Wire::V1,
            "response_to_init",
            &[
                ("rc", "0"),
                ("pmi_version", version),
                ("pmi_subversion", subversion),
            ],
        ));
        let r = &mut self.ranks[rank];
        if version == "2" {
            r.decoder.switch_to_v2();
        }
        r.stage = Stage::Active;
    }

    /// PMI-2 `fullinit`.
    fn fullinit(&mut self, rank: usize, command: &Command, out: &mut Vec<Effect>) {
        if self.mode == Mode::Pmi1 {
            let message = "sent a PMI-2 fullinit, but scrun serves PMI-1 only (-mpi=pmi1)";
            out.push(self.error(rank, Wire::V2, "fullinit-response", message));
            return self.fault(rank, message.to_string(), out);
        }
        let claimed = command.get("pmirank");
        if claimed.is_some_and(|claimed| claimed.trim() != rank.to_string()) {
            let message = format!(
                "claimed PMI rank {} in fullinit on the descriptor of rank {rank}",
                excerpt(claimed.unwrap_or_default().as_bytes())
            );
            out.push(self.error(rank, Wire::V2, "fullinit-response", &message));
            return self.fault(rank, message, out);
        }
        let (rank_text, size) = (rank.to_string(), self.size.to_string());
        let mut attrs = vec![
            ("rc", "0"),
            ("pmi-version", "2"),
            ("pmi-subversion", "0"),
            ("rank", rank_text.as_str()),
            ("size", size.as_str()),
            ("appnum", "0"),
        ];
        // MPICH's client takes a world with a spawner for spawned.
        if let Some(spawner) = &self.spawner {
            attrs.push(("spawner-jobid", spawner));
        }
        attrs.extend([("debugged", "FALSE"), ("pmiverbose", "FALSE")]);
        out.push(self.reply(rank, Wire::V2, "fullinit-response", &attrs));
        self.ranks[rank].stage = Stage::Active;
    }

    /// A key's value: the world's attributes first, then what ranks put.
    fn lookup(&self, key: &str) -> Option<String> {
        match key {
            // Every rank runs on this machine: one node holding all of
            // them, so that MPI uses shared memory between them.
            "PMI_process_mapping" => Some(format!("(vector,(0,1,{}))", self.size)),
            "universeSize" => Some(self.size.to_string()),
            "PMI_dead_processes" => Some(String::new()),
            _ => self.kvs.get(key).cloned(),
        }
    }

    /// Stores a `put` (`node`: a node attribute) within the limits.
    fn put(&mut self, rank: usize, command: &Command, node: bool) -> Result<(), String> {
        if let Some(kvsname) = command.get("kvsname") {
            if kvsname != self.kvsname {
                return Err(format!(
                    "kvsname {} is not this job's {}",
                    excerpt(kvsname.as_bytes()),
                    self.kvsname
                ));
            }
        }
        let (Some(key), Some(value)) = (command.get("key"), command.get("value")) else {
            return Err("put needs a key and a value".to_string());
        };
        if key.is_empty() || key.len() > LIMITS.key {
            return Err(format!(
                "key of {} bytes: keys are 1 to {} bytes",
                key.len(),
                LIMITS.key
            ));
        }
        if key.contains(['\n', '\0']) || value.contains(['\n', '\0']) {
            // A PMI-1 reply is one line: a newline would end another
            // rank's reply to a get in the middle.
            return Err("keys and values hold no newline or NUL".to_string());
        }
        if value.len() > LIMITS.value {
            return Err(format!(
                "value of {} bytes over the limit of {}",
                value.len(),
                LIMITS.value
            ));
        }
        let table = if node { &self.node } else { &self.kvs };
        let old = table.get(key).map_or(0, |old| key.len() + old.len());
        let new = key.len() + value.len();
        if old == 0 && self.ranks[rank].keys >= LIMITS.keys_per_rank {
            return Err(format!(
                "more than {} keys put by one rank",
                LIMITS.keys_per_rank
            ));
        }
        if self.bytes - old + new > LIMITS.bytes {
            return Err(format!(
                "the job's key-value space would exceed {} bytes",
                LIMITS.bytes
            ));
        }
        if old == 0 {
            self.ranks[rank].keys += 1;
        }
        self.bytes = self.bytes - old + new;
        let table = if node { &mut self.node } else { &mut self.kvs };
        table.insert(key.to_string(), value.to_string());
        Ok(())
    }

    /// Answers the ranks waiting for the node attribute just put.
    fn wake_node_waiters(&mut self, command: &Command, out: &mut Vec<Effect>) {
        let (Some(key), Some(value)) = (command.get("key"), command.get("value")) else {
            return;
        };
        for rank in 0..self.size {
            if self.ranks[rank].waiting_for.as_deref() == Some(key) {
                self.ranks[rank].waiting_for = None;
                out.push(self.reply(
                    rank,
                    Wire::V2,
                    "info-getnodeattr-response",
                    &[("rc", "0"), ("found", "TRUE"), ("value", value)],
                ));
            }
        }
    }

    /// Releases the barrier once every rank is in it; ends the world if a
    /// rank that can no longer join is missing while others wait.
    fn check_barrier(&mut self, out: &mut Vec<Effect>) {
        let Some(waiting) = self.ranks.iter().position(|r| r.in_barrier) else {
            return;
        };
        if let Some(missing) = self
            .ranks
            .iter()
            .position(|r| matches!(r.stage, Stage::Gone | Stage::Finalized))
        {
            let message = if self.ranks[missing].silent_end {
                format!("ended without ever using its PMI descriptor while rank {waiting} waits at the PMI barrier")
            } else {
                format!("finalized while rank {waiting} waits at the PMI barrier")
            };
            return self.fault(missing, message, out);
        }
        if !self.ranks.iter().all(|r| r.in_barrier) {
            return;
        }
        for rank in 0..self.size {
            self.ranks[rank].in_barrier = false;
            let wire = self.ranks[rank].decoder.wire().unwrap_or(Wire::V1);
            let name = if wire == Wire::V1 {
                "barrier_out"
            } else {
                "kvs-fence-response"
            };
            out.push(self.reply(rank, wire, name, &[("rc", "0")]));
        }
    }
}

/// The message for bytes that are not PMI.
fn garbage(error: &WireError) -> String {
    format!("sent what is not PMI on its PMI descriptor: {error}")
}

#[cfg(test)]
mod tests;

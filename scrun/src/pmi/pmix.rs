//! The pure part of scrun's PMIx server: what a job's namespace says
//! about it, and how what its ranks do turns into the job's end.
//!
//! [`job_attributes`] is the registration OpenMPI reads at `MPI_Init`
//! (sizes, the node and process maps, each rank's local and node rank),
//! as key and typed value, for the FFI layer to hand to libpmix.
//! [`Ranks`] follows each rank of one namespace (connected, finalized)
//! and says when a rank's abort or death ends the job, naming it.
//! [`served_env`] is what a rank is told to find the server before the
//! server exists, and [`tcp_owner`] who owns the far end of a loopback
//! connection. No descriptor, thread or library here.
#![forbid(unsafe_code)]

use std::net::SocketAddrV4;

/// A value of a namespace attribute, typed as PMIx types it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttrValue {
    /// `PMIX_UINT32`.
    U32(u32),
    /// `PMIX_UINT16`.
    U16(u16),
    /// `PMIX_PROC_RANK`.
    Rank(u32),
    /// `PMIX_BOOL`.
    Bool(bool),
    /// `PMIX_STRING`.
    Str(String),
    /// A node map: the host names, comma-separated, which libpmix turns
    /// into its regular expression (`PMIx_generate_regex`).
    NodeMap(String),
    /// A process map: the ranks of each node, `;` between nodes
    /// (`PMIx_generate_ppn`).
    ProcMap(String),
    /// `PMIX_DATA_ARRAY` of `PMIX_INFO`: one rank's own attributes.
    Infos(Vec<Attr>),
}

/// One attribute: a PMIx key (`pmix.job.size`) and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    /// The key, as `PMIX_JOB_SIZE` spells it.
    pub key: &'static str,
    /// Its value.
    pub value: AttrValue,
}

fn attr(key: &'static str, value: AttrValue) -> Attr {
    Attr { key, value }
}

/// What one namespace (one stage of a job) is registered with: `ranks`
/// ranks, all on this machine (one node named `hostname`), so that MPI
/// uses shared memory between them; the job's ranks in all stages are
/// its universe.
pub fn job_attributes(ranks: u32, universe: u32, hostname: &str) -> Vec<Attr> {
    let peers = (0..ranks)
        .map(|rank| rank.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mut attrs = vec![
        attr("pmix.univ.size", AttrValue::U32(universe)),
        attr("pmix.max.size", AttrValue::U32(universe)),
        attr("pmix.job.size", AttrValue::U32(ranks)),
        attr("pmix.app.size", AttrValue::U32(ranks)),
        attr("pmix.job.napps", AttrValue::U32(1)),
        attr("pmix.num.nodes", AttrValue::U32(1)),
        attr("pmix.local.size", AttrValue::U32(ranks)),
        attr("pmix.node.size", AttrValue::U32(ranks)),
        attr("pmix.lpeers", AttrValue::Str(peers.clone())),
        attr("pmix.lldr", AttrValue::Rank(0)),
        attr("pmix.nodeid", AttrValue::U32(0)),
        attr("pmix.spawned", AttrValue::Bool(false)),
        attr("pmix.nmap", AttrValue::NodeMap(hostname.to_string())),
        attr("pmix.pmap", AttrValue::ProcMap(peers)),
    ];
    for rank in 0..ranks {
        let local = u16::try_from(rank).unwrap_or(u16::MAX);
        attrs.push(attr(
            "pmix.pdata",
            AttrValue::Infos(vec![
                attr("pmix.rank", AttrValue::Rank(rank)),
                attr("pmix.appnum", AttrValue::U32(0)),
                attr("pmix.aldr", AttrValue::Rank(0)),
                attr("pmix.apprank", AttrValue::Rank(rank)),
                attr("pmix.grank", AttrValue::Rank(rank)),
                attr("pmix.lrank", AttrValue::U16(local)),
                attr("pmix.nrank", AttrValue::U16(local)),
                attr("pmix.nodeid", AttrValue::U32(0)),
                attr("pmix.hname", AttrValue::Str(hostname.to_string())),
            ]),
        ));
    }
    attrs
}

/// What OpenMPI 4 needs in a rank's environment to take a PMIx server it
/// did not start for its launcher (as its Slurm and Flux detection set it
/// when launched by those): none of its launcher-detection modules claims
/// the rank, so that it is launched through PMIx rather than a singleton,
/// and no binding of its own over the host's CPUs the rank was pinned to.
/// Newer OpenMPI and other PMIx clients ignore them; a variable the user
/// set wins.
pub const OPENMPI_DIRECT_LAUNCH: [(&str, &str); 3] = [
    ("OMPI_MCA_schizo", "ompi"),
    ("OMPI_MCA_hwloc_base_binding_policy", "none"),
    ("OMPI_MCA_orte_externally_bound", "1"),
];

/// The rank of scrun's PMIx server in its own namespace.
pub const SERVER_RANK: u32 = 0;

/// The variables libpmix's `PMIx_server_setup_fork` gives a rank of a
/// server with the hash store only, whose own namespace is `server` and
/// whose ranks connect to `127.0.0.1:port`, with its files in `tmpdir`
/// on the machine named `hostname` (but `PMIX_NAMESPACE` and
/// `PMIX_RANK`, which scored sets). They are known before the server
/// starts, so that it starts only when a rank connects. `PMIX_VERSION`
/// is left out: a client then takes the server for a 4.1 one, from the
/// newest URI variable, which is all its 4.x and 5.x checks ask.
pub fn served_env(server: &str, port: u16, tmpdir: &str, hostname: &str) -> Vec<(String, String)> {
    let uri = format!("{server}.{SERVER_RANK};tcp4://127.0.0.1:{port}");
    let mut env: Vec<(String, String)> = ["41", "4", "3", "2", "21"]
        .iter()
        .map(|version| (format!("PMIX_SERVER_URI{version}"), uri.clone()))
        .collect();
    for (key, value) in [
        ("PMIX_SECURITY_MODE", "native"),
        ("PMIX_BFROP_BUFFER_TYPE", "PMIX_BFROP_BUFFER_NON_DESC"),
        ("PMIX_GDS_MODULE", "hash"),
        ("PMIX_SERVER_TMPDIR", tmpdir),
        ("PMIX_SYSTEM_TMPDIR", tmpdir),
        ("PMIX_HOSTNAME", hostname),
    ] {
        env.push((key.to_string(), value.to_string()));
    }
    env
}

/// The variables of `given` (libpmix's own `PMIx_server_setup_fork`)
/// that `served` lacks or says otherwise, but for `PMIX_VERSION`,
/// `PMIX_NAMESPACE` and `PMIX_RANK`: what a rank was not told.
pub fn env_differences(given: &[(String, String)], served: &[(String, String)]) -> Vec<String> {
    given
        .iter()
        .filter(|(key, _)| {
            !matches!(
                key.as_str(),
                "PMIX_VERSION" | "PMIX_NAMESPACE" | "PMIX_RANK"
            )
        })
        .filter(|(key, value)| !served.iter().any(|(k, v)| k == key && v == value))
        .map(|(key, value)| format!("{key}={value}"))
        .collect()
}

/// The uid owning the socket at `peer` connected to `local`, from the
/// text of `/proc/net/tcp`: both ends of a loopback connection are
/// listed there, each with its owner.
pub fn tcp_owner(table: &str, peer: SocketAddrV4, local: SocketAddrV4) -> Option<u32> {
    let hex = |addr: SocketAddrV4| {
        format!(
            "{:08X}:{:04X}",
            u32::from_ne_bytes(addr.ip().octets()),
            addr.port()
        )
    };
    let (peer, local) = (hex(peer), hex(local));
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(1) == Some(&peer.as_str()) && fields.get(2) == Some(&local.as_str()) {
            fields.get(7)?.parse().ok()
        } else {
            None
        }
    })
}

/// Something a rank did through libpmix, as the FFI layer reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RankEvent {
    /// It connected (`PMIx_Init`).
    Connected,
    /// It called `PMIx_Finalize`.
    Finalized,
    /// It called `PMIx_Abort` (`MPI_Abort`) with this status and message.
    Aborted {
        /// The status it gave.
        status: i32,
        /// Its message, if any.
        message: Option<String>,
    },
    /// Its connection ended without `PMIx_Finalize`.
    Lost,
    /// It asked to spawn processes (`MPI_Comm_spawn`), which scrun does
    /// not serve.
    Spawned,
}

/// How the job ends because of a rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RankEnd {
    /// The rank aborted with this status and message.
    Abort {
        /// The rank.
        rank: usize,
        /// Its status.
        code: i32,
        /// Its message, if any.
        message: Option<String>,
    },
    /// The rank went away without finalizing: the sentence says how.
    Fault {
        /// The rank.
        rank: usize,
        /// What it did, without the rank.
        message: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Fresh,
    Connected,
    Finalized,
}

/// The ranks of one namespace and where each stands.
#[derive(Debug)]
pub struct Ranks {
    states: Vec<State>,
    ended: bool,
}

impl Ranks {
    /// `size` ranks, none connected yet.
    pub fn new(size: usize) -> Ranks {
        Ranks {
            states: vec![State::Fresh; size],
            ended: false,
        }
    }

    /// Takes what `rank` did; returns how the job ends, once.
    pub fn event(&mut self, rank: usize, event: RankEvent) -> Option<RankEnd> {
        if self.ended || rank >= self.states.len() {
            return None;
        }
        let end = match event {
            RankEvent::Connected => {
                if self.states[rank] == State::Fresh {
                    self.states[rank] = State::Connected;
                }
                None
            }
            RankEvent::Finalized => {
                self.states[rank] = State::Finalized;
                None
            }
            RankEvent::Aborted { status, message } => Some(RankEnd::Abort {
                rank,
                code: status,
                message,
            }),
            // Refused; OpenMPI's other ranks would wait for ever in the
            // collective, whatever the error handler.
            RankEvent::Spawned => Some(RankEnd::Fault {
                rank,
                message: "called MPI_Comm_spawn, which scrun does not serve (start each program as a :: stage, or as a job of its own)".to_string(),
            }),
            RankEvent::Lost if self.states[rank] == State::Finalized => None,
            RankEvent::Lost => Some(RankEnd::Fault {
                rank,
                message:
                    "ended its PMIx connection without finalize (did it exit or crash inside MPI?)"
                        .to_string(),
            }),
        };
        self.ended = end.is_some();
        end
    }

    /// The world has ended the job.
    pub fn ended(&self) -> bool {
        self.ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_namespace_says_every_rank_is_on_one_node_with_its_local_rank() {
        let attrs = job_attributes(3, 6, "box");
        let get = |key: &str| attrs.iter().find(|a| a.key == key).map(|a| a.value.clone());
        assert_eq!(get("pmix.job.size"), Some(AttrValue::U32(3)));
        assert_eq!(get("pmix.univ.size"), Some(AttrValue::U32(6)));
        assert_eq!(get("pmix.local.size"), Some(AttrValue::U32(3)));
        assert_eq!(get("pmix.lpeers"), Some(AttrValue::Str("0,1,2".into())));
        assert_eq!(get("pmix.nmap"), Some(AttrValue::NodeMap("box".into())));
        assert_eq!(get("pmix.pmap"), Some(AttrValue::ProcMap("0,1,2".into())));
        let procs: Vec<&Attr> = attrs.iter().filter(|a| a.key == "pmix.pdata").collect();
        assert_eq!(procs.len(), 3);
        let AttrValue::Infos(rank2) = &procs[2].value else {
            panic!("not an array");
        };
        assert!(rank2.contains(&attr("pmix.rank", AttrValue::Rank(2))));
        assert!(rank2.contains(&attr("pmix.lrank", AttrValue::U16(2))));
        assert!(rank2.contains(&attr("pmix.nrank", AttrValue::U16(2))));
    }

    #[test]
    fn the_served_environment_names_the_port_and_the_servers_namespace() {
        let env = served_env("scrun.7.server", 4242, "/tmp/d", "box");
        let get = |key: &str| env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        assert_eq!(
            get("PMIX_SERVER_URI41"),
            Some("scrun.7.server.0;tcp4://127.0.0.1:4242")
        );
        assert_eq!(get("PMIX_SERVER_URI21"), get("PMIX_SERVER_URI41"));
        assert_eq!(get("PMIX_GDS_MODULE"), Some("hash"));
        assert_eq!(get("PMIX_SERVER_TMPDIR"), Some("/tmp/d"));
        assert_eq!(get("PMIX_VERSION"), None);
        let given = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Vec<_>>()
        };
        assert!(env_differences(
            &given(&[
                ("PMIX_GDS_MODULE", "hash"),
                ("PMIX_VERSION", "4.2.2"),
                ("PMIX_RANK", "0")
            ]),
            &env
        )
        .is_empty());
        assert_eq!(
            env_differences(
                &given(&[("PMIX_GDS_MODULE", "ds21,hash"), ("PMIX_NEW", "x")]),
                &env
            ),
            ["PMIX_GDS_MODULE=ds21,hash", "PMIX_NEW=x"]
        );
    }

    #[test]
    fn the_owner_of_a_loopback_peer_is_read_from_the_tcp_table() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1092 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1 1 0 100 0 0 10 0
   1: 0100007F:1092 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000        0 2 1 0 20 4 30 10 -1
   2: 0100007F:D431 0100007F:1092 01 00000000:00000000 00:00000000 00000000  1001        0 3 1 0 20 4 30 10 -1
";
        let listener: SocketAddrV4 = "127.0.0.1:4242".parse().unwrap();
        let peer: SocketAddrV4 = "127.0.0.1:54321".parse().unwrap();
        assert_eq!(tcp_owner(table, peer, listener), Some(1001));
        let other: SocketAddrV4 = "127.0.0.1:54322".parse().unwrap();
        assert_eq!(tcp_owner(table, other, listener), None);
        assert_eq!(tcp_owner("", peer, listener), None);
    }

    #[test]
    fn an_abort_or_a_death_before_finalize_ends_the_job_once_naming_the_rank() {
        let mut ranks = Ranks::new(2);
        assert_eq!(ranks.event(0, RankEvent::Connected), None);
        assert_eq!(ranks.event(0, RankEvent::Finalized), None);
        assert_eq!(ranks.event(0, RankEvent::Lost), None);
        assert!(matches!(
            ranks.event(1, RankEvent::Lost),
            Some(RankEnd::Fault { rank: 1, .. })
        ));
        assert!(ranks.ended());
        assert_eq!(
            ranks.event(
                1,
                RankEvent::Aborted {
                    status: 7,
                    message: None
                }
            ),
            None
        );
        let mut ranks = Ranks::new(2);
        assert_eq!(
            ranks.event(
                1,
                RankEvent::Aborted {
                    status: 7,
                    message: Some("bye".into())
                }
            ),
            Some(RankEnd::Abort {
                rank: 1,
                code: 7,
                message: Some("bye".into())
            })
        );
        // Out of range: nothing.
        assert_eq!(Ranks::new(1).event(5, RankEvent::Lost), None);
        // A spawn, refused, ends the job naming the rank.
        let mut ranks = Ranks::new(2);
        assert!(matches!(
            ranks.event(0, RankEvent::Spawned),
            Some(RankEnd::Fault { rank: 0, message }) if message.contains("MPI_Comm_spawn")
        ));
    }
}

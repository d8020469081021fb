//! The pure part of scrun's PMIx server: what a job's namespace says
//! about it, and how what its ranks do turns into the job's end.
//!
//! [`job_attributes`] is the registration OpenMPI reads at `MPI_Init`
//! (sizes, the node and process maps, each rank's local and node rank),
//! as key and typed value, for the FFI layer to hand to libpmix.
//! [`Ranks`] follows each rank of one namespace (connected, finalized)
//! and says when a rank's abort or death ends the job, naming it. No
//! descriptor, thread or library here.
#![forbid(unsafe_code)]

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
    }
}

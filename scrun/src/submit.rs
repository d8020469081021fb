//! The `Submit` request: the parsed command line plus the caller's
//! environment, working directory, descriptors, ignored signals, limits,
//! umask and priorities, checked against the protocol's size limit and the
//! submission validator before anything is sent.
//!
//! [`submit_request`], [`check_size`] and [`check_rules`] are pure; only
//! [`build`] reads the process's environment and working directory.
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::path::Path;

use scored_proto::exitcode;
use scored_proto::proto::{self, ProcRequest, Request, Submit, WireBytes};
use scored_proto::submit;
use scrun::cli::Invocation;
use scrun::pmi::Mode;

use crate::caller::Caller;
use crate::error::Fatal;

/// This process's working directory, the job's.
pub(crate) fn working_dir() -> Result<std::path::PathBuf, Fatal> {
    std::env::current_dir().map_err(|error| {
        Fatal::with_source(
            exitcode::INTERNAL,
            "cannot read the working directory",
            error,
        )
    })
}

/// The request for `invocation`, with this process's environment (in
/// order) and working directory.
pub fn build(invocation: &Invocation, caller: &Caller) -> Result<Request, Fatal> {
    let cwd = working_dir()?;
    let mut request = submit_request(invocation, std::env::vars_os(), &cwd);
    if let Request::Submit { submit, .. } = &mut request {
        submit.ignored_signals = caller.ignored_signals.clone();
        submit.rlimits = caller.rlimits.clone();
        submit.umask = caller.umask;
        submit.nice = caller.nice;
        submit.ioprio = caller.ioprio;
        // A batch job gets nothing of scrun's descriptors; with -pty the
        // job's standard descriptors are the terminal's.
        if !invocation.options.batch.detach {
            if !invocation.options.pty {
                submit.closed_stdio = caller.closed_stdio.clone();
            }
            submit.fds = caller.descriptors.clone();
        }
        match pmi_route(invocation)? {
            PmiRoute::None => {}
            PmiRoute::Descriptors(ranks) => submit.pmi_ranks = ranks,
            PmiRoute::Port(_) => submit.pmi_port = true,
        }
    }
    check_size(&request)?;
    check_rules(&request)?;
    Ok(request)
}

/// How a job's ranks reach scrun's PMI-1 and PMI-2 server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmiRoute {
    /// No PMI.
    None,
    /// A descriptor for each of this many ranks of each stage, sent with
    /// the submission.
    Descriptors(u32),
    /// PMI-1 at a loopback port (`PMI_PORT`): for stages of a size known
    /// only once placed (`-hosts=`, `None`) or of more ranks in all than
    /// descriptors can carry.
    Port(Option<u32>),
}

/// How the ranks reach the PMI server (`-mpi=auto`, `pmi1`, `pmi2`):
/// descriptors for a job whose rank count scrun knows (`-nodes=N`,
/// `-nodes=NxM`) within [`proto::MAX_PMI_FDS`] in all; with `auto` and
/// `pmi1`, PMI-1 by port for the others (`-hosts=H`, or more ranks);
/// none with `-mpi=none` or `-mpi=pmix`. `pmi2` says why it cannot
/// serve a job.
pub fn pmi_route(invocation: &Invocation) -> Result<PmiRoute, Fatal> {
    let mode = invocation.options.mpi;
    if !matches!(mode, Mode::Auto | Mode::Pmi1 | Mode::Pmi2) {
        return Ok(PmiRoute::None);
    }
    if matches!(mode, Mode::Auto | Mode::Pmi1) && !invocation.options.batch.detach {
        let stages = invocation.stages.len() as u64;
        match rank_count(invocation) {
            None => return Ok(PmiRoute::Port(None)),
            Some(ranks) if ranks * stages > proto::MAX_PMI_FDS as u64 => {
                return Ok(PmiRoute::Port(Some(ranks as u32)))
            }
            Some(_) => {}
        }
    }
    Ok(match known_ranks(invocation)? {
        0 => PmiRoute::None,
        ranks => PmiRoute::Descriptors(ranks),
    })
}

/// The ranks of each stage, if scrun knows them before placement.
fn rank_count(invocation: &Invocation) -> Option<u64> {
    match invocation.options.procs {
        ProcRequest::Nodes(n) => Some(u64::from(n)),
        ProcRequest::Grid { hosts, per_host } => Some(u64::from(hosts) * u64::from(per_host)),
        ProcRequest::Hosts(_) => None,
    }
}

/// The worlds a job's PMIx server registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmixWorlds {
    /// No PMIx server.
    None,
    /// Each stage a world of this many ranks.
    Ranks(u32),
    /// Each stage a world of as many ranks as scored places
    /// (`-hosts=H`), which it tells at admission.
    Placed,
}

/// The worlds a PMIx server registers (`-mpi=auto`, `pmix`): as for
/// [`pmi_ranks`], and those of a `-hosts=H` job once placed; none with
/// `pmi1`, `pmi2` or `none`.
pub fn pmix_worlds(invocation: &Invocation) -> Result<PmixWorlds, Fatal> {
    let mode = invocation.options.mpi;
    if !matches!(mode, Mode::Auto | Mode::Pmix) {
        return Ok(PmixWorlds::None);
    }
    if invocation.options.batch.detach {
        // No scrun stays to serve it: refused unless `auto`.
        return known_ranks(invocation).map(|_| PmixWorlds::None);
    }
    if let ProcRequest::Hosts(_) = invocation.options.procs {
        return Ok(PmixWorlds::Placed);
    }
    Ok(match known_ranks(invocation)? {
        0 => PmixWorlds::None,
        // A rank alone is a world of one without a server: `auto` spares
        // it the server.
        1 if mode == Mode::Auto => PmixWorlds::None,
        ranks => PmixWorlds::Ranks(ranks),
    })
}

/// The rank count of each stage, if the job's PMI can serve it: 0 where
/// it cannot and `-mpi=auto` leaves it at that, a usage error naming why
/// for any other mode.
fn known_ranks(invocation: &Invocation) -> Result<u32, Fatal> {
    let mode = invocation.options.mpi;
    if invocation.options.batch.detach {
        // No scrun stays to serve it.
        return match mode {
            Mode::Auto => Ok(0),
            _ => Err(Fatal::new(
                exitcode::USAGE,
                format!(
                    "-mpi={}: a batch job has no scrun to serve its ranks' PMI; \
                     run MPI programs without -batch",
                    mode.name()
                ),
            )),
        };
    }
    let refuse = |why: String| {
        if mode == Mode::Auto {
            Ok(0)
        } else {
            Err(Fatal::new(
                exitcode::USAGE,
                format!("-mpi={}: {why}", mode.name()),
            ))
        }
    };
    let Some(ranks) = rank_count(invocation) else {
        return refuse(
            "the number of ranks of a -hosts= job is known only once placed, and PMI-2 \
             needs it before: use -mpi=pmi1, -nodes=N or -nodes=NxM"
                .to_string(),
        );
    };
    let stages = invocation.stages.len() as u64;
    if ranks * stages > proto::MAX_PMI_FDS as u64 {
        return refuse(format!(
            "PMI serves at most {} ranks in all stages of a job, this one has {}",
            proto::MAX_PMI_FDS,
            ranks * stages
        ));
    }
    Ok(ranks as u32)
}

/// Refuses a request that breaks a rule of the submission validator, with
/// the words and status scored's refusal would have: the option parser
/// has applied the rules on single values already, and this applies them
/// all to what is about to be sent (the working directory, the inherited
/// signals, limits and umask).
pub fn check_rules(request: &Request) -> Result<(), Fatal> {
    let Request::Submit { submit, .. } = request else {
        return Ok(());
    };
    submit::check(submit)
        .map_err(|error| Fatal::new(exitcode::REJECTED, format!("job rejected: {error}")))
}

/// Assembles the request from its parts.
pub fn submit_request(
    invocation: &Invocation,
    env: impl IntoIterator<Item = (OsString, OsString)>,
    cwd: &Path,
) -> Request {
    let stages = invocation
        .stages
        .iter()
        .map(|stage| stage.iter().map(|word| WireBytes::from_os(word)).collect())
        .collect();
    let env = env
        .into_iter()
        .map(|(key, value)| (WireBytes::from_os(&key), WireBytes::from_os(&value)))
        .collect();
    Request::Submit {
        version: proto::VERSION,
        submit: Submit {
            stages,
            joiner: invocation.joiner,
            options: invocation.options.job_options(),
            env,
            cwd: WireBytes::from_os(cwd.as_os_str()),
            ignored_signals: Vec::new(),
            rlimits: Vec::new(),
            umask: None,
            nice: None,
            ioprio: None,
            closed_stdio: Vec::new(),
            fds: Vec::new(),
            pmi_ranks: 0,
            pmix_namespace: None,
            pmi_port: false,
        },
    }
}

/// Refuses a request that scored would refuse for its size, with a
/// message that says what to shrink.
pub fn check_size(request: &Request) -> Result<(), Fatal> {
    // The frame is the payload plus its 4-byte length; the limit counts the payload.
    let len = proto::encode(request).len().saturating_sub(4);
    if len > proto::MAX_REQUEST {
        return Err(Fatal::new(
            exitcode::USAGE,
            format!(
                "the job's arguments and environment take {len} bytes, over the limit of {}",
                proto::MAX_REQUEST
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStringExt;

    use super::*;
    use scrun::cli::{parse, Parsed};

    fn invocation(args: &[&str]) -> Invocation {
        match parse(args.iter().map(OsString::from), None) {
            Ok(Parsed::Run(invocation)) => invocation,
            other => panic!("not a run: {other:?}"),
        }
    }

    #[test]
    fn request_carries_stages_options_environment_and_cwd() {
        let env = vec![
            (OsString::from("B"), OsString::from("2")),
            (OsString::from("A"), OsString::from_vec(vec![0xff])),
        ];
        let request = submit_request(
            &invocation(&["-nodes=2,wait", "echo", "hi", "==", "cat"]),
            env,
            Path::new("/work"),
        );
        let Request::Submit { version, submit } = request else {
            panic!("not a submit");
        };
        assert_eq!(version, proto::VERSION);
        assert_eq!(
            submit.stages,
            vec![
                vec!["echo".into(), "hi".into()],
                vec![WireBytes::from("cat")]
            ]
        );
        assert_eq!(submit.joiner, proto::Joiner::Pipe);
        assert_eq!(submit.options.procs, proto::ProcRequest::Nodes(2));
        assert!(submit.options.wait);
        assert_eq!(
            submit.env,
            vec![
                ("B".into(), "2".into()),
                ("A".into(), WireBytes::Raw(vec![0xff]))
            ]
        );
        assert_eq!(submit.cwd, WireBytes::from("/work"));
    }

    #[test]
    fn a_request_scored_would_refuse_is_refused_in_its_words() {
        let good = submit_request(&invocation(&["true"]), Vec::new(), Path::new("/"));
        assert!(check_rules(&good).is_ok());
        let refused = |change: fn(&mut Submit)| {
            let mut request = good.clone();
            if let Request::Submit { submit, .. } = &mut request {
                change(submit);
            }
            let error = check_rules(&request).unwrap_err();
            assert_eq!(error.code(), exitcode::REJECTED);
            error.to_string()
        };
        assert_eq!(
            refused(|submit| submit.cwd = "work".into()),
            "job rejected: the working directory must be an absolute path"
        );
        assert_eq!(
            refused(|submit| submit.umask = Some(0o7777)),
            "job rejected: umask 7777 is not a file mode mask (0-777)"
        );
        assert_eq!(
            refused(|submit| submit.ignored_signals = vec![9]),
            "job rejected: signal 9 cannot be ignored"
        );
    }

    #[test]
    fn pmi_goes_to_each_rank_of_a_known_count_by_port_to_others_or_is_refused_when_asked() {
        let route = |args: &[&str]| pmi_route(&invocation(args)).map_err(|f| f.to_string());
        assert_eq!(route(&["-nodes=4", "a"]), Ok(PmiRoute::Descriptors(4)));
        assert_eq!(
            route(&["-nodes=2x3", "a", "::", "b"]),
            Ok(PmiRoute::Descriptors(6))
        );
        assert_eq!(route(&["-nodes=4,mpi=none", "a"]), Ok(PmiRoute::None));
        assert_eq!(route(&["-nodes=4,mpi=pmix", "a"]), Ok(PmiRoute::None));
        let pmix = |args: &[&str]| pmix_worlds(&invocation(args)).map_err(|f| f.to_string());
        assert_eq!(pmix(&["-nodes=4", "a"]), Ok(PmixWorlds::Ranks(4)));
        assert_eq!(pmix(&["-nodes=1", "a"]), Ok(PmixWorlds::None));
        assert_eq!(pmix(&["-nodes=1,mpi=pmix", "a"]), Ok(PmixWorlds::Ranks(1)));
        assert_eq!(pmix(&["-nodes=4,mpi=pmix", "a"]), Ok(PmixWorlds::Ranks(4)));
        assert_eq!(pmix(&["-nodes=4,mpi=pmi2", "a"]), Ok(PmixWorlds::None));
        assert_eq!(pmix(&["-nodes=4,mpi=none", "a"]), Ok(PmixWorlds::None));
        assert_eq!(pmix(&["-hosts=2", "a"]), Ok(PmixWorlds::Placed));
        assert_eq!(pmix(&["-hosts=2,mpi=pmix", "a"]), Ok(PmixWorlds::Placed));
        assert_eq!(pmix(&["-hosts=2,mpi=none", "a"]), Ok(PmixWorlds::None));
        assert_eq!(route(&["-hosts=2", "a"]), Ok(PmiRoute::Port(None)));
        assert_eq!(route(&["-hosts=2,mpi=pmi1", "a"]), Ok(PmiRoute::Port(None)));
        assert_eq!(route(&["-nodes=129", "a"]), Ok(PmiRoute::Port(Some(129))));
        assert_eq!(
            route(&["-nodes=65", "a", "::", "b"]),
            Ok(PmiRoute::Port(Some(65)))
        );
        assert_eq!(
            route(&["-hosts=2,batch", "a"]).map_err(|_| ()),
            Ok(PmiRoute::None)
        );
        assert_eq!(
            route(&["-hosts=2,mpi=pmi2", "a"]),
            Err("-mpi=pmi2: the number of ranks of a -hosts= job is known only once placed, and PMI-2 needs it before: use -mpi=pmi1, -nodes=N or -nodes=NxM".to_string())
        );
        assert_eq!(
            route(&["-nodes=65,mpi=pmi2", "a", "::", "b"]),
            Err(
                "-mpi=pmi2: PMI serves at most 128 ranks in all stages of a job, this one has 130"
                    .to_string()
            )
        );
    }

    #[test]
    fn oversized_request_is_refused_before_sending() {
        let small = submit_request(&invocation(&["true"]), Vec::new(), Path::new("/"));
        assert!(check_size(&small).is_ok());
        let huge = vec![(
            OsString::from("BIG"),
            OsString::from("x".repeat(proto::MAX_REQUEST)),
        )];
        let request = submit_request(&invocation(&["true"]), huge, Path::new("/"));
        let error = check_size(&request).unwrap_err();
        assert_eq!(error.code(), exitcode::USAGE);
        let message = error.to_string();
        assert!(
            message.starts_with("the job's arguments and environment take 10"),
            "{message}"
        );
        assert!(
            message.ends_with(", over the limit of 1048576"),
            "{message}"
        );
    }
}

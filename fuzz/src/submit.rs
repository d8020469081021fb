//! Property of the submission validator (`scored_proto::submit`), which turns a
//! `proto::Submit` from the wire into the core's `JobRequest`
//! (`JobRequest::try_from`) and which scrun runs before sending (`check`).
//!
//! A `Submit` rarely survives mutation as JSON, so this target builds one
//! straight from the bytes (see [`submit`]): every stage count, argument,
//! number and flag is a few input bytes, and a short input reads as zeros.
//!
//! Properties:
//! - the validator never panics, every refusal has a message, and `check`
//!   and `try_from` agree on every input;
//! - an accepted request keeps the stages, options and working directory,
//!   drops exactly the environment entries no process environment can
//!   hold (a NUL byte, an empty name, `=` in the name), has 1 to
//!   `MAX_STAGES` stages each with a non-empty program and no NUL byte,
//!   asks for 1 to `MAX_PROCS` processes, has no zero limit, and lays its
//!   processes out on hosts of any size;
//! - accepted ignored signals, limits and umask are valid (1-64 but not
//!   SIGKILL or SIGSTOP, soft at most hard, a mask of at most 0777);
//! - the `Submit` survives encoding and decoding as a protocol frame.
#![forbid(unsafe_code)]

use std::ffi::OsString;

use scored_core::job::{JobRequest, ProcRequest};
use scored_proto::proto::{
    self, JobOptions, Joiner, Request, Submit, WireBytes, MAX_PROCS, MAX_REQUEST, MAX_STAGES,
};

/// Checks the properties on one input; panics when one fails.
pub fn check(data: &[u8]) {
    let submit = submit(&mut Reader(data));
    let request = Request::Submit {
        version: proto::VERSION,
        submit: submit.clone(),
    };
    let mut frame = proto::encode(&request);
    if frame.len() - 4 <= MAX_REQUEST {
        assert_eq!(
            proto::decode::<Request>(&mut frame, MAX_REQUEST),
            Ok(Some(request)),
            "the submission does not survive encoding"
        );
    }
    let checked = scored_proto::submit::check(&submit);
    let job = match JobRequest::try_from(submit.clone()) {
        Ok(job) => {
            assert_eq!(checked, Ok(()), "check refuses what try_from accepts");
            job
        }
        Err(error) => {
            assert!(!error.to_string().is_empty(), "a refusal without a message");
            assert_eq!(checked, Err(error), "check and try_from disagree");
            return;
        }
    };
    let stages: Vec<Vec<OsString>> = submit
        .stages
        .iter()
        .map(|argv| argv.iter().map(WireBytes::to_os).collect())
        .collect();
    assert_eq!(job.stages, stages, "the stages changed");
    assert!(
        (1..=MAX_STAGES).contains(&job.stages.len()),
        "accepted {} stages",
        job.stages.len()
    );
    for argv in &submit.stages {
        assert!(
            argv.first()
                .is_some_and(|program| !program.as_bytes().is_empty()),
            "accepted a stage without a program: {argv:?}"
        );
        assert!(
            argv.iter().all(|arg| !arg.as_bytes().contains(&0)),
            "accepted an argument with a NUL byte: {argv:?}"
        );
    }
    assert_eq!(job.joiner, submit.joiner, "the joiner changed");
    let options = &submit.options;
    assert_eq!(
        (job.priority, job.wait, job.memory, job.disk),
        (options.priority, options.wait, options.memory, options.disk),
        "the options changed"
    );
    assert!(
        job.memory != Some(0) && job.disk != Some(0) && job.time.is_none_or(|t| !t.is_zero()),
        "accepted a zero limit: {options:?}"
    );
    assert_eq!(job.cwd, submit.cwd.to_os(), "the working directory changed");
    assert!(
        job.cwd.as_encoded_bytes().first() == Some(&b'/')
            && !job.cwd.as_encoded_bytes().contains(&0),
        "accepted working directory {:?}",
        job.cwd
    );
    let env: Vec<(OsString, OsString)> = submit
        .env
        .iter()
        .filter(|(key, value)| {
            let key = key.as_bytes();
            !key.is_empty()
                && !key.contains(&b'=')
                && !key.contains(&0)
                && !value.as_bytes().contains(&0)
        })
        .map(|(key, value)| (key.to_os(), value.to_os()))
        .collect();
    assert_eq!(job.env, env, "the environment changed");
    for &signal in &submit.ignored_signals {
        assert!(
            (1..=64).contains(&signal)
                && signal != 9
                && signal != 19
                && job.inherited.ignores(signal),
            "accepted ignored signal {signal}"
        );
    }
    assert_eq!(
        job.inherited.rlimits.len(),
        submit.rlimits.len(),
        "limits lost"
    );
    for (limit, &(_, soft, hard)) in submit.rlimits.iter().zip(&job.inherited.rlimits) {
        assert!(soft <= hard, "accepted {limit:?} with soft above hard");
    }
    assert!(
        job.inherited.umask.is_none_or(|mask| mask <= 0o777),
        "accepted umask {:?}",
        job.inherited.umask
    );
    assert!(
        job.inherited
            .nice
            .is_none_or(|nice| (-20..=19).contains(&nice)),
        "accepted nice {:?}",
        job.inherited.nice
    );
    assert!(
        submit.closed_stdio.iter().all(|fd| (0..=2).contains(fd))
            && submit.fds.windows(2).all(|pair| pair[0] < pair[1])
            && submit.fds.iter().all(|fd| *fd >= 3),
        "accepted descriptors {:?} {:?}",
        submit.closed_stdio,
        submit.fds
    );

    let procs = options.procs;
    let total = match procs {
        ProcRequest::Nodes(n) | ProcRequest::Hosts(n) => u64::from(n),
        ProcRequest::Grid { hosts, per_host } => u64::from(hosts) * u64::from(per_host),
    };
    assert_eq!(job.procs, procs, "the placement changed");
    assert!(
        (1..=MAX_PROCS).contains(&total),
        "accepted {total} processes"
    );
    let _ = procs.describe();
    for cores in [0, 1, 3, 4096] {
        let layout = procs.layout(cores).unwrap_or_else(|| {
            panic!(
                "{} cannot be laid out on hosts of {cores} cores",
                procs.describe()
            )
        });
        let placed: u64 = layout.iter().map(|&n| u64::from(n)).sum();
        let expected = match procs {
            ProcRequest::Hosts(hosts) => u64::from(hosts) * u64::from(cores.max(1)),
            _ => total,
        };
        assert_eq!(
            placed,
            expected,
            "{} on hosts of {cores} cores places {placed} processes",
            procs.describe()
        );
        assert!(
            layout
                .iter()
                .all(|&n| (1..=cores.max(1)).contains(&n)
                    || matches!(procs, ProcRequest::Grid { .. })),
            "{} on hosts of {cores} cores overfills a host: {layout:?}",
            procs.describe()
        );
    }
}

/// Reads the input front to back; past its end every byte is zero.
struct Reader<'d>(&'d [u8]);

impl Reader<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&byte, rest)) => {
                self.0 = rest;
                byte
            }
            None => 0,
        }
    }

    fn bool(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    /// A number: small ones from one byte, and the edges (0, the limits,
    /// `MAX`) reachable, since the interesting values sit there.
    fn u32(&mut self) -> u32 {
        match self.byte() {
            0xf0 => u32::MAX,
            0xf1 => MAX_PROCS as u32,
            0xf2 => MAX_PROCS as u32 + 1,
            0xf3 => 1 << 16 | 1,
            0xff => u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()]),
            small => u32::from(small),
        }
    }

    fn u64(&mut self) -> u64 {
        match self.byte() {
            0xf0 => u64::MAX,
            0xff => u64::from_le_bytes(std::array::from_fn(|_| self.byte())),
            small => u64::from(small),
        }
    }

    fn option<T>(&mut self, read: impl FnOnce(&mut Self) -> T) -> Option<T> {
        self.bool().then(|| read(self))
    }

    /// Bytes of up to 15, as text (replacing what is not UTF-8) or raw.
    fn wire(&mut self) -> WireBytes {
        let head = self.byte();
        let len = usize::from(head >> 4);
        let bytes: Vec<u8> = (0..len).map(|_| self.byte()).collect();
        if head & 1 == 1 {
            WireBytes::Raw(bytes)
        } else {
            WireBytes::Text(String::from_utf8_lossy(&bytes).into_owned())
        }
    }
}

/// Builds a submission from the reader.
fn submit(reader: &mut Reader<'_>) -> Submit {
    let n_stages = usize::from(reader.byte()) % (MAX_STAGES + 4);
    let stages = (0..n_stages)
        .map(|_| {
            let n_args = usize::from(reader.byte() % 5);
            (0..n_args).map(|_| reader.wire()).collect()
        })
        .collect();
    let joiner = if reader.bool() {
        Joiner::Pipe
    } else {
        Joiner::Sequence
    };
    let procs = match reader.byte() % 3 {
        0 => proto::ProcRequest::Nodes(reader.u32()),
        1 => proto::ProcRequest::Grid {
            hosts: reader.u32(),
            per_host: reader.u32(),
        },
        _ => proto::ProcRequest::Hosts(reader.u32()),
    };
    let options = JobOptions {
        procs,
        priority: reader.option(Reader::u32),
        wait: reader.bool(),
        memory: reader.option(Reader::u64),
        disk: reader.option(Reader::u64),
        pty: false,
        time_ms: reader.option(Reader::u64),
        batch: Default::default(),
    };
    let n_env = usize::from(reader.byte() % 8);
    let env = (0..n_env).map(|_| (reader.wire(), reader.wire())).collect();
    let cwd = reader.wire();
    // Read last, so that inputs saved before these fields existed decode
    // the rest as they did.
    let n_ignored = usize::from(reader.byte() % 4);
    let ignored_signals = (0..n_ignored)
        .map(|_| i32::from(reader.byte() as i8))
        .collect();
    let n_limits = usize::from(reader.byte() % 4);
    let rlimits = (0..n_limits)
        .map(|_| {
            let name = scored_proto::inherit::RLIMIT_NAMES;
            let pick = usize::from(reader.byte());
            proto::WireRlimit {
                resource: name.get(pick).map_or("bogus", |n| n).to_string(),
                soft: reader.option(Reader::u64),
                hard: reader.option(Reader::u64),
            }
        })
        .collect();
    let umask = reader.option(Reader::u32);
    let nice = reader.option(Reader::u32).map(|value| value as i32);
    let ioprio = reader.option(Reader::u32);
    let closed_stdio = (0..reader.byte() % 4)
        .map(|_| reader.u32() as i32)
        .collect();
    let fds = (0..reader.byte() % 4)
        .map(|_| reader.u32() as i32)
        .collect();
    let pmi_ranks = reader.u32() % 256;
    let pmix_namespace =
        reader.option(|reader| String::from_utf8_lossy(reader.wire().as_bytes()).into_owned());
    Submit {
        stages,
        joiner,
        options,
        env,
        cwd,
        ignored_signals,
        rlimits,
        umask,
        nice,
        ioprio,
        closed_stdio,
        fds,
        pmi_ranks,
        pmix_namespace,
        pmi_port: reader.byte() & 1 == 1,
    }
}

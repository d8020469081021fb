//! What `job ID` and `jobs` show of the jobs of the backlog.

use super::{Entry, JobId};
use crate::core::{Core, EndKind, Ending};
use crate::ids::Tick;
use crate::job::JobState;
use std::rc::Rc;
use std::time::Duration;

use crate::job::JobRequest;
use scored_proto::batch::{Dependency, Expansion};
use scored_proto::command::reply::Value;

impl Core {
    /// The `job ID` facts of element `k` of `entry`: those of an admitted
    /// job, with no cluster or hosts yet, and `reason` saying why it
    /// waits (or, once ended, `exit` and `reason`).
    pub(in crate::core) fn entry_fields(
        &self,
        entry: &Entry,
        k: u32,
        ending: Option<&Ending>,
        now: Tick,
        details: bool,
    ) -> Vec<(String, Value)> {
        let id = entry.id(k);
        let request = entry.request.as_deref();
        let queue = request.map_or(self.default_queue(), |request| self.queue_of(request));
        let state = match ending {
            Some(ending) if ending.kind == EndKind::Exited => JobState::Done,
            Some(_) => JobState::Killed,
            None => JobState::Waiting,
        };
        let procs = request.map_or(0, |request| match request.procs {
            crate::job::ProcRequest::Hosts(_) => 0,
            _ => u64::from(request.procs_total()),
        });
        let detail = |value: Value| if details { value } else { Value::None };
        let mut fields = vec![
            ("id".to_string(), Value::Uint(id.0)),
            ("user".into(), Value::text(&*entry.user)),
            ("uid".into(), Value::Uint(u64::from(entry.cred.uid))),
            ("state".into(), Value::text(state.as_str())),
            ("queue".into(), Value::Uint(u64::from(queue))),
            (
                "queues".into(),
                Value::List(vec![Value::Uint(u64::from(queue))]),
            ),
            ("cluster".into(), Value::None),
            ("hosts".into(), Value::List(Vec::new())),
            ("procs".into(), Value::Uint(procs)),
            ("command".into(), detail(Value::text(&*entry.command))),
            (
                "held".into(),
                Value::text(if entry.held { "by its owner" } else { "no" }),
            ),
            ("cpu".into(), Value::Duration(Duration::ZERO)),
            ("wall".into(), Value::Duration(Duration::ZERO)),
            ("run".into(), Value::Duration(Duration::ZERO)),
            ("stopped".into(), Value::Duration(Duration::ZERO)),
            (
                "wait".into(),
                Value::Duration(now.since(entry.submitted_at)),
            ),
            ("switches".into(), Value::Uint(0)),
            ("memory".into(), Value::Map(Vec::new())),
            ("peak memory".into(), Value::Map(Vec::new())),
            ("disk".into(), Value::Size(0)),
            ("peak disk".into(), Value::Size(0)),
            ("cputime limit".into(), Value::None),
            (
                "memory limit".into(),
                Value::opt(request.and_then(|request| request.memory).map(Value::Size)),
            ),
            (
                "disk limit".into(),
                Value::opt(request.and_then(|request| request.disk).map(Value::Size)),
            ),
            ("residency".into(), Value::Duration(Duration::ZERO)),
        ];
        let name = &*entry.name;
        let index = entry.submission.array_index(id);
        let with = Expansion {
            job: id.0,
            rank: None,
            index,
            name,
        };
        let output = &entry.submission.batch.output;
        fields.extend(batch_fields(
            name,
            entry.link.is_batch(),
            (
                output.stdout.as_ref().map(|pattern| pattern.expand(&with)),
                output.stderr_file().map(|pattern| pattern.expand(&with)),
            ),
            index.map(|index| (index, entry.first())),
            &entry.submission.batch.after,
            details,
        ));
        match ending {
            Some(ending) => {
                fields.push(("exit".into(), detail(Value::Int(i64::from(ending.status)))));
                fields.push(("reason".into(), detail(Value::text(&ending.reason))));
            }
            None => {
                // As `job ID` of an admitted job that waits says it.
                let why = entry.why();
                let waits = why.strip_prefix("waits ").unwrap_or(&why);
                fields.push(("waits".into(), Value::text(waits)));
                fields.push(("reason".into(), Value::text(&why)));
            }
        }
        fields
    }

    /// The queue a job of the backlog asks for, as `jobs` shows it.
    pub(in crate::core) fn entry_queue(&self, entry: &Entry) -> u32 {
        entry
            .request
            .as_deref()
            .map_or(self.default_queue(), |request| self.queue_of(request))
    }
}

/// The facts of a job's batch options, shared by `job ID` of admitted jobs
/// and of jobs of the backlog: `name`, `batch`, `output`, `error`, `array`
/// and `after`.
pub(in crate::core) fn batch_fields(
    name: &str,
    batch: bool,
    (output, error): (Option<String>, Option<String>),
    array: Option<(u32, JobId)>,
    after: &[Dependency],
    details: bool,
) -> Vec<(String, Value)> {
    let detail = |value: Option<String>| match value {
        Some(text) if details => Value::text(text),
        _ => Value::None,
    };
    vec![
        ("name".into(), Value::text(name)),
        ("batch".into(), Value::Bool(batch)),
        ("output".into(), detail(output)),
        ("error".into(), detail(error)),
        (
            "array".into(),
            Value::opt(array.map(|(_, first)| Value::Uint(first.0))),
        ),
        (
            "array index".into(),
            Value::opt(array.map(|(index, _)| Value::Uint(u64::from(index)))),
        ),
        (
            "after".into(),
            if after.is_empty() {
                Value::None
            } else {
                Value::text(
                    after
                        .iter()
                        .map(|dep| format!("{}={}", dep.option(), dep.job))
                        .collect::<Vec<_>>()
                        .join(","),
                )
            },
        ),
    ]
}

/// A submission's name: its `-name=`, or its program's.
pub(super) fn entry_name(request: &JobRequest) -> Rc<str> {
    match &request.batch.name {
        Some(name) => Rc::from(&**name),
        None => {
            let program = request
                .stages
                .first()
                .and_then(|argv| argv.first())
                .map_or(&[][..], |program| program.as_encoded_bytes());
            scored_proto::batch::default_name(program).into()
        }
    }
}

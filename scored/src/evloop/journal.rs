//! The loop's side of the job journal: the records the core hands back
//! after each event appended to it, and the console commands answered from
//! it (`history`, and `jobs all` and `job ID` of jobs no longer in memory),
//! and how the jobs a submission or a command names ended, for those the
//! core no longer remembers.

use super::Daemon;
use crate::actuator::Actuator;
use crate::journal::Journal;
use scored_core::ids::{Cred, Tick};
use scored_proto::command;
use scored_proto::proto::Reply;

impl<A: Actuator> Daemon<A> {
    /// Keeps the job journal: the core's job events are appended to it
    /// after each event, and `history`, `jobs all` and `job ID` read it.
    pub fn with_journal(mut self, journal: Journal) -> Daemon<A> {
        self.core.record_journal();
        self.journal = Some(journal);
        self
    }

    /// Appends what the core recorded to the journal. It runs after the
    /// actions of an event are carried out, so never between the stops and
    /// the continues of a switch.
    pub(super) fn write_journal(&mut self) {
        let Some(journal) = &mut self.journal else {
            return;
        };
        let events = self.core.take_journal();
        if events.is_empty() {
            return;
        }
        if journal.wants_rotation() {
            let now = Tick(self.start.elapsed().as_micros() as u64);
            let open = self.core.open_records(now);
            if let Err(error) = journal.rotate(self.core.next_job_id(), open) {
                tracing::error!(%error, "cannot rotate the job journal");
            }
        }
        if let Err(error) = journal.record(events) {
            tracing::error!(%error, "cannot write to the job journal");
        }
    }

    /// Answers the console commands that read the journal: `history`, and
    /// `jobs all` and `job ID` for jobs that ended before this daemon's
    /// memory of them. `None`: the core answers.
    pub(super) fn journal_command(
        &mut self,
        command: &command::Command,
        json: bool,
        now: Tick,
        cred: &Cred,
    ) -> Option<Reply> {
        let journal = self.journal.as_mut()?;
        let console = |reply: command::reply::Reply, json: bool| Reply::Console {
            ok: !reply.is_error(),
            text: reply.to_text(),
            json: json.then(|| reply.to_json()),
        };
        // The command, exit status and reason of another user's job are
        // shown only to root and operators, as `job ID` does.
        let operator = self.core.is_operator(cred);
        let may_see = |record: &serde_json::Value| {
            operator || record["uid"].as_u64() == Some(u64::from(cred.uid))
        };
        match command {
            command::Command::History { user, since } => {
                let uid = match user.as_deref().map(resolve_user) {
                    None => None,
                    Some(Ok(uid)) => Some(uid),
                    Some(Err(message)) => {
                        return Some(console(command::reply::Reply::error(message), json))
                    }
                };
                let (mut records, left_out) = journal.history(uid, *since);
                for record in &mut records {
                    if !may_see(record) {
                        crate::journal::redact(record);
                    }
                }
                let table = crate::journal::history_table(&records);
                let mut text = command::reply::Reply::Table(table).to_text();
                if left_out > 0 {
                    text.push_str(&crate::journal::left_out_note(left_out));
                }
                Some(Reply::Console {
                    ok: true,
                    text,
                    json: json.then(|| serde_json::Value::Array(records)),
                })
            }
            command::Command::Jobs { all: true, filter } => {
                let reply = self.core.jobs_table(cred, false, filter, now);
                let command::reply::Reply::Table(current) = reply else {
                    return None;
                };
                let mut table = command::reply::Table {
                    columns: current.columns.clone(),
                    rows: Vec::new(),
                };
                let keep = |record: &serde_json::Value| {
                    let text = |key: &str| record[key].as_str().unwrap_or_default().to_string();
                    let uid = record["uid"]
                        .as_u64()
                        .and_then(|uid| u32::try_from(uid).ok());
                    filter.matches(
                        &text("user"),
                        uid.unwrap_or(u32::MAX),
                        &text("name"),
                        &text("state"),
                    )
                };
                journal.recent_rows(&mut table, &may_see, &keep);
                table.rows.extend(current.rows);
                Some(console(command::reply::Reply::Table(table), json))
            }
            command::Command::Job(id) if !self.core.knows(scored_core::ids::JobId(*id)) => {
                let mut record = journal.ended(*id)?;
                if !may_see(&record) {
                    crate::journal::redact(&mut record);
                }
                Some(console(
                    command::reply::Reply::Record(crate::journal::record_fields(&record)),
                    json,
                ))
            }
            _ => None,
        }
    }
}

impl<A: Actuator> Daemon<A> {
    /// How the jobs `request` depends on ended, as the journal says, for
    /// those the core no longer knows: inputs to give before it.
    pub(super) fn known_ends(
        &mut self,
        request: &scored_core::job::JobRequest,
    ) -> Vec<scored_core::core::Input> {
        let unknown = self.core.unknown_ends(request);
        self.journaled_ends(unknown)
    }

    /// How the jobs a console command names (`kill`, `suspend`, `resume`,
    /// `move`) ended, as the journal says, for those the core no longer
    /// knows: inputs to give before it.
    pub(super) fn named_ends(
        &mut self,
        command: &command::Command,
    ) -> Vec<scored_core::core::Input> {
        let named: Vec<scored_core::ids::JobId> = match command {
            command::Command::Kill { jobs, .. } => jobs.clone(),
            command::Command::Suspend(job)
            | command::Command::Resume(job)
            | command::Command::Move { job, .. } => vec![*job],
            _ => Vec::new(),
        }
        .into_iter()
        .map(scored_core::ids::JobId)
        .filter(|job| !self.core.knows(*job))
        .collect();
        self.journaled_ends(named)
    }

    /// The journal's word on how each of `unknown` ended, as inputs.
    fn journaled_ends(
        &mut self,
        unknown: Vec<scored_core::ids::JobId>,
    ) -> Vec<scored_core::core::Input> {
        let Some(journal) = self.journal.as_mut() else {
            return Vec::new();
        };
        unknown
            .into_iter()
            .filter_map(|job| {
                let record = journal.ended(job.0)?;
                let state = record["state"].as_str().unwrap_or("killed");
                let status = record["exit"].as_i64().unwrap_or(-1);
                let outcome = if state == "done" && status == 0 {
                    scored_core::core::Outcome::Success
                } else {
                    let reason = record["reason"].as_str().unwrap_or("");
                    scored_core::core::Outcome::Failure(scored_core::core::cap_text(
                        format!("job {job} ended with status {status} ({reason})"),
                        200,
                    ))
                };
                let owner = record["uid"]
                    .as_u64()
                    .and_then(|uid| u32::try_from(uid).ok())?;
                Some(scored_core::core::Input::KnownEnd {
                    job,
                    owner,
                    outcome,
                })
            })
            .collect()
    }
}

/// The user `history --user` names (a name or a uid): its uid. The
/// error names the option, as `jobs --user` and `kill --user` do.
fn resolve_user(user: &str) -> Result<u32, String> {
    if let Ok(uid) = user.parse::<u32>() {
        return Ok(uid);
    }
    match nix::unistd::User::from_name(user) {
        Ok(Some(found)) => Ok(found.uid.as_raw()),
        Ok(None) => Err(format!("--user: no user named '{user}'")),
        Err(error) => Err(format!("--user: cannot look up user '{user}': {error}")),
    }
}

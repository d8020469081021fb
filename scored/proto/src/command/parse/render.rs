//! The canonical printer, the parser's inverse: parsing what [`render`]
//! prints gives the same command.
#![forbid(unsafe_code)]

use super::{format_utc, signal_name};
use crate::command::{ClusterRef, Command, GroupRef, JobFilter, QueueAction, Setting, Since};
use crate::units::{format_duration_exact, parse_percent};

/// Prints a command in canonical console syntax: single spaces, settings in
/// the order of the usage, sizes with the largest exact unit, durations with
/// [`format_duration_exact`], percentages with the fewest decimals that read
/// back to the same value, signals by name.
///
/// `parse_line(&render(c)) == Ok(Some(c.clone()))` holds for every command
/// `parse_line` can produce. Values it cannot produce (a `help` topic that is
/// not a command, a cluster name with blanks or of digits only, a percentage
/// outside 0–100 or with more than nine decimals, an empty settings list)
/// are printed as faithfully as the syntax allows, and the text is refused
/// when parsed.
pub fn render(command: &Command) -> String {
    match command {
        Command::Help(None) => "help".to_string(),
        Command::Help(Some(topic)) => format!("help {topic}"),
        Command::Status => "status".to_string(),
        Command::Hosts => "hosts".to_string(),
        Command::Clusters => "clusters".to_string(),
        Command::ClusterLimit { cluster, limits } => {
            let mut text = match cluster {
                ClusterRef::Index(idx) => format!("cluster {idx} limit"),
                ClusterRef::Name(name) => format!("cluster {name} limit"),
            };
            push_setting(&mut text, "memory", limits.memory, size_text);
            push_setting(&mut text, "disk", limits.disk, size_text);
            push_setting(&mut text, "jobs", limits.jobs, |jobs| jobs.to_string());
            text
        }
        Command::Queues => "queues".to_string(),
        Command::QueueState { queue, action } => {
            let action = match action {
                QueueAction::Enable => "enable",
                QueueAction::Disable => "disable",
                QueueAction::Activate => "activate",
                QueueAction::Deactivate => "deactivate",
            };
            format!("queue {queue} {action}")
        }
        Command::QueueSet { queue, settings } => {
            let mut text = format!("queue {queue} set");
            if let Some(mode) = settings.mode {
                text.push_str(" mode=");
                text.push_str(mode.as_str());
            }
            push_setting(
                &mut text,
                "cputime",
                settings.cputime,
                format_duration_exact,
            );
            push_setting(
                &mut text,
                "residency",
                settings.residency,
                format_duration_exact,
            );
            push_setting(&mut text, "memory", settings.memory, percent_text);
            push_setting(&mut text, "disk", settings.disk, percent_text);
            push_setting(
                &mut text,
                "group",
                settings.group.clone(),
                |group| match group {
                    GroupRef::Name(name) => name,
                    GroupRef::Gid(gid) => gid.to_string(),
                },
            );
            if let Some(backfill) = settings.backfill {
                text.push_str(if backfill {
                    " backfill=on"
                } else {
                    " backfill=off"
                });
            }
            push_setting(&mut text, "mpl", settings.mpl, |level| level.to_string());
            if let Some(share) = settings.share {
                text.push_str(" share=");
                text.push_str(share.as_str());
            }
            push_setting(
                &mut text,
                "fairshare",
                settings.fairshare,
                format_duration_exact,
            );
            text
        }
        Command::Jobs { all, filter } => {
            let mut text = "jobs".to_string();
            if *all {
                text.push_str(" all");
            }
            push_filter(&mut text, filter);
            text
        }
        Command::Job(job) => format!("job {job}"),
        Command::Kill {
            jobs,
            filter,
            signal,
        } => {
            let mut text = "kill".to_string();
            if let Some(signal) = signal {
                text.push_str(" -s ");
                text.push_str(&signal_name(*signal));
            }
            for job in jobs {
                text.push_str(&format!(" {job}"));
            }
            push_filter(&mut text, filter);
            text
        }
        Command::Suspend(job) => format!("suspend {job}"),
        Command::Resume(job) => format!("resume {job}"),
        Command::Move { job, queue } => format!("move {job} {queue}"),
        Command::Timeslice(None) => "timeslice".to_string(),
        Command::Timeslice(Some(duration)) => {
            format!("timeslice {}", format_duration_exact(*duration))
        }
        Command::History { user, since } => {
            let mut text = "history".to_string();
            if let Some(user) = user {
                text.push_str(" --user ");
                text.push_str(user);
            }
            match since {
                Some(Since::Ago(duration)) => {
                    text.push_str(" --since ");
                    text.push_str(&format_duration_exact(*duration));
                }
                Some(Since::Unix(secs)) => {
                    text.push_str(" --since ");
                    text.push_str(&format_utc(*secs));
                }
                None => {}
            }
            text
        }
        Command::Restart => "restart".to_string(),
        Command::Shutdown { now: false } => "shutdown".to_string(),
        Command::Shutdown { now: true } => "shutdown now".to_string(),
    }
}

/// Appends ` key=value` or ` key=none`, or nothing when the setting is absent.
/// Appends `--user U --name N --state S`, the parts given.
fn push_filter(text: &mut String, filter: &JobFilter) {
    for (option, value) in [
        ("--user", &filter.user),
        ("--name", &filter.name),
        ("--state", &filter.state),
    ] {
        if let Some(value) = value {
            text.push_str(&format!(" {option} {value}"));
        }
    }
}

fn push_setting<T>(
    text: &mut String,
    key: &str,
    setting: Option<Setting<T>>,
    show: impl FnOnce(T) -> String,
) {
    let value = match setting {
        None => return,
        Some(Setting::Clear) => "none".to_string(),
        Some(Setting::Set(value)) => show(value),
    };
    text.push(' ');
    text.push_str(key);
    text.push('=');
    text.push_str(&value);
}

/// A byte count with the largest unit that divides it exactly (`4G`,
/// `1536K`, `4097`), so the text reads back to the same number.
fn size_text(bytes: u64) -> String {
    const UNITS: [(&str, u32); 4] = [("T", 40), ("G", 30), ("M", 20), ("K", 10)];
    for (suffix, shift) in UNITS {
        if bytes != 0 && bytes % (1u64 << shift) == 0 {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// A percentage with the fewest decimals (at most nine, the most
/// `parse_percent` reads) that `parse_percent` turns back into the same
/// `f64`. `parse_percent` computes `whole + frac / 10^digits`, which is not
/// always the correctly rounded value of the text, so the shortest
/// round-tripping float text (`{}`) could read back one bit off; trying it
/// through the parser itself is the only reliable test.
fn percent_text(pct: f64) -> String {
    for digits in 0..=9 {
        let text = format!("{pct:.digits$}%");
        if parse_percent(&text) == Ok(pct) {
            return text;
        }
    }
    format!("{pct}%")
}

//! Figures of a replay: waits, bounded slowdowns, utilisation, makespan,
//! for all jobs and per queue, as text, JSON and one CSV row per job.
//!
//! Definitions (seconds): wait = start − submit; bounded slowdown =
//! (end − submit) / max(run, 10), which is (wait + run) / max(run, 10)
//! when a job runs without being stopped; the median of an even number
//! of values is the mean of the two middle ones; the 95th percentile is
//! the nearest rank (the ⌈0.95 n⌉-th smallest); makespan = last end −
//! first submission; utilisation = Σ processes × run / (processor slots
//! × makespan). Per-queue figures group jobs by the queue they were
//! submitted to, and share the machine's makespan. Per-user figures group
//! the jobs whose user the trace names (field 12); user fairness is Jain's
//! index of the users' mean bounded slowdowns, (Σx)² / (n Σx²), in (0, 1]:
//! 1 when every user's jobs are slowed alike, 1/n when one user's alone are.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{json, Map, Value};

use super::{JobOutcome, Outcome};

/// The figures of one group of jobs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Figures {
    /// Jobs replayed.
    pub jobs: usize,
    /// Mean wait.
    pub mean_wait: f64,
    /// Median wait.
    pub median_wait: f64,
    /// 95th percentile of the wait.
    pub p95_wait: f64,
    /// Mean bounded slowdown (τ = 10 s).
    pub mean_bounded_slowdown: f64,
    /// Busy share of the machine.
    pub utilisation: f64,
}

/// The figures of a replay.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Report {
    /// All jobs.
    pub all: Figures,
    /// Per queue the jobs were submitted to.
    pub queues: BTreeMap<u32, Figures>,
    /// Per user the trace names: jobs, mean wait, mean bounded slowdown.
    pub users: BTreeMap<i64, Figures>,
    /// Jain's index of the users' mean bounded slowdowns (`None` without
    /// users).
    pub user_fairness: Option<f64>,
    /// Jobs skipped, by reason.
    pub skipped: BTreeMap<String, usize>,
    /// Number of jobs skipped.
    pub n_skipped: usize,
    /// Last end − first submission.
    pub makespan: f64,
    /// Switches the core made.
    pub switches: u64,
    /// Processor slots.
    pub slots: u64,
}

/// Computes the figures of `outcome`.
pub fn report(outcome: &Outcome) -> Report {
    let first = outcome
        .jobs
        .iter()
        .map(|job| job.submit)
        .fold(f64::INFINITY, f64::min);
    let last = outcome
        .jobs
        .iter()
        .map(|job| job.end)
        .fold(f64::NEG_INFINITY, f64::max);
    let makespan = if outcome.jobs.is_empty() {
        0.0
    } else {
        last - first
    };
    let capacity = outcome.slots as f64 * makespan;
    let figures = |jobs: &[&JobOutcome]| -> Figures {
        if jobs.is_empty() {
            return Figures::default();
        }
        let n = jobs.len() as f64;
        let mut waits: Vec<f64> = jobs.iter().map(|job| job.wait()).collect();
        waits.sort_by(f64::total_cmp);
        let busy: f64 = jobs.iter().map(|job| f64::from(job.procs) * job.run).sum();
        Figures {
            jobs: jobs.len(),
            mean_wait: waits.iter().sum::<f64>() / n,
            median_wait: median(&waits),
            p95_wait: nearest_rank(&waits, 0.95),
            mean_bounded_slowdown: jobs.iter().map(|job| job.bounded_slowdown()).sum::<f64>() / n,
            utilisation: if capacity > 0.0 { busy / capacity } else { 0.0 },
        }
    };
    let all: Vec<&JobOutcome> = outcome.jobs.iter().collect();
    let mut by_queue: BTreeMap<u32, Vec<&JobOutcome>> = BTreeMap::new();
    for job in &outcome.jobs {
        by_queue.entry(job.queue).or_default().push(job);
    }
    let mut by_user: BTreeMap<i64, Vec<&JobOutcome>> = BTreeMap::new();
    for job in &outcome.jobs {
        if let Some(user) = job.user {
            by_user.entry(user).or_default().push(job);
        }
    }
    let users: BTreeMap<i64, Figures> = by_user
        .iter()
        .map(|(user, jobs)| (*user, figures(jobs)))
        .collect();
    let slowdowns: Vec<f64> = users
        .values()
        .map(|figures| figures.mean_bounded_slowdown)
        .collect();
    let mut skipped = BTreeMap::new();
    for skip in &outcome.skipped {
        // Group "rejected: ..." reasons by their first clause.
        let key = skip.reason.split(':').take(2).collect::<Vec<_>>().join(":");
        *skipped.entry(key).or_insert(0) += 1;
    }
    Report {
        all: figures(&all),
        queues: by_queue
            .iter()
            .map(|(queue, jobs)| (*queue, figures(jobs)))
            .collect(),
        users,
        user_fairness: jain(&slowdowns),
        skipped,
        n_skipped: outcome.skipped.len(),
        makespan,
        switches: outcome.switches,
        slots: outcome.slots,
    }
}

/// Jain's index of `values`: (Σx)² / (n Σx²); `None` without values.
fn jain(values: &[f64]) -> Option<f64> {
    let sum: f64 = values.iter().sum();
    let squares: f64 = values.iter().map(|value| value * value).sum();
    (squares > 0.0).then(|| sum * sum / (values.len() as f64 * squares))
}

fn median(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

fn nearest_rank(sorted: &[f64], share: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (share * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Figures {
    fn json(&self) -> Map<String, Value> {
        let mut map = Map::new();
        map.insert("jobs".into(), json!(self.jobs));
        map.insert("mean_wait".into(), json!(self.mean_wait));
        map.insert("median_wait".into(), json!(self.median_wait));
        map.insert("p95_wait".into(), json!(self.p95_wait));
        map.insert(
            "mean_bounded_slowdown".into(),
            json!(self.mean_bounded_slowdown),
        );
        map.insert("utilisation".into(), json!(self.utilisation));
        map
    }
}

impl Report {
    /// One JSON object: the figures of all jobs, `skipped`, `makespan`,
    /// `switches`, and `queues` with the same figures per queue.
    pub fn to_json(&self) -> Value {
        let mut map = self.all.json();
        map.insert("skipped".into(), json!(self.n_skipped));
        map.insert("skipped_reasons".into(), json!(self.skipped));
        map.insert("makespan".into(), json!(self.makespan));
        map.insert("switches".into(), json!(self.switches));
        let mut queues = Map::new();
        for (queue, figures) in &self.queues {
            let mut entry = figures.json();
            entry.insert("skipped".into(), json!(0));
            entry.insert("makespan".into(), json!(self.makespan));
            queues.insert(queue.to_string(), Value::Object(entry));
        }
        map.insert("queues".into(), Value::Object(queues));
        let mut users = Map::new();
        for (user, figures) in &self.users {
            let mut entry = Map::new();
            entry.insert("jobs".into(), json!(figures.jobs));
            entry.insert("mean_wait".into(), json!(figures.mean_wait));
            entry.insert(
                "mean_bounded_slowdown".into(),
                json!(figures.mean_bounded_slowdown),
            );
            users.insert(user.to_string(), Value::Object(entry));
        }
        map.insert("users".into(), Value::Object(users));
        map.insert("user_fairness".into(), json!(self.user_fairness));
        Value::Object(map)
    }

    /// The report as text, one `key: value` line per figure, then a table
    /// per queue.
    pub fn to_text(&self) -> String {
        let mut text = String::new();
        let _ = writeln!(text, "jobs replayed: {}", self.all.jobs);
        let _ = writeln!(text, "skipped: {}", self.n_skipped);
        for (reason, count) in &self.skipped {
            let _ = writeln!(text, "  {count} {reason}");
        }
        let _ = writeln!(text, "mean wait: {}", secs(self.all.mean_wait));
        let _ = writeln!(text, "median wait: {}", secs(self.all.median_wait));
        let _ = writeln!(text, "p95 wait: {}", secs(self.all.p95_wait));
        let _ = writeln!(
            text,
            "mean bounded slowdown: {:.3}",
            self.all.mean_bounded_slowdown
        );
        let _ = writeln!(text, "utilisation: {:.2}%", self.all.utilisation * 100.0);
        let _ = writeln!(text, "makespan: {}", secs(self.makespan));
        let _ = writeln!(text, "switches: {}", self.switches);
        if let Some(fairness) = self.user_fairness {
            let _ = writeln!(
                text,
                "user fairness: {fairness:.3} ({} users)",
                self.users.len()
            );
        }
        let _ = writeln!(
            text,
            "\n{:>5}  {:>7}  {:>11}  {:>11}  {:>11}  {:>9}  {:>11}",
            "queue", "jobs", "mean wait", "median wait", "p95 wait", "mean bsld", "utilisation"
        );
        for (queue, figures) in &self.queues {
            let _ = writeln!(
                text,
                "{:>5}  {:>7}  {:>11}  {:>11}  {:>11}  {:>9.3}  {:>10.2}%",
                queue,
                figures.jobs,
                secs(figures.mean_wait),
                secs(figures.median_wait),
                secs(figures.p95_wait),
                figures.mean_bounded_slowdown,
                figures.utilisation * 100.0
            );
        }
        text
    }
}

fn secs(value: f64) -> String {
    format!("{value:.1}s")
}

/// The jobs as CSV: a header, then one row per job in trace order.
pub fn jobs_csv(outcome: &Outcome) -> String {
    let mut jobs: Vec<&JobOutcome> = outcome.jobs.iter().collect();
    jobs.sort_by_key(|job| job.number);
    let mut text = String::from("id,submit,start,end,wait,run,slowdown,queues,ending\n");
    for job in jobs {
        let queues: Vec<String> = job.queues.iter().map(u32::to_string).collect();
        let _ = writeln!(
            text,
            "{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.4},{},{}",
            job.number,
            job.submit,
            job.start,
            job.end,
            job.wait(),
            job.run,
            job.bounded_slowdown(),
            queues.join(";"),
            csv_field(&job.ending)
        );
    }
    text
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(number: i64, submit: f64, start: f64, run: f64) -> JobOutcome {
        JobOutcome {
            number,
            procs: 1,
            queue: 1,
            user: Some(number % 2),
            queues: vec![1],
            submit,
            start,
            end: start + run,
            run,
            ending: "done".into(),
        }
    }

    #[test]
    fn definitions() {
        let outcome = Outcome {
            jobs: vec![
                job(1, 0.0, 0.0, 100.0),
                job(2, 0.0, 100.0, 5.0),
                job(3, 10.0, 105.0, 20.0),
                job(4, 20.0, 20.0, 10.0),
            ],
            slots: 2,
            ..Outcome::default()
        };
        let report = report(&outcome);
        assert_eq!(report.all.jobs, 4);
        assert_eq!(report.all.mean_wait, (0.0 + 100.0 + 95.0 + 0.0) / 4.0);
        assert_eq!(report.all.median_wait, (0.0 + 95.0) / 2.0);
        assert_eq!(report.all.p95_wait, 100.0);
        // (100/100 + 105/10 + 115/20 + 10/10) / 4
        assert_eq!(
            report.all.mean_bounded_slowdown,
            (1.0 + 10.5 + 5.75 + 1.0) / 4.0
        );
        assert_eq!(report.makespan, 125.0);
        assert_eq!(report.all.utilisation, 135.0 / 250.0);
        // Users 1 (jobs 1, 3) and 0 (jobs 2, 4): slowdowns (1 + 5.75) / 2
        // and (10.5 + 1) / 2; Jain's index of the two.
        let (odd, even) = (6.75 / 2.0, 11.5 / 2.0);
        assert_eq!(report.users[&1].mean_bounded_slowdown, odd);
        assert_eq!(report.users[&0].mean_bounded_slowdown, even);
        assert_eq!(report.users[&0].jobs, 2);
        let jain = (odd + even) * (odd + even) / (2.0 * (odd * odd + even * even));
        assert_eq!(report.user_fairness, Some(jain));
        let json = report.to_json();
        assert_eq!(json["users"]["1"]["jobs"], 2);
        assert_eq!(json["user_fairness"], jain);
        let csv = jobs_csv(&outcome);
        assert!(csv.starts_with("id,submit,start,end,wait,run,slowdown,queues,ending\n1,0.000,0.000,100.000,0.000,100.000,1.0000,1,done\n"), "{csv}");
    }
}

//! Replays of small traces whose answers are worked out by hand, and
//! properties of the replay clock.

use proptest::prelude::*;

use super::metrics::report;
use super::*;

/// Five jobs on 4 processors (number, submit, run, procs, requested):
/// 1: 0 100 2 100; 2: 10 50 4 50; 3: 20 60 2 60; 4: 30 30 1 30;
/// 5: 40 200 2 200.
const FIVE: &str = "\
; MaxProcs: 4
1 0 -1 100 2 -1 -1 2 100 -1 1 1 1 1 1 -1 -1 -1
2 10 -1 50 4 -1 -1 4 50 -1 1 1 1 1 1 -1 -1 -1
3 20 -1 60 2 -1 -1 2 60 -1 1 1 1 1 1 -1 -1 -1
4 30 -1 30 1 -1 -1 1 30 -1 1 1 1 1 1 -1 -1 -1
5 40 -1 200 2 -1 -1 2 200 -1 1 1 1 1 1 -1 -1 -1
";

fn replay(text: &str, n_hosts: u32, rc: &str) -> Outcome {
    let (trace, errors) = swf::parse(text.lines());
    assert!(errors.is_empty(), "{errors:?}");
    let mut setup = Setup::new(uniform_machine(n_hosts, 1 << 30));
    setup.rc = Some(("test.rc".into(), rc.into()));
    run(&trace, &setup, &mut |_, _| {}).expect("replay")
}

/// The replay as [`run`] makes it and stepped through every slice
/// boundary, each without its count of boundaries passed over, and the
/// count of the first.
fn repeated_and_stepped(text: &str, n_hosts: u32, rc: &str) -> (Outcome, Outcome, u64) {
    let (trace, errors) = swf::parse(text.lines());
    assert!(errors.is_empty(), "{errors:?}");
    let mut setup = Setup::new(uniform_machine(n_hosts, 1 << 30));
    setup.rc = Some(("test.rc".into(), rc.into()));
    let repeated = run(&trace, &setup, &mut |_, _| {}).expect("replay");
    let stepped = super::replay(&trace, &setup, &mut |_, _| {}, false).expect("replay");
    assert_eq!(stepped.repeated, 0);
    let count = repeated.repeated;
    (
        Outcome {
            repeated: 0,
            ..repeated
        },
        stepped,
        count,
    )
}

/// (number, start, end) of every job, in trace order.
fn starts(outcome: &Outcome) -> Vec<(i64, f64, f64)> {
    let mut rows: Vec<(i64, f64, f64)> = outcome
        .jobs
        .iter()
        .map(|job| (job.number, job.start, job.end))
        .collect();
    rows.sort_by_key(|row| row.0);
    rows
}

const FCFS: &str = "queue 1 set mode=exclusive\n";
const EASY: &str = "queue 1 set mode=exclusive backfill=on\n";

#[test]
fn five_jobs_first_come_first_served() {
    let outcome = replay(FIVE, 4, FCFS);
    // Job 2 needs the whole machine and waits for job 1; everything waits
    // behind it; at 150 jobs 3 and 4 start, job 5 when job 4 ends.
    assert_eq!(
        starts(&outcome),
        vec![
            (1, 0.0, 100.0),
            (2, 100.0, 150.0),
            (3, 150.0, 210.0),
            (4, 150.0, 180.0),
            (5, 180.0, 380.0)
        ]
    );
    let report = report(&outcome);
    assert_eq!(report.all.mean_wait, 96.0);
    assert_eq!(report.all.median_wait, 120.0);
    assert_eq!(report.all.p95_wait, 140.0);
    assert!((report.all.mean_bounded_slowdown - 13.666_666_666_666_666 / 5.0).abs() < 1e-9);
    assert_eq!(report.makespan, 380.0);
    assert!((report.all.utilisation - 950.0 / 1520.0).abs() < 1e-12);
    assert_eq!(outcome.switches, 0);
}

/// [`FIVE`] as jobs of two users (field 12): 7 for jobs 1, 3 and 5, 8 for
/// 2 and 4.
fn two_users() -> String {
    FIVE.lines()
        .map(|line| {
            let mut fields: Vec<&str> = line.split(' ').collect();
            if !line.starts_with(';') {
                fields[11] = if fields[0].parse::<u32>().is_ok_and(|n| n % 2 == 1) {
                    "7"
                } else {
                    "8"
                };
            }
            fields.join(" ") + "\n"
        })
        .collect()
}

/// The five jobs of two users (field 12: 7 for jobs 1, 3 and 5, 8 for 2
/// and 4), first come first served: per user its jobs, mean wait and mean
/// bounded slowdown, and Jain's index of the two slowdowns.
#[test]
fn figures_per_user_and_their_fairness() {
    let report = report(&replay(&two_users(), 4, FCFS));
    // Slowdowns: 100/100, 140/50, 190/60, 150/30, 340/200.
    let seven = (1.0 + 190.0 / 60.0 + 340.0 / 200.0) / 3.0;
    let eight = (140.0 / 50.0 + 150.0 / 30.0) / 2.0;
    assert_eq!(report.users.len(), 2);
    assert_eq!(report.users[&7].jobs, 3);
    assert_eq!(report.users[&8].jobs, 2);
    assert_eq!(report.users[&7].mean_wait, (0.0 + 130.0 + 140.0) / 3.0);
    assert_eq!(report.users[&8].mean_wait, (90.0 + 120.0) / 2.0);
    assert!((report.users[&7].mean_bounded_slowdown - seven).abs() < 1e-9);
    assert!((report.users[&8].mean_bounded_slowdown - eight).abs() < 1e-9);
    let jain = (seven + eight).powi(2) / (2.0 * (seven * seven + eight * eight));
    let fairness = report.user_fairness.expect("two users");
    assert!((fairness - jain).abs() < 1e-9, "{fairness} against {jain}");
    assert!(fairness < 1.0);
    let json = report.to_json();
    assert_eq!(json["users"]["8"]["jobs"], 2);
    assert!(json["user_fairness"].as_f64().is_some());
    // One user: perfectly fair.
    assert_eq!(
        super::metrics::report(&replay(FIVE, 4, FCFS)).user_fairness,
        Some(1.0)
    );
}

/// Eight jobs on 4 processors, gang scheduled with 1 s slices that cost
/// 0.25 s, and residency demotion after 5 s of CPU time: six jobs sink to
/// queue 2 while short ones finish in queue 1. The figures are pinned so
/// that a cheaper way to reach a scheduling decision cannot change what
/// the decision is.
#[test]
fn gang_with_residency_demotion_is_pinned() {
    const EIGHT: &str = "\
; MaxProcs: 4
1 0 -1 40 2 -1 -1 2 60 -1 1 1 1 1 1 -1 -1 -1
2 1 -1 3 1 -1 -1 1 10 -1 1 1 1 1 1 -1 -1 -1
3 2 -1 30 4 -1 -1 4 60 -1 1 1 1 1 1 -1 -1 -1
4 3 -1 8 1 -1 -1 1 10 -1 1 1 1 1 1 -1 -1 -1
5 5 -1 20 3 -1 -1 3 30 -1 1 1 1 1 1 -1 -1 -1
6 9 -1 2 2 -1 -1 2 10 -1 1 1 1 1 1 -1 -1 -1
7 12 -1 15 1 -1 -1 1 20 -1 1 1 1 1 1 -1 -1 -1
8 20 -1 4 4 -1 -1 4 10 -1 1 1 1 1 1 -1 -1 -1
";
    let (trace, errors) = swf::parse(EIGHT.lines());
    assert!(errors.is_empty(), "{errors:?}");
    let mut setup = Setup::new(uniform_machine(4, 1 << 30));
    setup.switch_cost = Duration::from_millis(250);
    setup.rc = Some((
        "test.rc".into(),
        "timeslice 1s\nqueue 1 set residency=5s\n".into(),
    ));
    let outcome = run(&trace, &setup, &mut |_, _| {}).expect("replay");
    assert_eq!(
        metrics::jobs_csv(&outcome),
        "\
id,submit,start,end,wait,run,slowdown,queues,ending
1,0.000,0.000,138.500,0.000,40.000,3.4625,1;2,done
2,1.000,1.000,7.750,0.000,3.000,0.6750,1,done
3,2.000,2.250,130.750,0.250,30.000,4.2917,1;2,done
4,3.000,3.250,15.250,0.250,8.000,1.2250,1;2,done
5,5.000,6.250,102.750,1.250,20.000,4.8875,1;2,done
6,9.000,9.250,12.500,0.250,2.000,0.3500,1,done
7,12.000,12.250,76.500,0.250,15.000,4.3000,1;2,done
8,20.000,20.250,38.000,0.250,4.000,1.8000,1;2,done
"
    );
    assert_eq!(outcome.switches, 118);
}

#[test]
fn five_jobs_easy_backfilling() {
    let outcome = replay(FIVE, 4, EASY);
    // Job 2 is reserved at 100 (when job 1 ends); job 3 ends by then and
    // backfills at 20; job 4 at 80 would end at 110 and take a host the
    // reservation needs, so it waits; job 2 starts at 100 as reserved.
    assert_eq!(
        starts(&outcome),
        vec![
            (1, 0.0, 100.0),
            (2, 100.0, 150.0),
            (3, 20.0, 80.0),
            (4, 150.0, 180.0),
            (5, 150.0, 350.0)
        ]
    );
    let report = report(&outcome);
    assert_eq!(report.all.mean_wait, 64.0);
    assert!((report.all.mean_bounded_slowdown - 11.35 / 5.0).abs() < 1e-9);
    assert_eq!(report.makespan, 350.0);
}

#[test]
fn a_job_that_asked_for_no_time_backfills_as_a_job_of_no_length() {
    // Job 2 is reserved at 100. Job 3 requested 0 s and ran 0 s: its
    // estimate is 0 (1 ms), so it backfills at once. Job 4 requested
    // nothing (-1): it has no estimate, cannot be shown to end by the
    // reservation, and waits for job 2.
    let trace = "\
1 0 -1 100 2 -1 -1 2 100 -1 1 1 1 1 1 -1 -1 -1
2 10 -1 50 4 -1 -1 4 50 -1 1 1 1 1 1 -1 -1 -1
3 20 -1 0 2 -1 -1 2 0 -1 1 1 1 1 1 -1 -1 -1
4 30 -1 0 2 -1 -1 2 -1 -1 1 1 1 1 1 -1 -1 -1
";
    let outcome = replay(trace, 4, EASY);
    assert_eq!(
        starts(&outcome),
        vec![
            (1, 0.0, 100.0),
            (2, 100.0, 150.0),
            (3, 20.0, 20.0),
            (4, 150.0, 150.0)
        ]
    );
}

#[test]
fn gang_time_sharing_stretches_jobs_by_the_slices_they_wait() {
    // Two full-width jobs of 10 s on one gang queue with 1 s slices: they
    // alternate, and each ends after about twice its run time.
    let trace = "\
1 0 -1 10 2 -1 -1 2 -1 -1 1 1 1 1 1 -1 -1 -1
2 0 -1 10 2 -1 -1 2 -1 -1 1 1 1 1 1 -1 -1 -1
";
    let outcome = replay(trace, 2, "timeslice 1s\n");
    let rows = starts(&outcome);
    assert_eq!(rows[0].1, 0.0);
    assert_eq!(rows[1].1, 1.0, "job 2 starts at the first slice boundary");
    assert_eq!(rows[0].2, 19.0);
    assert_eq!(rows[1].2, 20.0);
    assert!(outcome.switches >= 18, "{}", outcome.switches);
}

#[test]
fn replayed_as_its_users_a_trace_shares_a_host_by_user() {
    // One host, four jobs of 10 s: three of user 7, one of user 8. As root
    // the lone job has one slice in four; as its user, one in two.
    let trace = "\
1 0 -1 10 1 -1 -1 1 -1 -1 1 7 1 1 1 -1 -1 -1
2 0 -1 10 1 -1 -1 1 -1 -1 1 7 1 1 1 -1 -1 -1
3 0 -1 10 1 -1 -1 1 -1 -1 1 7 1 1 1 -1 -1 -1
4 0 -1 10 1 -1 -1 1 -1 -1 1 8 1 1 1 -1 -1 -1
";
    let lone_end = |as_users: bool, rc: &str| {
        let (trace, errors) = swf::parse(trace.lines());
        assert!(errors.is_empty(), "{errors:?}");
        let mut setup = Setup::new(uniform_machine(1, 1 << 30));
        setup.rc = Some(("test.rc".into(), rc.into()));
        setup.as_users = as_users;
        let outcome = run(&trace, &setup, &mut |_, _| {}).expect("replay");
        starts(&outcome)[3].2
    };
    let by_user = lone_end(true, "timeslice 1s\n");
    assert!(by_user <= 21.0, "the lone user's job ended at {by_user} s");
    let as_root = lone_end(false, "timeslice 1s\n");
    assert!(as_root >= 34.0, "as root, it ended at {as_root} s");
    let by_job = lone_end(true, "timeslice 1s\nqueue 1 set share=job\n");
    assert_eq!(by_job, as_root, "share=job replays as root does");
}

#[test]
fn the_switch_cost_delays_the_entering_job() {
    let trace = "\
1 0 -1 10 1 -1 -1 1 -1 -1 1 1 1 1 1 -1 -1 -1
2 0 -1 10 1 -1 -1 1 -1 -1 1 1 1 1 1 -1 -1 -1
";
    let (parsed, _) = swf::parse(trace.lines());
    let mut setup = Setup::new(uniform_machine(1, 1 << 30));
    setup.timeslice = Duration::from_secs(1);
    setup.switch_cost = Duration::from_millis(100);
    let outcome = run(&parsed, &setup, &mut |_, _| {}).expect("replay");
    let rows = starts(&outcome);
    assert_eq!(
        rows[1].1, 1.1,
        "job 2 enters once job 1's stop is confirmed"
    );
    // 20 s of work and about 19 switches of 100 ms each.
    assert!(rows[1].2 > 21.5 && rows[1].2 < 22.5, "{rows:?}");
}

/// Repeating whole periods of the gang rotation between events changes
/// nothing a replay reports (every job's start and end, the switches, the
/// decisions, the timeline), with and without a multiprogramming level and
/// with `-time` limits met exactly; and it does pass over most of the
/// slice boundaries.
#[test]
fn repeating_rotation_periods_changes_no_figure() {
    for (seed, rc) in [
        (1, "queue 1 set mode=gang\n"),
        (2, "queue 1 set mode=gang mpl=3\n"),
        (3, "timeslice 2s\n"),
    ] {
        let model = generate::Model {
            jobs: 300,
            procs: 32,
            load: 0.95,
            seed,
        };
        let text = generate::to_swf(&model, &generate::generate(&model));
        let (repeated, stepped, count) = repeated_and_stepped(&text, 32, rc);
        assert_eq!(repeated, stepped, "seed {seed}, {rc:?}");
        assert!(
            repeated.switches > 0 && count > repeated.switches / 2,
            "seed {seed}: {} switches, {count} boundaries repeated",
            repeated.switches,
        );
    }
}

#[test]
fn jobs_that_cannot_be_replayed_are_skipped_with_the_reason() {
    let trace = "\
1 0 -1 10 8 -1 -1 8 -1 -1 1 1 1 1 1 -1 -1 -1
2 0 -1 -1 1 -1 -1 1 -1 -1 1 1 1 1 1 -1 -1 -1
3 0 -1 10 -1 -1 -1 -1 -1 -1 1 1 1 1 1 -1 -1 -1
4 0 -1 0 1 -1 -1 1 -1 -1 1 1 1 1 1 -1 -1 -1
5 -1 -1 10 1 -1 -1 1 -1 -1 1 1 1 1 1 -1 -1 -1
";
    let outcome = replay(trace, 4, "");
    let reasons: Vec<(i64, String)> = outcome
        .skipped
        .iter()
        .map(|skip| (skip.number, skip.reason.clone()))
        .collect();
    assert_eq!(
        reasons,
        vec![
            (2, "unknown run time".to_string()),
            (3, "unknown processor count".to_string()),
            (5, "unknown submit time".to_string()),
            (
                1,
                "rejected: nodes=8 needs 8 hosts with 1 process each, but cluster replay has 4 hosts with 1 core"
                    .to_string()
            ),
        ]
    );
    // A job of no run time is replayed: it starts and ends at once.
    assert_eq!(starts(&outcome), vec![(4, 0.0, 0.0)]);
}

#[test]
fn a_picture_that_cannot_be_written_names_its_file() {
    let outcome = replay(FIVE, 4, FCFS);
    let dir = std::env::temp_dir().join(format!("sc_replay-plot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("missing").join("replay.svg");
    let error = plot::draw(&outcome, &path).expect_err("no such directory");
    assert_eq!(error.path, path);
    assert!(
        error
            .to_string()
            .starts_with(&format!("cannot draw {}: ", path.display())),
        "{error}"
    );
    std::fs::create_dir_all(&dir).expect("temporary directory");
    let path = dir.join("replay.svg");
    plot::draw(&outcome, &path).expect("drawn");
    let svg = std::fs::read_to_string(&path).expect("written");
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(100)]);
    std::fs::remove_dir_all(&dir).expect("cleaned up");
}

/// The picture draws each user's mean bounded slowdown, a bar a user
/// labelled with its number, and the users' fairness in the caption.
#[test]
fn the_picture_draws_each_users_slowdown() {
    let outcome = replay(&two_users(), 4, FCFS);
    let fairness = report(&outcome).user_fairness.expect("two users");
    let dir = std::env::temp_dir().join(format!("sc_replay-users-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    let path = dir.join("replay.svg");
    plot::draw(&outcome, &path).expect("drawn");
    let svg = std::fs::read_to_string(&path).expect("written");
    std::fs::remove_dir_all(&dir).expect("cleaned up");
    let caption = format!(
        "mean bounded slowdown by user, most jobs first (2 of 2 users; fairness, Jain: {fairness:.3})"
    );
    let panel = svg
        .split_once(&caption)
        .unwrap_or_else(|| panic!("no {caption:?} in the picture"))
        .1;
    for user in ["7", "8"] {
        assert!(
            panel.contains(&format!(">\n{user}\n</text>")),
            "no label of user {user}"
        );
    }
    // A bar a user, user 7 (three jobs) first; user 8's mean (3.9) is
    // higher than user 7's (1.96), so its bar is taller.
    let heights: Vec<u32> = panel
        .split("<rect ")
        .skip(1)
        .map(|rect| {
            let at = rect.find("height=\"").expect("a height") + 8;
            rect[at..]
                .split('"')
                .next()
                .unwrap_or("")
                .parse()
                .expect("a number")
        })
        .collect();
    assert_eq!(heights.len(), 2, "{heights:?}");
    assert!(heights[0] < heights[1], "{heights:?}");
}

#[test]
fn rc_errors_name_the_file_and_line() {
    let (trace, _) = swf::parse(FIVE.lines());
    let mut setup = Setup::new(uniform_machine(4, 1 << 30));
    setup.rc = Some((
        "policy.rc".into(),
        "queue 1 set mode=exclusive\nqueue 9 set mode=gang\nshutdown\n".into(),
    ));
    let error = run(&trace, &setup, &mut |_, _| {}).expect_err("bad rc");
    assert!(
        matches!(&error, ReplayError::Rc(errors) if errors.len() == 2),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "policy.rc:2: no queue 9: queues are 0 to 2\npolicy.rc:3: shutdown cannot be used in a start-up script"
    );
}

#[test]
fn a_deactivated_queue_is_reported_not_looped_on() {
    let (trace, _) = swf::parse(FIVE.lines());
    let mut setup = Setup::new(uniform_machine(4, 1 << 30));
    setup.rc = Some(("x.rc".into(), "queue 1 deactivate\n".into()));
    let error = run(&trace, &setup, &mut |_, _| {}).expect_err("stuck");
    assert_eq!(
        error,
        ReplayError::Stuck {
            jobs: 5,
            examples: vec![1, 2, 3, 4, 5]
        }
    );
    assert_eq!(
        error.to_string(),
        "5 jobs can never run (for example trace jobs 1, 2, 3, 4, 5): is a queue deactivated by the rc file?"
    );
}

fn random_trace(jobs: &[(u32, u32, u32, u32)]) -> String {
    let mut text = String::new();
    let mut submit = 0;
    for (idx, (gap, run, procs, slack)) in jobs.iter().enumerate() {
        submit += gap;
        text.push_str(&format!(
            "{} {submit} -1 {run} {procs} -1 -1 {procs} {} -1 1 1 1 1 1 -1 -1 -1\n",
            idx + 1,
            run + slack
        ));
    }
    text
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// An exclusive queue without backfill replays exactly first come,
    /// first served: jobs start in submission order, each runs its run
    /// time without a stop, and no job starts later than it could.
    #[test]
    fn exclusive_without_backfill_is_exactly_fcfs(
        jobs in proptest::collection::vec((0u32..50, 0u32..100, 1u32..=4, 0u32..50), 1..30),
    ) {
        let outcome = replay(&random_trace(&jobs), 4, FCFS);
        prop_assert_eq!(outcome.jobs.len(), jobs.len());
        let rows = starts(&outcome);
        // An independent FCFS: each job starts at the earliest time at or
        // after its submission and the previous job's start at which
        // enough processors are free.
        let mut running: Vec<(f64, u32)> = Vec::new();
        let mut previous = 0.0f64;
        // The replay counts time from the first submission.
        let mut submit = -f64::from(jobs[0].0);
        for (idx, (gap, run, procs, _)) in jobs.iter().enumerate() {
            submit += f64::from(*gap);
            let mut at = submit.max(previous);
            loop {
                let busy: u32 = running.iter().filter(|(end, _)| *end > at).map(|(_, n)| n).sum();
                if busy + procs <= 4 { break; }
                at = running.iter().map(|(end, _)| *end).filter(|end| *end > at).fold(f64::INFINITY, f64::min);
            }
            running.push((at + f64::from(*run), *procs));
            previous = at;
            prop_assert_eq!(rows[idx].1, at, "job {} start", idx + 1);
            prop_assert_eq!(rows[idx].2, at + f64::from(*run), "job {} end", idx + 1);
        }
        prop_assert_eq!(outcome.switches, 0);
    }

    /// With or without backfill, and in gang queues, the clock only moves
    /// forward, every job runs exactly its work, and the machine is never
    /// busier than it has processors.
    #[test]
    fn replays_conserve_work(
        jobs in proptest::collection::vec((0u32..50, 0u32..100, 1u32..=4, 0u32..50), 1..20),
        policy in 0usize..3,
    ) {
        let rc = [FCFS, EASY, "timeslice 5s\n"][policy];
        let outcome = replay(&random_trace(&jobs), 4, rc);
        prop_assert_eq!(outcome.jobs.len(), jobs.len());
        for job in &outcome.jobs {
            prop_assert!(job.start >= job.submit);
            prop_assert!(job.end - job.start >= job.run - 1e-6);
            if policy < 2 {
                prop_assert!((job.end - job.start - job.run).abs() < 1e-6, "exclusive jobs run unstopped");
            }
        }
        let report = report(&outcome);
        prop_assert!(report.all.utilisation <= 1.0 + 1e-9);
    }

    /// Gang replays give the same outcome whether whole rotation periods
    /// are repeated at once or every slice is stepped through.
    #[test]
    fn repeated_rotation_periods_are_the_stepped_ones(
        jobs in proptest::collection::vec((0u32..50, 0u32..100, 1u32..=4, 0u32..3), 1..20),
        policy in 0usize..3,
    ) {
        let rc = ["queue 1 set mode=gang\n", "timeslice 1s\n", "queue 1 set mode=gang mpl=3\n"][policy];
        let (repeated, stepped, _) = repeated_and_stepped(&random_trace(&jobs), 4, rc);
        prop_assert_eq!(repeated, stepped);
    }
}

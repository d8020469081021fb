//! The stop's timeouts, on a clock that moves only when the test moves
//! it, and signals to a job still being launched. The job's one rank is
//! a `sleep` the test starts itself (the actuator's own fork refuses a
//! test harness's threads), recorded as the actuator records a rank it
//! forked.

use std::cell::Cell;
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::super::{
    cgroup::Cgroups, statedir, ActuatorConfig, Child, Clock, JobProcs, OsActuator, SwitchedOutHold,
    CONFIRM_FALLBACK, FREEZE_AFTER, STOP_TIMEOUT,
};
use crate::actuator::Actuator;
use scored_core::cluster::Topology;
use scored_core::core::Input;
use scored_core::ids::JobId;

/// A clock that stands still until `advance`.
#[derive(Clone)]
struct FakeClock(Rc<Cell<Instant>>);

impl FakeClock {
    fn advance(&self, by: Duration) {
        self.0.set(self.0.get() + by);
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Instant {
        self.0.get()
    }
}

/// A rank of job 1 that sleeps: the actuator, its clock, the process.
struct Fixture {
    actuator: OsActuator,
    clock: FakeClock,
    rank: std::process::Child,
    state_dir: PathBuf,
}

const JOB: JobId = JobId(1);

impl Fixture {
    fn new(name: &str) -> Fixture {
        let state_dir =
            std::env::temp_dir().join(format!("scored-stop-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&state_dir);
        let clock = FakeClock(Rc::new(Cell::new(Instant::now())));
        let config = ActuatorConfig {
            state_dir: state_dir.clone(),
            use_cgroups: false,
            job_nofile: None,
            keeper_wait: std::time::Duration::from_secs(60),
        };
        let mut actuator =
            OsActuator::with_clock(config, &Topology::default(), Box::new(clock.clone()))
                .expect("an actuator on a fresh state directory");
        // The leader of a process group of its own, as a rank is.
        let rank = std::os::unix::process::CommandExt::process_group(
            &mut std::process::Command::new("sleep"),
            0,
        )
        .arg("60")
        .spawn()
        .expect("sleep starts");
        let pid = rank.id() as i32;
        actuator.children.insert(
            pid,
            Child {
                job: JOB,
                stage: 0,
                rank: 0,
                slot: 0,
                start: 0,
            },
        );
        actuator.jobs.insert(
            JOB,
            JobProcs {
                groups: HashMap::from([(pid, 0)]),
                children: BTreeSet::from([pid]),
                extras: HashMap::new(),
                members: HashMap::new(),
                member_cursor: 0,
                stop_wait: None,
                drain: None,
                reaped_cpu: Duration::ZERO,
                discovered_at: Some(clock.now()),
                listed_at: None,
                reaped_peak: vec![0],
                exe_bytes: 0,
                seen_exes: BTreeSet::new(),
                scratch: state_dir.join("jobs/1"),
                disk_walk: statedir::DiskWalk::default(),
                cgroup_procs: None,
                pids_procs: None,
                cgroup_clean: false,
                uid: 0,
                hold: SwitchedOutHold::default(),
                launch: None,
                launch_failed: false,
                over_limit: false,
                execs_in_flight: 0,
                lost: None,
            },
        );
        Fixture {
            actuator,
            clock,
            rank,
            state_dir,
        }
    }

    fn pid(&self) -> i32 {
        self.rank.id() as i32
    }

    /// Waits (in real time, 10 s at most) until /proc shows the rank
    /// stopped, or running again.
    fn wait_until_stopped(&self, stopped: bool) {
        let started = Instant::now();
        while super::procfs::read_stat(self.pid()).is_none_or(|stat| stat.is_stopped() != stopped) {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the rank never became {}",
                if stopped { "stopped" } else { "running" }
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn poll(&mut self) -> Vec<Input> {
        let mut out = Vec::new();
        self.actuator.poll(self.clock.now(), &mut out);
        out
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.rank.kill();
        let _ = self.rank.wait();
        let _ = std::fs::remove_dir_all(&self.state_dir);
    }
}

/// A rank that wait4 has not reported stopped is taken as stopped on
/// /proc's word only once the fallback delay has passed on the
/// actuator's clock, however long ago in real time it stopped.
#[test]
fn a_stop_is_confirmed_through_proc_once_the_fallback_delay_has_passed() {
    let mut fixture = Fixture::new("fallback");
    let mut out = Vec::new();
    fixture.actuator.stop(JOB, &mut out);
    assert_eq!(out, []);
    fixture.wait_until_stopped(true);
    assert_eq!(fixture.poll(), [], "confirmed before the fallback delay");
    fixture
        .clock
        .advance(CONFIRM_FALLBACK - Duration::from_millis(1));
    assert_eq!(fixture.poll(), [], "confirmed before the fallback delay");
    fixture.clock.advance(Duration::from_millis(1));
    assert_eq!(fixture.poll(), [Input::Stopped(JOB)]);
    assert_eq!(fixture.actuator.pending_stops(), 0);
}

/// A rank continued from outside right after its stop never confirms
/// it: the job's stop fails once the stop timeout has passed on the
/// actuator's clock, not before, naming how many processes ran on.
#[test]
fn a_stop_not_confirmed_within_the_stop_timeout_fails_the_job() {
    let mut fixture = Fixture::new("timeout");
    let mut out = Vec::new();
    fixture.actuator.stop(JOB, &mut out);
    fixture.wait_until_stopped(true);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(fixture.pid()),
        nix::sys::signal::Signal::SIGCONT,
    )
    .expect("SIGCONT to our own child");
    fixture.wait_until_stopped(false);
    fixture.clock.advance(CONFIRM_FALLBACK);
    assert_eq!(fixture.poll(), []);
    fixture
        .clock
        .advance(STOP_TIMEOUT - CONFIRM_FALLBACK - Duration::from_millis(1));
    assert_eq!(fixture.poll(), [], "failed before the stop timeout");
    assert_eq!(fixture.actuator.pending_stops(), 1);
    fixture.clock.advance(Duration::from_millis(1));
    let out = fixture.poll();
    assert_eq!(
        out,
        [Input::StopFailed {
            job: JOB,
            reason: "1 of its processes did not stop within 5s of being switched out \
                     (something kept continuing them, or they could not stop)"
                .to_string(),
        }]
    );
    assert_eq!(fixture.actuator.pending_stops(), 0);
}

/// Whether the daemon freezes a job whose stop it has not seen taken
/// within `FREEZE_AFTER`, after the job was sent SIGKILL (`kill`) or not.
/// The job's rank is in a freezer cgroup of its own, and the job's signals
/// reach no process (none is in its process groups), as those of a rank
/// given no CPU, or waiting in the kernel, reach it late: `None` where no
/// freezer cgroup can be made (not root).
fn frozen_for_its_stop(name: &str, kill: bool) -> Option<bool> {
    let mut fixture = Fixture::new(name);
    let cgroups = Cgroups::create(&fixture.state_dir)?;
    let (join, _) = cgroups.add_job(JOB).expect("the job's cgroup");
    let dir = cgroups.base().join("job-1");
    std::fs::write(dir.join("cgroup.procs"), fixture.pid().to_string()).expect("join the cgroup");
    let procs = fixture.actuator.jobs.get_mut(&JOB).expect("the job");
    procs.groups.clear();
    procs.cgroup_procs = Some(join);
    fixture.actuator.cgroups = Some(cgroups);
    let mut out = Vec::new();
    fixture.actuator.stop(JOB, &mut out);
    if kill {
        fixture.actuator.signal(JOB, libc::SIGKILL);
    }
    fixture.clock.advance(FREEZE_AFTER);
    fixture.poll();
    let frozen = super::super::cgroup::freeze_asked(&dir);
    // Thawed, the rank dies with the fixture, and the cgroups go.
    let _ = std::fs::write(dir.join("freezer.state"), "THAWED");
    let _ = std::fs::write(dir.join("cgroup.freeze"), "0");
    let base = fixture
        .actuator
        .cgroups
        .take()
        .map(|cgroups| cgroups.base().to_path_buf());
    drop(fixture);
    let started = Instant::now();
    while std::fs::remove_dir(&dir).is_err() && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    if let Some(base) = base {
        let _ = std::fs::remove_dir(base);
    }
    Some(frozen)
}

/// A job whose stop is not seen taken in time is frozen, unless it is
/// being killed: a process frozen before it acted on its SIGKILL never
/// acts on it, and the job would never end.
#[test]
fn a_job_being_killed_is_not_frozen_for_a_stop_it_did_not_take() {
    let Some(unkilled) = frozen_for_its_stop("unkilled", false) else {
        println!("skipped: no freezer cgroup can be made here");
        return;
    };
    assert!(unkilled, "a stop not taken in time froze nothing");
    assert_eq!(
        frozen_for_its_stop("killed", true),
        Some(false),
        "a job sent SIGKILL was frozen"
    );
}

/// Waits (in real time, 10 s at most) for `child` to end, and says how.
fn ended(child: &mut std::process::Child) -> Option<std::process::ExitStatus> {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

/// A signal asked for a job while its keeper is still creating its
/// ranks reaches the ranks known then at once, and a rank the keeper
/// reports afterwards as it is reported: scrun passes a ^C on as soon as
/// it hears of the start, which comes before the processes exist.
#[test]
fn a_signal_during_a_launch_reaches_the_ranks_created_after_it() {
    use std::os::unix::process::ExitStatusExt;
    let mut fixture = Fixture::new("launch-signal");
    fixture.actuator.jobs.get_mut(&JOB).expect("the job").launch =
        Some(super::super::launch::LaunchInProgress::adopted(&(
            0,
            vec!["sleep".to_string()],
            "/".to_string(),
        )));
    fixture.actuator.signal(JOB, libc::SIGUSR1);
    assert_eq!(
        ended(&mut fixture.rank).and_then(|status| status.signal()),
        Some(libc::SIGUSR1),
        "the rank known at the signal"
    );
    let mut late = std::os::unix::process::CommandExt::process_group(
        &mut std::process::Command::new("sleep"),
        0,
    )
    .arg("60")
    .spawn()
    .expect("sleep starts");
    fixture
        .actuator
        .rank_spawned(JOB, late.id() as i32, 0, 0, 1, 0);
    let status = ended(&mut late);
    if status.is_none() {
        let _ = late.kill();
        let _ = late.wait();
    }
    assert_eq!(
        status.and_then(|status| status.signal()),
        Some(libc::SIGUSR1),
        "the rank reported after the signal"
    );
}

/// Right after the switch's signals, a rank /proc shows stopped confirms
/// the stop without its keeper's answer; one running again does not.
#[test]
fn a_stop_the_kernel_carried_out_is_confirmed_by_a_look_right_after_the_signals() {
    let mut fixture = Fixture::new("look");
    let mut out = Vec::new();
    fixture.actuator.stop(JOB, &mut out);
    fixture.wait_until_stopped(true);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(fixture.pid()),
        nix::sys::signal::Signal::SIGCONT,
    )
    .expect("SIGCONT to our own child");
    fixture.wait_until_stopped(false);
    fixture.actuator.await_stops(Duration::ZERO, &mut out);
    assert_eq!(out, [], "a running rank confirmed by a look");
    assert_eq!(fixture.actuator.pending_stops(), 1);
    // The same switch again, the rank stopped by the time of the look.
    fixture.actuator.cont(JOB);
    fixture.actuator.stop(JOB, &mut out);
    fixture.wait_until_stopped(true);
    fixture.actuator.await_stops(Duration::ZERO, &mut out);
    assert_eq!(out, [Input::Stopped(JOB)]);
    assert_eq!(fixture.actuator.pending_stops(), 0);
}

/// The keeper hears of a stop once the switch is over (or before scored
/// waits for its answer), and always before anything scored tells it
/// next, so that it sees every stop and continue in the order scored
/// made them.
#[test]
fn the_keeper_hears_of_a_stop_after_its_signals_and_before_what_follows() {
    use crate::keeper::{socket_pair, ToKeeper};
    let mut fixture = Fixture::new("told");
    let (ours, keeper) = socket_pair().expect("a socket pair");
    fixture
        .actuator
        .keepers
        .links
        .insert(JOB, super::super::keepers::Link::new(ours, true));
    let mut buffer = vec![0u8; crate::keeper::MAX_MESSAGE];
    let mut heard = || told(&keeper, &mut buffer);
    let mut out = Vec::new();
    fixture.actuator.stop(JOB, &mut out);
    assert_eq!(heard(), [], "told before the switch is over");
    fixture.actuator.cont(JOB);
    assert_eq!(heard(), [ToKeeper::Stop(1), ToKeeper::Continue(2)]);
    fixture.actuator.stop(JOB, &mut out);
    assert_eq!(heard(), []);
    fixture.actuator.settled();
    assert_eq!(heard(), [ToKeeper::Stop(3)]);
    fixture.actuator.cont(JOB);
    assert_eq!(heard(), [ToKeeper::Continue(4)]);
}

/// A keeper with a notes pipe (and stops told on its link) reads each
/// continue there, written before the SIGCONT and waking nobody, and
/// hears of it on the link once the switch is over; a stop still to be
/// told sends the continue on the link first, in order.
#[test]
fn a_continue_is_noted_on_the_pipe_before_its_signals_and_told_after_the_switch() {
    use crate::keeper::{receive, socket_pair, ToKeeper, NOTES_PROTOCOL};
    use std::os::fd::AsFd;
    let mut fixture = Fixture::new("noted");
    let (ours, keeper) = socket_pair().expect("a socket pair");
    let mut link = super::super::keepers::Link::new(ours, true);
    link.open_notes(NOTES_PROTOCOL, &fixture.actuator.exec_watch, JOB);
    fixture.actuator.keepers.links.insert(JOB, link);
    let mut buffer = vec![0u8; crate::keeper::MAX_MESSAGE];
    let mut notes = None;
    let mut heard = |notes: &mut Option<std::os::fd::OwnedFd>| -> Vec<ToKeeper> {
        let mut messages = Vec::new();
        while let Some((message, fds)) =
            receive::<ToKeeper>(keeper.as_fd(), &mut buffer).expect("the link reads")
        {
            if message == ToKeeper::Notes {
                *notes = fds.into_iter().next();
            }
            messages.push(message);
        }
        messages
    };
    let noted = |notes: &Option<std::os::fd::OwnedFd>| -> Vec<u64> {
        serials(
            notes
                .as_ref()
                .expect("the notes pipe came with its message"),
        )
    };
    assert_eq!(heard(&mut notes), [ToKeeper::Notes]);
    let mut out = Vec::new();
    fixture.actuator.stop(JOB, &mut out);
    fixture.wait_until_stopped(true);
    fixture.actuator.await_stops(Duration::ZERO, &mut out);
    fixture.actuator.settled();
    assert_eq!(heard(&mut notes), [ToKeeper::Stop(1)]);
    fixture.actuator.cont(JOB);
    assert_eq!(noted(&notes), [2], "noted before the rank could continue");
    assert_eq!(heard(&mut notes), [], "told on the link during the switch");
    fixture.wait_until_stopped(false);
    fixture.actuator.settled();
    assert_eq!(heard(&mut notes), [ToKeeper::Continue(2)]);
    // A stop not told yet: the continue goes on the link first, after it.
    fixture.actuator.stop(JOB, &mut out);
    fixture.actuator.cont(JOB);
    assert_eq!(noted(&notes), Vec::<u64>::new());
    assert_eq!(
        heard(&mut notes),
        [ToKeeper::Stop(3), ToKeeper::Continue(4)]
    );
    // A continue noted, then a stop in the same event: told in order.
    fixture.wait_until_stopped(false);
    fixture.actuator.stop(JOB, &mut out);
    fixture.actuator.settled();
    fixture.actuator.cont(JOB);
    assert_eq!(noted(&notes), [6]);
    fixture.actuator.stop(JOB, &mut out);
    fixture.actuator.settled();
    assert_eq!(
        heard(&mut notes),
        [ToKeeper::Stop(5), ToKeeper::Continue(6), ToKeeper::Stop(7)]
    );
}

/// A stop /proc confirmed during the switch is told to the keeper once
/// the switch is over, since no answer is awaited; a stop still awaited
/// is told before scored waits for the answer.
#[test]
fn only_an_awaited_stop_is_told_to_the_keeper_during_the_switch() {
    use crate::keeper::{socket_pair, ToKeeper};
    let mut fixture = Fixture::new("awaited");
    let (ours, keeper) = socket_pair().expect("a socket pair");
    fixture
        .actuator
        .keepers
        .links
        .insert(JOB, super::super::keepers::Link::new(ours, true));
    let mut buffer = vec![0u8; crate::keeper::MAX_MESSAGE];
    let mut heard = || told(&keeper, &mut buffer);
    let mut out = Vec::new();
    fixture.actuator.stop(JOB, &mut out);
    fixture.wait_until_stopped(true);
    fixture.actuator.await_stops(Duration::ZERO, &mut out);
    assert_eq!(out, [Input::Stopped(JOB)]);
    assert_eq!(heard(), [], "told though /proc confirmed the stop");
    fixture.actuator.settled();
    assert_eq!(heard(), [ToKeeper::Stop(1)]);
    // A rank running again when scored looks: its keeper's answer is
    // awaited, and the keeper hears of the stop first.
    fixture.actuator.cont(JOB);
    assert_eq!(heard(), [ToKeeper::Continue(2)]);
    out.clear();
    fixture.actuator.stop(JOB, &mut out);
    fixture.wait_until_stopped(true);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(fixture.pid()),
        nix::sys::signal::Signal::SIGCONT,
    )
    .expect("SIGCONT to our own child");
    fixture.wait_until_stopped(false);
    fixture.actuator.await_stops(Duration::ZERO, &mut out);
    assert_eq!(out, []);
    assert_eq!(heard(), [ToKeeper::Stop(3)]);
}

/// Gives the fixture's job as many more ranks as there are CPUs, each a
/// `sleep` leading a group of its own: a stop of it only its keeper's
/// answer confirms.
fn more_ranks_than_cpus(fixture: &mut Fixture) -> Vec<std::process::Child> {
    let mut others = Vec::new();
    for _ in 0..super::online_cpus() {
        let rank = std::os::unix::process::CommandExt::process_group(
            &mut std::process::Command::new("sleep"),
            0,
        )
        .arg("60")
        .spawn()
        .expect("sleep starts");
        let pid = rank.id() as i32;
        let procs = fixture.actuator.jobs.get_mut(&JOB).expect("the job");
        procs.groups.insert(pid, 0);
        procs.children.insert(pid);
        others.push(rank);
    }
    others
}

/// A stop of more ranks than there are CPUs, which only its keeper's
/// answer confirms, is told to a keeper of the notes protocol on its link
/// as the stop is made, before scored waits for anything: the keeper then
/// waits for each rank in the kernel instead of being woken by the first
/// rank's stop. The continue that follows is noted as any other.
#[test]
fn a_stop_of_more_ranks_than_cpus_is_told_to_the_keeper_as_it_is_made() {
    use crate::keeper::{socket_pair, ToKeeper, NOTES_PROTOCOL};
    let mut fixture = Fixture::new("first");
    let others = more_ranks_than_cpus(&mut fixture);
    let (ours, keeper) = socket_pair().expect("a socket pair");
    let mut link = super::super::keepers::Link::new(ours, true);
    link.open_notes(NOTES_PROTOCOL, &fixture.actuator.exec_watch, JOB);
    fixture.actuator.keepers.links.insert(JOB, link);
    let mut buffer = vec![0u8; crate::keeper::MAX_MESSAGE];
    let mut heard = || told(&keeper, &mut buffer);
    assert_eq!(heard(), [ToKeeper::Notes]);
    let mut out = Vec::new();
    fixture.actuator.stop(JOB, &mut out);
    assert_eq!(
        heard(),
        [ToKeeper::Stop(1)],
        "not told as the stop was made"
    );
    fixture.wait_until_stopped(true);
    fixture.actuator.await_stops(Duration::ZERO, &mut out);
    fixture.actuator.settled();
    assert_eq!(heard(), [], "told twice");
    fixture.actuator.cont(JOB);
    fixture.actuator.settled();
    assert_eq!(heard(), [ToKeeper::Continue(2)]);
    for mut rank in others {
        let _ = rank.kill();
        let _ = rank.wait();
    }
}

/// The serials a pipe holds (8 bytes each).
fn serials(pipe: &std::os::fd::OwnedFd) -> Vec<u64> {
    use std::os::fd::AsFd;
    crate::keeper::read_serials(pipe.as_fd()).0
}

/// A keeper of this protocol is noted a stop on its stops pipe as the
/// stop is made, with nothing on its link, and its answer on the answers
/// pipe confirms the stop (an answer to another stop confirms nothing).
/// Once the keeper's end of the answers pipe is closed, stops are told on
/// the link again.
#[test]
fn a_wide_stop_goes_on_the_stops_pipe_and_its_answer_comes_back_on_the_answers_pipe() {
    use crate::keeper::{receive, socket_pair, ToKeeper, PROTOCOL};
    use std::os::fd::{AsFd, OwnedFd};
    let mut fixture = Fixture::new("piped");
    let others = more_ranks_than_cpus(&mut fixture);
    let (ours, keeper) = socket_pair().expect("a socket pair");
    let mut link = super::super::keepers::Link::new(ours, true);
    link.open_notes(PROTOCOL, &fixture.actuator.exec_watch, JOB);
    fixture.actuator.keepers.links.insert(JOB, link);
    let mut buffer = vec![0u8; crate::keeper::MAX_MESSAGE];
    let (message, fds) = receive::<ToKeeper>(keeper.as_fd(), &mut buffer)
        .expect("the link reads")
        .expect("a message");
    assert_eq!(message, ToKeeper::Notes);
    let [notes, stops, answers]: [OwnedFd; 3] =
        fds.try_into().expect("the notes, stops and answers pipes");
    let mut heard = || told(&keeper, &mut buffer);
    let mut out = Vec::new();
    fixture.actuator.stop(JOB, &mut out);
    assert_eq!(serials(&stops), [1], "not noted as the stop was made");
    assert_eq!(heard(), [], "told on the link");
    fixture.wait_until_stopped(true);
    fixture.actuator.await_stops(Duration::ZERO, &mut out);
    assert_eq!(out, [], "confirmed before its keeper answered");
    let answer = |serial: u64| {
        assert_eq!(
            nix::unistd::write(&answers, &serial.to_ne_bytes()),
            Ok(8),
            "the answers pipe takes an answer"
        );
    };
    answer(7);
    assert_eq!(
        fixture.poll(),
        [],
        "another stop's answer confirmed this one"
    );
    answer(1);
    assert_eq!(fixture.poll(), [Input::Stopped(JOB)]);
    fixture.actuator.settled();
    assert_eq!(heard(), [], "told twice");
    fixture.actuator.cont(JOB);
    assert_eq!(serials(&notes), [2]);
    fixture.actuator.settled();
    assert_eq!(heard(), [ToKeeper::Continue(2)]);
    drop(answers);
    assert_eq!(fixture.poll(), []);
    fixture.actuator.stop(JOB, &mut out);
    assert_eq!(heard(), [ToKeeper::Stop(3)]);
    assert_eq!(serials(&stops), Vec::<u64>::new());
    for mut rank in others {
        let _ = rank.kill();
        let _ = rank.wait();
    }
}

/// What the keeper's end of a link was told since it last looked, in order.
fn told(keeper: &std::os::fd::OwnedFd, buffer: &mut [u8]) -> Vec<crate::keeper::ToKeeper> {
    use std::os::fd::AsFd;
    let mut messages = Vec::new();
    while let Some((message, _)) =
        crate::keeper::receive::<crate::keeper::ToKeeper>(keeper.as_fd(), buffer)
            .expect("the link reads")
    {
        messages.push(message);
    }
    messages
}

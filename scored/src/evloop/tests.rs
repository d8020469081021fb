//! The loop's glue, with a recording fake actuator in place of the
//! system: what the loop asks of the actuator for the core's actions, and
//! in what order, without a process.

use std::ffi::OsString;
use std::os::fd::RawFd;
use std::path::PathBuf;

use super::*;
use crate::actuator::{ActuatorSnapshot, HandoverError, JobStdio};
use scored_core::core::CoreConfig;
use scored_core::ids::{ClientToken, Cred, JobId};
use scored_core::job::{JobRequest, Joiner, LaunchPlan, ProcRequest, Usage};

/// What the loop asked of the actuator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Spawn(JobId),
    Stop(JobId),
    Cont(JobId),
    Signal(JobId, i32),
    Release(JobId),
    AwaitStops,
}

/// An actuator that records each call and, if told to, confirms the
/// stops it was asked for when the loop waits for them.
#[derive(Default)]
struct RecordingActuator {
    calls: Vec<Call>,
    /// Stops asked for and not confirmed yet.
    stopping: Vec<JobId>,
    confirm_stops: bool,
    /// A client's end of its connection, and the replies it could read
    /// there when each job's processes were created or released.
    client: Option<(std::os::unix::net::UnixStream, Vec<Reply>)>,
}

impl RecordingActuator {
    /// Reads what the client has been told so far.
    fn read_client(&mut self) {
        if let Some((stream, told)) = &mut self.client {
            use std::io::Read;
            stream.set_nonblocking(true).expect("non-blocking");
            let mut bytes = Vec::new();
            let _ = stream.read_to_end(&mut bytes);
            while let Some(reply) = proto::decode(&mut bytes, proto::MAX_REPLY).expect("a reply") {
                told.push(reply);
            }
        }
    }
}

impl Actuator for RecordingActuator {
    fn spawn(&mut self, plan: &LaunchPlan, _stdio: Option<&JobStdio>, _out: &mut Vec<Input>) {
        self.calls.push(Call::Spawn(plan.job));
        self.read_client();
    }
    fn stop(&mut self, job: JobId, _out: &mut Vec<Input>) {
        self.calls.push(Call::Stop(job));
        self.stopping.push(job);
    }
    fn cont(&mut self, job: JobId) {
        self.calls.push(Call::Cont(job));
    }
    fn signal(&mut self, job: JobId, signal: i32) {
        self.calls.push(Call::Signal(job, signal));
    }
    fn sample(&mut self, _job: JobId) -> Option<Usage> {
        None
    }
    fn release(&mut self, job: JobId) {
        self.calls.push(Call::Release(job));
        self.read_client();
    }
    fn reap(&mut self, _out: &mut Vec<Input>) {}
    fn poll(&mut self, _now: Instant, _out: &mut Vec<Input>) {}
    fn next_deadline(&self) -> Option<Instant> {
        None
    }
    fn pending_stops(&self) -> usize {
        self.stopping.len()
    }
    fn await_stops(&mut self, _max: Duration, out: &mut Vec<Input>) {
        self.calls.push(Call::AwaitStops);
        if self.confirm_stops {
            out.extend(self.stopping.drain(..).map(Input::Stopped));
        }
    }
    fn kill_everything(&mut self) {}
    fn handover(&self) -> Result<(ActuatorSnapshot, Vec<RawFd>), HandoverError> {
        Err(HandoverError::Unsupported)
    }
    /// Every job's keeper is found: nothing to report.
    fn take_over(&mut self, _jobs: &[crate::actuator::Adopt], _out: &mut Vec<Input>) {}
}

/// A loop on one host with 100 ms slices, the fake actuator, and a socket
/// of its own that no client connects to.
fn daemon(name: &str, confirm_stops: bool) -> (Daemon<RecordingActuator>, PathBuf) {
    let dir = std::env::temp_dir().join(format!("scored-glue-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory for the socket");
    let socket = dir.join("sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
    let config = CoreConfig {
        timeslice: Duration::from_millis(100),
        daemon_uid: 0,
        ..CoreConfig::default()
    };
    let topology = scored_test_topology();
    let core = Core::new(config, topology, vec![None]);
    let actuator = RecordingActuator {
        confirm_stops,
        ..RecordingActuator::default()
    };
    let config = LoopConfig {
        socket,
        idle_exit: None,
        max_connections: 16,
        max_connections_per_user: 16,
        max_descriptors_per_user: 3072,
        max_plain_descriptors: 100_000,
        request_timeout: Duration::from_secs(10),
    };
    let daemon = Daemon::new(core, actuator, listener, config, SigSet::empty()).expect("a loop");
    (daemon, dir)
}

/// One host of one CPU.
fn scored_test_topology() -> scored_core::cluster::Topology {
    use scored_core::cluster::{Cluster, Host, Topology};
    use scored_core::ids::{ClusterId, HostId};
    Topology {
        hosts: vec![Host {
            id: HostId(0),
            name: "h0".to_string(),
            cluster: ClusterId(0),
            cpus: scored_proto::units::CpuSet::from_cpus([0]),
            cores: 1,
            speed: 1.0,
            cpugen: "test".to_string(),
            memory: 1 << 30,
            watchfs: Vec::new(),
            groups: Vec::new(),
        }],
        clusters: vec![Cluster {
            id: ClusterId(0),
            name: "test".to_string(),
            cpugen: "test".to_string(),
            speed: 1.0,
            cores: 1,
            hosts: vec![HostId(0)],
        }],
    }
}

/// A one-process job from client `client`, as root.
fn submit(client: u64) -> Input {
    Input::Submit {
        client: ClientToken(client),
        cred: Cred {
            uid: 0,
            gid: 0,
            pid: 100 + client as i32,
            groups: Vec::new(),
        },
        user: "root".into(),
        request: Box::new(JobRequest {
            stages: vec![vec![OsString::from("prog")]],
            joiner: Joiner::Sequence,
            procs: ProcRequest::Nodes(1),
            priority: None,
            wait: false,
            memory: None,
            disk: None,
            time: None,
            env: vec![],
            cwd: OsString::from("/"),
            inherited: Default::default(),
            batch: Default::default(),
        }),
    }
}

/// Lets a slice pass on the loop's clock, then handles the deadline.
fn end_slice(daemon: &mut Daemon<RecordingActuator>) {
    daemon.start -= Duration::from_millis(150);
    daemon.handle_event(Event::Deadline);
}

/// At a slice boundary the loop stops the running job, waits for the
/// stop, and only once it is confirmed starts the job whose turn it is.
#[test]
fn a_job_enters_only_after_the_loop_has_waited_for_the_leaving_jobs_stop() {
    let (mut daemon, dir) = daemon("switch", true);
    daemon.feed(vec![submit(1), submit(2)]);
    assert_eq!(daemon.actuator.calls, [Call::Spawn(JobId(1))]);
    end_slice(&mut daemon);
    assert_eq!(
        daemon.actuator.calls,
        [
            Call::Spawn(JobId(1)),
            Call::Stop(JobId(1)),
            Call::AwaitStops,
            Call::Spawn(JobId(2)),
        ]
    );
    std::fs::remove_dir_all(dir).expect("clean up");
}

/// A stop the actuator has not confirmed keeps the next job out, however
/// many deadlines pass; its confirmation, whenever it comes, lets it in.
#[test]
fn an_unconfirmed_stop_keeps_the_next_job_out_until_it_is_confirmed() {
    let (mut daemon, dir) = daemon("unconfirmed", false);
    daemon.feed(vec![submit(1), submit(2)]);
    end_slice(&mut daemon);
    end_slice(&mut daemon);
    assert!(
        !daemon.actuator.calls.contains(&Call::Spawn(JobId(2))),
        "{:?}",
        daemon.actuator.calls
    );
    assert_eq!(
        daemon.actuator.calls[..3],
        [
            Call::Spawn(JobId(1)),
            Call::Stop(JobId(1)),
            Call::AwaitStops
        ]
    );
    daemon.actuator.stopping.clear();
    daemon.feed(vec![Input::Stopped(JobId(1))]);
    assert_eq!(daemon.actuator.calls.last(), Some(&Call::Spawn(JobId(2))));
    std::fs::remove_dir_all(dir).expect("clean up");
}

/// A new daemon taking jobs over (after a crash) stops the jobs the core
/// holds switched out first, and continues the running ones only once
/// those stops are confirmed, as a switch does: a dead daemon may have
/// died between a switch's continue and the stop before it.
#[test]
fn a_takeover_continues_only_once_its_stops_are_confirmed() {
    let (mut daemon, dir) = daemon("takeover", true);
    daemon.feed(vec![submit(1), submit(2)]);
    end_slice(&mut daemon);
    assert_eq!(daemon.actuator.calls.last(), Some(&Call::Spawn(JobId(2))));
    daemon.actuator.confirm_stops = false;
    daemon.actuator.calls.clear();
    let mut daemon = daemon.take_over(&HashMap::new(), Some(Duration::from_secs(60)));
    assert_eq!(
        daemon.actuator.calls,
        [Call::Stop(JobId(1)), Call::AwaitStops],
        "job 2 is continued before job 1's stop is confirmed"
    );
    daemon.actuator.stopping.clear();
    daemon.feed(vec![Input::Stopped(JobId(1))]);
    assert_eq!(daemon.actuator.calls.last(), Some(&Call::Cont(JobId(2))));
    std::fs::remove_dir_all(dir).expect("clean up");
}

/// A connection that goes away takes its job with it: the loop passes the
/// core's kill on to the actuator as a signal to the job.
#[test]
fn a_client_gone_has_its_job_signalled() {
    let (mut daemon, dir) = daemon("gone", true);
    daemon.feed(vec![submit(1)]);
    daemon.feed(vec![Input::ClientGone(ClientToken(1))]);
    assert!(
        daemon
            .actuator
            .calls
            .iter()
            .any(|call| matches!(call, Call::Signal(JobId(1), _))),
        "{:?}",
        daemon.actuator.calls
    );
    std::fs::remove_dir_all(dir).expect("clean up");
}

/// Connects a client of root's (token 1) to the loop: its end of the
/// connection.
fn connect_client(daemon: &mut Daemon<RecordingActuator>) -> std::os::unix::net::UnixStream {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("a socket pair");
    let cred = Cred {
        uid: 0,
        gid: 0,
        pid: 101,
        groups: Vec::new(),
    };
    daemon.connections.insert(
        Token(1),
        Box::new(Connection {
            stream: super::connection::ClientSocket::new(mio::net::UnixStream::from_std(theirs), 0),
            cred,
            user: "root".into(),
            input: proto::FrameBuffer::new(),
            output: VecDeque::new(),
            fds: Vec::new(),
            stdio: None,
            submitted: true,
            closing: false,
            writing: false,
            paused: false,
            privileged: true,
            counted: (0, 0),
        }),
    );
    ours
}

/// A client hears that its job started before the job's processes
/// exist, so that nothing they do (their output, which reaches the client
/// directly, or a signal sent to scrun in answer to it) comes first.
#[test]
fn a_client_is_told_its_job_started_before_the_processes_exist() {
    let (mut daemon, dir) = daemon("told", true);
    let ours = connect_client(&mut daemon);
    daemon.actuator.client = Some((ours, Vec::new()));
    daemon.feed(vec![submit(1)]);
    assert_eq!(daemon.actuator.calls, [Call::Spawn(JobId(1))]);
    let told = &daemon.actuator.client.as_ref().expect("the client").1;
    assert!(
        told.iter()
            .any(|reply| matches!(reply, Reply::Started { job: 1, .. })),
        "{told:?}"
    );
    std::fs::remove_dir_all(dir).expect("clean up");
}

/// A client hears that its job ended before the actuator lets go of what
/// the job held (its cgroup, scratch directory and keeper): that work is
/// no reason for the client to wait.
#[test]
fn a_client_is_told_its_job_ended_before_the_job_is_released() {
    let (mut daemon, dir) = daemon("ended", true);
    let ours = connect_client(&mut daemon);
    daemon.actuator.client = Some((ours, Vec::new()));
    daemon.feed(vec![submit(1)]);
    daemon.feed(vec![
        Input::RankExited {
            job: JobId(1),
            stage: 0,
            rank: 0,
            status: scored_core::job::ExitStatus::Code(0),
        },
        Input::ProcessesGone(JobId(1)),
    ]);
    assert_eq!(
        daemon.actuator.calls,
        [Call::Spawn(JobId(1)), Call::Release(JobId(1))]
    );
    let told = &daemon.actuator.client.as_ref().expect("the client").1;
    assert!(
        told.iter()
            .any(|reply| matches!(reply, Reply::Ended { job: 1, .. })),
        "{told:?}"
    );
    std::fs::remove_dir_all(dir).expect("clean up");
}

/// A client's socket read to its end holds nothing more: the loop closes
/// it at once. One not read to its end may hold messages that carry
/// descriptors, and goes to the closer.
#[test]
fn a_client_socket_read_to_its_end_is_closed_without_the_closer() {
    let (mut daemon, dir) = daemon("drained", true);
    crate::closer::queue_only();
    drop(connect_client(&mut daemon));
    let mut inputs = Vec::new();
    daemon.serve_client(Token(1), &mut inputs);
    assert!(!daemon.connections.contains_key(&Token(1)), "still open");
    assert_eq!(crate::closer::queued(), 0);
    let ours = connect_client(&mut daemon);
    daemon.close(Token(1), &mut inputs);
    assert_eq!(crate::closer::queued(), 1);
    drop(ours);
    std::fs::remove_dir_all(dir).expect("clean up");
}

#[test]
fn a_deadline_taken_before_the_timeout_is_due_at_once() {
    // As the actuator asks while a launch is under way: "now".
    let deadline = Instant::now();
    assert_eq!(poll_timeout(Some(deadline)), Some(Duration::ZERO));
    assert_eq!(poll_timeout(None), None);
    let later = poll_timeout(Some(Instant::now() + Duration::from_secs(60)))
        .expect("a deadline gives a timeout");
    assert!(later > Duration::from_secs(59), "{later:?}");
}

/// The daemon's state log is not synced while a switch awaits its stops
/// (the sync's work would take a CPU from the ranks that must run to take
/// them), nor does its deadline wake the loop then; it is synced once the
/// stops are confirmed.
#[test]
fn the_state_log_is_synced_after_a_switch_not_while_it_awaits_its_stops() {
    let (daemon, dir) = daemon("sync", false);
    let durable = crate::durable::Durable::start(
        &dir,
        0,
        0,
        crate::durable::Settings::of(&CoreConfig::default()),
        daemon.core().snapshot(),
        Vec::new(),
    )
    .expect("a state log");
    let mut daemon = daemon.with_durable(durable);
    daemon.feed(vec![submit(1), submit(2)]);
    end_slice(&mut daemon);
    assert!(daemon.actuator.calls.contains(&Call::Stop(JobId(1))));
    assert!(
        daemon.core.stops_in_flight(),
        "job 1's stop awaits its confirmation"
    );
    let unsynced = |daemon: &Daemon<RecordingActuator>| {
        daemon
            .durable
            .as_ref()
            .and_then(crate::durable::Durable::sync_deadline)
    };
    let due = unsynced(&daemon).expect("the switch's records are written, not yet synced");
    std::thread::sleep(due.saturating_duration_since(Instant::now()) + Duration::from_millis(5));
    daemon.handle_event(Event::Deadline);
    assert!(
        unsynced(&daemon).is_some_and(|deadline| deadline <= Instant::now()),
        "a sync due while the stop is awaited waits"
    );
    assert!(
        daemon.next_deadline().is_none_or(|deadline| deadline > due),
        "the sync due does not wake the loop meanwhile"
    );
    daemon.actuator.stopping.clear();
    daemon.feed(vec![Input::Stopped(JobId(1))]);
    assert_eq!(daemon.actuator.calls.last(), Some(&Call::Spawn(JobId(2))));
    assert_eq!(unsynced(&daemon), None, "synced once the switch is over");
    std::fs::remove_dir_all(dir).expect("clean up");
}

/// A switch's continues are made as soon as its stops are confirmed,
/// before the core hears of the confirmations (it foresees them), and
/// only once: the core's own `Continue` then has nothing left to do.
#[test]
fn the_next_job_is_continued_as_soon_as_the_stop_is_confirmed() {
    let (mut daemon, dir) = daemon("early", false);
    daemon.feed(vec![submit(1), submit(2)]);
    end_slice(&mut daemon);
    daemon.actuator.stopping.clear();
    daemon.feed(vec![Input::Stopped(JobId(1))]);
    end_slice(&mut daemon);
    assert_eq!(daemon.actuator.calls.last(), Some(&Call::AwaitStops));
    assert_eq!(daemon.actuator.stopping, [JobId(2)]);
    daemon.actuator.stopping.clear();
    let confirmed = [Input::Stopped(JobId(2))];
    daemon.stops_awaited(&confirmed);
    assert_eq!(daemon.actuator.calls.last(), Some(&Call::Cont(JobId(1))));
    assert!(
        daemon.core.stops_in_flight(),
        "continued before the core heard of the stop"
    );
    daemon.feed(confirmed.to_vec());
    assert!(!daemon.core.stops_in_flight());
    let conts = |daemon: &Daemon<RecordingActuator>| {
        daemon
            .actuator
            .calls
            .iter()
            .filter(|call| **call == Call::Cont(JobId(1)))
            .count()
    };
    assert_eq!(conts(&daemon), 1, "{:?}", daemon.actuator.calls);
    // What the wait gathered beside the confirmation (a job's end) leaves
    // the continue to the core.
    end_slice(&mut daemon);
    daemon.actuator.stopping.clear();
    let with_more = [Input::Stopped(JobId(1)), Input::ClientGone(ClientToken(2))];
    daemon.stops_awaited(&with_more);
    assert_eq!(daemon.actuator.calls.last(), Some(&Call::AwaitStops));
    std::fs::remove_dir_all(dir).expect("clean up");
}

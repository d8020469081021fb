//! Who may submit to a daemon that is not root, and the start-up script
//! run as console inputs.

use super::*;

/// A daemon that is not root cannot change credentials, so it runs only
/// its own user's jobs (root's too are refused, as they would run as the
/// daemon's user); the refusal names that user.
#[test]
fn a_daemon_that_is_not_root_runs_only_its_own_users_jobs() {
    let config = CoreConfig {
        daemon_uid: 1000,
        daemon_user: "alice".into(),
        ..CoreConfig::default()
    };
    let mut core = Core::new(config, topology(1), vec![Some(1 << 30)]);
    let mut submit = |client: u64, cred: Cred| {
        let request = JobRequest {
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
        };
        let actions = core.handle(
            Input::Submit {
                client: ClientToken(client),
                cred,
                user: "u".into(),
                request: Box::new(request),
            },
            Tick(0),
        );
        core.check_invariants();
        actions
            .into_iter()
            .find_map(|action| match action {
                Action::Notify(notice) if notice.client == ClientToken(client) => {
                    Some(notice.event)
                }
                _ => None,
            })
            .expect("the client is told")
    };
    let refused = ClientEvent::Rejected {
        kind: Rejection::Permission,
        reason: "this scored runs as alice and can only run that user's jobs".into(),
    };
    assert_eq!(submit(1, user(1001)), refused);
    assert_eq!(submit(2, root()), refused);
    assert!(matches!(
        submit(3, user(1000)),
        ClientEvent::Admitted { job: JobId(1), .. }
    ));
}

/// The start-up script's lines are console inputs; every line is
/// tried, each refusal names the script and line and changes nothing, and
/// what accepted lines ask of the shell is returned, not dropped.
#[test]
fn a_start_up_script_runs_as_console_inputs_and_keeps_its_actions() {
    let mut sim = Sim::new(1, 100);
    let script = "# policy\n\
                  queue 9 deactivate\n\
                  shutdown\n\
                  restart\n\
                  frobnicate\n\
                  queue 1 deactivate\n";
    let run = sim.core.run_script(&root(), "rc", script, sim.now);
    let errors: Vec<String> = run.errors.iter().map(ToString::to_string).collect();
    check(
        &errors.join("\n"),
        "rc:2: no queue 9: queues are 0 to 2\n\
         rc:3: shutdown cannot be used in a start-up script\n\
         rc:4: restart cannot be used in a start-up script\n\
         rc:5: unknown command 'frobnicate' in 'frobnicate': help lists the commands",
    );
    assert!(matches!(run.errors[0].problem, ScriptProblem::Refused(_)));
    assert!(matches!(run.errors[3].problem, ScriptProblem::Syntax(_)));
    assert_eq!(run.actions, Vec::new(), "no job, nothing to do");
    let client = sim.submit(1, Some(1));
    sim.advance(1000);
    check(&sim.take_log(), "");
    check(&sim.client(client), "admitted 1");
    // A script run while a job runs: its stop comes back as an action.
    let run = sim
        .core
        .run_script(&root(), "rc", "queue 1 activate\n", sim.now);
    assert!(run.errors.is_empty());
    let mut inputs = VecDeque::new();
    sim.apply(run.actions, &mut inputs);
    check(&sim.take_log(), "spawn 1 stage 0 x1");
    let run = sim
        .core
        .run_script(&root(), "rc", "queue 1 deactivate\n", sim.now);
    sim.apply(run.actions, &mut inputs);
    check(&sim.take_log(), "stop 1");
}

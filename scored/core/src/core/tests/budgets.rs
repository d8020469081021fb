//! The budgets of what users keep in the core: a submission over one is
//! refused naming it, other users and root are not affected.

use super::*;

/// A submission of `prog` by `cred` whose environment holds `env_bytes`
/// bytes in 128 KiB entries, made distinct by `tag`.
fn request(tag: usize, env_bytes: usize) -> JobRequest {
    let mut env = Vec::new();
    let mut left = env_bytes;
    while left > 0 {
        let len = left.min(128 * 1024);
        env.push((
            OsString::from(format!("V{}_{tag}", env.len())),
            OsString::from("x".repeat(len)),
        ));
        left -= len;
    }
    JobRequest {
        stages: vec![vec![OsString::from("prog")]],
        joiner: Joiner::Sequence,
        procs: ProcRequest::Nodes(1),
        priority: None,
        wait: false,
        memory: None,
        disk: None,
        time: None,
        env,
        cwd: OsString::from("/"),
        inherited: Default::default(),
        batch: Default::default(),
    }
}

/// Submits and returns the rejection's reason, if refused.
fn submit(sim: &mut Sim, cred: Cred, request: JobRequest) -> Option<String> {
    let client = sim.next_client;
    sim.next_client += 1;
    let actions = sim.core.handle(
        Input::Submit {
            client: ClientToken(client),
            cred,
            user: "u".into(),
            request: Box::new(request),
        },
        sim.now,
    );
    let rejected = actions.iter().find_map(|action| match action {
        Action::Notify(notice) => match &notice.event {
            ClientEvent::Rejected { reason, .. } => Some(reason.clone()),
            _ => None,
        },
        _ => None,
    });
    let mut inputs = VecDeque::new();
    sim.apply(actions, &mut inputs);
    while let Some(input) = inputs.pop_front() {
        let actions = sim.core.handle(input, sim.now);
        sim.apply(actions, &mut inputs);
    }
    rejected
}

#[test]
fn a_user_past_the_jobs_budget_is_refused_and_others_are_not() {
    let mut sim = Sim::new(4, 100);
    for tag in 0..USER_JOBS {
        assert_eq!(
            submit(&mut sim, user(1000), request(tag, 0)),
            None,
            "job {tag}"
        );
    }
    let reason = submit(&mut sim, user(1000), request(0, 0)).expect("refused");
    assert!(
        reason.contains("user u has 1000 unfinished jobs")
            && reason.contains("the budget of 1000 jobs per user"),
        "{reason}"
    );
    assert_eq!(submit(&mut sim, user(1001), request(0, 0)), None);
    assert_eq!(submit(&mut sim, root(), request(0, 0)), None);
    sim.core.check_invariants();
}

#[test]
fn a_user_past_the_bytes_budget_is_refused_and_shared_launches_count_once() {
    let mut sim = Sim::new(4, 100);
    let mib = 1 << 20;
    let mut kept = 0;
    let reason = loop {
        match submit(&mut sim, user(1000), request(kept, mib)) {
            None => kept += 1,
            Some(reason) => break reason,
        }
    };
    assert_eq!(kept, USER_BYTES / mib - 1, "{reason}");
    assert!(
        reason.contains("more than the budget of 8192 KiB per user"),
        "{reason}"
    );
    // Another user is held only to the total, which is larger.
    assert_eq!(submit(&mut sim, user(1001), request(0, mib)), None);
    // Identical submissions share their launch: two hundred of them, 12.5 MiB apart, cost one.
    for _ in 0..200 {
        assert_eq!(submit(&mut sim, user(1002), request(7, 64 * 1024)), None);
    }
    // The total over every user held to budgets.
    let mut total_reason = None;
    for uid in 2000..2000 + (TOTAL_BYTES / USER_BYTES) as u32 + 1 {
        for tag in 0..USER_BYTES / mib - 1 {
            if let Some(reason) = submit(&mut sim, user(uid), request(tag, mib)) {
                total_reason = Some(reason);
                break;
            }
        }
        if total_reason.is_some() {
            break;
        }
    }
    let total_reason = total_reason.expect("the total budget is reached");
    assert!(
        total_reason.contains("more than the budget of 32768 KiB in total"),
        "{total_reason}"
    );
    // Root is held to none.
    assert_eq!(submit(&mut sim, root(), request(99, 4 * mib)), None);
}

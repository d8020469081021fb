//! A world driven by hand-written ranks: the exchanges MPICH makes, and
//! ranks that break the protocol or leave.

use super::*;
use crate::pmi::wire;

fn text(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .map(|effect| match effect {
            Effect::Send { rank, bytes } => {
                format!("{rank}< {}", String::from_utf8_lossy(bytes).trim_end())
            }
            Effect::Abort {
                rank,
                code,
                message,
            } => format!("abort {rank} {code} {message:?}"),
            Effect::Fault { rank, message } => format!("fault {rank}: {message}"),
            Effect::Spawn { rank, spawn } => format!(
                "spawn {rank}: {} x{} {:?} {:?}",
                spawn.execname, spawn.nprocs, spawn.args, spawn.preput
            ),
        })
        .collect()
}

fn send(world: &mut World, rank: usize, line: &str) -> Vec<String> {
    text(&world.received(rank, line.as_bytes()))
}

#[test]
fn mpich_wire_up_of_two_ranks_over_pmi1() {
    let mut world = World::new(2, "kvs_7_0".into(), Mode::Auto);
    for rank in 0..2 {
        assert_eq!(
            send(
                &mut world,
                rank,
                "cmd=init pmi_version=1 pmi_subversion=1\n"
            ),
            [format!(
                "{rank}< cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1"
            )]
        );
        assert_eq!(
            send(&mut world, rank, "cmd=get_maxes\n"),
            [format!(
                "{rank}< cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024"
            )]
        );
        assert_eq!(
            send(&mut world, rank, "cmd=get_appnum\ncmd=get_my_kvsname\n"),
            [
                format!("{rank}< cmd=appnum rc=0 appnum=0"),
                format!("{rank}< cmd=my_kvsname rc=0 kvsname=kvs_7_0")
            ]
        );
        assert_eq!(
            send(
                &mut world,
                rank,
                "cmd=get kvsname=kvs_7_0 key=PMI_process_mapping\n"
            ),
            [format!(
                "{rank}< cmd=get_result rc=0 msg=success value=(vector,(0,1,2))"
            )]
        );
        let put = format!("cmd=put kvsname=kvs_7_0 key=card-{rank} value=addr#{rank}$\n");
        assert_eq!(
            send(&mut world, rank, &put),
            [format!("{rank}< cmd=put_result rc=0 msg=success")]
        );
    }
    assert!(send(&mut world, 1, "cmd=barrier_in\n").is_empty());
    assert_eq!(
        send(&mut world, 0, "cmd=barrier_in\n"),
        ["0< cmd=barrier_out rc=0", "1< cmd=barrier_out rc=0"]
    );
    assert_eq!(
        send(&mut world, 0, "cmd=get kvsname=kvs_7_0 key=card-1\n"),
        ["0< cmd=get_result rc=0 msg=success value=addr#1$"]
    );
    assert_eq!(
        send(&mut world, 0, "cmd=get kvsname=kvs_7_0 key=nothing\n"),
        ["0< cmd=get_result rc=-1 msg=key_\"nothing\"_not_found"]
    );
    for rank in 0..2 {
        assert_eq!(
            send(&mut world, rank, "cmd=finalize\n"),
            [format!("{rank}< cmd=finalize_ack rc=0")]
        );
        assert!(world.closed(rank).is_empty());
    }
    assert!(!world.ended());
}

#[test]
fn pmi2_after_a_v1_opening_and_directly() {
    let mut world = World::new(2, "kvs".into(), Mode::Auto);
    assert_eq!(
        send(&mut world, 0, "cmd=init pmi_version=2 pmi_subversion=0\n"),
        ["0< cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0"]
    );
    let frame = |cmd: &str, attrs: &[(&str, &str)]| {
        String::from_utf8(wire::encode(Wire::V2, cmd, attrs)).unwrap()
    };
    assert_eq!(
        send(&mut world, 0, &frame("fullinit", &[("pmirank", "0")])),
        ["0< 113   cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=0;size=2;appnum=0;debugged=FALSE;pmiverbose=FALSE;"]
    );
    // Rank 1 opens with a frame at once.
    assert_eq!(
        send(&mut world, 1, &frame("fullinit", &[("pmirank", "1")])).len(),
        1
    );
    assert_eq!(
        send(
            &mut world,
            1,
            &frame("info-getjobattr", &[("key", "PMI_process_mapping")])
        ),
        ["1< 68    cmd=info-getjobattr-response;rc=0;found=TRUE;value=(vector,(0,1,2));"]
    );
    assert_eq!(
        send(
            &mut world,
            0,
            &frame("kvs-put", &[("key", "a"), ("value", "x;y")])
        ),
        ["0< 26    cmd=kvs-put-response;rc=0;"]
    );
    assert!(send(&mut world, 0, &frame("kvs-fence", &[])).is_empty());
    assert_eq!(send(&mut world, 1, &frame("kvs-fence", &[])).len(), 2);
    assert_eq!(
        send(
            &mut world,
            1,
            &frame("kvs-get", &[("jobid", "kvs"), ("srcid", "0"), ("key", "a")])
        ),
        ["1< 48    cmd=kvs-get-response;rc=0;found=TRUE;value=x;;y;"]
    );
    // A node attribute waited for is answered when it is put.
    assert!(send(
        &mut world,
        1,
        &frame("info-getnodeattr", &[("key", "shm"), ("wait", "TRUE")])
    )
    .is_empty());
    assert_eq!(
        send(
            &mut world,
            0,
            &frame("info-putnodeattr", &[("key", "shm"), ("value", "seg1")])
        ),
        [
            "0< 35    cmd=info-putnodeattr-response;rc=0;",
            "1< 57    cmd=info-getnodeattr-response;rc=0;found=TRUE;value=seg1;"
        ]
    );
    assert_eq!(
        send(
            &mut world,
            0,
            &frame("abort", &[("isworld", "TRUE"), ("msg", "bad input")])
        ),
        ["abort 0 1 Some(\"bad input\")"]
    );
    assert!(world.ended());
    assert!(send(&mut world, 1, &frame("finalize", &[])).is_empty());
}

#[test]
fn abort_carries_the_code_and_ends_the_world() {
    let mut world = World::new(1, "kvs".into(), Mode::Pmi1);
    send(&mut world, 0, "cmd=init pmi_version=1 pmi_subversion=1\n");
    assert_eq!(
        send(&mut world, 0, "cmd=abort exitcode=7\n"),
        ["abort 0 7 None"]
    );
    assert!(world.ended());
}

#[test]
fn a_mode_refuses_the_other_protocol() {
    let mut world = World::new(1, "kvs".into(), Mode::Pmi1);
    assert_eq!(
        send(&mut world, 0, "cmd=init pmi_version=2 pmi_subversion=0\n"),
        [
            "0< cmd=response_to_init rc=-1 pmi_version=1 pmi_subversion=1",
            "fault 0: sent init for PMI-2, but scrun serves PMI-1 only (-mpi=)"
        ]
    );
    let mut world = World::new(1, "kvs".into(), Mode::Pmi2);
    assert_eq!(
        send(&mut world, 0, "cmd=init pmi_version=1 pmi_subversion=1\n")[1],
        "fault 0: sent init for PMI-1, but scrun serves PMI-2 only (-mpi=)"
    );
}

#[test]
fn garbage_and_misbehaviour_end_the_world_naming_the_rank() {
    let fault = |bytes: &[u8]| {
        let mut world = World::new(2, "kvs".into(), Mode::Auto);
        text(&world.received(1, bytes)).pop().unwrap()
    };
    assert_eq!(
        fault(b"hello\n"),
        "fault 1: sent what is not PMI on its PMI descriptor: \"hello\" where a key=value pair belongs"
    );
    assert_eq!(
        fault(b"cmd=put key=a value=b\n"),
        "fault 1: sent \"put\" before init on its PMI descriptor"
    );
    assert_eq!(
        fault(&[b'a'; 5000]),
        "fault 1: sent what is not PMI on its PMI descriptor: a PMI-1 line longer than 1024 bytes"
    );
    let mut world = World::new(2, "kvs".into(), Mode::Auto);
    send(&mut world, 1, "cmd=init pmi_version=1 pmi_subversion=1\n");
    assert_eq!(
        send(&mut world, 1, "cmd=frobnicate\n"),
        ["fault 1: sent the unknown PMI command \"frobnicate\" on its PMI descriptor"]
    );
}

#[test]
fn a_rank_that_leaves_mid_barrier_or_never_comes_is_named() {
    let mut world = World::new(3, "kvs".into(), Mode::Auto);
    for rank in 0..3 {
        send(
            &mut world,
            rank,
            "cmd=init pmi_version=1 pmi_subversion=1\n",
        );
    }
    send(&mut world, 0, "cmd=barrier_in\n");
    assert_eq!(
        text(&world.closed(2)),
        ["fault 2: ended its PMI connection without finalize (did it exit or crash inside MPI?)"]
    );
    let mut world = World::new(2, "kvs".into(), Mode::Auto);
    send(&mut world, 0, "cmd=init pmi_version=1 pmi_subversion=1\n");
    send(&mut world, 0, "cmd=barrier_in\n");
    assert_eq!(
        text(&world.closed(0)),
        ["fault 0: ended its PMI connection while waiting at the barrier"]
    );
    // A rank that never used PMI ends quietly, unless others wait for it.
    let mut world = World::new(2, "kvs".into(), Mode::Auto);
    assert!(world.closed(1).is_empty());
    send(&mut world, 0, "cmd=init pmi_version=1 pmi_subversion=1\n");
    assert_eq!(
        send(&mut world, 0, "cmd=barrier_in\n"),
        ["fault 1: ended without ever using its PMI descriptor while rank 0 waits at the PMI barrier"]
    );
    // A program that never uses PMI costs nothing.
    let mut world = World::new(2, "kvs".into(), Mode::Auto);
    assert!(world.closed(0).is_empty() && world.closed(1).is_empty());
    assert!(!world.ended());
}

#[test]
fn every_limit_is_an_error_to_the_rank_and_memory_stays_bounded() {
    let mut world = World::new(1, "kvs".into(), Mode::Auto);
    send(&mut world, 0, "cmd=init pmi_version=1 pmi_subversion=1\n");
    let long_key = "k".repeat(65);
    assert_eq!(
        send(&mut world, 0, &format!("cmd=put key={long_key} value=v\n")),
        ["0< cmd=put_result rc=-1 msg=key_of_65_bytes:_keys_are_1_to_64_bytes"]
    );
    assert_eq!(
        send(&mut world, 0, "cmd=put kvsname=other key=a value=v\n"),
        ["0< cmd=put_result rc=-1 msg=kvsname_\"other\"_is_not_this_job's_kvs"]
    );
    for n in 0..256 {
        assert_eq!(
            send(&mut world, 0, &format!("cmd=put key=k{n} value=v\n")),
            ["0< cmd=put_result rc=0 msg=success"]
        );
    }
    // Overwriting a key is not a new key.
    assert_eq!(
        send(&mut world, 0, "cmd=put key=k0 value=w\n"),
        ["0< cmd=put_result rc=0 msg=success"]
    );
    assert_eq!(
        send(&mut world, 0, "cmd=put key=k256 value=v\n"),
        ["0< cmd=put_result rc=-1 msg=more_than_256_keys_put_by_one_rank"]
    );
    // The bytes of the world: 128 ranks of 255 values of 1000 bytes are
    // over the limit of a megabyte well before the end.
    let mut world = World::new(128, "kvs".into(), Mode::Auto);
    let value = "v".repeat(1000);
    let mut refused = 0;
    for rank in 0..128 {
        send(
            &mut world,
            rank,
            "cmd=init pmi_version=2 pmi_subversion=0\n",
        );
        for n in 0..255 {
            let frame = wire::encode(
                Wire::V2,
                "kvs-put",
                &[("key", &format!("k{rank}.{n}")), ("value", &value)],
            );
            let reply = text(&world.received(rank, &frame));
            if reply[0]
                .contains("rc=-1;errmsg=the job's key-value space would exceed 1048576 bytes")
            {
                refused += 1;
            }
        }
    }
    assert!(world.bytes <= LIMITS.bytes, "{}", world.bytes);
    assert!(refused > 100 * 255, "{refused}");
}

#[test]
fn a_value_that_would_break_another_ranks_line_is_refused() {
    let mut world = World::new(1, "kvs".into(), Mode::Auto);
    send(&mut world, 0, "cmd=init pmi_version=2 pmi_subversion=0\n");
    let frame = wire::encode(
        Wire::V2,
        "kvs-put",
        &[("key", "k"), ("value", "a\ncmd=barrier_out")],
    );
    assert_eq!(
        text(&world.received(0, &frame)),
        ["0< 73    cmd=kvs-put-response;rc=-1;errmsg=keys and values hold no newline or NUL;"]
    );
}

#[test]
fn names_are_published_found_and_withdrawn_across_stages_and_wires() {
    let names = Rc::new(RefCell::new(Names::new()));
    let mut first = World::new(1, "a".into(), Mode::Auto).sharing_names(Rc::clone(&names), 0);
    let mut second = World::new(1, "b".into(), Mode::Auto).sharing_names(Rc::clone(&names), 1);
    send(&mut first, 0, "cmd=init pmi_version=1 pmi_subversion=1\n");
    assert_eq!(
        send(
            &mut first,
            0,
            "cmd=publish_name service=svc port=tcp://x:1\n"
        ),
        ["0< cmd=publish_result rc=0 msg=success"]
    );
    assert_eq!(
        send(&mut first, 0, "cmd=publish_name service=svc port=other\n"),
        ["0< cmd=publish_result rc=-1 msg=service_svc_is_published_already"]
    );
    // Stage 2 speaks PMI-2 and finds what stage 1 published.
    let frame = |cmd: &str, attrs: &[(&str, &str)]| {
        String::from_utf8(wire::encode(Wire::V2, cmd, attrs)).unwrap()
    };
    send(&mut second, 0, &frame("fullinit", &[("pmirank", "0")]));
    let found = send(&mut second, 0, &frame("name-lookup", &[("name", "svc")]));
    assert_eq!(found.len(), 1);
    assert!(
        found[0]
            .contains("cmd=name-lookup-response;rc=0;found=TRUE;port=tcp://x:1;value=tcp://x:1;"),
        "{found:?}"
    );
    // Only the publisher withdraws it.
    let refused = send(&mut second, 0, &frame("name-unpublish", &[("name", "svc")]));
    assert!(
        refused[0].contains("rc=-1;errmsg=service svc was published by another rank;"),
        "{refused:?}"
    );
    assert_eq!(
        send(&mut first, 0, "cmd=unpublish_name service=svc\n"),
        ["0< cmd=unpublish_result rc=0 msg=success"]
    );
    assert_eq!(
        send(&mut first, 0, "cmd=lookup_name service=svc\n"),
        ["0< cmd=lookup_result rc=-1 msg=service_svc_is_not_published"]
    );
    assert!(names.borrow().is_empty());
    assert!(!first.ended() && !second.ended());
}

#[test]
fn a_pmi1_spawn_of_two_blocks_is_refused_once_after_the_last() {
    let mut world = World::new(1, "kvs_7_0".into(), Mode::Auto);
    send(&mut world, 0, "cmd=init pmi_version=1 pmi_subversion=1\n");
    let block = |n: usize| {
        format!("mcmd=spawn\nnprocs=1\nexecname=a\ntotspawns=2\nspawnssofar={n}\nargcnt=0\ninfo_num=0\nendcmd\n")
    };
    assert!(send(&mut world, 0, &block(1)).is_empty());
    let got = send(&mut world, 0, &block(2));
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("0< cmd=spawn_result rc=-1 msg=a_spawn_of_2_programs"),
        "{got:?}"
    );
    // The rank goes on.
    assert_eq!(
        send(&mut world, 0, "cmd=get_appnum\n"),
        ["0< cmd=appnum rc=0 appnum=0"]
    );
}

#[test]
fn a_spawn_is_asked_for_then_answered_once_in_the_ranks_wire() {
    let mut world = World::new(2, "kvs_7_0".into(), Mode::Auto);
    send(&mut world, 0, "cmd=init pmi_version=1 pmi_subversion=1\n");
    let spawn = "mcmd=spawn\nnprocs=3\nexecname=child\ntotspawns=1\nspawnssofar=1\nargcnt=1\narg1=x y\npreput_num=1\npreput_key_0=PARENT_ROOT_PORT_NAME\npreput_val_0=port#1\ninfo_num=0\nendcmd\n";
    assert_eq!(
        send(&mut world, 0, spawn),
        ["spawn 0: child x3 [\"x y\"] [(\"PARENT_ROOT_PORT_NAME\", \"port#1\")]"]
    );
    // A second spawn while the first waits is refused; the first is
    // answered once.
    let again = send(&mut world, 0, spawn);
    assert!(again[0].contains("rc=-1"), "{again:?}");
    assert_eq!(
        text(&world.spawn_result(0, Ok("kvs_9_0".into()))),
        ["0< cmd=spawn_result rc=0"]
    );
    assert!(world.spawn_result(0, Ok("kvs_9_0".into())).is_empty());
    // PMI-2: the children's kvs name comes back; a refusal says why.
    let frame = |body: &str| format!("{:<6}{body}", body.len());
    send(&mut world, 1, &frame("cmd=fullinit;pmirank=1;"));
    let asked = send(
        &mut world,
        1,
        &frame("cmd=spawn;ncmds=1;preputcount=0;subcmd=child;maxprocs=2;argc=0;infokeycount=0;"),
    );
    assert_eq!(asked, ["spawn 1: child x2 [] []"]);
    assert_eq!(
        text(&world.spawn_result(1, Ok("kvs_9_0".into()))),
        ["1< 38    cmd=spawn-response;rc=0;jobid=kvs_9_0;"]
    );
    send(
        &mut world,
        1,
        &frame("cmd=spawn;ncmds=1;subcmd=child;maxprocs=2;argc=0;"),
    );
    assert_eq!(
        text(&world.spawn_result(1, Err("not admitted".into()))),
        ["1< 45    cmd=spawn-response;rc=-1;errmsg=not admitted;"]
    );
}

#[test]
fn a_spawned_world_starts_with_the_preput_and_names_its_spawner() {
    let mut world = World::new(1, "kvs_9_0".into(), Mode::Auto);
    world.set_spawner(
        "kvs_7_0".into(),
        &[("PARENT_ROOT_PORT_NAME".into(), "port#1".into())],
    );
    let frame = |body: &str| format!("{:<6}{body}", body.len());
    let init = send(&mut world, 0, &frame("cmd=fullinit;pmirank=0;"));
    assert!(init[0].contains(";spawner-jobid=kvs_7_0;"), "{init:?}");
    let got = send(
        &mut world,
        0,
        &frame("cmd=kvs-get;jobid=kvs_9_0;srcid=-1;key=PARENT_ROOT_PORT_NAME;"),
    );
    assert!(got[0].ends_with("found=TRUE;value=port#1;"), "{got:?}");
}

//! Tests of the job journal: records written and read back, rotation,
//! the index of ended jobs, torn lines and the size limit.

use super::*;
use scored_core::ids::JobId;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("scored-journal-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

fn record(id: u64, uid: u32) -> Vec<(String, Value)> {
    vec![
        ("id".into(), Value::Uint(id)),
        ("user".into(), Value::text("alice")),
        ("uid".into(), Value::Uint(u64::from(uid))),
        ("state".into(), Value::text("queued")),
        ("queue".into(), Value::Uint(1)),
        ("queues".into(), Value::List(vec![Value::Uint(1)])),
        ("cpu".into(), Value::Duration(Duration::from_millis(1500))),
    ]
}

fn admitted(id: u64) -> JobEvent {
    JobEvent::Admitted {
        job: JobId(id),
        waited: Duration::ZERO,
        record: record(id, 1000),
    }
}

fn ended(id: u64) -> JobEvent {
    let mut fields = record(id, 1000);
    fields[3].1 = Value::text("done");
    fields.push(("exit".into(), Value::Int(0)));
    fields.push((
        "reason".into(),
        Value::text("all processes exited with status 0"),
    ));
    JobEvent::Ended {
        job: JobId(id),
        record: fields,
        early: std::time::Duration::ZERO,
    }
}

/// The admitted line written straight from the fields is the one the
/// `Json` tree gave, byte for byte, for every kind of value a record
/// holds (so older readers and `absorb` see no change).
#[test]
fn an_admitted_line_is_the_json_tree_serialized() {
    let mut fields = record(7, 1000);
    fields.extend([
        (
            "command".into(),
            Value::text("sh -c 'echo \"é\\n\"'\t\u{1}"),
        ),
        ("held".into(), Value::None),
        (
            "hosts".into(),
            Value::List(vec![Value::text("h0"), Value::text("h1")]),
        ),
        (
            "memory".into(),
            Value::Map(vec![
                ("h0".into(), Value::Size(4096)),
                ("h1".into(), Value::Size(0)),
            ]),
        ),
        ("exit".into(), Value::Int(-3)),
        ("load".into(), Value::Float(0.1 + 0.2)),
        ("share".into(), Value::Percent(33.25)),
        ("pty".into(), Value::Bool(true)),
        (
            "wait".into(),
            Value::Duration(Duration::from_nanos(123_456_789)),
        ),
    ]);
    for (now, waited) in [
        (1_795_000_000.123_456_7, Duration::from_micros(1_500)),
        (0.0, Duration::ZERO),
        (17.5, Duration::from_secs(20)),
    ] {
        let tree = json!({
            "t": now,
            "event": "admitted",
            "job": 7u64,
            "submitted": now - waited.as_secs_f64(),
            "record": fields_json(&fields),
        });
        let direct = admitted_line(now, 7, waited, &fields).expect("serialize");
        assert_eq!(
            String::from_utf8(direct).expect("utf-8"),
            serde_json::to_string(&tree).expect("serialize"),
        );
    }
}

#[test]
fn an_ended_line_is_the_json_tree_serialized_and_kept_and_indexed_as_it() {
    let mut fields = record(9, 0);
    fields[3].1 = Value::text("done");
    fields[6].1 = Value::Duration(Duration::from_nanos(123_456_789));
    fields.extend([
        (
            "command".into(),
            Value::text("sh -c 'echo \"é\\n\"'\t\u{1}"),
        ),
        (
            "memory".into(),
            Value::Map(vec![("h0".into(), Value::Size(4096))]),
        ),
        ("exit".into(), Value::Int(-3)),
    ]);
    for (now, early) in [
        (1_795_000_000.123_456_7, Duration::from_micros(1_500)),
        (0.0, Duration::ZERO),
        (17.5, Duration::from_secs(20)),
    ] {
        let mut record = fields_json(&fields);
        if let Json::Object(map) = &mut record {
            map.insert("ended".into(), json!(now - early.as_secs_f64()));
        }
        let tree = json!({"t": now, "event": "ended", "job": 9u64, "record": record});
        let direct = ended_line(now, 9, now - early.as_secs_f64(), &fields)
            .expect("serialize")
            .expect("a line of its own");
        assert_eq!(
            String::from_utf8(direct.line.clone()).expect("utf-8"),
            serde_json::to_string(&tree).expect("serialize"),
        );
        assert_eq!(
            &direct.line[direct.record.clone()],
            record.to_string().as_bytes()
        );
        let at = EndedAt::of(&tree, false, 0, direct.line.len()).expect("an ended line");
        assert_eq!(
            (direct.job, direct.id, direct.uid, direct.ended),
            (at.id, record["id"].as_u64(), at.uid, at.ended)
        );
    }
    // A record that names its own end or a key twice, or one too long,
    // is built as a tree.
    for key in ["ended", "state"] {
        let mut named = fields.clone();
        named.push((key.into(), Value::Uint(1)));
        assert!(ended_line(1.0, 9, 1.0, &named)
            .expect("serialize")
            .is_none());
    }
    let mut long = fields.clone();
    long[7].1 = Value::text("x".repeat(MAX_RECORD));
    assert!(ended_line(1.0, 9, 1.0, &long).expect("serialize").is_none());
}

#[test]
fn ended_jobs_read_back_as_they_were_recorded() {
    let dir = temp_dir("ended-direct");
    let (mut journal, _) = Journal::open(&dir, DEFAULT_MAX_SIZE).expect("open");
    journal
        .record(vec![admitted(3), JobEvent::Started(JobId(3)), ended(3)])
        .expect("record");
    let kept = journal.ended(3).expect("kept in memory");
    let text = fs::read_to_string(dir.join(FILE)).expect("read");
    let line: Json = serde_json::from_str(text.lines().last().expect("a line")).expect("json");
    assert_eq!(line["event"], "ended");
    assert_eq!(line["record"], kept);
    assert!(kept["ended"].as_f64().is_some());
    drop(journal);
    let (mut journal, _) = Journal::open(&dir, DEFAULT_MAX_SIZE).expect("reopen");
    assert_eq!(journal.ended(3), Some(kept));
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn unfinished_jobs_and_the_last_id_are_recovered() {
    let dir = temp_dir("recover");
    let (mut journal, recovered) = Journal::open(&dir, DEFAULT_MAX_SIZE).expect("open");
    assert_eq!(recovered.last_id, 0);
    journal
        .record(vec![
            admitted(1),
            admitted(2),
            JobEvent::Started(JobId(1)),
            ended(1),
        ])
        .expect("record");
    journal
        .record(vec![JobEvent::Moved {
            job: JobId(2),
            from: 1,
            to: 2,
            by: "residency",
        }])
        .expect("record");
    drop(journal);
    // A crash in the middle of a write leaves a torn line.
    let mut file = OpenOptions::new()
        .append(true)
        .open(dir.join(FILE))
        .expect("open");
    file.write_all(b"{\"t\":1,\"event\":\"adm").expect("write");
    drop(file);
    let (mut journal, recovered) = Journal::open(&dir, DEFAULT_MAX_SIZE).expect("reopen");
    assert_eq!(recovered.last_id, 2);
    assert_eq!(recovered.bad_lines, 1);
    assert_eq!(recovered.open.keys().copied().collect::<Vec<_>>(), vec![2]);
    assert_eq!(recovered.open[&2]["queue"], json!(2));
    journal.record_lost(&recovered.open).expect("lost");
    let lost = journal.ended(2).expect("job 2 is in the journal");
    assert_eq!(lost["reason"], json!(LOST_REASON));
    assert_eq!(lost["state"], json!("killed"));
    assert_eq!(journal.history(None, None).0.len(), 2);
    assert_eq!(journal.history(Some(7), None).0.len(), 0);
    assert_eq!(
        journal
            .history(None, Some(Since::Ago(Duration::from_secs(3600))))
            .0
            .len(),
        2
    );
    assert_eq!(
        journal
            .history(None, Some(Since::Unix(u64::MAX / 2)))
            .0
            .len(),
        0
    );
    let (_, recovered) = Journal::open(&dir, DEFAULT_MAX_SIZE).expect("reopen");
    assert!(recovered.open.is_empty());
    let _ = fs::remove_dir_all(&dir);
}

/// Records jobs 1, 2, … admitted and ended until the journal wants to
/// rotate; returns the last id.
fn fill_until_rotation(journal: &mut Journal) -> u64 {
    let mut id = 0;
    while !journal.wants_rotation() {
        id += 1;
        journal
            .record(vec![admitted(id), ended(id)])
            .expect("record");
    }
    id
}

#[test]
fn rotation_keeps_open_jobs_and_ids() {
    let dir = temp_dir("rotate");
    let (mut journal, _) = Journal::open(&dir, 4096).expect("open");
    let id = fill_until_rotation(&mut journal);
    journal.record(vec![admitted(id + 1)]).expect("record");
    journal
        .rotate(id + 2, vec![record(id + 1, 1000)])
        .expect("rotate");
    journal
        .rotate(id + 2, vec![record(id + 1, 1000)])
        .expect("rotate twice");
    let (_, recovered) = Journal::open(&dir, 4096).expect("reopen");
    assert_eq!(recovered.last_id, id + 1);
    assert_eq!(
        recovered.open.keys().copied().collect::<Vec<_>>(),
        vec![id + 1]
    );
    let _ = fs::remove_dir_all(&dir);
}

fn ids(records: &[Json]) -> Vec<u64> {
    records.iter().filter_map(|r| r["id"].as_u64()).collect()
}

#[test]
fn ended_records_are_found_through_the_index_across_rotation_and_reopening() {
    let dir = temp_dir("index");
    let (mut journal, _) = Journal::open(&dir, 4096).expect("open");
    let mut id = fill_until_rotation(&mut journal);
    let before_rotation = id;
    journal.rotate(id + 1, Vec::new()).expect("rotate");
    id += 1;
    let mut other = record(id, 7);
    other.push(("exit".into(), Value::Int(3)));
    journal
        .record(vec![JobEvent::Ended {
            job: JobId(id),
            record: other,
            early: std::time::Duration::ZERO,
        }])
        .expect("record");
    // Past the in-memory recent records: job 1 comes from journal.1.
    journal.recent.clear();
    assert_eq!(journal.ended(1).expect("job 1")["id"], json!(1));
    assert_eq!(journal.ended(id).expect("last job")["exit"], json!(3));
    assert!(journal.ended(id + 1).is_none());
    let (all, left_out) = journal.history(None, None);
    assert_eq!(ids(&all), (1..=id).collect::<Vec<_>>());
    assert_eq!(left_out, 0);
    assert_eq!(ids(&journal.history(Some(7), None).0), vec![id]);
    // A second rotation drops what journal.1 held, but for the last jobs
    // of each user, carried into the new file within half its size.
    journal.rotate(id + 1, Vec::new()).expect("rotate");
    assert_eq!(ids(&journal.history(Some(7), None).0), vec![id]);
    let carried = ids(&journal.history(Some(1000), None).0);
    assert!(
        !carried.is_empty() && carried.len() < before_rotation as usize,
        "{carried:?}"
    );
    let first = before_rotation + 1 - carried.len() as u64;
    assert_eq!(carried, (first..=before_rotation).collect::<Vec<_>>());
    assert!(journal.ended(first - 1).is_none());
    assert_eq!(
        ids(&journal.history(None, None).0).last(),
        Some(&id),
        "the carried records are listed before the newer ones"
    );
    drop(journal);
    // After an in-place restart the index is built on first use.
    let mut journal = Journal::reopen(&dir, 4096, Vec::new()).expect("reopen");
    assert!(journal.index.is_none());
    assert_eq!(journal.ended(id).expect("last job")["id"], json!(id));
    assert_eq!(ids(&journal.history(Some(7), None).0), vec![id]);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn history_lists_the_last_matching_jobs_and_counts_the_rest() {
    let dir = temp_dir("limit");
    let (mut journal, _) = Journal::open(&dir, DEFAULT_MAX_SIZE).expect("open");
    let n_jobs = HISTORY_LIMIT as u64 + 5;
    for id in 1..=n_jobs {
        journal.record(vec![ended(id)]).expect("record");
    }
    let (records, left_out) = journal.history(None, None);
    assert_eq!(left_out, 5);
    assert_eq!(ids(&records), (6..=n_jobs).collect::<Vec<_>>());
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn ends_are_synced_at_most_once_per_interval() {
    let dir = temp_dir("sync");
    let (mut journal, _) = Journal::open(&dir, DEFAULT_MAX_SIZE).expect("open");
    assert_eq!(journal.sync_deadline(), None);
    journal.record(vec![admitted(1)]).expect("record");
    assert_eq!(journal.sync_deadline(), None, "only ends need a sync");
    journal.record(vec![ended(1)]).expect("record");
    let due = journal.sync_deadline().expect("an end waits for its sync");
    assert!(due <= journal.last_sync + SYNC_INTERVAL);
    // Long after the last sync, an end is synced at once.
    journal.last_sync = Instant::now() - SYNC_INTERVAL;
    journal.sync_if_needed().expect("sync");
    assert_eq!(journal.sync_deadline(), None);
    // Right after a sync, the next end waits for the interval.
    journal.record(vec![ended(2)]).expect("record");
    journal.sync_if_needed().expect("sync");
    assert!(journal
        .sync_deadline()
        .is_some_and(|due| due > Instant::now()));
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn sizes_below_a_record_are_refused() {
    assert_eq!(parse_max_size("16M"), Ok(16 << 20));
    assert!(parse_max_size("100")
        .unwrap_err()
        .to_string()
        .contains("at least 4K"));
    assert!(parse_max_size("lots").is_err());
}

fn ended_as(id: u64, uid: u32, reason: &str) -> JobEvent {
    let mut fields = record(id, uid);
    fields.push(("reason".into(), Value::text(reason)));
    JobEvent::Ended {
        job: JobId(id),
        record: fields,
        early: std::time::Duration::ZERO,
    }
}

/// One user's flood of ended jobs, through many rotations, does not push
/// another user's last jobs out of `history`, and restarting from the
/// files keeps them too.
#[test]
fn a_flood_of_one_user_keeps_the_last_jobs_of_the_others() {
    let dir = temp_dir("flood");
    let max = 64 * 1024;
    let (mut journal, _) = Journal::open(&dir, max).expect("open");
    for id in 1..=3 {
        journal
            .record(vec![ended_as(id, 7, "mine")])
            .expect("record");
    }
    let mut id = 3;
    let mut rotations = 0;
    while rotations < 5 {
        id += 1;
        journal
            .record(vec![ended_as(id, 1000, &"x".repeat(900))])
            .expect("record");
        if journal.wants_rotation() {
            journal.rotate(id + 1, Vec::new()).expect("rotate");
            rotations += 1;
        }
    }
    assert_eq!(ids(&journal.history(Some(7), None).0), vec![1, 2, 3]);
    let flooder = ids(&journal.history(Some(1000), None).0);
    assert_eq!(flooder.last(), Some(&id));
    assert!(flooder.len() >= HISTORY_PER_USER, "{}", flooder.len());
    drop(journal);
    let (mut journal, _) = Journal::open(&dir, max).expect("reopen");
    assert_eq!(ids(&journal.history(Some(7), None).0), vec![1, 2, 3]);
    assert!(
        !journal.recent.iter().any(|recent| recent.id == Some(1)),
        "a carried record is history, not a recent end"
    );
    let _ = fs::remove_dir_all(&dir);
}

/// A record longer than the budget is cut: its long strings end with a
/// marker, and the line fits.
#[test]
fn a_record_over_the_budget_is_cut_with_a_marker() {
    let dir = temp_dir("cut");
    let (mut journal, _) = Journal::open(&dir, DEFAULT_MAX_SIZE).expect("open");
    let reason = format!("cannot run 'x' in /{}", "d".repeat(100_000));
    journal
        .record(vec![admitted(1), ended_as(1, 7, &reason)])
        .expect("record");
    let mut hosts = record(2, 7);
    hosts.push((
        "hosts".into(),
        Value::List((0..5000).map(|n| Value::text(format!("host{n}"))).collect()),
    ));
    journal
        .record(vec![JobEvent::Ended {
            job: JobId(2),
            record: hosts,
            early: std::time::Duration::ZERO,
        }])
        .expect("record");
    drop(journal);
    let text = fs::read_to_string(dir.join(FILE)).expect("read");
    for line in text.lines() {
        assert!(line.len() <= MAX_RECORD, "{} bytes", line.len());
    }
    let (mut journal, _) = Journal::open(&dir, DEFAULT_MAX_SIZE).expect("reopen");
    journal.recent.clear();
    let one = journal.ended(1).expect("job 1");
    let kept = one["reason"].as_str().expect("a reason");
    assert!(kept.starts_with("cannot run 'x' in /ddd"), "{kept}");
    assert!(kept.ends_with("bytes cut]"), "{kept}");
    let two = journal.ended(2).expect("job 2");
    assert!(
        two["hosts"]
            .as_str()
            .is_some_and(|note| note.contains("over the journal's record budget")),
        "{}",
        two["hosts"]
    );
    assert_eq!(two["uid"], json!(7));
    let _ = fs::remove_dir_all(&dir);
}

/// One `history` reads at most `HISTORY_BYTES` of the journal: the newest
/// records that fit, the older ones counted as left out.
#[test]
fn history_reads_a_bounded_number_of_bytes() {
    let dir = temp_dir("bytes");
    let (mut journal, _) = Journal::open(&dir, 64 << 20).expect("open");
    let reason = "r".repeat(4000);
    for id in 1..=600 {
        journal
            .record(vec![ended_as(id, 7, &reason)])
            .expect("record");
    }
    let (records, left_out) = journal.history(Some(7), None);
    let listed = ids(&records);
    assert!(listed.len() < 600 && listed.len() > 100, "{}", listed.len());
    assert_eq!(listed.last(), Some(&600));
    assert_eq!(left_out + listed.len(), 600);
    let bytes: usize = records.iter().map(|r| r.to_string().len()).sum();
    assert!(bytes as u64 <= HISTORY_BYTES, "{bytes}");
    let _ = fs::remove_dir_all(&dir);
}

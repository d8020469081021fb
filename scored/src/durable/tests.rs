//! The core's state on disk: what is logged reads back in order after its
//! snapshot, torn and out-of-order records are dropped, folding empties the log.

use std::time::Duration;

use super::*;
use scored_core::cluster::Topology;
use scored_core::core::Core;

fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("scored-durable-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn core() -> Core {
    Core::new(CoreConfig::default(), Topology::default(), vec![])
}

#[test]
fn what_is_logged_and_written_reads_back_after_the_snapshot() {
    let dir = dir("roundtrip");
    let config = CoreConfig {
        operators: vec![1000],
        kill_grace: Duration::from_millis(1500),
        ..CoreConfig::default()
    };
    let mut durable = Durable::start(
        &dir,
        42,
        7,
        Settings::of(&config),
        core().snapshot(),
        vec![],
    )
    .unwrap();
    durable.note(Tick(10), &[Input::Tick]);
    durable.note(Tick(20), &[Input::Tick, Input::Shutdown { now: false }]);
    // Logged but not written: a crash loses it, and nobody heard of it.
    let written = fs::read(dir.join(LOG)).unwrap();
    assert!(written.is_empty());
    durable.write_pending().unwrap();
    durable.note(Tick(30), &[Input::Tick]);
    let left = load(&dir).unwrap().expect("state left");
    assert_eq!(left.state.seq, 7);
    assert_eq!(left.state.origin_ns, 42);
    assert_eq!(
        left.state.settings.apply(&CoreConfig::default()).operators,
        vec![1000]
    );
    assert!(!Settings::of(&config).differs(&left.state.settings));
    assert!(Settings::of(&CoreConfig::default()).differs(&left.state.settings));
    let seqs: Vec<(u64, u64, usize)> = left
        .records
        .iter()
        .map(|record| (record.seq, record.tick, record.inputs.len()))
        .collect();
    assert_eq!(seqs, vec![(8, 10, 1), (9, 20, 2)]);
    assert_eq!(left.dropped, 0);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_torn_record_and_what_follows_a_gap_are_dropped() {
    let dir = dir("torn");
    let mut durable = Durable::start(
        &dir,
        0,
        0,
        Settings::of(&CoreConfig::default()),
        core().snapshot(),
        vec![],
    )
    .unwrap();
    durable.note(Tick(1), &[Input::Tick]);
    durable.write_pending().unwrap();
    let mut log = OpenOptions::new().append(true).open(dir.join(LOG)).unwrap();
    // A record the snapshot already holds, a gap, and a torn line.
    log.write_all(b"{\"seq\":5,\"tick\":2,\"inputs\":[]}\n{\"seq\":2,\"ti")
        .unwrap();
    let left = load(&dir).unwrap().unwrap();
    assert_eq!(left.records.len(), 1);
    assert_eq!(left.dropped, 2);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn folding_empties_the_log_and_keeps_the_numbering() {
    let dir = dir("fold");
    let mut durable = Durable::start(
        &dir,
        0,
        0,
        Settings::of(&CoreConfig::default()),
        core().snapshot(),
        vec![],
    )
    .unwrap();
    durable.note(Tick(1), &[Input::Tick]);
    durable.note(Tick(2), &[Input::Tick]);
    durable.fold(core().snapshot(), vec![]).unwrap();
    assert_eq!(fs::metadata(dir.join(LOG)).unwrap().len(), 0);
    durable.note(Tick(3), &[Input::Tick]);
    durable.write_pending().unwrap();
    let left = load(&dir).unwrap().unwrap();
    assert_eq!(left.state.seq, 2);
    assert_eq!(
        left.records.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![3]
    );
    // A panic's inputs are forgotten before they are written.
    let mark = durable.mark();
    durable.note(Tick(4), &[Input::Tick]);
    durable.forget(mark);
    durable.write_pending().unwrap();
    assert_eq!(load(&dir).unwrap().unwrap().records.len(), 1);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_snapshot_of_another_format_is_refused_by_name() {
    let dir = dir("format");
    fs::write(dir.join(SNAPSHOT), r#"{"format": 99}"#).unwrap();
    let error = load(&dir).unwrap_err().to_string();
    assert!(error.contains("format 99;"), "{error}");
    fs::write(dir.join(SNAPSHOT), "not json").unwrap();
    assert!(load(&dir).is_err());
    fs::remove_file(dir.join(SNAPSHOT)).unwrap();
    assert!(load(&dir).unwrap().is_none());
    remove(&dir);
    let _ = fs::remove_dir_all(&dir);
}

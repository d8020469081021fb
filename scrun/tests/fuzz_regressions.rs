//! Replays the `scrun_options` fuzz target's seeds and saved crashing
//! inputs (`fuzz/seeds/scrun_options/`, `fuzz/regressions/scrun_options/`)
//! through the property the fuzzer checks, so that `cargo test` guards them
//! without nightly or libFuzzer. The property lives in
//! `fuzz/src/scrun_options.rs` and is included here by path.
#![forbid(unsafe_code)]

use std::path::Path;

#[path = "../../fuzz/src/replay.rs"]
mod replay;
#[path = "../../fuzz/src/scrun_options.rs"]
mod scrun_options;

#[test]
fn scrun_options_inputs_keep_their_property() {
    let fuzz_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    replay::replay(&fuzz_dir, "scrun_options", scrun_options::check);
}

#[path = "../../fuzz/src/pmi.rs"]
mod pmi;

#[test]
fn pmi_inputs_keep_their_property() {
    let fuzz_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    replay::replay(&fuzz_dir, "pmi", pmi::check);
}

/// Pieces of PMI that ranks send, for random inputs that get past the
/// first line more often than random bytes would: PMI-1 lines, and PMI-2
/// commands with their length prefix.
fn pieces() -> Vec<Vec<u8>> {
    let lines = [
        "cmd=init pmi_version=1 pmi_subversion=1\n",
        "cmd=init pmi_version=2 pmi_subversion=0\n",
        "cmd=get_maxes\n",
        "cmd=get_my_kvsname\n",
        "cmd=put kvsname=kvs key=k value=v\n",
        "cmd=get kvsname=kvs key=k\n",
        "cmd=get key=n\n",
        "cmd=barrier_in\n",
        "cmd=finalize\n",
        "cmd=abort exitcode=3\n",
        "mcmd=spawn\nnprocs=1\n",
        "endcmd\n",
        "mcmd=spawn\nnprocs=2\nexecname=a\ntotspawns=1\nspawnssofar=1\nargcnt=1\narg1=x\npreput_num=1\npreput_key_0=k\npreput_val_0=v\ninfo_num=0\nendcmd\n",
        "mcmd=spawn\nnprocs=1\nexecname=a\ntotspawns=2\nspawnssofar=1\nargcnt=0\nendcmd\n",
    ];
    let frames = [
        "cmd=fullinit;pmirank=0;",
        "cmd=kvs-put;key=a;value=;;b;",
        "cmd=kvs-put;key=n;value=x\ny;",
        "cmd=kvs-get;key=a;",
        "cmd=kvs-fence;",
        "cmd=info-putnodeattr;key=a;value=1;",
        "cmd=info-getnodeattr;key=a;wait=TRUE;",
        "cmd=finalize;",
        "cmd=spawn;ncmds=1;preputcount=1;ppkey0=k;ppval0=v;subcmd=a;maxprocs=2;argc=0;",
    ];
    lines
        .iter()
        .map(|line| line.as_bytes().to_vec())
        .chain(
            frames
                .iter()
                .map(|body| format!("{:<6}{body}", body.len()).into_bytes()),
        )
        .collect()
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config::with_cases(2000))]
    /// Random conversations of up to four ranks keep the property the
    /// fuzzer checks.
    #[test]
    fn random_pmi_conversations_keep_the_property(
        first in proptest::prelude::any::<u8>(),
        records in proptest::collection::vec(
            (
                proptest::prelude::any::<u8>(),
                proptest::collection::vec(0..21usize, 0..4),
                proptest::collection::vec(proptest::prelude::any::<u8>(), 0..8),
            ),
            0..40,
        ),
    ) {
        let known = pieces();
        let mut data = vec![first];
        for (control, pieces, noise) in records {
            // A few controls close a connection; most send.
            let control = if control > 240 { control | 4 } else { control & !4 };
            let mut bytes = Vec::new();
            for piece in pieces {
                match known.get(piece) {
                    Some(text) => bytes.extend_from_slice(text),
                    None => bytes.extend_from_slice(&noise),
                }
            }
            bytes.truncate(255);
            data.push(control);
            data.push(bytes.len() as u8);
            data.extend(bytes);
        }
        pmi::check(&data);
    }
}

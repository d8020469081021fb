//! Property of scrun's PMI server core (`scrun::pmi::World`): any bytes
//! from any ranks, in any pieces, with connections ending at any time.
//!
//! The input's first byte picks the world (1 to 4 ranks) and the mode
//! (auto, pmi1, pmi2). Then records: a control byte (the rank in its low
//! two bits, modulo the size; bit 2 ends the rank's connection instead),
//! a length byte, and that many bytes received from the rank.
//!
//! Properties:
//! - the world never panics;
//! - every reply goes to a rank of the world, as one whole command of
//!   its wire: a PMI-1 line with one newline at its end, or a PMI-2
//!   command whose length prefix is its length;
//! - a spawn is asked for by a rank of the world, for at least one
//!   process, and its answer (here a refusal) is one whole reply;
//! - the job ends at most once (one abort or fault), and after that the
//!   world answers nothing;
//! - memory stays bounded: a rank's undecoded bytes never exceed the
//!   longest command, and the key-value space never exceeds its limit.
#![forbid(unsafe_code)]

use scrun::pmi::wire::{MAX_FRAME, MAX_LINE};
use scrun::pmi::{Effect, Mode, World, LIMITS};

/// Checks the properties on one input; panics when one fails.
pub fn check(data: &[u8]) {
    let Some((&first, mut rest)) = data.split_first() else {
        return;
    };
    let size = usize::from(first % 4) + 1;
    let mode = [Mode::Auto, Mode::Pmi1, Mode::Pmi2][usize::from(first / 4) % 3];
    let mut world = World::new(size, "kvs".to_string(), mode);
    let mut ends = 0;
    while let [control, len, tail @ ..] = rest {
        let rank = usize::from(control & 3) % size;
        let len = usize::from(*len).min(tail.len());
        let (bytes, after) = tail.split_at(len);
        rest = after;
        let was_ended = world.ended();
        let effects = if control & 4 != 0 {
            world.closed(rank)
        } else {
            world.received(rank, bytes)
        };
        if was_ended {
            assert!(effects.is_empty(), "an ended world answered: {effects:?}");
        }
        let mut answers = Vec::new();
        for effect in &effects {
            match effect {
                Effect::Send { rank, bytes } => {
                    assert!(*rank < size, "a reply to rank {rank} of {size}");
                    check_reply(bytes);
                }
                Effect::Spawn { rank, spawn } => {
                    assert!(*rank < size, "a spawn of rank {rank} of {size}");
                    assert!(spawn.nprocs >= 1, "a spawn of no process");
                    answers.extend(world.spawn_result(*rank, Err("refused".to_string())));
                }
                Effect::Abort { .. } | Effect::Fault { .. } => ends += 1,
            }
        }
        for answer in &answers {
            let Effect::Send { rank, bytes } = answer else {
                panic!("a spawn's answer that is not a reply: {answer:?}");
            };
            assert!(*rank < size, "a reply to rank {rank} of {size}");
            check_reply(bytes);
        }
        assert!(ends <= 1, "the job ended {ends} times");
        assert_eq!(
            ends == 1,
            world.ended(),
            "ended() disagrees with the effects"
        );
        for rank in 0..size {
            let held = world.buffered(rank);
            assert!(
                held <= (6 + MAX_FRAME).max(MAX_LINE) + 255,
                "rank {rank} holds {held} undecoded bytes"
            );
        }
        assert!(
            world.kvs_bytes() <= LIMITS.bytes,
            "{} bytes stored",
            world.kvs_bytes()
        );
    }
}

/// One whole reply of either wire.
fn check_reply(bytes: &[u8]) {
    if bytes.starts_with(b"cmd=") {
        let newlines = bytes.iter().filter(|&&b| b == b'\n').count();
        assert!(
            newlines == 1 && bytes.ends_with(b"\n"),
            "a PMI-1 reply that is not one line: {:?}",
            String::from_utf8_lossy(bytes)
        );
        return;
    }
    assert!(bytes.len() >= 6, "a short PMI-2 reply: {bytes:?}");
    let len: usize = std::str::from_utf8(&bytes[..6])
        .ok()
        .and_then(|prefix| prefix.trim().parse().ok())
        .unwrap_or_else(|| panic!("a PMI-2 reply without its length: {bytes:?}"));
    assert_eq!(len, bytes.len() - 6, "a PMI-2 length prefix that lies");
    assert!(
        bytes[6..].starts_with(b"cmd="),
        "a PMI-2 reply without cmd="
    );
}

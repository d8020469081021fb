//! Tests of the relay on a real pty, with a pipe for scrun's stdout.

use std::fs::File;
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::*;

/// Writes to the pty's slave, as the job would, until it holds no more;
/// returns how much it took.
fn fill(relay: &Relay) -> usize {
    let slave = relay.pty.peek.as_ref().expect("the slave's copy");
    let mut written = 0;
    loop {
        match nix::unistd::write(slave, &[b'y'; 1024]) {
            Ok(len) => written += len,
            Err(Errno::EAGAIN) => return written,
            Err(Errno::EINTR) => {}
            Err(errno) => panic!("write to the slave: {errno}"),
        }
    }
}

fn master_has_output(relay: &Relay, within: Duration) -> bool {
    let mut fds = [PollFd::new(relay.master(), PollFlags::POLLIN)];
    let timeout = PollTimeout::try_from(within.as_millis()).expect("a timeout");
    matches!(poll(&mut fds, timeout), Ok(1))
}

#[test]
fn a_reader_gone_is_told_before_the_rest_of_the_output_is_read() {
    let (reader, writer) = nix::unistd::pipe().expect("a pipe");
    drop(reader);
    let mut relay = Relay::writing_to(Pty::open().expect("a pty"), Box::new(File::from(writer)));
    let written = fill(&relay);
    // The kernel moves it to the master on its own time: let all of it
    // arrive, so that one call could read it all.
    std::thread::sleep(Duration::from_millis(200));
    relay.relay_output();
    assert!(relay.take_output_gone(), "the reader's end is told");
    assert!(
        master_has_output(&relay, Duration::from_secs(5)),
        "the relay read on after the reader went away ({written} bytes were written)"
    );
    // The rest is read and dropped; the end is told once.
    while master_has_output(&relay, Duration::ZERO) {
        relay.relay_output();
    }
    assert!(!relay.take_output_gone());
}

//! The keepers' messages: each reads back as itself across a socket pair,
//! with the descriptors it carries, and events are cut into messages that
//! fit.

use std::os::fd::AsFd;

use super::*;

#[test]
fn messages_and_descriptors_cross_a_socket_pair() {
    let (a, b) = socket_pair().unwrap();
    let (read, write) = nix::unistd::pipe().unwrap();
    let message = ToKeeper::Reap(vec![3, 4]);
    assert!(send(a.as_fd(), &message, &[write.as_raw_fd()]).unwrap());
    let mut buffer = vec![0u8; MAX_MESSAGE];
    let (got, fds): (ToKeeper, Vec<OwnedFd>) = receive(b.as_fd(), &mut buffer).unwrap().unwrap();
    assert_eq!(got, message);
    assert_eq!(fds.len(), 1);
    drop(write);
    nix::unistd::write(&fds[0], b"x").unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(nix::unistd::read(&read, &mut byte).unwrap(), 1);
    // Nothing more waits; the peer's end is an end of file.
    assert!(receive::<ToKeeper>(b.as_fd(), &mut buffer)
        .unwrap()
        .is_none());
    drop(a);
    let error = receive::<ToKeeper>(b.as_fd(), &mut buffer).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
}

#[test]
fn many_events_are_cut_into_messages_that_fit() {
    let events: Vec<Event> = (0..10_000)
        .map(|pid| Event::Exited {
            pid,
            ended: Ended {
                code: None,
                signal: Some((9, true)),
                cpu_us: u64::MAX,
                max_rss: u64::MAX,
                at_us: u64::MAX,
            },
        })
        .collect();
    let messages = batches(events);
    assert!(messages.len() > 1);
    let mut total = 0;
    for message in &messages {
        let bytes = serde_json::to_vec(message).unwrap();
        assert!(bytes.len() <= MAX_MESSAGE, "{} bytes", bytes.len());
        if let FromKeeper::Events(events) = message {
            total += events.len();
        }
    }
    assert_eq!(total, 10_000);
}

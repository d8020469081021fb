//! Property of the protocol decoder (`scored_proto::proto`).
//!
//! The input is the byte stream a client sends to the daemon: frames of a
//! 4-byte big-endian length and that much JSON, possibly cut short or
//! followed by garbage.
//!
//! Properties:
//! - `decode::<Request>` never panics; called again and again, as the
//!   daemon does on its connection buffer, it takes whole frames off the
//!   front until it needs more bytes (and then leaves the buffer alone) or
//!   reports an error;
//! - every decoded request encodes to one frame that decodes to the same
//!   request;
//! - what the daemon does next with a decoded request never panics: a
//!   `Submit` goes through the validator, `JobRequest::try_from` (checked
//!   further by the `submit` target), a console line through
//!   `command::parse_line`;
//! - `decode::<Reply>` (the client's side) never panics either. Replies are
//!   not round-tripped: they carry `f64` accounting, which serde_json reads
//!   back exactly only with its `float_roundtrip` feature.
#![forbid(unsafe_code)]

use scored_core::job::JobRequest;
use scored_proto::command::parse_line;
use scored_proto::proto::{self, FrameError, Reply, Request, MAX_REPLY, MAX_REQUEST};

/// Checks the properties on one input; panics when one fails.
pub fn check(data: &[u8]) {
    let mut buffer = data.to_vec();
    loop {
        let n_before = buffer.len();
        match proto::decode::<Request>(&mut buffer, MAX_REQUEST) {
            Ok(Some(request)) => {
                assert!(buffer.len() < n_before, "a decoded frame took no bytes");
                round_trip(&request);
                follow(request);
            }
            Ok(None) => {
                assert_eq!(buffer.len(), n_before, "an incomplete frame was consumed");
                break;
            }
            // A malformed frame is consumed whole; the daemon closes the
            // connection, but decoding what follows must not panic either.
            Err(FrameError::Malformed(why)) => {
                assert!(buffer.len() < n_before, "a malformed frame took no bytes");
                assert!(!why.is_empty(), "a malformed frame without a reason");
            }
            Err(FrameError::TooLarge { len, max }) => {
                assert!(len > max, "frame of {len} bytes refused with limit {max}");
                assert_eq!(buffer.len(), n_before, "an oversized frame was consumed");
                break;
            }
        }
    }

    let mut buffer = data.to_vec();
    while let Ok(Some(_)) | Err(FrameError::Malformed(_)) =
        proto::decode::<Reply>(&mut buffer, MAX_REPLY)
    {}
}

/// Encodes `request` and decodes it again.
fn round_trip(request: &Request) {
    let mut frame = proto::encode(request);
    assert_eq!(
        proto::frame_len(&frame, MAX_REQUEST),
        Ok(Some(frame.len() - 4)),
        "the frame of {request:?} announces another length"
    );
    let decoded = proto::decode::<Request>(&mut frame, MAX_REQUEST);
    assert_eq!(
        decoded,
        Ok(Some(request.clone())),
        "{request:?} does not survive encoding"
    );
    assert!(frame.is_empty(), "encoding {request:?} left bytes over");
}

/// Does with `request` what the daemon does first.
fn follow(request: Request) {
    match request {
        Request::Submit { submit, .. } => {
            let _ = JobRequest::try_from(submit);
        }
        Request::Console { line, .. } => {
            let _ = parse_line(&line);
        }
        Request::Reattach { reattach, .. } => {
            if reattach.check().is_ok() {
                let _ = reattach.descriptor_count();
            }
        }
        Request::Hold
        | Request::Release
        | Request::Kill
        | Request::Winch
        | Request::Signal { .. } => {}
    }
}

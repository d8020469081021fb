//! The two PMI wire formats, read from a byte stream and written back.
//!
//! PMI-1 ("simple PMI", Flux RFC 13): one command per line, `key=value`
//! words separated by spaces, the first being `cmd=NAME`; a spawn comes as
//! `mcmd=spawn` and lines up to `endcmd`. PMI-2: a 6-character decimal
//! length, then that many bytes of `key=value;` pairs, the first being
//! `cmd=NAME`, a `;` inside a value written `;;`. MPICH's PMI-2 client
//! opens with a PMI-1 `init` line and switches after the reply; other
//! clients open with a PMI-2 frame at once: [`Decoder`] tells which from
//! the first byte.
//!
//! Pure and bounded: a [`Decoder`] holds at most one command's bytes (the
//! limits below) plus what one read brought, and refuses more.
#![forbid(unsafe_code)]

use std::fmt;

/// The longest PMI-1 line, newline included (MPICH's `PMIU_MAXLINE`).
pub const MAX_LINE: usize = 1024;
/// The longest PMI-2 command, length prefix excluded (MPICH's
/// `PMII_MAX_COMMAND_LEN`).
pub const MAX_FRAME: usize = 64 * 1024;
/// The most bytes of one PMI-1 multi-line (`mcmd=`) command.
pub const MAX_MCMD: usize = 64 * 1024;
/// The length prefix of a PMI-2 command.
const PREFIX: usize = 6;

/// Which wire format a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// PMI-1 lines.
    V1,
    /// PMI-2 length-prefixed commands.
    V2,
}

/// One command: its name and its attributes, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// The value of `cmd=` (or `mcmd=`).
    pub cmd: String,
    /// The other `key=value` pairs.
    pub attrs: Vec<(String, String)>,
}

impl Command {
    /// The value of the first attribute named `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }
}

/// Why bytes from a rank are not PMI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// A PMI-1 line longer than [`MAX_LINE`].
    LineTooLong,
    /// A multi-line command longer than [`MAX_MCMD`].
    McmdTooLong,
    /// A PMI-2 length prefix that is not a number from 1 to [`MAX_FRAME`].
    BadLength(String),
    /// Not UTF-8.
    NotText,
    /// A word or pair that is not `key=value`, or a command without `cmd=`
    /// first; the text says which.
    Malformed(String),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::LineTooLong => {
                write!(f, "a PMI-1 line longer than {MAX_LINE} bytes")
            }
            WireError::McmdTooLong => {
                write!(f, "a PMI-1 multi-line command longer than {MAX_MCMD} bytes")
            }
            WireError::BadLength(text) => write!(
                f,
                "a PMI-2 length prefix {text:?} that is not a number from 1 to {MAX_FRAME}"
            ),
            WireError::NotText => f.write_str("bytes that are not UTF-8 text"),
            WireError::Malformed(what) => f.write_str(what),
        }
    }
}

/// Shortens hostile text for a message: at most 40 characters, escaped.
pub fn excerpt(bytes: &[u8]) -> String {
    let text: String = String::from_utf8_lossy(&bytes[..bytes.len().min(40)])
        .escape_debug()
        .collect();
    if bytes.len() > 40 {
        format!("\"{text}...\"")
    } else {
        format!("\"{text}\"")
    }
}

/// The bytes received from one rank and not yet decoded, and the wire
/// format it speaks once known.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    wire: Option<Wire>,
    /// Lines of a multi-line command so far (`mcmd=`), and their bytes.
    mcmd: Option<(Command, usize)>,
}

impl Decoder {
    /// A decoder that has seen nothing.
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// The wire format, once the first byte told it.
    pub fn wire(&self) -> Option<Wire> {
        self.wire
    }

    /// From now on, PMI-2 frames (after an `init` with `pmi_version=2`).
    pub fn switch_to_v2(&mut self) {
        self.wire = Some(Wire::V2);
    }

    /// Bytes held.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Appends received bytes; the caller then takes the commands with
    /// [`Decoder::next_command`] until it returns `None`.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete command, `None` when more bytes are needed, or
    /// why the bytes are not PMI (after which the decoder is of no use).
    pub fn next_command(&mut self) -> Result<Option<(Wire, Command)>, WireError> {
        loop {
            if self.buf.is_empty() {
                return Ok(None);
            }
            let wire =
                *self
                    .wire
                    .get_or_insert(if self.buf[0].is_ascii_digit() || self.buf[0] == b' ' {
                        Wire::V2
                    } else {
                        Wire::V1
                    });
            match wire {
                Wire::V2 => return self.next_frame().map(|c| c.map(|c| (Wire::V2, c))),
                Wire::V1 => {
                    let Some(line) = self.next_line()? else {
                        return Ok(None);
                    };
                    if let Some(command) = self.v1_line(&line)? {
                        return Ok(Some((Wire::V1, command)));
                    }
                }
            }
        }
    }

    /// Takes one line (without its newline), or `None` if incomplete.
    fn next_line(&mut self) -> Result<Option<Vec<u8>>, WireError> {
        match self.buf.iter().position(|&byte| byte == b'\n') {
            Some(end) if end + 1 > MAX_LINE => Err(WireError::LineTooLong),
            Some(end) => {
                let line = self.buf[..end].to_vec();
                self.buf.drain(..=end);
                Ok(Some(line))
            }
            None if self.buf.len() >= MAX_LINE => Err(WireError::LineTooLong),
            None => Ok(None),
        }
    }

    /// A line of PMI-1: a whole command, or a part of a multi-line one
    /// (`None` until its `endcmd`).
    fn v1_line(&mut self, line: &[u8]) -> Result<Option<Command>, WireError> {
        let text = std::str::from_utf8(line).map_err(|_| WireError::NotText)?;
        if let Some((mut command, bytes)) = self.mcmd.take() {
            let bytes = bytes + line.len() + 1;
            if bytes > MAX_MCMD {
                return Err(WireError::McmdTooLong);
            }
            if text.trim() == "endcmd" {
                return Ok(Some(command));
            }
            let (key, value) = split_pair(text.trim())?;
            command.attrs.push((key.to_string(), value.to_string()));
            self.mcmd = Some((command, bytes));
            return Ok(None);
        }
        let mut words = text.split(' ').filter(|word| !word.is_empty());
        let Some(first) = words.next() else {
            return Err(WireError::Malformed("an empty PMI-1 line".to_string()));
        };
        let (key, cmd) = split_pair(first)?;
        let mut command = Command {
            cmd: cmd.to_string(),
            attrs: Vec::new(),
        };
        for word in words {
            let (key, value) = split_pair(word)?;
            command.attrs.push((key.to_string(), value.to_string()));
        }
        match key {
            "cmd" => Ok(Some(command)),
            "mcmd" => {
                self.mcmd = Some((command, line.len() + 1));
                Ok(None)
            }
            _ => Err(WireError::Malformed(format!(
                "a PMI-1 line that starts with {} instead of cmd=",
                excerpt(first.as_bytes())
            ))),
        }
    }

    /// Takes one PMI-2 command, or `None` if incomplete.
    fn next_frame(&mut self) -> Result<Option<Command>, WireError> {
        if self.buf.len() < PREFIX {
            return Ok(None);
        }
        let prefix = &self.buf[..PREFIX];
        let digits = std::str::from_utf8(prefix)
            .ok()
            .map(str::trim)
            .filter(|text| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()));
        let len = digits
            .and_then(|text| text.parse::<usize>().ok())
            .filter(|len| (1..=MAX_FRAME).contains(len))
            .ok_or_else(|| WireError::BadLength(String::from_utf8_lossy(prefix).into_owned()))?;
        if self.buf.len() < PREFIX + len {
            return Ok(None);
        }
        let body: Vec<u8> = self.buf[PREFIX..PREFIX + len].to_vec();
        self.buf.drain(..PREFIX + len);
        parse_v2(&body).map(Some)
    }
}

/// `key=value`, with a key that is not empty.
fn split_pair(word: &str) -> Result<(&str, &str), WireError> {
    match word.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key, value)),
        _ => Err(WireError::Malformed(format!(
            "{} where a key=value pair belongs",
            excerpt(word.as_bytes())
        ))),
    }
}

/// The pairs of a PMI-2 command body. NUL bytes after the last pair are
/// ignored, as some clients send them.
pub fn parse_v2(body: &[u8]) -> Result<Command, WireError> {
    let end = body
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |last| last + 1);
    let text = std::str::from_utf8(&body[..end]).map_err(|_| WireError::NotText)?;
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let Some((key, after)) = rest.split_once('=') else {
            return Err(WireError::Malformed(format!(
                "{} where a PMI-2 key=value; pair belongs",
                excerpt(rest.as_bytes())
            )));
        };
        if key.is_empty() || key.contains(';') {
            return Err(WireError::Malformed(format!(
                "{} where a PMI-2 key belongs",
                excerpt(key.as_bytes())
            )));
        }
        // The value ends at a `;` that is not doubled.
        let bytes = after.as_bytes();
        let mut value = String::new();
        let mut i = 0;
        let mut closed = false;
        while i < bytes.len() {
            if bytes[i] == b';' {
                if bytes.get(i + 1) == Some(&b';') {
                    value.push(';');
                    i += 2;
                    continue;
                }
                closed = true;
                break;
            }
            let start = i;
            while i < bytes.len() && bytes[i] != b';' {
                i += 1;
            }
            value.push_str(&after[start..i]);
        }
        pairs.push((key.to_string(), value));
        rest = if closed { &after[i + 1..] } else { "" };
    }
    let mut pairs = pairs.into_iter();
    match pairs.next() {
        Some((key, cmd)) if key == "cmd" => Ok(Command {
            cmd,
            attrs: pairs.collect(),
        }),
        _ => Err(WireError::Malformed(
            "a PMI-2 command that does not start with cmd=".to_string(),
        )),
    }
}

/// A reply in `wire`'s format: `cmd=NAME` and the pairs.
pub fn encode(wire: Wire, cmd: &str, attrs: &[(&str, &str)]) -> Vec<u8> {
    match wire {
        Wire::V1 => {
            let mut line = format!("cmd={cmd}");
            for (key, value) in attrs {
                line.push(' ');
                line.push_str(key);
                line.push('=');
                line.push_str(value);
            }
            line.push('\n');
            line.into_bytes()
        }
        Wire::V2 => {
            let mut body = format!("cmd={cmd};");
            for (key, value) in attrs {
                body.push_str(key);
                body.push('=');
                body.push_str(&value.replace(';', ";;"));
                body.push(';');
            }
            let mut frame = format!("{:<6}", body.len()).into_bytes();
            frame.extend_from_slice(body.as_bytes());
            frame
        }
    }
}

/// The number a rank that reached the server by port gives in its first
/// line, PMI-1's `cmd=initack pmiid=N` (MPICH's client sends it when
/// `PMI_PORT` and `PMI_ID` are set); `None` for any other line.
pub fn initack_id(line: &[u8]) -> Option<usize> {
    let line = std::str::from_utf8(line).ok()?.trim_end_matches('\r');
    let mut words = line.split_whitespace();
    if words.next()? != "cmd=initack" {
        return None;
    }
    let id = words.next()?.strip_prefix("pmiid=")?;
    if words.next().is_some() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    id.parse().ok()
}

/// The answer to [`initack_id`]: the acknowledgement, then the world's
/// size, the rank and the debug flag, in the order MPICH reads them.
pub fn initack_reply(size: usize, rank: usize) -> Vec<u8> {
    format!("cmd=initack\ncmd=set size={size}\ncmd=set rank={rank}\ncmd=set debug=0\n").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(decoder: &mut Decoder) -> Result<Vec<(Wire, Command)>, WireError> {
        let mut out = Vec::new();
        while let Some(command) = decoder.next_command()? {
            out.push(command);
        }
        Ok(out)
    }

    #[test]
    fn pmi1_lines_split_into_commands_whatever_the_reads() {
        let bytes = b"cmd=init pmi_version=1 pmi_subversion=1\ncmd=put kvsname=k key=a value=x=y\ncmd=get_maxes\n";
        for cut in 0..bytes.len() {
            let mut decoder = Decoder::new();
            decoder.push(&bytes[..cut]);
            let mut got = all(&mut decoder).unwrap();
            decoder.push(&bytes[cut..]);
            got.extend(all(&mut decoder).unwrap());
            assert_eq!(got.len(), 3, "cut at {cut}");
            assert_eq!(got[0].1.cmd, "init");
            assert_eq!(got[1].1.get("value"), Some("x=y"));
            assert_eq!(got[2].1.cmd, "get_maxes");
            assert!(got.iter().all(|(wire, _)| *wire == Wire::V1));
        }
    }

    #[test]
    fn a_multi_line_spawn_is_one_command() {
        let mut decoder = Decoder::new();
        decoder.push(b"mcmd=spawn\nnprocs=2\nexecname=a.out\nendcmd\ncmd=finalize\n");
        let got = all(&mut decoder).unwrap();
        assert_eq!(got[0].1.cmd, "spawn");
        assert_eq!(got[0].1.get("execname"), Some("a.out"));
        assert_eq!(got[1].1.cmd, "finalize");
    }

    #[test]
    fn pmi2_frames_unescape_doubled_semicolons() {
        let frame = encode(Wire::V2, "kvs-put", &[("key", "a;b"), ("value", "x;;y")]);
        assert_eq!(&frame[..6], b"34    ");
        let mut decoder = Decoder::new();
        decoder.push(&frame);
        decoder.push(b"24    cmd=kvs-fence;\0\0\0\0\0\0\0\0\0\0");
        let got = all(&mut decoder).unwrap();
        assert_eq!(got[0].0, Wire::V2);
        assert_eq!(got[0].1.get("key"), Some("a;b"));
        assert_eq!(got[0].1.get("value"), Some("x;;y"));
        assert_eq!(got[1].1.cmd, "kvs-fence");
    }

    #[test]
    fn a_v1_opening_switches_to_v2_frames_when_told() {
        let mut decoder = Decoder::new();
        decoder.push(b"cmd=init pmi_version=2 pmi_subversion=0\n");
        decoder.push(&encode(Wire::V2, "fullinit", &[("pmirank", "1")]));
        let (wire, init) = decoder.next_command().unwrap().unwrap();
        assert_eq!((wire, init.get("pmi_version")), (Wire::V1, Some("2")));
        decoder.switch_to_v2();
        let (wire, full) = decoder.next_command().unwrap().unwrap();
        assert_eq!((wire, full.cmd.as_str()), (Wire::V2, "fullinit"));
    }

    #[test]
    fn garbage_is_refused_with_what_was_wrong() {
        let refuse = |bytes: &[u8]| {
            let mut decoder = Decoder::new();
            decoder.push(bytes);
            all(&mut decoder).unwrap_err().to_string()
        };
        assert_eq!(
            refuse(b"hello world\n"),
            "\"hello\" where a key=value pair belongs"
        );
        assert_eq!(
            refuse(b"key=value\n"),
            "a PMI-1 line that starts with \"key=value\" instead of cmd="
        );
        assert_eq!(
            refuse(&[b'c', 0xff, b'\n']),
            "bytes that are not UTF-8 text"
        );
        assert_eq!(
            refuse(&[b'x'; MAX_LINE]),
            "a PMI-1 line longer than 1024 bytes"
        );
        assert_eq!(
            refuse(b"99999999"),
            "a PMI-2 length prefix \"999999\" that is not a number from 1 to 65536"
        );
        assert_eq!(
            refuse(b"4     a=b;"),
            "a PMI-2 command that does not start with cmd="
        );
        let mut long = b"mcmd=spawn\n".to_vec();
        while long.len() <= MAX_MCMD {
            long.extend_from_slice(b"arg=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n");
        }
        assert_eq!(
            refuse(&long),
            "a PMI-1 multi-line command longer than 65536 bytes"
        );
    }

    #[test]
    fn a_rank_by_port_names_itself_in_initack_and_is_told_its_place() {
        assert_eq!(initack_id(b"cmd=initack pmiid=3"), Some(3));
        assert_eq!(initack_id(b"cmd=initack pmiid=0 "), Some(0));
        assert_eq!(initack_id(b"cmd=init pmi_version=1 pmi_subversion=1"), None);
        assert_eq!(initack_id(b"cmd=initack pmiid=-1"), None);
        assert_eq!(initack_id(b"cmd=initack pmiid=1 extra=2"), None);
        assert_eq!(initack_id(b"cmd=initack"), None);
        assert_eq!(initack_id(b"\xff"), None);
        assert_eq!(
            initack_reply(4, 2),
            b"cmd=initack\ncmd=set size=4\ncmd=set rank=2\ncmd=set debug=0\n".to_vec()
        );
    }
}

//! The launch data of a job, packed in one shared allocation: its stages'
//! argument vectors, its environment, its working directory and what its
//! processes inherit from the caller. Identical submissions share one copy.
#![forbid(unsafe_code)]

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::rc::Rc;

use scored_proto::inherit::Inherited;

/// A job's programs, environment and working directory, packed in one
/// allocation and shared: identical submissions (a user's many jobs of one
/// script, from one shell) hold a single copy. The core interns them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Launch(Rc<[u8]>);

impl Launch {
    /// Packs the parts: counts and lengths as little-endian `u32`, then bytes.
    pub fn pack(stages: &[Vec<OsString>], env: &[(OsString, OsString)], cwd: &OsStr) -> Launch {
        fn put(out: &mut Vec<u8>, bytes: &[u8]) {
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(bytes);
        }
        let mut out = Vec::new();
        out.extend_from_slice(&(stages.len() as u32).to_le_bytes());
        for argv in stages {
            out.extend_from_slice(&(argv.len() as u32).to_le_bytes());
            for arg in argv {
                put(&mut out, arg.as_bytes());
            }
        }
        out.extend_from_slice(&(env.len() as u32).to_le_bytes());
        for (key, value) in env {
            put(&mut out, key.as_bytes());
            put(&mut out, value.as_bytes());
        }
        put(&mut out, cwd.as_bytes());
        Launch(out.into())
    }

    /// Packs the parts and what the processes inherit from the caller
    /// (after the working directory: the ignored signals as a `u64`, the
    /// umask as a `u32` or `u32::MAX` for none, then a count of limits,
    /// each a `u32` index and two `u64`, then, if either is known, the
    /// priorities: a `u32` of which are present (bit 0 nice, bit 1 I/O),
    /// the nice value and the I/O priority as `u32`).
    pub fn pack_with(
        stages: &[Vec<OsString>],
        env: &[(OsString, OsString)],
        cwd: &OsStr,
        inherited: &Inherited,
    ) -> Launch {
        let mut out = Launch::pack(stages, env, cwd).0.to_vec();
        out.extend_from_slice(&inherited.ignored.to_le_bytes());
        out.extend_from_slice(&inherited.umask.unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(&(inherited.rlimits.len() as u32).to_le_bytes());
        for &(resource, soft, hard) in &inherited.rlimits {
            out.extend_from_slice(&u32::from(resource).to_le_bytes());
            out.extend_from_slice(&soft.to_le_bytes());
            out.extend_from_slice(&hard.to_le_bytes());
        }
        // Only when there are any, so that what a launch without them
        // packs stays the same bytes.
        let present =
            u32::from(inherited.nice.is_some()) | u32::from(inherited.ioprio.is_some()) << 1;
        if present != 0 {
            out.extend_from_slice(&present.to_le_bytes());
            out.extend_from_slice(&(inherited.nice.unwrap_or(0) as u32).to_le_bytes());
            out.extend_from_slice(&inherited.ioprio.unwrap_or(0).to_le_bytes());
        }
        Launch(out.into())
    }

    /// The packed bytes, as [`Launch::pack`] or [`Launch::pack_with`] made them.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// What the processes inherit from the caller (nothing for a launch
    /// packed without it).
    pub fn inherited(&self) -> Inherited {
        let mut reader = self.reader();
        reader.skip_stages();
        let n_vars = reader.count();
        for _ in 0..n_vars * 2 + 1 {
            reader.os();
        }
        if reader.at >= reader.bytes.len() {
            return Inherited::default();
        }
        let ignored = reader.u64();
        let umask = match reader.count() as u32 {
            u32::MAX => None,
            mask => Some(mask),
        };
        let n_limits = reader.count();
        let rlimits = (0..n_limits)
            .map(|_| (reader.count() as u8, reader.u64(), reader.u64()))
            .collect();
        let (mut nice, mut ioprio) = (None, None);
        if reader.at < reader.bytes.len() {
            let present = reader.count();
            let (value, io) = (reader.count() as u32 as i32, reader.count() as u32);
            nice = (present & 1 != 0).then_some(value);
            ioprio = (present & 2 != 0).then_some(io);
        }
        Inherited {
            ignored,
            rlimits,
            umask,
            nice,
            ioprio,
        }
    }

    fn reader(&self) -> Reader<'_> {
        Reader {
            bytes: &self.0,
            at: 0,
        }
    }

    /// The argument vectors of all stages.
    pub fn stages(&self) -> Vec<Vec<OsString>> {
        let mut reader = self.reader();
        let n_stages = reader.count();
        (0..n_stages).map(|_| reader.argv()).collect()
    }

    /// The argument vector of one stage.
    pub fn stage(&self, idx: usize) -> Vec<OsString> {
        let mut reader = self.reader();
        let n_stages = reader.count();
        let mut argv = Vec::new();
        for stage in 0..n_stages.min(idx + 1) {
            argv = reader.argv();
            if stage == idx {
                break;
            }
        }
        argv
    }

    /// How many stages there are.
    pub fn n_stages(&self) -> usize {
        self.reader().count()
    }

    /// The environment, in order.
    pub fn env(&self) -> Vec<(OsString, OsString)> {
        let mut reader = self.reader();
        reader.skip_stages();
        let n_vars = reader.count();
        (0..n_vars).map(|_| (reader.os(), reader.os())).collect()
    }

    /// The working directory.
    pub fn cwd(&self) -> OsString {
        let mut reader = self.reader();
        reader.skip_stages();
        let n_vars = reader.count();
        for _ in 0..n_vars * 2 {
            reader.os();
        }
        reader.os()
    }

    /// Bytes held (shared among identical launches).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the packing is empty (never: it always holds its counts).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `other` is the very same allocation.
    pub fn same(&self, other: &Launch) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }

    /// How many holders share this allocation.
    pub fn holders(&self) -> usize {
        Rc::strong_count(&self.0)
    }
}

/// Reads a packed [`Launch`]; the packing is ours, so reads past the end
/// only happen on a bug and yield empty values rather than a panic.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn count(&mut self) -> usize {
        let Some(raw) = self.bytes.get(self.at..self.at + 4) else {
            return 0;
        };
        self.at += 4;
        u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]) as usize
    }

    fn u64(&mut self) -> u64 {
        let Some(raw) = self.bytes.get(self.at..self.at + 8) else {
            return 0;
        };
        self.at += 8;
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(raw);
        u64::from_le_bytes(bytes)
    }

    fn os(&mut self) -> OsString {
        let len = self.count();
        let end = (self.at + len).min(self.bytes.len());
        let value = OsString::from_vec(self.bytes[self.at.min(end)..end].to_vec());
        self.at = end;
        value
    }

    fn argv(&mut self) -> Vec<OsString> {
        let n_args = self.count();
        (0..n_args).map(|_| self.os()).collect()
    }

    fn skip_stages(&mut self) {
        let n_stages = self.count();
        for _ in 0..n_stages {
            self.argv();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_packing_round_trips() {
        let stages = vec![
            vec!["sh".into(), "-c".into(), "".into()],
            vec![OsString::from_vec(vec![0xff, 0])],
        ];
        let env = vec![("A".into(), "1".into()), ("EMPTY".into(), "".into())];
        let launch = Launch::pack(&stages, &env, OsStr::new("/tmp"));
        assert_eq!(launch.stages(), stages);
        assert_eq!(launch.stage(1), stages[1]);
        assert_eq!(launch.n_stages(), 2);
        assert_eq!(launch.env(), env);
        assert_eq!(launch.cwd(), "/tmp");
        assert_eq!(launch.inherited(), Inherited::default());
        let inherited = Inherited {
            ignored: 1 << 63 | 0b110,
            rlimits: vec![(9, 64, 1024), (15, u64::MAX, u64::MAX)],
            umask: Some(0o077),
            nice: Some(-1),
            ioprio: Some(0x4003),
        };
        let launch = Launch::pack_with(&stages, &env, OsStr::new("/tmp"), &inherited);
        assert_eq!(launch.stages(), stages);
        assert_eq!(launch.env(), env);
        assert_eq!(launch.cwd(), "/tmp");
        assert_eq!(launch.inherited(), inherited);
        let none = Inherited::default();
        let launch = Launch::pack_with(&stages, &env, OsStr::new("/"), &none);
        assert_eq!(launch.inherited(), none);
    }
}

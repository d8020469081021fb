//! The hosts database on disk: the one [`Loader`] that reads real files.
//!
//! The parser and resolver live in the core crate (`scored_core::hosts`) and
//! reach files only through the `Loader` trait; this module is the daemon's
//! side of that boundary.
#![forbid(unsafe_code)]

use std::io::{self, Read};
use std::path::Path;

use scored_core::hosts::{Loader, MAX_FILE_SIZE};

/// The [`Loader`] that reads real files, refusing files larger than
/// [`MAX_FILE_SIZE`] and files that are not UTF-8 text.
#[derive(Debug, Clone, Copy, Default)]
pub struct FsLoader;

impl Loader for FsLoader {
    fn load(&mut self, path: &Path) -> io::Result<String> {
        let file = std::fs::File::open(path)?;
        let too_large = || {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is larger than {} MiB",
                    path.display(),
                    MAX_FILE_SIZE >> 20
                ),
            )
        };
        if file.metadata()?.len() > MAX_FILE_SIZE {
            return Err(too_large());
        }
        // The length in the metadata is not trusted: a device such as
        // /dev/zero reports 0 and never ends, so the read itself is bounded.
        let mut bytes = Vec::new();
        file.take(MAX_FILE_SIZE + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > MAX_FILE_SIZE {
            return Err(too_large());
        }
        String::from_utf8(bytes).map_err(|error| {
            let offset = error.utf8_error().valid_up_to();
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is not UTF-8 text (invalid byte at offset {offset})",
                    path.display()
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scored_core::cluster::Machine;
    use scored_core::hosts::{load_topology, Diagnostic};
    use scored_proto::units::CpuSet;

    fn render_diagnostics(diagnostics: &[Diagnostic]) -> String {
        diagnostics
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn machine() -> Machine {
        Machine {
            online_cpus: CpuSet::from_cpus(0..4),
            total_memory: 16 << 30,
        }
    }

    #[test]
    fn fs_loader_refuses_what_it_cannot_read() {
        let dir = std::env::temp_dir().join(format!("scored-hosts-test-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let bad = dir.join("bad.db");
        let good = dir.join("good.db");
        std::fs::write(&bad, b"n\xff").expect("temporary directory is writable");
        std::fs::write(&good, b"n cpus=0\n").expect("temporary directory is writable");
        let error = FsLoader.load(&bad).map(|_| ()).unwrap_err().to_string();
        assert_eq!(
            error,
            format!(
                "{} is not UTF-8 text (invalid byte at offset 1)",
                bad.display()
            )
        );
        assert!(FsLoader.load(&dir.join("missing.db")).is_err());
        let topology = load_topology(&good, &mut FsLoader, None, &machine())
            .map_err(|d| render_diagnostics(&d));
        assert_eq!(topology.map(|t| t.hosts.len()), Ok(1));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

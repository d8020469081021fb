//! What scrun does for the batch options: checks, as the submitting user,
//! that the output files can be created before anything is sent (so a
//! path the user may not write is refused, and nothing is created), and
//! follows a `-batch` submission to the id it prints.
//!
//! scrun runs as the user, so `access(2)` here answers with the user's own
//! rights, symbolic links followed as the user's open will follow them;
//! scored never opens these paths (the rank's own process does, once it is
//! the user).
#![forbid(unsafe_code)]

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use nix::unistd::{access, AccessFlags};
use scored_proto::batch::{BatchOptions, Expansion, Pattern};
use scored_proto::client::Connection;
use scored_proto::exitcode;
use scored_proto::proto::Reply;

use crate::error::Fatal;

/// Checks that the user may create or write each output file the options
/// name, relative to `cwd`: the directory exists and the user may write
/// in it, or the file exists and the user may write it. A directory that
/// depends on the job's id (`%j`) is known only once the job has one: the
/// rank's open says then. `name` is the job's name, `index` its first
/// array index.
pub fn check_output(
    options: &BatchOptions,
    name: &str,
    index: Option<u32>,
    cwd: &Path,
) -> Result<(), Fatal> {
    for (option, text) in [("output", &options.output), ("error", &options.error)] {
        let Some(text) = text else { continue };
        let pattern = Pattern::parse(option, text, options.array.is_some())
            .map_err(|error| Fatal::new(exitcode::USAGE, error.to_string()))?;
        check_pattern(option, &pattern, name, index, cwd)?;
    }
    Ok(())
}

fn check_pattern(
    option: &str,
    pattern: &Pattern,
    name: &str,
    index: Option<u32>,
    cwd: &Path,
) -> Result<(), Fatal> {
    let text = pattern.as_str();
    let (dir, file) = match text.rfind('/') {
        Some(0) => ("/", &text[1..]),
        Some(at) => (&text[..at], &text[at + 1..]),
        None => (".", text),
    };
    let refuse = |why: String| {
        Err(Fatal::new(
            exitcode::USAGE,
            format!("option '{option}': cannot write {}: {why}", quoted(text)),
        ))
    };
    if file.is_empty() {
        return refuse("it names a directory, not a file".into());
    }
    if dir.contains("%j") {
        return Ok(());
    }
    let with = Expansion {
        job: 0,
        rank: Some(0),
        index,
        name,
    };
    let dir = match dir {
        "." => cwd.to_path_buf(),
        _ => cwd.join(expand(dir, &with)),
    };
    match std::fs::metadata(&dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return refuse(format!("{} is not a directory", dir.display())),
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return refuse(format!("directory {} does not exist", dir.display()))
        }
        Err(error) => return refuse(format!("{}: {error}", dir.display())),
    }
    // A fixed file name that exists must be writable; one that does not
    // (or that each job names anew) is created in the directory.
    if !file.contains('%') {
        let path = dir.join(file);
        let denied = |desc: &str| {
            refuse(format!(
                "{}: {desc} (as user {})",
                path.display(),
                nix::unistd::getuid()
            ))
        };
        match std::fs::metadata(&path) {
            Ok(meta) if meta.is_dir() => {
                return refuse(format!("{} is a directory", path.display()));
            }
            Ok(_) => {
                return match access(&path, AccessFlags::W_OK) {
                    Ok(()) => Ok(()),
                    Err(errno) => denied(errno.desc()),
                };
            }
            // Nothing there (or a link to nothing yet): the file is made
            // in the directory, checked below.
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            // Something the user cannot even look at, such as a link into
            // a directory closed to the user: the rank's open would fail
            // the same way.
            Err(error) => {
                let desc = error
                    .raw_os_error()
                    .map(|raw| nix::errno::Errno::from_raw(raw).desc().to_string())
                    .unwrap_or_else(|| error.to_string());
                return denied(&desc);
            }
        }
    }
    match access(&dir, AccessFlags::W_OK | AccessFlags::X_OK) {
        Ok(()) => Ok(()),
        Err(errno) => refuse(format!(
            "you (uid {}) may not create files in {}: {}",
            nix::unistd::getuid(),
            dir.display(),
            errno.desc()
        )),
    }
}

/// A pattern's text (a directory part) with its escapes expanded.
fn expand(text: &str, with: &Expansion) -> PathBuf {
    // The directory part of a valid pattern is a valid pattern of its own.
    match Pattern::parse("output", text, true) {
        Ok(pattern) => PathBuf::from(pattern.expand(with)),
        Err(_) => PathBuf::from(text),
    }
}

fn quoted(text: &str) -> String {
    scored_proto::units::quote(text)
}

/// Waits for scored's answer to a `-batch` submission: prints the job id
/// alone on stdout (and, for a job that will never run, why on stderr),
/// and returns scrun's status.
pub fn follow(connection: &mut Connection) -> Result<i32, Fatal> {
    loop {
        let reply = connection.recv().map_err(|error| {
            Fatal::with_source(
                exitcode::UNREACHABLE,
                "scored went away before it took the job",
                error,
            )
        })?;
        match reply {
            Reply::Accepted { job, waits, .. } => {
                let mut stdout = io::stdout().lock();
                let printed = writeln!(stdout, "{job}").and_then(|()| stdout.flush());
                if let Err(error) = printed {
                    return Err(Fatal::with_source(
                        exitcode::INTERNAL,
                        format!("job {job} was submitted, but its id cannot be printed"),
                        error,
                    ));
                }
                if let Some(why) = waits.filter(|why| why.starts_with("never ran")) {
                    crate::session::say(&format!("job {job} {why}"));
                }
                return Ok(exitcode::OK);
            }
            Reply::Rejected { reason, .. } => {
                return Err(Fatal::new(
                    exitcode::REJECTED,
                    format!("job rejected: {reason}"),
                ))
            }
            Reply::Error { message } => {
                return Err(Fatal::new(exitcode::INTERNAL, format!("scored: {message}")))
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(output: &str, cwd: &Path) -> Result<(), String> {
        let options = BatchOptions {
            output: Some(output.into()),
            ..BatchOptions::default()
        };
        check_output(&options, "job", None, cwd).map_err(|fatal| fatal.to_string())
    }

    #[test]
    fn a_file_in_a_writable_directory_passes() {
        let dir = std::env::temp_dir();
        assert_eq!(check("out.%j", &dir), Ok(()));
        assert_eq!(
            check(&format!("{}/x.%r", dir.display()), Path::new("/")),
            Ok(())
        );
        // A directory that depends on the id is known only later.
        assert_eq!(check("no/such/%j/out", &dir), Ok(()));
    }

    #[test]
    fn a_missing_directory_or_a_directory_is_refused_naming_the_option_and_path() {
        let dir = std::env::temp_dir();
        let error = check("no/such/dir/out.%j", &dir).unwrap_err();
        assert!(
            error.starts_with("option 'output': cannot write 'no/such/dir/out.%j': directory "),
            "{error}"
        );
        assert!(error.ends_with("no/such/dir does not exist"), "{error}");
        let error = check("out/", &dir).unwrap_err();
        assert!(error.contains("names a directory"), "{error}");
        let error = check(".", Path::new("/")).unwrap_err();
        assert!(error.contains("is a directory"), "{error}");
    }

    #[test]
    fn the_array_index_and_name_expand_in_the_directory() {
        let base = std::env::temp_dir().join(format!("scrun-batch-{}", std::process::id()));
        std::fs::create_dir_all(base.join("job-7")).unwrap();
        let options = BatchOptions {
            output: Some("%x-%a/out".into()),
            array: Some(scored_proto::batch::ArraySpec::parse("7-9").unwrap()),
            ..BatchOptions::default()
        };
        assert!(check_output(&options, "job", Some(7), &base).is_ok());
        assert!(check_output(&options, "other", Some(7), &base).is_err());
        std::fs::remove_dir_all(&base).unwrap();
    }
}

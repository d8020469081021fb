//! The clients' system-wide setting: the `[client]` table of
//! `/etc/scored/scored.toml` (the file the shared daemon's unit reads), by
//! which an operator names the shared daemon's socket for every scrun and
//! sc_console of the machine and says whether scrun may fall back to a
//! private daemon when the shared one does not answer.
//!
//! ```toml
//! socket = "/run/scored/scored.sock"   # scored's own socket (--socket)
//! [client]
//! socket = "/run/scored/scored.sock"   # default: the socket above
//! private = false                      # default: true
//! ```
//!
//! The rest of the file is scored's and is not read here. The variable
//! `SCORED_CLIENT_CONFIG` names another file (empty: none). Pure apart
//! from [`read`], which reads the file.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The file clients read their setting from, unless
/// [`CONFIG_ENV`] names another.
pub const SYSTEM_CONFIG: &str = "/etc/scored/scored.toml";

/// The environment variable that names the clients' file instead of
/// [`SYSTEM_CONFIG`]; empty means none.
pub const CONFIG_ENV: &str = "SCORED_CLIENT_CONFIG";

/// The `[client]` table as written; scored checks it too when it reads
/// the same file with `--config`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSection {
    /// The shared daemon's socket.
    pub socket: Option<PathBuf>,
    /// Whether scrun may start a private daemon when the shared one does
    /// not answer.
    pub private: Option<bool>,
}

impl ClientSection {
    /// Checks what a value cannot say by its type: the socket is an
    /// absolute path.
    pub fn check(&self) -> Result<(), String> {
        match &self.socket {
            Some(socket) if !socket.is_absolute() => Err(format!(
                "[client] socket {} is not an absolute path",
                socket.display()
            )),
            _ => Ok(()),
        }
    }
}

/// What the clients take from the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSettings {
    /// The file the settings came from, if one was read.
    pub file: Option<PathBuf>,
    /// The shared daemon's socket: `[client] socket`, else scored's own
    /// `socket` of the same file.
    pub socket: Option<PathBuf>,
    /// scrun may start a private daemon (`[client] private`, true by
    /// default).
    pub private: bool,
}

impl Default for ClientSettings {
    fn default() -> ClientSettings {
        ClientSettings {
            file: None,
            socket: None,
            private: true,
        }
    }
}

/// Parses the file's text; an error names the file and, where the TOML
/// parser says, the line.
pub fn parse(path: &Path, text: &str) -> Result<ClientSettings, String> {
    let table: toml::Table = toml::from_str(text).map_err(|error| {
        let line = error
            .span()
            .map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1);
        match line {
            Some(line) => format!("{}:{line}: {}", path.display(), error.message()),
            None => format!("{}: {}", path.display(), error.message()),
        }
    })?;
    let section = match table.get("client") {
        Some(value) => ClientSection::deserialize(value.clone())
            .map_err(|error| format!("{}: [client]: {}", path.display(), error.message()))?,
        None => ClientSection::default(),
    };
    section
        .check()
        .map_err(|error| format!("{}: {error}", path.display()))?;
    let daemon_socket = match table.get("socket") {
        Some(toml::Value::String(socket)) if Path::new(socket).is_absolute() => {
            Some(PathBuf::from(socket))
        }
        _ => None,
    };
    Ok(ClientSettings {
        file: Some(path.to_path_buf()),
        socket: section.socket.or(daemon_socket),
        private: section.private.unwrap_or(true),
    })
}

/// Reads the clients' file: `$SCORED_CLIENT_CONFIG` if set (empty: none),
/// else [`SYSTEM_CONFIG`]. A file that does not exist is no setting; one
/// that cannot be read or parsed is an error naming it.
pub fn read() -> Result<ClientSettings, String> {
    let path = match std::env::var_os(CONFIG_ENV) {
        Some(value) if value.is_empty() => return Ok(ClientSettings::default()),
        Some(value) => PathBuf::from(value),
        None => PathBuf::from(SYSTEM_CONFIG),
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => parse(&path, &text),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(ClientSettings::default()),
        Err(error) => Err(format!("cannot read {}: {error}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<ClientSettings, String> {
        parse(Path::new("/etc/scored/scored.toml"), text)
    }

    #[test]
    fn the_client_table_names_the_socket_and_private_daemons() {
        assert_eq!(
            check("").unwrap(),
            ClientSettings {
                file: Some("/etc/scored/scored.toml".into()),
                ..ClientSettings::default()
            }
        );
        let settings = check("socket = \"/run/a.sock\"\n[client]\nprivate = false\n").unwrap();
        assert_eq!(settings.socket, Some(PathBuf::from("/run/a.sock")));
        assert!(!settings.private);
        let settings =
            check("socket = \"/run/a.sock\"\n[client]\nsocket = \"/run/b.sock\"\n").unwrap();
        assert_eq!(settings.socket, Some(PathBuf::from("/run/b.sock")));
        assert!(settings.private);
    }

    #[test]
    fn mistakes_name_the_file() {
        assert_eq!(
            check("[client]\nprivate = \"no\"\n").unwrap_err(),
            "/etc/scored/scored.toml: [client]: invalid type: string \"no\", expected a boolean"
        );
        assert!(check("[client]\nsockett = \"/x\"\n")
            .unwrap_err()
            .starts_with("/etc/scored/scored.toml: [client]: unknown field `sockett`"));
        assert_eq!(
            check("[client]\nsocket = \"run/x.sock\"\n").unwrap_err(),
            "/etc/scored/scored.toml: [client] socket run/x.sock is not an absolute path"
        );
        assert!(check("[client\n")
            .unwrap_err()
            .starts_with("/etc/scored/scored.toml:1: "));
    }
}

//! The job's name service: what `MPI_Publish_name` puts and
//! `MPI_Lookup_name` finds, through PMI-1 (`publish_name`, `lookup_name`,
//! `unpublish_name`), PMI-2 (`name-publish`, `name-lookup`,
//! `name-unpublish`) or PMIx (`PMIx_Publish`, `PMIx_Lookup`,
//! `PMIx_Unpublish`).
//!
//! One table per job and server: a name is visible to every rank of the
//! job's stages, never to another job (as `mpiexec`'s own name service is
//! one per launch). A name is published once until its publisher
//! unpublishes it; the table is bounded ([`NAME_LIMITS`]). Pure.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

/// The bounds of one job's table, documented in scrun(1), section MPI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NameLimits {
    /// The longest service name, in bytes.
    pub name: usize,
    /// The longest port (value), in bytes.
    pub port: usize,
    /// The most names at once.
    pub names: usize,
}

/// The limits scrun applies.
pub const NAME_LIMITS: NameLimits = NameLimits {
    name: 256,
    port: 1024,
    names: 1024,
};

/// Who published a name: the stage (world) and the rank in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Publisher {
    /// The stage, from 0.
    pub world: usize,
    /// The rank in that stage.
    pub rank: usize,
}

/// Why a publish or unpublish was refused, as a sentence for the rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameError {
    /// The name is published already (by anyone).
    Taken(String),
    /// Nothing is published under that name.
    NotFound(String),
    /// Another rank published it.
    NotOwner(String),
    /// A name or port over its limit, or a table full.
    Limit(String),
}

impl std::fmt::Display for NameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NameError::Taken(name) => write!(f, "service {name} is published already"),
            NameError::NotFound(name) => write!(f, "service {name} is not published"),
            NameError::NotOwner(name) => {
                write!(f, "service {name} was published by another rank")
            }
            NameError::Limit(what) => f.write_str(what),
        }
    }
}

/// The published names of one job, and what each names: a port (`V`),
/// a string for PMI, a typed value for PMIx.
#[derive(Debug)]
pub struct Names<V = String> {
    table: BTreeMap<String, (Publisher, V)>,
}

impl<V> Default for Names<V> {
    fn default() -> Names<V> {
        Names {
            table: BTreeMap::new(),
        }
    }
}

/// What a name can name: its size, for the limit.
pub trait Port {
    /// Its size in bytes.
    fn size(&self) -> usize;
}

impl Port for String {
    fn size(&self) -> usize {
        self.len()
    }
}

impl<V: Port> Names<V> {
    /// An empty table.
    pub fn new() -> Names<V> {
        Names::default()
    }

    /// Publishes `port` under `name` for `publisher`.
    pub fn publish(&mut self, publisher: Publisher, name: &str, port: V) -> Result<(), NameError> {
        if name.is_empty() || name.len() > NAME_LIMITS.name {
            return Err(NameError::Limit(format!(
                "a service name of {} bytes: names are 1 to {} bytes",
                name.len(),
                NAME_LIMITS.name
            )));
        }
        if port.size() > NAME_LIMITS.port {
            return Err(NameError::Limit(format!(
                "a port of {} bytes over the limit of {}",
                port.size(),
                NAME_LIMITS.port
            )));
        }
        if name.contains(['\n', '\0', ' ', ';']) {
            // A PMI-1 reply is one line of space-separated words.
            return Err(NameError::Limit(
                "a service name holds no space, semicolon, newline or NUL".to_string(),
            ));
        }
        if self.table.contains_key(name) {
            return Err(NameError::Taken(name.to_string()));
        }
        if self.table.len() >= NAME_LIMITS.names {
            return Err(NameError::Limit(format!(
                "the job has {} names published, the most it may",
                NAME_LIMITS.names
            )));
        }
        self.table.insert(name.to_string(), (publisher, port));
        Ok(())
    }

    /// The port published under `name`.
    pub fn lookup(&self, name: &str) -> Option<&V> {
        self.table.get(name).map(|(_, port)| port)
    }

    /// The port published under `name`, and who published it.
    pub fn lookup_with_publisher(&self, name: &str) -> Option<(&V, Publisher)> {
        self.table
            .get(name)
            .map(|(publisher, port)| (port, *publisher))
    }

    /// Withdraws `name`, which `publisher` must have published.
    pub fn unpublish(&mut self, publisher: Publisher, name: &str) -> Result<(), NameError> {
        match self.table.get(name) {
            None => Err(NameError::NotFound(name.to_string())),
            Some((owner, _)) if *owner != publisher => Err(NameError::NotOwner(name.to_string())),
            Some(_) => {
                self.table.remove(name);
                Ok(())
            }
        }
    }

    /// The number of names published.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Nothing is published.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Publisher = Publisher { world: 0, rank: 0 };
    const B: Publisher = Publisher { world: 0, rank: 1 };

    #[test]
    fn a_name_is_published_once_found_and_withdrawn_by_its_publisher_only() {
        let mut names = Names::new();
        assert_eq!(names.publish(A, "svc", "port-1".to_string()), Ok(()));
        assert_eq!(names.lookup("svc").map(String::as_str), Some("port-1"));
        assert_eq!(
            names.publish(B, "svc", "port-2".to_string()),
            Err(NameError::Taken("svc".into()))
        );
        assert_eq!(
            names.unpublish(B, "svc"),
            Err(NameError::NotOwner("svc".into()))
        );
        assert_eq!(names.unpublish(A, "svc"), Ok(()));
        assert_eq!(names.lookup("svc"), None);
        assert_eq!(
            names.unpublish(A, "svc"),
            Err(NameError::NotFound("svc".into()))
        );
        assert!(names.is_empty());
    }

    #[test]
    fn the_table_is_bounded_and_refuses_what_a_reply_cannot_carry() {
        let mut names: Names = Names::new();
        assert!(matches!(
            names.publish(A, &"n".repeat(257), "p".into()),
            Err(NameError::Limit(_))
        ));
        assert!(matches!(
            names.publish(A, "n", "p".repeat(1025)),
            Err(NameError::Limit(_))
        ));
        assert!(matches!(
            names.publish(A, "a b", "p".into()),
            Err(NameError::Limit(_))
        ));
        assert!(matches!(
            names.publish(A, "", "p".into()),
            Err(NameError::Limit(_))
        ));
        for n in 0..NAME_LIMITS.names {
            names.publish(A, &format!("s{n}"), "p".into()).unwrap();
        }
        assert!(matches!(
            names.publish(A, "one-more", "p".into()),
            Err(NameError::Limit(_))
        ));
        assert_eq!(names.len(), NAME_LIMITS.names);
    }
}

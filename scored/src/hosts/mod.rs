//! The hosts database (scorehosts.db, SPEC §4): parsing and resolution into a topology.
#![forbid(unsafe_code)]

//! A rank's request to start new processes (`MPI_Comm_spawn`), read from
//! PMI-1's multi-line `mcmd=spawn` blocks or PMI-2's `spawn` command into
//! one [`Spawn`], within bounds.
//!
//! PMI-1 (MPICH's `PMI_Spawn_multiple`): one block per program, each with
//! `nprocs`, `execname`, `totspawns`, `spawnssofar`, `argcnt` and `arg1`..,
//! `info_num` and `info_key_0`/`info_val_0`.., the first also `preput_num`
//! and `preput_key_0`/`preput_val_0`... PMI-2 (`PMI2_Job_Spawn`): `ncmds`,
//! `preputcount`, `ppkey0`/`ppval0`.., then per program `subcmd`,
//! `maxprocs`, `argc`, `argv0`.., `infokeycount`, `infokey0`/`infoval0`...
//! scrun starts one program per spawn; the `info` keys `wdir` and `path`
//! are honoured, others (hosts) ignored, as scored places the processes.
#![forbid(unsafe_code)]

use super::wire::{excerpt, Command};
use super::LIMITS;

/// The most processes one spawn may ask for (scored's budgets apply too).
pub const MAX_PROCS: u32 = scored_proto::proto::MAX_PROCS as u32;
/// The most arguments of the program.
pub const MAX_ARGS: usize = 256;
/// The most key-values the spawner may put in the new processes' space.
pub const MAX_PREPUT: usize = 64;
/// The most `info` pairs of one program.
pub const MAX_INFO: usize = 64;
/// The most programs a PMI-1 spawn may announce (`totspawns`): its blocks
/// are gathered before the single reply.
pub const MAX_BLOCKS: usize = 16;

/// One spawn: the program, its arguments, how many processes, and the
/// key-values their space starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spawn {
    /// How many processes.
    pub nprocs: u32,
    /// The program, as given (found on `PATH` unless it holds a `/`).
    pub execname: String,
    /// Its arguments, program name excluded.
    pub args: Vec<String>,
    /// Key-values put before the processes start (MPICH's
    /// `PARENT_ROOT_PORT_NAME`, through which they connect back).
    pub preput: Vec<(String, String)>,
    /// The working directory (`info` key `wdir`).
    pub wdir: Option<String>,
    /// Where to find the program (`info` key `path`).
    pub path: Option<String>,
}

/// A number attribute within `0..=max`.
fn number(command: &Command, key: &str, max: usize) -> Result<usize, String> {
    let text = command
        .get(key)
        .ok_or_else(|| format!("spawn without {key}"))?;
    text.trim()
        .parse::<usize>()
        .ok()
        .filter(|&n| n <= max)
        .ok_or_else(|| {
            format!(
                "spawn with {key}={}: a number from 0 to {max} is needed",
                excerpt(text.as_bytes())
            )
        })
}

/// An attribute that must be there.
fn text<'a>(command: &'a Command, key: &str) -> Result<&'a str, String> {
    command
        .get(key)
        .ok_or_else(|| format!("spawn without {key}"))
}

/// How many programs a PMI-1 block says the spawn has, and which this is.
pub fn v1_block_position(block: &Command) -> Result<(usize, usize), String> {
    let total = number(block, "totspawns", MAX_BLOCKS)?;
    let so_far = number(block, "spawnssofar", MAX_BLOCKS)?;
    if total == 0 || so_far == 0 || so_far > total {
        return Err(format!(
            "spawn block {so_far} of {total}: blocks count from 1 to totspawns"
        ));
    }
    Ok((so_far, total))
}

/// The spawn that PMI-1 blocks (all of them, in order) ask for.
pub fn from_v1(blocks: &[Command]) -> Result<Spawn, String> {
    let [block] = blocks else {
        return Err(several(blocks.len()));
    };
    let nprocs = procs(block, "nprocs")?;
    let execname = program(text(block, "execname")?)?;
    let argc = number(block, "argcnt", MAX_ARGS)?;
    let args = (1..=argc)
        .map(|i| text(block, &format!("arg{i}")).map(str::to_string))
        .collect::<Result<Vec<_>, _>>()?;
    let preput = pairs(
        block,
        "preput_num",
        "preput_key_",
        "preput_val_",
        MAX_PREPUT,
    )?;
    let info = pairs(block, "info_num", "info_key_", "info_val_", MAX_INFO)?;
    with_info(nprocs, execname, args, preput, info)
}

/// The spawn that a PMI-2 `spawn` command asks for.
pub fn from_v2(command: &Command) -> Result<Spawn, String> {
    let count = number(command, "ncmds", MAX_BLOCKS)?;
    if count != 1 {
        return Err(several(count));
    }
    let preput = pairs(command, "preputcount", "ppkey", "ppval", MAX_PREPUT)?;
    let nprocs = procs(command, "maxprocs")?;
    let execname = program(text(command, "subcmd")?)?;
    let argc = number(command, "argc", MAX_ARGS)?;
    let args = (0..argc)
        .map(|i| text(command, &format!("argv{i}")).map(str::to_string))
        .collect::<Result<Vec<_>, _>>()?;
    let info = pairs(command, "infokeycount", "infokey", "infoval", MAX_INFO)?;
    with_info(nprocs, execname, args, preput, info)
}

fn several(count: usize) -> String {
    format!("a spawn of {count} programs at once (MPI_Comm_spawn_multiple): scrun starts one program per spawn")
}

fn procs(command: &Command, key: &str) -> Result<u32, String> {
    let n = number(command, key, MAX_PROCS as usize)?;
    if n == 0 {
        return Err(format!(
            "spawn with {key}=0: at least one process is needed"
        ));
    }
    Ok(n as u32)
}

fn program(name: &str) -> Result<String, String> {
    if name.is_empty() {
        return Err("spawn with an empty execname".to_string());
    }
    Ok(name.to_string())
}

/// `count_key` pairs named `key_prefix`N and `value_prefix`N from 0.
fn pairs(
    command: &Command,
    count_key: &str,
    key_prefix: &str,
    value_prefix: &str,
    max: usize,
) -> Result<Vec<(String, String)>, String> {
    let count = match command.get(count_key) {
        None => 0,
        Some(_) => number(command, count_key, max)?,
    };
    (0..count)
        .map(|i| {
            let key = text(command, &format!("{key_prefix}{i}"))?;
            let value = text(command, &format!("{value_prefix}{i}"))?;
            Ok((key.to_string(), value.to_string()))
        })
        .collect()
}

fn with_info(
    nprocs: u32,
    execname: String,
    args: Vec<String>,
    preput: Vec<(String, String)>,
    info: Vec<(String, String)>,
) -> Result<Spawn, String> {
    for (key, value) in &preput {
        if key.is_empty() || key.len() > LIMITS.key || value.len() > LIMITS.value {
            return Err(format!(
                "spawn with the key-value {}: keys are 1 to {} bytes, values at most {}",
                excerpt(key.as_bytes()),
                LIMITS.key,
                LIMITS.value
            ));
        }
        if key.contains(['\n', '\0']) || value.contains(['\n', '\0']) {
            return Err("spawn with a key-value that holds a newline or NUL".to_string());
        }
    }
    let mut spawn = Spawn {
        nprocs,
        execname,
        args,
        preput,
        wdir: None,
        path: None,
    };
    for (key, value) in info {
        match key.as_str() {
            "wdir" => spawn.wdir = Some(value),
            "path" => spawn.path = Some(value),
            _ => {}
        }
    }
    Ok(spawn)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(cmd: &str, attrs: &[(&str, &str)]) -> Command {
        Command {
            cmd: cmd.to_string(),
            attrs: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn a_pmi1_block_gives_the_program_arguments_preput_and_wdir() {
        let block = command(
            "spawn",
            &[
                ("nprocs", "3"),
                ("execname", "./child"),
                ("totspawns", "1"),
                ("spawnssofar", "1"),
                ("argcnt", "2"),
                ("arg1", "-x"),
                ("arg2", "a b"),
                ("preput_num", "1"),
                ("preput_key_0", "PARENT_ROOT_PORT_NAME"),
                ("preput_val_0", "tag#0$"),
                ("info_num", "2"),
                ("info_key_0", "wdir"),
                ("info_val_0", "/tmp"),
                ("info_key_1", "host"),
                ("info_val_1", "n1"),
            ],
        );
        assert_eq!(v1_block_position(&block), Ok((1, 1)));
        assert_eq!(
            from_v1(&[block]),
            Ok(Spawn {
                nprocs: 3,
                execname: "./child".to_string(),
                args: vec!["-x".to_string(), "a b".to_string()],
                preput: vec![("PARENT_ROOT_PORT_NAME".to_string(), "tag#0$".to_string())],
                wdir: Some("/tmp".to_string()),
                path: None,
            })
        );
    }

    #[test]
    fn a_pmi2_command_gives_the_same_with_arguments_from_zero() {
        let spawn = command(
            "spawn",
            &[
                ("ncmds", "1"),
                ("preputcount", "1"),
                ("ppkey0", "k"),
                ("ppval0", "v;w"),
                ("subcmd", "child"),
                ("maxprocs", "2"),
                ("argc", "1"),
                ("argv0", "x"),
                ("infokeycount", "0"),
            ],
        );
        let got = from_v2(&spawn).unwrap();
        assert_eq!(got.nprocs, 2);
        assert_eq!(got.execname, "child");
        assert_eq!(got.args, vec!["x".to_string()]);
        assert_eq!(got.preput, vec![("k".to_string(), "v;w".to_string())]);
    }

    #[test]
    fn bad_spawns_are_refused_with_a_reason() {
        let base = [
            ("nprocs", "2"),
            ("execname", "child"),
            ("totspawns", "1"),
            ("spawnssofar", "1"),
            ("argcnt", "0"),
        ];
        let with = |change: (&str, &str)| {
            let mut attrs: Vec<(&str, &str)> = base
                .iter()
                .copied()
                .filter(|(k, _)| *k != change.0)
                .collect();
            attrs.push(change);
            from_v1(&[command("spawn", &attrs)]).unwrap_err()
        };
        assert!(with(("nprocs", "0")).contains("at least one process"));
        assert!(with(("nprocs", "99999999999")).contains("a number from 0 to"));
        assert!(with(("nprocs", "two")).contains("nprocs=\"two\""));
        assert!(with(("argcnt", "3")).contains("spawn without arg1"));
        assert!(with(("execname", "")).contains("empty execname"));
        assert!(with(("preput_num", "100")).contains("preput_num"));
        let long = "k".repeat(LIMITS.key + 1);
        let mut attrs = base.to_vec();
        attrs.extend([
            ("preput_num", "1"),
            ("preput_key_0", &long),
            ("preput_val_0", "v"),
        ]);
        assert!(from_v1(&[command("spawn", &attrs)])
            .unwrap_err()
            .contains("keys are 1 to"));
        let two = [command("spawn", &base), command("spawn", &base)];
        assert!(from_v1(&two)
            .unwrap_err()
            .contains("MPI_Comm_spawn_multiple"));
        assert!(v1_block_position(&command(
            "spawn",
            &[("totspawns", "2"), ("spawnssofar", "3")]
        ))
        .is_err());
        assert!(v1_block_position(&command(
            "spawn",
            &[("totspawns", "17"), ("spawnssofar", "1")]
        ))
        .is_err());
    }
}

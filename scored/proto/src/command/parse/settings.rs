//! The `key=value` settings of `cluster ... set` and `queue ... set`: each
//! key once, each value checked against its bounds, and an error that shows
//! the setting's syntax.
#![forbid(unsafe_code)]

use super::{
    did_you_mean, is_group_name, one_of, parse_digits, ParseErrorKind, Parser, CLUSTER_LIMITS,
    MAX_GROUP_NAME, QUEUE_SETTINGS,
};
use crate::command::{
    ClusterLimits, GroupRef, ParseError, QueueMode, QueueSettings, QueueShare, Setting,
};
use crate::units::{parse_duration, parse_percent, parse_size, quote, tiny_limit};

impl<'a> Parser<'a> {
    /// The settings after `limit` or `set`: at least one, each `key=value`
    /// with a known key given once.
    pub(super) fn settings(
        &mut self,
        keys: &'static [&'static str],
        what: &str,
    ) -> Result<Vec<(&'static str, &'a str, &'a str)>, ParseError> {
        let mut settings: Vec<(&'static str, &'a str, &'a str)> = Vec::new();
        while let Some(word) = self.next() {
            let Some((key, value)) = word.split_once('=') else {
                let hint = match keys.iter().find(|key| **key == word) {
                    Some(key) => format!("expected {}", self.setting_syntax(key)),
                    None => format!("expected KEY=VALUE with a key from {}", one_of(keys)),
                };
                return Err(self.error(
                    ParseErrorKind::MissingEquals,
                    format!("{what} {} without '='", quote(word)),
                    hint,
                ));
            };
            let Some(&key) = keys.iter().find(|known| **known == key) else {
                return Err(self.error(
                    ParseErrorKind::UnknownSetting,
                    format!("unknown {what} {}", quote(key)),
                    format!("{}expected {}", did_you_mean(key, keys), one_of(keys)),
                ));
            };
            if value.is_empty() {
                return Err(self.error(
                    ParseErrorKind::EmptyValue,
                    format!("empty value for {key}"),
                    format!("expected {}", self.setting_syntax(key)),
                ));
            }
            if settings.iter().any(|(seen, _, _)| *seen == key) {
                return Err(self.error(
                    ParseErrorKind::DuplicateSetting,
                    format!("{what} {key} given twice"),
                    "give each setting at most once".to_string(),
                ));
            }
            settings.push((key, value, word));
        }
        if settings.is_empty() {
            return Err(self.error(
                ParseErrorKind::MissingArgument,
                format!("missing {what}s"),
                self.usage_hint(),
            ));
        }
        Ok(settings)
    }

    /// The syntax of one setting as the usage shows it, e.g. `memory=SIZE|none`.
    pub(super) fn setting_syntax(&self, key: &str) -> String {
        let usage = self.form.unwrap_or_else(|| self.usage());
        usage
            .split(' ')
            .find(|word| word.split_once('=').is_some_and(|(known, _)| known == key))
            .unwrap_or(key)
            .to_string()
    }

    pub(super) fn bad_setting(&self, word: &str, problem: String) -> ParseError {
        self.invalid(format!("bad setting {}", quote(word)), problem)
    }

    pub(super) fn cluster_limits(&mut self) -> Result<ClusterLimits, ParseError> {
        let mut limits = ClusterLimits::default();
        for (key, value, word) in self.settings(CLUSTER_LIMITS, "cluster limit")? {
            let setting = if value == "none" {
                Setting::Clear
            } else if key == "jobs" {
                match parse_digits(value) {
                    Some(jobs) => Setting::Set(jobs),
                    None => {
                        return Err(self.bad_setting(
                            word,
                            format!(
                                "{} is not a whole number; expected {}",
                                quote(value),
                                self.setting_syntax(key)
                            ),
                        ))
                    }
                }
            } else {
                let size = parse_size(value).map_err(|error| self.bad_setting(word, error.0))?;
                if size == 0 {
                    // Every job is assumed to use some memory and counts its
                    // executables as disk: a limit of 0 kills each one at
                    // its first sample.
                    return Err(self.bad_setting(
                        word,
                        format!(
                            "a {key} limit of 0 would kill every job at its first sample; give a size above 0, or {key}=none for no limit"
                        ),
                    ));
                }
                if let Some(tiny) = tiny_limit(size) {
                    return Err(self.bad_setting(word, format!("a {key} limit of {value} {tiny}")));
                }
                Setting::Set(size)
            };
            match key {
                "memory" => limits.memory = Some(setting),
                "disk" => limits.disk = Some(setting),
                _ => limits.jobs = Some(setting),
            }
        }
        Ok(limits)
    }

    pub(super) fn queue_settings(&mut self) -> Result<QueueSettings, ParseError> {
        let mut settings = QueueSettings::default();
        for (key, value, word) in self.settings(QUEUE_SETTINGS, "queue setting")? {
            match key {
                "mode" => {
                    settings.mode = Some(match value {
                        "gang" => QueueMode::Gang,
                        "exclusive" => QueueMode::Exclusive,
                        _ => {
                            return Err(self.bad_setting(
                                word,
                                format!(
                                    "{}unknown mode {}; expected mode=gang|exclusive",
                                    did_you_mean(value, &["gang", "exclusive"]),
                                    quote(value)
                                ),
                            ))
                        }
                    })
                }
                "backfill" => {
                    settings.backfill = Some(match value {
                        "on" => true,
                        "off" => false,
                        _ => {
                            return Err(self.bad_setting(
                                word,
                                format!(
                                    "{}unknown value {}; expected backfill=on|off",
                                    did_you_mean(value, &["on", "off"]),
                                    quote(value)
                                ),
                            ))
                        }
                    })
                }
                "share" => {
                    settings.share = Some(match value {
                        "user" => QueueShare::User,
                        "job" => QueueShare::Job,
                        _ => {
                            return Err(self.bad_setting(
                                word,
                                format!(
                                    "{}unknown value {}; expected share=user|job",
                                    did_you_mean(value, &["user", "job"]),
                                    quote(value)
                                ),
                            ))
                        }
                    })
                }
                "mpl" => {
                    settings.mpl = Some(if value == "none" {
                        Setting::Clear
                    } else {
                        match parse_digits(value).and_then(|n| u32::try_from(n).ok()) {
                            Some(0) => {
                                return Err(self.bad_setting(
                                    word,
                                    "a level of 0 would let no job run; give mpl=1 or more, or mpl=none for no level".into(),
                                ))
                            }
                            Some(level) => Setting::Set(level),
                            None => {
                                return Err(self.bad_setting(
                                    word,
                                    format!(
                                        "{} is not a whole number; expected mpl=N|none",
                                        quote(value)
                                    ),
                                ))
                            }
                        }
                    })
                }
                "fairshare" => {
                    settings.fairshare = Some(if value == "none" {
                        Setting::Clear
                    } else {
                        let half_life = parse_duration(value)
                            .map_err(|error| self.bad_setting(word, error.0))?;
                        if half_life.is_zero() {
                            return Err(self.bad_setting(
                                word,
                                "a half-life of 0 forgets all usage at once; give fairshare=HALFLIFE above 0, or fairshare=none".into(),
                            ));
                        }
                        Setting::Set(half_life)
                    });
                }
                "cputime" | "residency" => {
                    let setting = if value == "none" {
                        Setting::Clear
                    } else {
                        let duration = parse_duration(value)
                            .map_err(|error| self.bad_setting(word, error.0))?;
                        if duration.is_zero() {
                            return Err(self.bad_setting(
                                word,
                                format!("{key} must be longer than 0; use {key}=none to remove it"),
                            ));
                        }
                        Setting::Set(duration)
                    };
                    if key == "cputime" {
                        settings.cputime = Some(setting);
                    } else {
                        settings.residency = Some(setting);
                    }
                }
                "memory" | "disk" => {
                    let setting = if value == "none" {
                        Setting::Clear
                    } else if !value.ends_with('%') && parse_percent(value).is_ok() {
                        // A bare number could be meant as a size: the
                        // queue's share is a percentage of the cluster's.
                        return Err(self.bad_setting(
                            word,
                            format!(
                                "a queue's {key} limit is a share of the cluster's, written with %: {key}={value}%"
                            ),
                        ));
                    } else {
                        let pct = parse_percent(value)
                            .map_err(|error| self.bad_setting(word, error.0))?;
                        if pct <= 0.0 {
                            return Err(self.bad_setting(
                                word,
                                format!(
                                    "a {key} share of 0% would kill every job at its first sample; give a share above 0%, or {key}=none for no limit"
                                ),
                            ));
                        }
                        Setting::Set(pct)
                    };
                    if key == "memory" {
                        settings.memory = Some(setting);
                    } else {
                        settings.disk = Some(setting);
                    }
                }
                _ => {
                    settings.group = Some(if value == "none" {
                        Setting::Clear
                    } else {
                        Setting::Set(self.group(value, word)?)
                    })
                }
            }
        }
        Ok(settings)
    }

    pub(super) fn group(&self, value: &str, word: &str) -> Result<GroupRef, ParseError> {
        if value.bytes().all(|byte| byte.is_ascii_digit()) {
            return match parse_digits(value).and_then(|gid| u32::try_from(gid).ok()) {
                Some(gid) => Ok(GroupRef::Gid(gid)),
                None => Err(self.bad_setting(
                    word,
                    format!(
                        "group id {} is too large; expected a number below 4294967296",
                        quote(value)
                    ),
                )),
            };
        }
        if value.len() > MAX_GROUP_NAME {
            return Err(self.bad_setting(
                word,
                format!(
                    "group name {} is longer than {MAX_GROUP_NAME} characters",
                    quote(value)
                ),
            ));
        }
        if !is_group_name(value) {
            return Err(self.bad_setting(
                word,
                format!(
                    "{} is not a group name or number; a name starts with a letter or '_' \
                     and holds letters, digits, '_', '.' and '-'",
                    quote(value)
                ),
            ));
        }
        Ok(GroupRef::Name(value.to_string()))
    }
}

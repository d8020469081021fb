//! The decoders of [`Request`] and [`WireBytes`], written by hand.
//!
//! serde's derived decoder of an internally tagged enum (`Request`, tagged
//! by `type`) copies the whole message into a buffer before it reads the
//! tag, and the derived decoder of an untagged one (`WireBytes`) copies
//! each value before it tries its forms: that doubled the cost of decoding
//! a submission, which every launch pays. These read the tag where
//! serde_json writes it, first, and the other messages through the same
//! buffer as before, so that they accept exactly the maps the derived
//! decoders accept, with the same values (the tests compare them). A
//! request is a map: the array form the derived decoder also took
//! (`["hold"]`), which no client writes, is refused.

use serde::de::value::{MapAccessDeserializer, MapDeserializer};
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::{Reattach, Request, Submit, WireBytes};

impl<'de> Deserialize<'de> for WireBytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(WireBytesVisitor)
    }
}

/// A string as `Text`, a sequence of bytes as `Raw`: the two forms
/// `WireBytes` is written in, nothing else.
struct WireBytesVisitor;

impl<'de> Visitor<'de> for WireBytesVisitor {
    type Value = WireBytes;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a string, or an array of bytes")
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<WireBytes, E> {
        Ok(WireBytes::Text(value.to_string()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<WireBytes, E> {
        Ok(WireBytes::Text(value))
    }

    fn visit_bytes<E: de::Error>(self, value: &[u8]) -> Result<WireBytes, E> {
        Ok(WireBytes::Raw(value.to_vec()))
    }

    fn visit_byte_buf<E: de::Error>(self, value: Vec<u8>) -> Result<WireBytes, E> {
        Ok(WireBytes::Raw(value))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<WireBytes, A::Error> {
        let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(byte) = seq.next_element::<u8>()? {
            bytes.push(byte);
        }
        Ok(WireBytes::Raw(bytes))
    }
}

/// The tag's values.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Submit,
    Console,
    Hold,
    Release,
    Kill,
    Winch,
    Signal,
    Reattach,
}

/// A key of the message: the tag, or any other.
enum Key {
    Tag,
    Other(String),
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<Key, E> {
                Ok(if value == "type" {
                    Key::Tag
                } else {
                    Key::Other(value.to_string())
                })
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// A second tag among a variant's fields: refused, as the derived
/// decoder refuses it.
#[derive(Default)]
struct NoSecondTag;

impl<'de> Deserialize<'de> for NoSecondTag {
    fn deserialize<D: Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(de::Error::duplicate_field("type"))
    }
}

#[derive(Deserialize)]
struct SubmitFields {
    version: u32,
    submit: Submit,
    #[serde(rename = "type", default)]
    _tag: NoSecondTag,
}

#[derive(Deserialize)]
struct ConsoleFields {
    version: u32,
    line: String,
    json: bool,
    #[serde(rename = "type", default)]
    _tag: NoSecondTag,
}

#[derive(Deserialize)]
struct SignalFields {
    signal: i32,
    #[serde(rename = "type", default)]
    _tag: NoSecondTag,
}

#[derive(Deserialize)]
struct ReattachFields {
    version: u32,
    reattach: Reattach,
    #[serde(rename = "type", default)]
    _tag: NoSecondTag,
}

/// A variant without fields: whatever else the message holds is
/// ignored, as the derived decoder ignores it, but a second tag.
#[derive(Deserialize)]
struct NoFields {
    #[serde(rename = "type", default)]
    _tag: NoSecondTag,
}

/// The variant `kind` names, its fields read from `fields`.
fn variant<'de, D: Deserializer<'de>>(kind: Kind, fields: D) -> Result<Request, D::Error> {
    Ok(match kind {
        Kind::Submit => {
            let SubmitFields {
                version, submit, ..
            } = SubmitFields::deserialize(fields)?;
            Request::Submit { version, submit }
        }
        Kind::Console => {
            let ConsoleFields {
                version,
                line,
                json,
                ..
            } = ConsoleFields::deserialize(fields)?;
            Request::Console {
                version,
                line,
                json,
            }
        }
        Kind::Signal => Request::Signal {
            signal: SignalFields::deserialize(fields)?.signal,
        },
        Kind::Reattach => {
            let ReattachFields {
                version, reattach, ..
            } = ReattachFields::deserialize(fields)?;
            Request::Reattach { version, reattach }
        }
        Kind::Hold | Kind::Release | Kind::Kill | Kind::Winch => {
            NoFields::deserialize(fields)?;
            match kind {
                Kind::Hold => Request::Hold,
                Kind::Release => Request::Release,
                Kind::Kill => Request::Kill,
                _ => Request::Winch,
            }
        }
    })
}

impl<'de> Deserialize<'de> for Request {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(RequestVisitor)
    }
}

struct RequestVisitor;

impl<'de> Visitor<'de> for RequestVisitor {
    type Value = Request;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a request: a map with its `type`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Request, A::Error> {
        let first = map.next_key::<Key>()?;
        if let Some(Key::Tag) = first {
            // Where serde_json writes it: the fields follow, read in place.
            let kind = map.next_value::<Kind>()?;
            return variant(kind, MapAccessDeserializer::new(map));
        }
        // Anywhere else: the fields are kept until the tag is found.
        let mut fields: Vec<(String, serde_json::Value)> = Vec::new();
        if let Some(Key::Other(key)) = first {
            fields.push((key, map.next_value()?));
        }
        while let Some(key) = map.next_key::<String>()? {
            fields.push((key, map.next_value()?));
        }
        let Some(at) = fields.iter().position(|(key, _)| key == "type") else {
            return Err(de::Error::missing_field("type"));
        };
        let (_, tag) = fields.remove(at);
        let kind = Kind::deserialize(tag).map_err(de::Error::custom)?;
        let rest = MapDeserializer::<_, serde_json::Error>::new(fields.into_iter());
        variant(kind, rest).map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The decoders serde derives for these shapes: what the hand-written
    /// ones must agree with.
    #[allow(clippy::large_enum_variant)]
    #[derive(Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Derived {
        Submit {
            version: u32,
            submit: Submit,
        },
        Console {
            version: u32,
            line: String,
            json: bool,
        },
        Hold,
        Release,
        Kill,
        Winch,
        Signal {
            signal: i32,
        },
        Reattach {
            version: u32,
            reattach: Reattach,
        },
    }

    impl From<Derived> for Request {
        fn from(derived: Derived) -> Request {
            match derived {
                Derived::Submit { version, submit } => Request::Submit { version, submit },
                Derived::Console {
                    version,
                    line,
                    json,
                } => Request::Console {
                    version,
                    line,
                    json,
                },
                Derived::Hold => Request::Hold,
                Derived::Release => Request::Release,
                Derived::Kill => Request::Kill,
                Derived::Winch => Request::Winch,
                Derived::Signal { signal } => Request::Signal { signal },
                Derived::Reattach { version, reattach } => Request::Reattach { version, reattach },
            }
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum DerivedBytes {
        Text(String),
        Raw(Vec<u8>),
    }

    fn reattach() -> Request {
        Request::Reattach {
            version: 1,
            reattach: Reattach {
                job: 7,
                descriptors: true,
                closed_stdio: vec![2],
                fds: vec![5],
                pmi_ranks: 2,
                stages: 1,
                pty: true,
                pmix_namespace: Some("ns".into()),
                pmi_port: true,
            },
        }
    }

    fn samples() -> Vec<Request> {
        vec![
            super::super::tests::submit(),
            Request::Console {
                version: 1,
                line: "status".into(),
                json: true,
            },
            Request::Hold,
            Request::Release,
            Request::Kill,
            Request::Winch,
            Request::Signal { signal: 2 },
            reattach(),
        ]
    }

    /// Both decoders agree on `text`: the same request, or both refuse it.
    fn agree(text: &str) -> Result<(), String> {
        let derived = serde_json::from_str::<Derived>(text).map(Request::from);
        let decoded = serde_json::from_str::<Request>(text);
        match (derived, decoded) {
            (Ok(derived), Ok(decoded)) if derived == decoded => Ok(()),
            (Err(_), Err(_)) => Ok(()),
            (derived, decoded) => Err(format!(
                "{text}\n derived: {derived:?}\n by hand: {decoded:?}"
            )),
        }
    }

    /// A sample's fields as JSON text, the tag among them.
    fn fields(request: &Request) -> Vec<(String, String)> {
        let serde_json::Value::Object(map) = serde_json::to_value(request).unwrap() else {
            panic!("a request is a map");
        };
        map.into_iter()
            .map(|(key, value)| (key, value.to_string()))
            .collect()
    }

    fn object(fields: &[(String, String)]) -> String {
        let body: Vec<String> = fields
            .iter()
            .map(|(key, value)| format!("{}:{value}", serde_json::to_string(key).unwrap()))
            .collect();
        format!("{{{}}}", body.join(","))
    }

    #[test]
    fn every_request_comes_back_as_it_was_sent() {
        for request in samples() {
            let text = serde_json::to_string(&request).unwrap();
            assert!(text.starts_with("{\"type\":"), "{text}");
            assert_eq!(serde_json::from_str::<Request>(&text).unwrap(), request);
            agree(&text).unwrap();
        }
    }

    #[test]
    fn the_tag_anywhere_and_every_malformed_map_decode_as_derived() {
        let extra = ("x".to_string(), "[1,{\"type\":2}]".to_string());
        for request in samples() {
            let fields = fields(&request);
            let tag = fields.iter().position(|(key, _)| key == "type").unwrap();
            let mut cases = Vec::new();
            // The tag last, in the middle, twice, with other values.
            let mut last = fields.clone();
            let moved = last.remove(tag);
            last.push(moved.clone());
            cases.push(last.clone());
            last.insert(last.len() / 2, extra.clone());
            cases.push(last);
            for second in [
                moved.1.clone(),
                "null".into(),
                "\"hold\"".into(),
                "3".into(),
            ] {
                let mut twice = fields.clone();
                twice.push(("type".into(), second));
                cases.push(twice);
            }
            for value in ["null", "3", "\"nothing\"", "{}", "[\"submit\"]"] {
                let mut other = fields.clone();
                other[tag].1 = value.into();
                cases.push(other);
            }
            // Each field missing, each doubled, each of another type.
            for at in 0..fields.len() {
                let mut missing = fields.clone();
                missing.remove(at);
                cases.push(missing);
                let mut doubled = fields.clone();
                doubled.push(fields[at].clone());
                cases.push(doubled);
                let mut wrong = fields.clone();
                wrong[at].1 = "\"x\"".into();
                cases.push(wrong);
            }
            let mut more = fields.clone();
            more.push(extra.clone());
            cases.push(more);
            for case in cases {
                agree(&object(&case)).unwrap();
            }
        }
        for text in [
            "{}",
            "null",
            "\"hold\"",
            "{\"type\":\"hold\"",
            "{\"TYPE\":\"hold\"}",
        ] {
            agree(text).unwrap();
        }
        for text in ["[]", "[\"hold\"]", "[\"signal\",2]"] {
            assert!(serde_json::from_str::<Request>(text).is_err(), "{text}");
        }
    }

    #[test]
    fn bytes_decode_as_the_derived_untagged_form() {
        for text in [
            "\"abc\"",
            "\"\\u00e9\"",
            "[255,0,120]",
            "[]",
            "[256]",
            "[-1]",
            "[\"a\"]",
            "3",
            "null",
            "{}",
            "[1.5]",
        ] {
            let derived = serde_json::from_str::<DerivedBytes>(text).map(|bytes| match bytes {
                DerivedBytes::Text(text) => WireBytes::Text(text),
                DerivedBytes::Raw(raw) => WireBytes::Raw(raw),
            });
            let decoded = serde_json::from_str::<WireBytes>(text);
            match (derived, decoded) {
                (Ok(derived), Ok(decoded)) => assert_eq!(derived, decoded, "{text}"),
                (Err(_), Err(_)) => {}
                (derived, decoded) => panic!("{text}: derived {derived:?}, by hand {decoded:?}"),
            }
        }
    }

    fn pieces() -> (Vec<String>, Vec<String>) {
        let keys = [
            "type", "version", "submit", "line", "json", "signal", "reattach", "x",
        ];
        let mut values: Vec<String> = [
            "\"submit\"",
            "\"console\"",
            "\"hold\"",
            "\"winch\"",
            "\"signal\"",
            "\"reattach\"",
            "1",
            "-1",
            "true",
            "null",
            "\"status\"",
            "[]",
            "{}",
        ]
        .iter()
        .map(|value| value.to_string())
        .collect();
        for request in samples() {
            for (key, value) in fields(&request) {
                if key != "type" {
                    values.push(value);
                }
            }
        }
        (keys.iter().map(|key| key.to_string()).collect(), values)
    }

    proptest! {
        /// Any map of the request's keys and values, in any order and
        /// with any repeats: both decoders agree.
        #[test]
        fn any_map_decodes_as_derived(
            picks in proptest::collection::vec((0usize..8, 0usize..64), 0..7)
        ) {
            let (keys, values) = pieces();
            let fields: Vec<(String, String)> = picks
                .iter()
                .map(|&(key, value)| (keys[key].clone(), values[value % values.len()].clone()))
                .collect();
            prop_assert_eq!(agree(&object(&fields)), Ok(()));
        }
    }
}

//! The `requestState` of a 2026-07-28 input-required result: where a tool
//! call (prompt, resource read) resumes and the answers so far ([`Resume`]),
//! signed so a client can carry it but not forge it.
//!
//! rmcp's `RequestStateCodec` seals it: HMAC-SHA256 over the payload and
//! associated data that bind it to the request it was made for (the method,
//! the tool/prompt name or resource URI, and a SHA-256 digest of the
//! arguments in canonical form), with an expiry ([`TTL`]). The state is
//! signed, not encrypted: the client can read the answers it gave, nothing
//! else is in it. Keys come from `--state-key-env NAME` (one key, or several
//! separated by commas: the first signs, all verify, for rotation), else from
//! a random per-process key. A key is never logged.

use std::time::Duration;

use rmcp::ErrorData;
use rmcp::model::{RequestStateCodec, RequestStateError, SealOptions};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::run::steps::Resume;

/// How long a state stays valid after it was issued.
pub const TTL: Duration = Duration::from_secs(10 * 60);

/// Shortest key accepted, in bytes.
pub const MIN_KEY_BYTES: usize = RequestStateCodec::MIN_KEY_LENGTH;

/// The keys that sign and verify request states.
#[derive(Clone)]
pub struct StateKeys {
    codec: RequestStateCodec,
    /// How long a sealed state stays valid ([`TTL`]).
    ttl: Duration,
}

impl std::fmt::Debug for StateKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateKeys(…)")
    }
}

/// The request a state belongs to: it opens only for the same one.
#[derive(Debug, Clone, Copy)]
pub struct Binding<'a> {
    /// `tools/call`, `prompts/get` or `resources/read`.
    pub method: &'a str,
    /// The tool or prompt name, or the resource URI.
    pub name: &'a str,
    /// The arguments (none for a resource).
    pub arguments: Option<&'a Map<String, Value>>,
}

impl StateKeys {
    /// Keys from `value`: one key, or several separated by commas (the first
    /// signs; all verify). Each at least [`MIN_KEY_BYTES`] bytes. The error
    /// never quotes a key.
    pub fn from_value(value: &str) -> Result<StateKeys, String> {
        let keys: Vec<&str> = value.split(',').map(str::trim).collect();
        let mut ring = Vec::with_capacity(keys.len());
        for (idx, key) in keys.iter().enumerate() {
            if key.len() < MIN_KEY_BYTES {
                let which =
                    if keys.len() == 1 { "the key".to_owned() } else { format!("key {} of {}", idx + 1, keys.len()) };
                return Err(format!(
                    "{which} is {} bytes long; a state key needs at least {MIN_KEY_BYTES} (e.g. `openssl rand -hex 32`)",
                    key.len()
                ));
            }
            ring.push((key_id(key.as_bytes()), key.as_bytes().to_vec()));
        }
        let active = ring[0].0.clone();
        RequestStateCodec::new_with_keyring(active, ring).map(|codec| StateKeys { codec, ttl: TTL }).map_err(|err| {
            match err {
                RequestStateError::InvalidKeyring(_) => "the same key is listed twice".to_owned(),
                other => other.to_string(),
            }
        })
    }

    /// A random key for this process only: a state does not survive a
    /// restart, nor reach another replica.
    pub fn random() -> StateKeys {
        let mut key = [0u8; 32];
        if getrandom::fill(&mut key).is_err() {
            // No OS randomness: a key from the clock and the process is still
            // unknown to clients, just weaker; say so.
            tracing::warn!("no OS randomness for the request-state key; using a weaker one");
            let seed = format!("{:?}{}", std::time::SystemTime::now(), std::process::id());
            key.copy_from_slice(&Sha256::digest(seed.as_bytes()));
        }
        let id = key_id(&key);
        match RequestStateCodec::new_with_keyring(id, [(key_id(&key), key.to_vec())]) {
            Ok(codec) => StateKeys { codec, ttl: TTL },
            // A 32-byte key with one id is always a valid keyring.
            Err(_) => StateKeys { codec: RequestStateCodec::new_unchecked(key.to_vec()), ttl: TTL },
        }
    }

    /// Seals `resume` for the request `binding`.
    pub fn seal(&self, binding: &Binding<'_>, resume: &Resume) -> Result<String, ErrorData> {
        let data = associated_data(binding);
        let options = SealOptions::new().associated_data(&data).ttl(self.ttl);
        self.codec
            .seal_json_with(resume, &options)
            .map_err(|err| ErrorData::internal_error(format!("the request state could not be sealed: {err}"), None))
    }

    /// Opens a state the client sent back with the request `binding`:
    /// tampered, expired, signed with an unknown key or for another request
    /// are all one -32602 error (the detail is logged at debug).
    pub fn open(&self, binding: &Binding<'_>, state: &str) -> Result<Resume, ErrorData> {
        let data = associated_data(binding);
        self.codec.open_json_with::<Resume>(state, &data).map_err(|err| {
            tracing::debug!(method = binding.method, name = binding.name, "requestState refused: {err}");
            ErrorData::invalid_params(
                "requestState is invalid, expired, or was issued for another request; send the request again without it",
                None,
            )
        })
    }
}

/// A key's id in a signed state: a digest, so that the id names the key
/// without revealing it, and stays the same wherever the key sits in a list.
fn key_id(key: &[u8]) -> String {
    let digest = Sha256::new().chain_update(b"carte request-state key id\0").chain_update(key).finalize();
    digest.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

/// What a state is bound to: each part length-prefixed, the arguments as the
/// SHA-256 of their canonical JSON (object keys sorted).
fn associated_data(binding: &Binding<'_>) -> Vec<u8> {
    let mut canonical = Vec::new();
    if let Some(arguments) = binding.arguments {
        write_canonical(&mut canonical, &Value::Object(arguments.clone()));
    }
    let digest = Sha256::digest(&canonical);
    let mut data = Vec::with_capacity(binding.method.len() + binding.name.len() + 64);
    for part in [binding.method.as_bytes(), binding.name.as_bytes(), digest.as_slice()] {
        data.extend_from_slice(&(part.len() as u64).to_be_bytes());
        data.extend_from_slice(part);
    }
    data
}

/// Writes `value` as JSON with object keys sorted, so the same arguments
/// in another key order give the same bytes.
fn write_canonical(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push(b'{');
            for (idx, key) in keys.into_iter().enumerate() {
                if idx > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(Value::String(key.clone()).to_string().as_bytes());
                out.push(b':');
                write_canonical(out, &map[key]);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (idx, item) in items.iter().enumerate() {
                if idx > 0 {
                    out.push(b',');
                }
                write_canonical(out, item);
            }
            out.push(b']');
        }
        other => out.extend_from_slice(other.to_string().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    fn resume() -> Resume {
        let mut answers = Map::new();
        answers.insert("user_name".to_owned(), json!({"action": "accept", "content": {"name": "Ada"}}));
        Resume { step: 2, answers }
    }

    #[test]
    fn a_state_opens_for_the_same_request_only() {
        let keys = StateKeys::random();
        let a = args(json!({"room": "Focus", "n": [1, {"b": 2, "a": 1}]}));
        let same_other_order = args(json!({"n": [1, {"a": 1, "b": 2}], "room": "Focus"}));
        let binding = Binding { method: "tools/call", name: "book", arguments: Some(&a) };
        let state = keys.seal(&binding, &resume()).unwrap();
        assert_eq!(keys.open(&binding, &state).unwrap(), resume());
        let reordered = Binding { arguments: Some(&same_other_order), ..binding };
        assert_eq!(keys.open(&reordered, &state).unwrap(), resume());

        let other_args = args(json!({"room": "Lab", "n": [1, {"b": 2, "a": 1}]}));
        for foreign in [
            Binding { name: "cancel", ..binding },
            Binding { method: "prompts/get", ..binding },
            Binding { arguments: Some(&other_args), ..binding },
            Binding { arguments: None, ..binding },
        ] {
            let err = keys.open(&foreign, &state).unwrap_err();
            assert_eq!(err.code, rmcp::model::ErrorCode::INVALID_PARAMS, "{foreign:?}");
            assert!(err.message.starts_with("requestState is invalid"), "{}", err.message);
        }
    }

    #[test]
    fn a_tampered_state_or_another_key_is_refused() {
        let keys = StateKeys::random();
        let binding = Binding { method: "tools/call", name: "book", arguments: None };
        let state = keys.seal(&binding, &resume()).unwrap();
        assert!(keys.open(&binding, &format!("{state}-TAMPERED")).is_err());
        let mut flipped = state.clone().into_bytes();
        let mid = flipped.len() / 2;
        flipped[mid] = if flipped[mid] == b'A' { b'B' } else { b'A' };
        assert!(keys.open(&binding, &String::from_utf8(flipped).unwrap()).is_err());
        assert!(StateKeys::random().open(&binding, &state).is_err());
        assert!(keys.open(&binding, "").is_err());
    }

    #[test]
    fn an_expired_state_is_refused() {
        let keys = StateKeys { ttl: Duration::from_millis(1), ..StateKeys::random() };
        let binding = Binding { method: "tools/call", name: "book", arguments: None };
        let state = keys.seal(&binding, &resume()).unwrap();
        // Past its expiry for sure (this waits; it does not time anything).
        std::thread::sleep(Duration::from_millis(20));
        assert!(keys.open(&binding, &state).is_err());
    }

    #[test]
    fn every_round_gets_a_new_state() {
        let keys = StateKeys::random();
        let binding = Binding { method: "tools/call", name: "book", arguments: None };
        let first = keys.seal(&binding, &Resume::default()).unwrap();
        let second = keys.seal(&binding, &resume()).unwrap();
        assert_ne!(first, second);
    }

    #[test]
    fn rotation_signs_with_the_first_key_and_verifies_with_all() {
        let old = "o".repeat(32);
        let new = "n".repeat(40);
        let binding = Binding { method: "tools/call", name: "book", arguments: None };
        let before = StateKeys::from_value(&old).unwrap();
        let during = StateKeys::from_value(&format!("{new}, {old}")).unwrap();
        let after = StateKeys::from_value(&new).unwrap();
        let sealed_before = before.seal(&binding, &resume()).unwrap();
        assert_eq!(during.open(&binding, &sealed_before).unwrap(), resume());
        let sealed_during = during.seal(&binding, &resume()).unwrap();
        assert_eq!(after.open(&binding, &sealed_during).unwrap(), resume());
        assert!(after.open(&binding, &sealed_before).is_err());
    }

    #[test]
    fn short_keys_are_refused_without_being_quoted() {
        let err = StateKeys::from_value("short-secret").unwrap_err();
        assert!(err.contains("12 bytes long") && !err.contains("short-secret"), "{err}");
        let err = StateKeys::from_value(&format!("{},tiny", "k".repeat(32))).unwrap_err();
        assert!(err.starts_with("key 2 of 2 is 4 bytes long"), "{err}");
        let err = StateKeys::from_value(&format!("{0},{0}", "k".repeat(32))).unwrap_err();
        assert!(err.contains("twice"), "{err}");
    }
}

//! What carte answers a message rmcp cannot read, the same on every
//! transport: -32700 for text that is not JSON, -32600 for JSON that is not
//! a request (a batch, a non-object, an id that is not a string or a
//! number), -32602 for a known method whose `params` is not an object, and
//! -32601 for an unknown one. A malformed notification gets no answer.

use std::borrow::Cow;

use rmcp::model::{ClientRequest, JsonRpcMessage, JsonRpcRequest};
use rmcp::service::{RoleServer, RxJsonRpcMessage};
use serde::Deserialize;
use serde_json::{Value, json};

/// The answer to a request that id `id` (or `null`) cannot be served as sent.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorReply {
    /// The request's id, or `null` when it has none that can be echoed.
    pub id: Value,
    /// The JSON-RPC error code.
    pub code: i64,
    /// What was wrong, for a person.
    pub message: String,
}

impl ErrorReply {
    fn new(id: Value, code: i64, message: impl Into<String>) -> ErrorReply {
        ErrorReply { id, code, message: message.into() }
    }

    /// The JSON-RPC response.
    pub fn to_json(&self) -> Value {
        json!({ "jsonrpc": "2.0", "id": self.id, "error": { "code": self.code, "message": self.message } })
    }
}

/// What to do with one message's text.
#[derive(Debug)]
pub enum Verdict {
    /// A message rmcp reads: hand it over.
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    /// Answer this error instead.
    Reply(ErrorReply),
    /// A malformed notification: nothing to answer.
    Ignore,
}

/// The text of one message's bytes: UTF-8 (else -32700), without a byte
/// order mark or surrounding white space.
pub fn text_of(bytes: &[u8]) -> Result<&str, ErrorReply> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Ok(text.trim_start_matches('\u{feff}').trim()),
        Err(_) => Err(ErrorReply::new(Value::Null, -32700, "Parse error: the message is not valid UTF-8")),
    }
}

const BAD_ID: &str = "Invalid Request: `id` must be a string or a number";

/// Reads one message's text (see [`text_of`]).
pub fn read(text: &str) -> Verdict {
    let head = serde_json::from_str::<Head>(text).ok();
    if let Some(message) = head.as_ref().and_then(|head| read_hot(head, text)) {
        return Verdict::Message(Box::new(message));
    }
    match serde_json::from_str::<RxJsonRpcMessage<RoleServer>>(text) {
        // rmcp reads `{"id": null, "method": …}` as a notification: a request
        // with an id that is not a string or a number is invalid instead.
        Ok(RxJsonRpcMessage::<RoleServer>::Notification(_)) if head.is_some_and(|head| head.id) => {
            Verdict::Reply(ErrorReply::new(Value::Null, -32600, BAD_ID))
        }
        Ok(message) => Verdict::Message(Box::new(message)),
        Err(err) if err.is_syntax() || err.is_eof() => {
            Verdict::Reply(ErrorReply::new(Value::Null, -32700, format!("Parse error: {err}")))
        }
        Err(err) => match serde_json::from_str::<Value>(text).unwrap_or(Value::Null) {
            Value::Array(_) => {
                Verdict::Reply(ErrorReply::new(Value::Null, -32600, "Invalid Request: batches are not supported"))
            }
            Value::Object(map) => unreadable(&map, &err),
            _ => {
                Verdict::Reply(ErrorReply::new(Value::Null, -32600, "Invalid Request: a message must be a JSON object"))
            }
        },
    }
}

/// The answer to an object rmcp could not read as a message.
fn unreadable(map: &serde_json::Map<String, Value>, err: &serde_json::Error) -> Verdict {
    let Some(id) = map.get("id") else {
        if map.contains_key("method") {
            tracing::debug!("dropped a malformed notification: {err}");
            return Verdict::Ignore;
        }
        return Verdict::Reply(ErrorReply::new(Value::Null, -32600, format!("Invalid Request: {err}")));
    };
    if !(id.is_string() || id.is_number()) {
        return Verdict::Reply(ErrorReply::new(Value::Null, -32600, BAD_ID));
    }
    let id = id.clone();
    let method = map.get("method").and_then(Value::as_str);
    let params = map.get("params").filter(|params| !params.is_null());
    let version_2 = map.get("jsonrpc") == Some(&json!("2.0"));
    Verdict::Reply(match method {
        // A request whose parameters are not an object: the request is
        // valid, its parameters are not (or its method is unknown).
        Some(method) if version_2 && params.is_some_and(|params| !params.is_object()) => {
            if super::handler::KNOWN_METHODS.contains(&method) {
                ErrorReply::new(id, -32602, format!("Invalid params: the parameters of `{method}` must be an object"))
            } else {
                ErrorReply::new(id, -32601, format!("Method not found: {method}"))
            }
        }
        _ => ErrorReply::new(id, -32600, format!("Invalid Request: {err}")),
    })
}

/// Which members a JSON object has, and its method: enough to tell a
/// request from the other messages, as rmcp does (method and id, no
/// result or error).
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "present")]
    id: bool,
    #[serde(default, deserialize_with = "present")]
    result: bool,
    #[serde(default, deserialize_with = "present")]
    error: bool,
}

fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(deserializer).map(|_| true)
}

/// The requests clients send most, read straight into their variant.
/// rmcp reads a request as an untagged union of every client request,
/// trying each variant in order: `tools/call`, the fourteenth, cost
/// thirteen failed attempts (a serde error each), a quarter of a call's
/// work. Anything this does not read (another method, a malformed request)
/// goes the general way, with its error messages.
fn read_hot(head: &Head<'_>, text: &str) -> Option<RxJsonRpcMessage<RoleServer>> {
    if !head.id || head.result || head.error {
        return None;
    }
    macro_rules! direct {
        ($($method:literal => $variant:ident),* $(,)?) => {
            match head.method.as_deref()? {
                $($method => {
                    let request = serde_json::from_str::<JsonRpcRequest<rmcp::model::$variant>>(text).ok()?;
                    Some(JsonRpcMessage::Request(JsonRpcRequest {
                        jsonrpc: request.jsonrpc,
                        id: request.id,
                        request: ClientRequest::$variant(request.request),
                    }))
                })*
                _ => None,
            }
        };
    }
    direct! {
        "tools/call" => CallToolRequest,
        "tools/list" => ListToolsRequest,
        "resources/read" => ReadResourceRequest,
        "prompts/get" => GetPromptRequest,
        "completion/complete" => CompleteRequest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(text: &str) -> (Value, i64) {
        match read(text) {
            Verdict::Reply(reply) => (reply.id, reply.code),
            other => panic!("expected an error reply for {text}, got {other:?}"),
        }
    }

    #[test]
    fn each_mistake_gets_its_code() {
        assert_eq!(reply("{nope"), (Value::Null, -32700));
        assert_eq!(reply("[]"), (Value::Null, -32600));
        assert_eq!(reply("5"), (Value::Null, -32600));
        assert_eq!(reply(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#), (Value::Null, -32600));
        assert_eq!(reply(r#"{"jsonrpc":"2.0","id":[],"method":"ping"}"#), (Value::Null, -32600));
        assert_eq!(reply(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":"x"}"#), (json!(7), -32602));
        assert_eq!(reply(r#"{"jsonrpc":"2.0","id":"a","method":"no/such","params":[1]}"#), (json!("a"), -32601));
    }

    #[test]
    fn hot_requests_read_as_rmcp_reads_them() {
        let meta = r#""_meta":{"progressToken":"p","io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#;
        for text in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"q","arguments":{"a":[1,{"b":null}]}}}"#.to_owned(),
            format!(r#"{{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{{"name":"q",{meta}}}}}"#),
            format!(r#"{{"method":"resources/read","params":{{"uri":"a://b",{meta}}},"id":2,"jsonrpc":"2.0"}}"#),
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"cursor":"c"}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":4,"method":"prompts/get","params":{"name":"p","arguments":{"k":"v"}}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":5,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"p"},"argument":{"name":"k","value":"v"}}}"#.to_owned(),
        ] {
            let head = serde_json::from_str::<Head>(&text).unwrap();
            let hot = read_hot(&head, &text).unwrap_or_else(|| panic!("not read directly: {text}"));
            let general = serde_json::from_str::<RxJsonRpcMessage<RoleServer>>(&text).unwrap();
            assert_eq!(serde_json::to_value(&hot).unwrap(), serde_json::to_value(&general).unwrap(), "{text}");
        }
        // What rmcp refuses or reads otherwise goes the general way.
        for text in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"q"},"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"q"}}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"q"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"q"},"id":2}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
        ] {
            let head = serde_json::from_str::<Head>(text).ok();
            assert!(head.is_none_or(|head| read_hot(&head, text).is_none()), "{text}");
        }
    }

    #[test]
    fn good_messages_pass_and_bad_notifications_are_ignored() {
        assert!(matches!(read(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), Verdict::Message(_)));
        assert!(matches!(
            read(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":"x"}"#),
            Verdict::Ignore
        ));
    }
}

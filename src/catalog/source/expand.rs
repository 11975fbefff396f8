//! `${VAR}`, `${VAR:-default}` and `${VAR:?message}` in a catalog's string
//! values, read from the environment when the file loads; every value taken
//! from the environment is remembered as a secret.

use std::fmt::Write as _;

use serde_json::Value;

use super::Positions;
use crate::diag::Diagnostic;
use crate::diag::escape_pointer;

/// Expands `${…}` in every string value of `value` (whose place is
/// `pointer`), each problem a diagnostic at the value.
pub(super) fn expand_env(
    value: &mut Value,
    pointer: &mut String,
    positions: &Positions,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Diagnostic>,
) {
    match value {
        Value::String(text) if text.contains('$') => match expand_str(text, env) {
            Ok(expanded) => *text = expanded,
            Err(problem) => {
                let diagnostic = Diagnostic::error("env", positions.locate(pointer), problem.message);
                problems.push(match problem.hint {
                    Some(hint) => diagnostic.with_hint(hint),
                    None => diagnostic,
                });
            }
        },
        Value::Array(items) => {
            for (idx, item) in items.iter_mut().enumerate() {
                let len = pointer.len();
                let _ = write!(pointer, "/{idx}");
                expand_env(item, pointer, positions, env, problems);
                pointer.truncate(len);
            }
        }
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&escape_pointer(key));
                expand_env(item, pointer, positions, env, problems);
                pointer.truncate(len);
            }
        }
        _ => {}
    }
}

/// Why a `${…}` reference could not be expanded.
#[derive(Debug, PartialEq, Eq)]
pub struct EnvProblem {
    /// What went wrong.
    pub message: String,
    /// What to do.
    pub hint: Option<String>,
}

/// Expands `${VAR}`, `${VAR:-default}` and `${VAR:?message}` in `text`;
/// `$${` stands for a literal `${`. Each value taken from the environment
/// is remembered as a secret ([`crate::secret::remember`]): it is
/// never printed or logged as is from then on.
pub fn expand_str(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, EnvProblem> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(idx) = rest.find('$') {
        out.push_str(&rest[..idx]);
        let after = &rest[idx + 1..];
        if let Some(stripped) = after.strip_prefix("${") {
            out.push_str("${");
            rest = stripped;
            continue;
        }
        let Some(body_start) = after.strip_prefix('{') else {
            out.push('$');
            rest = after;
            continue;
        };
        let Some(end) = body_start.find('}') else {
            return Err(EnvProblem {
                message: "unclosed `${` in value".to_owned(),
                hint: Some("write `${NAME}`, or `$${` for a literal `${`".to_owned()),
            });
        };
        let body = &body_start[..end];
        rest = &body_start[end + 1..];
        let (name, op) = match body.find(':') {
            Some(colon) => (&body[..colon], Some(&body[colon..])),
            None => (body, None),
        };
        let valid_name = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit());
        if !valid_name {
            return Err(EnvProblem {
                message: format!("`${{{body}}}` is not a valid environment reference"),
                hint: Some(
                    "write `${NAME}`, `${NAME:-default}` or `${NAME:?message}`; `$${` for a literal `${`".to_owned(),
                ),
            });
        }
        let current = env(name).filter(|v| !v.is_empty());
        match (current, op) {
            (Some(v), _) => {
                // From the environment (not a `:-` default): a secret from now on.
                crate::secret::remember(name, &v);
                out.push_str(&v);
            }
            (None, Some(op)) if op.starts_with(":-") => out.push_str(&op[2..]),
            (None, Some(op)) if op.starts_with(":?") => {
                let message = op[2..].trim();
                return Err(EnvProblem {
                    message: if message.is_empty() {
                        format!("environment variable `{name}` is required but not set")
                    } else {
                        format!("environment variable `{name}` is not set: {message}")
                    },
                    hint: Some(format!("set it before starting carte, e.g. `{name}=… carte serve …`")),
                });
            }
            (None, Some(op)) => {
                return Err(EnvProblem {
                    message: format!("unknown operator `{op}` in `${{{body}}}`"),
                    hint: Some("use `${NAME:-default}` or `${NAME:?message}`".to_owned()),
                });
            }
            (None, None) => {
                return Err(EnvProblem {
                    message: format!("environment variable `{name}` is not set"),
                    hint: Some(format!("set it, or give a default: `${{{name}:-value}}`")),
                });
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::source::tests::env;

    #[test]
    fn expands_all_forms() {
        assert_eq!(expand_str("a ${HOME_DIR} b", &env).unwrap(), "a /home/x b");
        assert_eq!(expand_str("${NOPE:-sqlite:x.db}", &env).unwrap(), "sqlite:x.db");
        assert_eq!(expand_str("${EMPTY:-d}", &env).unwrap(), "d");
        assert_eq!(expand_str("cost $5 $${KEEP}", &env).unwrap(), "cost $5 ${KEEP}");
        let err = expand_str("${NOPE:?set the database URL}", &env).unwrap_err();
        assert_eq!(err.message, "environment variable `NOPE` is not set: set the database URL");
        let err = expand_str("${NOPE}", &env).unwrap_err();
        assert_eq!(err.message, "environment variable `NOPE` is not set");
    }
}

//! The names templates may use without declaring them: the environment's
//! globals, and minijinja's builtin filters and tests that carte keeps (the
//! catalog's checks ask here whether a name a template uses exists).

use std::collections::HashSet;

use minijinja::{Environment, ErrorKind};

use super::environment;

/// Names every template may use without declaring them: globals and
/// functions of the environment (`fail`, `range`, `namespace`, …).
pub fn global_names(env: &Environment<'_>) -> HashSet<String> {
    let mut names: HashSet<String> = env.globals().map(|(name, _)| name.to_owned()).collect();
    // Tests and loop helpers that undeclared_variables may report.
    names.extend(["loop", "self", "super", "caller", "varargs", "kwargs"].map(String::from));
    names
}

/// minijinja's builtin filters (with the `builtins` feature) that carte keeps.
const FILTERS: &[&str] = &[
    "abs",
    "attr",
    "batch",
    "bool",
    "capitalize",
    "chain",
    "count",
    "d",
    "default",
    "dictsort",
    "e",
    "escape",
    "first",
    "float",
    "format",
    "groupby",
    "indent",
    "int",
    "items",
    "join",
    "jq",
    "last",
    "length",
    "lines",
    "list",
    "lower",
    "map",
    "max",
    "min",
    "pprint",
    "reject",
    "rejectattr",
    "replace",
    "reverse",
    "round",
    "safe",
    "select",
    "selectattr",
    "slice",
    "sort",
    "split",
    "string",
    "sum",
    "title",
    "tojson",
    "trim",
    "unique",
    "upper",
    "urlencode",
    "zip",
];

/// minijinja's builtin tests.
const TESTS: &[&str] = &[
    "boolean",
    "defined",
    "divisibleby",
    "endingwith",
    "eq",
    "equalto",
    "escaped",
    "even",
    "false",
    "filter",
    "float",
    "ge",
    "greaterthan",
    "gt",
    "in",
    "integer",
    "iterable",
    "le",
    "lessthan",
    "lower",
    "lt",
    "mapping",
    "ne",
    "none",
    "number",
    "odd",
    "safe",
    "sameas",
    "sequence",
    "startingwith",
    "string",
    "test",
    "true",
    "undefined",
    "upper",
];

/// The environment filters and tests are looked up in.
static PROBE: std::sync::LazyLock<Environment<'static>> = std::sync::LazyLock::new(environment);

/// Whether the environment has the filter `name` (minijinja reports an
/// unknown filter only when a render reaches it; this asks by rendering
/// one). `name` is one the template parser accepted.
fn probe_filter(name: &str) -> bool {
    !matches!(PROBE.render_str(&format!("{{{{ none|{name} }}}}"), ()), Err(err) if err.kind() == ErrorKind::UnknownFilter)
}

fn probe_test(name: &str) -> bool {
    !matches!(
        PROBE.render_str(&format!("{{% if none is {name} %}}{{% endif %}}"), ()),
        Err(err) if err.kind() == ErrorKind::UnknownTest
    )
}

/// The filters templates can use, for "did you mean".
pub fn filter_names() -> &'static [&'static str] {
    FILTERS
}

/// The tests templates can use, for "did you mean".
pub fn test_names() -> &'static [&'static str] {
    TESTS
}

/// Whether templates can use the filter `name` (a name the parser accepted).
/// The lists answer for builtins (a unit test holds them to the environment);
/// anything else is probed, so a filter carte adds is never refused.
pub fn has_filter(name: &str) -> bool {
    FILTERS.contains(&name) || probe_filter(name)
}

/// Whether templates can use the test `name` (a name the parser accepted).
pub fn has_test(name: &str) -> bool {
    TESTS.contains(&name) || probe_test(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_filter_and_test_is_in_the_environment() {
        let missing: Vec<&str> = FILTERS.iter().copied().filter(|name| !probe_filter(name)).collect();
        assert!(missing.is_empty(), "filters listed but not in the environment: {missing:?}");
        let missing: Vec<&str> = TESTS.iter().copied().filter(|name| !probe_test(name)).collect();
        assert!(missing.is_empty(), "tests listed but not in the environment: {missing:?}");
        assert!(!has_filter("no_such_filter") && !has_test("no_such_test"));
    }
}

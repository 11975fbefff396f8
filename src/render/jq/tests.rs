//! Unit tests of `jq`.

use super::*;

fn jq(text: &str, input: Value) -> Result<Value, String> {
    run(text, &input, STEPS, 8 << 20).result.map_err(|err| err.to_string())
}

fn json(value: serde_json::Value) -> Value {
    crate::render::to_value(&value)
}

#[test]
fn one_output_as_it_is_several_as_a_list() {
    let input = json(serde_json::json!({ "items": [{ "id": 1 }, { "id": 2 }], "name": "x" }));
    assert_eq!(jq(".name", input.clone()).unwrap(), Value::from("x"));
    assert_eq!(jq(".items[].id", input.clone()).unwrap(), Value::from(vec![1, 2]));
    assert_eq!(jq(".items[] | select(.id > 5)", input.clone()).unwrap(), Value::from(Vec::<Value>::new()));
    let object = jq("{n: (.items | length), big: 12345678901234567890, f: 1.5, s: \"é\"}", input).unwrap();
    assert_eq!(object.to_string(), "{'n': 2, 'big': 12345678901234567890, 'f': 1.5, 's': 'é'}");
}

#[test]
fn what_a_run_builds_is_bounded() {
    let built = "the jq filter built more than 256 KiB of values and was stopped";
    for text in [
        // One step, from a size the filter chooses: refused before it allocates.
        "\"x\" * 10000000000",
        "\"x\" * 12345678901234567890",
        "[limit(8; repeat(\"x\" * 1000000))] | add | . * 1000",
        // Doubling, a step at a time.
        "reduce range(40) as $i (\"x\"; . + .)",
        "reduce range(40) as $i ([1]; . + .)",
        "reduce range(40) as $i (12345678901234567890; . * .)",
        // Many values, each small enough.
        "[range(100) | \"x\" * 1000000] | length",
        // A refusal that is caught still ends the run.
        "[range(3) | try (\"x\" * 10000000000) catch \"caught\"] | length",
    ] {
        let ran = run(text, &Value::from(()), STEPS, 64 << 10);
        assert_eq!(ran.result.unwrap_err().to_string(), built, "{text}");
        assert!(ran.spent, "{text}");
    }
    // What fits is built.
    assert_eq!(jq("\"ab\" * 3", Value::from(())).unwrap(), Value::from("ababab"));
    assert_eq!(jq("[range(100) | \"x\" * 1000] | add | length", Value::from(())).unwrap(), Value::from(100_000));
    let ran = run(".[0]", &Value::from(vec![1]), STEPS, 8 << 20);
    assert!(!ran.spent);
}

#[test]
fn errors_are_messages() {
    assert_eq!(jq("error(\"no\")", Value::from(1)).unwrap_err(), "jq: no");
    let err = jq(".a", Value::from(vec![1])).unwrap_err();
    assert!(err.starts_with("jq: cannot index"), "{err}");
    let err = jq(".items[", Value::from(1)).unwrap_err();
    assert!(err.starts_with("the jq filter is not valid: expected"), "{err}");
}

#[test]
fn invalid_filters_say_where() {
    let invalid = check(".items[").unwrap_err();
    assert_eq!(invalid.message, "expected closing bracket, found the end of the filter");
    assert_eq!(invalid.at, Some(7..7));
    let invalid = check(".a | [1,,]").unwrap_err();
    assert_eq!((invalid.message.as_str(), invalid.at), ("expected term, found `,`", Some(8..9)));
    let invalid = check(".a | nosuch(1)").unwrap_err();
    assert_eq!(invalid.message, "undefined filter `nosuch/1`");
    assert_eq!(invalid.at, Some(5..11));
    let invalid = check("$ENV.HOME").unwrap_err();
    assert_eq!(invalid.message, "undefined variable `$ENV` (carte gives jq no environment)");
    assert!(check(&"1+".repeat(MAX_FILTER_BYTES)).unwrap_err().message.contains("longer than 8 KiB"));
    // Deep nesting is compiled on a thread with a large stack.
    let deep = format!("{}1{}", "(".repeat(4000), ")".repeat(4000));
    assert_eq!(jq(&deep, Value::from(())).unwrap(), Value::from(1));
}

#[test]
fn runaway_filters_stop() {
    for (text, expected) in [
        ("repeat(1)", "more than 10,000 outputs"),
        ("range(1e18)", "more than 10,000 outputs"),
        ("last(range(1e18))", "too much work"),
        ("[range(1e18)] | length", "too much work"),
        ("def f: f; f", "too much work"),
        ("def f: 1 + f; f", ""),
        ("def f: [f]; f", ""),
        ("[limit(1e9; repeat(\"x\"))] | add", "too much work"),
    ] {
        let err = jq(text, Value::from(())).unwrap_err();
        assert!(err.contains(expected) && (err.contains("stopped") || err.contains("outputs")), "{text}: {err}");
    }
}

#[test]
fn the_environment_is_out_of_reach() {
    let err = jq("env", Value::from(())).unwrap_err();
    assert!(err.contains("not available in carte"), "{err}");
    assert!(jq("halt", Value::from(())).unwrap_err().contains("not available"));
    assert!(jq("input", Value::from(())).is_err());
}

#[test]
fn values_are_bounded_both_ways() {
    let big = Value::from("x".repeat(1000));
    let err = run(".", &big, STEPS, 100).result.unwrap_err().to_string();
    assert!(err.contains("larger than 100 bytes"), "{err}");
    let err = run("[range(100)]", &Value::from(()), STEPS, 1000).result.unwrap_err().to_string();
    assert!(err.contains("larger than 1,000 bytes"), "{err}");
    let err = jq("reduce range(600) as $i (0; [.])", Value::from(())).unwrap_err();
    assert!(err.contains("deeper than 512"), "{err}");
}

#[test]
fn steps_are_counted() {
    let ran = run("[range(100)] | length", &Value::from(()), STEPS, 8 << 20);
    assert_eq!(ran.result.unwrap(), Value::from(100));
    assert!(ran.steps >= 100, "{}", ran.steps);
    let ran = run("last(range(1e6))", &Value::from(()), 1000, 8 << 20);
    assert_eq!(ran.result.unwrap_err(), JqError::OutOfSteps);
    assert_eq!(ran.steps, 1000);
}

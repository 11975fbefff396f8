//! Unit tests of `render`.

use super::*;

#[test]
fn fail_is_an_error_with_the_message() {
    let mut env = environment();
    env.add_template("t", "{% if n < 1 %}{{ fail('hours must be at least 1') }}{% endif %}ok").unwrap();
    let err = render_in(&env, "t", minijinja::context! { n => 0 }).unwrap_err();
    assert_eq!(err, RenderError::Failed("hours must be at least 1".to_owned()));
    assert_eq!(render_in(&env, "t", minijinja::context! { n => 2 }).unwrap(), "ok");
}

#[test]
fn runaway_loops_stop() {
    let mut env = environment();
    env.add_template("t", "{% for i in range(10000) %}{% for j in range(10000) %}{{ j }}{% endfor %}{% endfor %}")
        .unwrap();
    let err = render_in(&env, "t", minijinja::context! {}).unwrap_err();
    assert!(matches!(err, RenderError::Template(ref m) if m.contains("runaway")), "{err:?}");
}

fn render_one(source: &str) -> Result<String, RenderError> {
    let mut env = environment();
    env.add_template("t", source).unwrap();
    render_in(&env, "t", minijinja::context! {})
}

fn assert_too_big(source: &str, expected: &str) {
    let err = render_one(source).unwrap_err();
    assert!(matches!(err, RenderError::Template(ref m) if m.contains(expected)), "{source}: {err:?}");
}

#[test]
fn joining_gigabytes_is_refused_before_building_them() {
    assert_too_big("{{ ((['x'*10**6])*3000)|join }}", "`join` would build more than 8 MiB");
    assert_too_big("{{ ((['x'*10**6])*3000)|join(attribute='nothing') ~ 'y' * 10**8 }}", "");
    // Within the budget, join is minijinja's.
    assert_eq!(render_one("{{ [1, 'a']|join('-') }}|{{ [{'n': {'m': 1}}, {'n': {'m': 2}}]|join(',', attribute='n.m') }}|{{ 'abc'|join('.') }}|{{ nothing|join }}").unwrap(), "1-a|1,2|a.b.c|");
}

#[test]
fn doubling_a_string_stops() {
    assert_too_big(
        "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
        "too much work",
    );
}

#[test]
fn serializing_gigabytes_is_refused_before_building_them() {
    // A lazy repeat: 3000 references to one 1 MB string, 3 GB as text.
    let big = "((['x'*10**6])*3000)";
    assert_too_big(&format!("{{{{ {big}|tojson }}}}"), "`tojson` would build more than 8 MiB");
    assert_too_big(&format!("{{{{ {big}|tojson(indent=2) }}}}"), "`tojson` would build more than 8 MiB");
    assert_too_big(&format!("{{{{ {big}|string }}}}"), "`string` would build more than 8 MiB");
    assert_too_big(&format!("{{{{ {big}|pprint }}}}"), "`pprint` would build more than 8 MiB");
    // Printed directly, the output cap (or the fuel) stops it.
    assert_too_big(&format!("{{{{ {big} }}}}"), "");
}

#[test]
fn the_budget_is_what_the_fuel_left_can_pay_for() {
    // 120 MB of strings leave less than 8 MiB of the 128 MiB the fuel pays for.
    let source = "{% set a = 'x' * 6 * 10**7 %}{% set b = 'x' * 6 * 10**7 %}{{ ((['y'*10**6])*30)|join }}";
    assert_too_big(source, "`join` would build more than 6 MiB");
}

#[test]
fn round_gives_what_minijinjas_gives() {
    let values = [0.5, 1.5, 2.5, -0.5, -0.4, 2.675, 1e300, -1e-300, 12345.678, 11250.0, 2.0f64.powi(53) + 1.0];
    let sources = ["{{ x|round }}", "{{ x|round|int }}", "{{ x|round(1) }}", "{{ x|round(method='floor') }}"];
    for value in values.into_iter().chain([f64::NAN, f64::INFINITY, f64::NEG_INFINITY]) {
        for source in sources {
            let render_with = |mut env: Environment<'static>| {
                env.add_template("t", source).unwrap();
                render_in(&env, "t", minijinja::context! { x => value })
            };
            let (ours, theirs) = (render_with(environment()), render_with(Environment::new()));
            assert_eq!(ours, theirs, "{source} of {value}");
        }
    }
    assert_eq!(render_one("{{ 7|round }} {{ 2.5|round }} {{ 3.5|round }}").unwrap(), "7 2.0 4.0");
    assert!(render_one("{{ 'a'|round }}").is_err());
}

#[test]
fn output_is_capped() {
    assert_too_big("{% for i in range(100) %}{{ 'x' * 10**6 }}{% endfor %}", "output is larger than 8 MiB");
}

#[test]
fn serializing_filters_keep_their_output() {
    assert_eq!(render_one("{{ {'a': [1, '<b>']}|tojson }}").unwrap(), r#"{"a": [1, "\u003cb\u003e"]}"#);
    assert_eq!(render_one("{{ {'a': 1}|tojson(indent=2) }}").unwrap(), "{\n  \"a\": 1\n}");
    assert_eq!(render_one("{{ [1, 2]|string }}").unwrap(), "[1, 2]");
    assert_eq!(render_one("{{ [1]|pprint }}").unwrap(), "[\n    1,\n]");
}

/// Renders `source` with `data:` below and the argument `product`.
#[test]
fn auth_is_the_callers_claims_or_missing_with_a_reason() {
    let render_auth = |source: &str, claims: Option<&serde_json::Map<String, serde_json::Value>>| {
        let mut env = environment();
        env.add_template("t", source).unwrap();
        render_in(&env, "t", minijinja::context! { auth => auth_value(claims) })
    };
    let serde_json::Value::Object(claims) = serde_json::json!({ "sub": "alice" }) else { unreachable!() };
    assert_eq!(render_auth("{{ auth.sub }}", Some(&claims)).unwrap(), "alice");
    let err = render_auth("{{ auth.tenant }}", Some(&claims)).unwrap_err();
    assert!(
        matches!(&err, RenderError::Template(m) if m.contains("auth has no key \"tenant\" (it has sub)")),
        "{err:?}"
    );
    assert_eq!(render_auth("{{ auth.sub if auth is defined else 'local' }}", None).unwrap(), "local");
    let err = render_auth("{{ auth.sub }}", None).unwrap_err();
    assert!(matches!(&err, RenderError::Template(m) if m.contains("no verified caller")), "{err:?}");
}

fn render_data(source: &str, product: Option<&str>) -> Result<String, RenderError> {
    let data = serde_json::json!({
        "menu": { "rye": { "name": "Rye", "price": 4 }, "wheat": { "name": "Wheat", "price": 3 } },
        "rooms": [ { "name": "Blue" }, { "name": "Red" } ],
    });
    let serde_json::Value::Object(data) = data else { unreachable!() };
    let mut env = environment();
    env.add_template("t", source).unwrap();
    let context = match product {
        Some(product) => minijinja::context! { data => data_value(&data), product => product },
        None => minijinja::context! { data => data_value(&data) },
    };
    render_in(&env, "t", context)
}

#[test]
fn data_renders_as_plain_values() {
    let source = "{{ data.menu[product].name }} {{ data.rooms[1].name }} {{ data.rooms[-1].name }} \
            {% for k in data.menu %}{{ k }},{% endfor %} {% for r in data.rooms %}{{ r.name }},{% endfor %} \
            {{ data.menu|length }} {{ data.rooms|map(attribute='name')|join('+') }} {{ data.menu.rye|tojson }} \
            {% for k, v in data.menu|items %}{{ k }}={{ v.price }};{% endfor %} {{ data.menu.keys()|join(',') }}";
    assert_eq!(
        render_data(source, Some("rye")).unwrap(),
        "Rye Red Red rye,wheat, Blue,Red, 2 Blue+Red {\"name\": \"Rye\", \"price\": 4} rye=4;wheat=3; rye,wheat"
    );
}

#[test]
fn a_missing_key_of_data_is_an_error_naming_the_path() {
    let err = render_data("{{ data.menu[product].nmae }}", Some("rye")).unwrap_err();
    assert_eq!(
        err,
        RenderError::Template(
            "undefined value: data.menu.rye has no key \"nmae\" (it has name, price) (in template t, line 1)"
                .to_owned()
        )
    );
    // A subscript stays undefined (`in` asks the same way): minijinja's error below it.
    let err = render_data("{{ data.menu[product].name }}", Some("spelt")).unwrap_err();
    assert!(matches!(&err, RenderError::Template(m) if m.contains("`data.menu[...]` is undefined")), "{err:?}");
    let asked = "{{ product in data.menu }} {{ 'rye' in data.menu }} {{ data.menu[product] is defined }}";
    assert_eq!(render_data(asked, Some("spelt")).unwrap(), "False True False");
    let err = render_data("{{ data.menu.spelt }}", None).unwrap_err();
    assert!(
        matches!(&err, RenderError::Template(m) if m.contains("data.menu has no key \"spelt\" (it has rye, wheat)")),
        "{err:?}"
    );
    // Below a missing key, the message still names the first one.
    let err = render_data("{{ data.manu.rye.name }}", None).unwrap_err();
    assert!(matches!(&err, RenderError::Template(m) if m.contains("data has no key \"manu\"")), "{err:?}");
    let err = render_data("{{ data.rooms|join(', ', attribute='nmae') }}", None).unwrap_err();
    assert!(matches!(&err, RenderError::Template(m) if m.contains("data.rooms[0] has no key \"nmae\"")), "{err:?}");
    let err = render_data("{{ data.menu.spelt|tojson }}", None).unwrap_err();
    assert!(matches!(&err, RenderError::Template(m) if m.contains("data.menu has no key \"spelt\"")), "{err:?}");
    let err = render_data("{{ data.rooms[5].name }}", None).unwrap_err();
    assert!(matches!(&err, RenderError::Template(m) if m.contains("data.rooms has no item 5 (it has 2)")), "{err:?}");
}

#[test]
fn a_template_can_still_ask_whether_data_has_a_key() {
    let source = "{{ data.x is defined == 1 is even }} {{ data.x is undefined == 1 is odd }} {{ data.menu[product].stock|default('in stock') }} \
            {{ data.x|d('d') }} {{ data.x|default('', true) }}{% if data.x %}yes{% else %}no{% endif %} {{ data.x or 'or' }} \
            {{ data.get('x', 'got') }} {{ data.menu.get('rye').name }} {% for i in data.x %}{{ i }}{% endfor %}[{{ '' ~ data.x }}]";
    assert_eq!(render_data(source, Some("rye")).unwrap(), "True True in stock d no or got Rye []");
}

#[test]
fn jq_filters_data_and_its_missing_keys_are_errors() {
    assert_eq!(render_data("{{ data.menu | jq('.rye.price') }}", None).unwrap(), "4");
    assert_eq!(render_data("{{ data | jq('[.rooms[].name]') | join(',') }}", None).unwrap(), "Blue,Red");
    let err = render_data("{{ data.manu | jq('.') }}", None).unwrap_err();
    assert!(matches!(&err, RenderError::Template(m) if m.contains("data has no key \"manu\"")), "{err:?}");
    let err = render_one("{{ 1 | jq('.a') }}").unwrap_err();
    assert!(matches!(&err, RenderError::Template(m) if m.contains("jq: cannot index 1")), "{err:?}");
}

#[test]
fn jq_work_is_charged_to_the_render() {
    // Each call is within jq's own budget; together they exceed the render's fuel.
    let source = "{% for i in range(100) %}{{ none | jq('[range(300000)] | length') }}{% endfor %}";
    let err = render_one(source).unwrap_err();
    assert!(matches!(&err, RenderError::Template(m) if m.contains("too much work")), "{err:?}");
    assert_eq!(render_one("{{ none | jq('[range(300000)] | length') }}").unwrap(), "300000");
}

#[test]
fn optional_arguments_not_given_render_as_before() {
    // `product` not given: `data.menu[product]` is undefined, printed as nothing.
    assert_eq!(render_data("[{{ data.menu[product] }}][{{ product }}]", None).unwrap(), "[][]");
    assert_eq!(render_data("{{ data.menu[product] is undefined == 1 is odd }}", None).unwrap(), "True");
    let mut env = environment();
    env.add_template("t", "[{{ data.menu[product] }}]").unwrap();
    let serde_json::Value::Object(data) = serde_json::json!({ "menu": {} }) else { unreachable!() };
    let data = data_value(&data);
    let null = render_in(&env, "t", minijinja::context! { data => data, product => () }).unwrap();
    assert_eq!(null, "[]");
}

fn render_url(source: &str, context: Value) -> String {
    let name = "tool t:/run/http/path".to_owned();
    let sources = std::collections::HashMap::from([(name.clone(), source.to_owned())]);
    let templates = Templates::new(sources, HashSet::from([name.clone()]));
    render(&templates, &name, context).unwrap_or_else(|err| panic!("{err}"))
}

#[test]
fn url_templates_percent_encode_each_printed_value() {
    let context = minijinja::context! {
        id => "../../admin",
        q => "a b?c=d#e&f%2F\\g",
        n => 42,
        u => "é☃",
        none => Value::from(()),
        safe => Value::from_safe_string("x/y".to_owned()),
    };
    assert_eq!(render_url("/users/{{ id }}/x", context.clone()), "/users/..%2F..%2Fadmin/x");
    assert_eq!(render_url("/s/{{ q }}", context.clone()), "/s/a%20b%3Fc%3Dd%23e%26f%252F%5Cg");
    assert_eq!(render_url("/n/{{ n }}/{{ u }}", context.clone()), "/n/42/%C3%A9%E2%98%83");
    assert_eq!(render_url("/e/{{ none }}{{ missing }}/{{ safe }}", context.clone()), "/e//x%2Fy");
    assert_eq!(render_url("/keep-_.~/{{ 'a-b_c.d~e' }}", context), "/keep-_.~/a-b_c.d~e");
    // Other templates print as they are.
    let templates =
        Templates::new(std::collections::HashMap::from([("t".to_owned(), "{{ id }}".to_owned())]), HashSet::new());
    assert_eq!(render(&templates, "t", minijinja::context! { id => "a/b c" }).ok().as_deref(), Some("a/b c"));
}

fn templates(source: &str) -> Templates {
    Templates::new(std::collections::HashMap::from([("t".to_owned(), source.to_owned())]), HashSet::new())
}

#[test]
fn an_inline_attempt_gives_what_fits_its_fuel_and_nothing_else() {
    let small = templates("{% if n < 1 %}{{ fail('n must be positive') }}{% endif %}{{ n * 2 }}");
    let attempt = inline(|| render(&small, "t", minijinja::context! { n => 21 }));
    assert_eq!(attempt, Some(Ok("42".to_owned())));
    // A failure that is not about fuel is the attempt's answer.
    let attempt = inline(|| render(&small, "t", minijinja::context! { n => 0 }));
    assert_eq!(attempt, Some(Err(RenderError::Failed("n must be positive".to_owned()))));
    // More work than the inline fuel: no answer, and later renders of the attempt do not start.
    let big = templates("{% for i in range(n) %}{{ i }}{% endfor %}");
    let renders = std::cell::Cell::new(0);
    let attempt = inline(|| {
        renders.set(renders.get() + 1);
        let first = render(&big, "t", minijinja::context! { n => 100_000 });
        let second = render(&small, "t", minijinja::context! { n => 1 });
        (first, second)
    });
    assert_eq!(attempt, None);
    assert_eq!(renders.get(), 1);
    // With the full fuel (outside an attempt, as on the pool) it renders.
    assert_eq!(render(&big, "t", minijinja::context! { n => 100_000 }).map(|text| text.len()), Ok(488_890));
    // Out of the full fuel, it is an error result.
    let endless = templates("{% for i in range(100000) %}{% for j in range(100) %}{% endfor %}{% endfor %}");
    let err = render(&endless, "t", minijinja::context! {}).unwrap_err();
    assert!(err.to_string().contains("too much work"), "{err}");
}

#[tokio::test(flavor = "current_thread")]
async fn inline_first_finishes_on_the_pool_what_does_not_fit_inline() {
    let big = std::sync::Arc::new(templates("{% for i in range(n) %}{{ i }}{% endfor %}"));
    let pooled_calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let work = {
        let (big, pooled_calls) = (big.clone(), pooled_calls.clone());
        move || {
            if ATTEMPT.get() == Attempt::Full {
                pooled_calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            render(&big, "t", minijinja::context! { n => 100_000 }).map(|text| text.len())
        }
    };
    let rendered = inline_first(|| Caller::new("test"), work).await;
    assert_eq!(rendered, Ok(Ok(488_890)));
    assert_eq!(pooled_calls.load(std::sync::atomic::Ordering::Relaxed), 1);
}

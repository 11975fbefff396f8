//! Unit tests of `template_analysis`.

use super::*;

fn data() -> Map<String, Value> {
    let value = serde_json::json!({
        "menu": {
            "rye": { "name": "Rye", "price": 4 },
            "wheat": { "name": "Wheat", "price": 3 }
        },
        "rooms": [ { "name": "Blue" }, { "name": "Red" } ],
        "title": "Bakery"
    });
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn problems(source: &str) -> Vec<(String, String)> {
    let analysis = analyze(source, &data()).unwrap();
    analysis.data.iter().map(|p| (source[p.range.clone()].to_owned(), p.message.clone())).collect()
}

#[test]
fn undeclared_variables_point_at_their_first_use() {
    let source = "{% set a = 1 %}{{ a }} {{ rom }} {{ rom }} {% for x in xs %}{{ x }}{{ loop.index }}{% endfor %}";
    let analysis = analyze(source, &Map::new()).unwrap();
    let names: Vec<(&str, &str)> =
        analysis.undeclared.iter().map(|u| (u.name.as_str(), &source[u.range.clone()])).collect();
    assert_eq!(names, [("rom", "rom"), ("xs", "xs")]);
    assert_eq!(analysis.undeclared[0].range.start, source.find("rom").unwrap());
}

#[test]
fn filters_and_tests_point_at_their_names() {
    let source = "{{ x | uper }}{{ x|default(1) }}{% if x is odd %}{% endif %}";
    let analysis = analyze(source, &Map::new()).unwrap();
    let filters: Vec<&str> = analysis.filters.iter().map(|u| &source[u.range.clone()]).collect();
    let tests: Vec<&str> = analysis.tests.iter().map(|u| &source[u.range.clone()]).collect();
    assert_eq!(filters, ["uper", "default"]);
    assert_eq!(tests, ["odd"]);
}

#[test]
fn literal_data_paths_are_checked() {
    assert_eq!(problems("{{ data.manu }}"), [("manu".to_owned(), "`data` has no key `manu`".to_owned())]);
    assert_eq!(problems("{{ data['menu'].ry.name }}"), [("ry".to_owned(), "`data.menu` has no key `ry`".to_owned())]);
    assert_eq!(problems("{{ data.menu.rye.name }}{{ data.rooms[1].name }}{{ data.title }}"), []);
    assert_eq!(
        problems("{{ data.rooms[2].name }}"),
        [("2".to_owned(), "`data.rooms` has no item 2 (it has 2)".to_owned())]
    );
}

#[test]
fn an_expression_part_stands_for_every_value() {
    assert_eq!(problems("{{ data.menu[product].name }}"), []);
    assert_eq!(
        problems("{{ data.menu[product].nmae }}"),
        [("nmae".to_owned(), "`data.menu[…]` has no key `nmae`: none of the 2 values it can be has one".to_owned())]
    );
    let analysis = analyze("{{ data.menu[product].nmae }}", &data()).unwrap();
    assert_eq!(analysis.data[0].hint, "did you mean `name`? `data.menu[…]` has: name, price");
}

#[test]
fn loops_and_sets_bind_data_values() {
    assert_eq!(problems("{% for r in data.rooms %}{{ r.name }}{% endfor %}"), []);
    assert_eq!(
        problems("{% for r in data.rooms %}{{ r.nmae }}{% endfor %}"),
        [(
            "nmae".to_owned(),
            "`r` (`data.rooms[…]`) has no key `nmae`: none of the 2 values it can be has one".to_owned()
        )]
    );
    assert_eq!(
        problems("{% set m = data.menu %}{{ m.rye.nmae }}"),
        [("nmae".to_owned(), "`m.rye` (`data.menu.rye`) has no key `nmae`".to_owned())]
    );
    // A local named `data` is not the catalog's.
    assert_eq!(problems("{% set data = {} %}{{ data.manu }}"), []);
}

#[test]
fn presence_tests_are_not_errors() {
    for source in [
        "{{ data.x is defined }}",
        "{{ data.x | default(1) }}",
        "{{ data.x|d(1) }}",
        "{{ data.get('x') }}",
        "{% if data.x %}{{ data.x.y }}{% endif %}",
        "{% if data.x is defined and data.x.y %}{{ data.x.y.z }}{% else %}{{ data.x }}{% endif %}",
        "{{ data.x.y if data.x else 'none' }}",
        "{{ data.x and data.x.y }}",
        "{% if not data.menu.rye.stock %}sold out{% endif %}",
        "{% for r in data.rooms %}{% if r.vip %}{{ r.vip.level }}{% endif %}{% endfor %}",
        "{% if data['x'] %}{{ data.x.y }}{% endif %}",
    ] {
        assert_eq!(problems(source), [], "{source}");
    }
    // A guard covers only what is below the path it tests.
    assert_eq!(problems("{% if data.x %}{{ data.y }}{% endif %}").len(), 1);
}

/// Paths through `jq` calls.
mod jq_tests {
    use super::*;

    fn jq_problems(source: &str) -> Vec<(String, String)> {
        let analysis = analyze(source, &Map::new()).unwrap();
        analysis.jq.iter().map(|p| (source[p.range.clone()].to_owned(), p.message.clone())).collect()
    }

    #[test]
    fn literal_jq_filters_are_compiled_at_their_fault() {
        assert_eq!(jq_problems("{{ x | jq('.items[].id') }}{{ x | jq(\".a\") | length }}"), []);
        assert_eq!(
            jq_problems("{{ x | jq('.a | nosuch') }}"),
            [("nosuch".to_owned(), "the jq filter does not compile: undefined filter `nosuch/0`".to_owned())]
        );
        // The end of the filter: its closing quote.
        assert_eq!(
            jq_problems("{{ x | jq('.items[') }}"),
            [(
                "'".to_owned(),
                "the jq filter does not compile: expected closing bracket, found the end of the filter".to_owned()
            )]
        );
        // With escapes, the whole literal.
        assert_eq!(jq_problems("{{ x | jq('.a |\\t nosuch') }}")[0].0, "'.a |\\t nosuch'");
    }

    #[test]
    fn a_jq_filter_must_be_written_in_the_template() {
        for (source, underlined) in
            [("{{ x | jq(f) }}", "f"), ("{{ x | jq('.a' ~ f) }}", "'.a' ~ f"), ("{{ x | jq }}", "jq")]
        {
            let found = jq_problems(source);
            assert_eq!(found.len(), 1, "{source}");
            assert_eq!(found[0].0, underlined, "{source}");
            assert_eq!(found[0].1, "`jq` takes one filter, written as a string in the template");
        }
    }
}

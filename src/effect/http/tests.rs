use super::*;

#[test]
fn query_and_header_values_are_text_and_empty_ones_are_left_out() {
    assert_eq!(text_of(&Value::Null), None);
    assert_eq!(text_of(&Value::String(String::new())), None);
    assert_eq!(text_of(&serde_json::json!(20)).as_deref(), Some("20"));
    assert_eq!(text_of(&serde_json::json!(true)).as_deref(), Some("true"));
    assert_eq!(text_of(&serde_json::json!("a b")).as_deref(), Some("a b"));
}

#[test]
fn marks_are_found_outside_template_tags_only() {
    assert_eq!(outside_tags("/a/{{ x ~ '?' }}/b", &['?', '#']), None);
    assert_eq!(outside_tags("/a{# c #}/b?q=1", &['?', '#']), Some((11, '?')));
    assert_eq!(outside_tags("/a#frag", &['?', '#']), Some((2, '#')));
    assert_eq!(outside_tags("/a/{{ x", &['?']), None);
}

//! What PostgreSQL cannot hold, made so it can: the NUL character. `text` refuses it (SQLSTATE 22021) and `jsonb`
//! refuses `\u0000` in any string (22P05), so one NUL made a whole write fail: an item's failure or heartbeat, a
//! batch of completions (every item of it), a file's asset (which stopped the crawl at that file, at every crawl).
//! The store writes each NUL of text that comes from outside its control (a handler's error, result and progress, a
//! file's metadata) as U+FFFD, the character that stands for one that could not be kept; nothing else changes.

use std::borrow::Cow;

use serde_json::Value;

/// What a NUL is written as.
pub(crate) const NUL_WRITTEN_AS: char = '\u{fffd}';

/// `text` with each NUL written as [`NUL_WRITTEN_AS`].
pub(crate) fn text(text: &str) -> Cow<'_, str> {
    if text.contains('\0') { Cow::Owned(text.replace('\0', &NUL_WRITTEN_AS.to_string())) } else { Cow::Borrowed(text) }
}

/// `value` with each NUL of its strings and keys written as [`NUL_WRITTEN_AS`]; borrowed when it has none.
pub(crate) fn json(value: &Value) -> Cow<'_, Value> {
    if !holds_nul(value) {
        return Cow::Borrowed(value);
    }
    let mut owned = value.clone();
    // Walked with a list rather than recursion, as `holds_nul` is.
    let mut todo = vec![&mut owned];
    while let Some(v) = todo.pop() {
        match v {
            Value::String(s) => {
                if let Cow::Owned(clean) = text(s) {
                    *s = clean;
                }
            }
            Value::Array(items) => todo.extend(items.iter_mut()),
            Value::Object(map) => {
                if map.keys().any(|k| k.contains('\0')) {
                    *map = std::mem::take(map).into_iter().map(|(k, v)| (text(&k).into_owned(), v)).collect();
                }
                todo.extend(map.values_mut());
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    Cow::Owned(owned)
}

/// Whether a string or key anywhere in `value` holds a NUL.
fn holds_nul(value: &Value) -> bool {
    let mut todo = vec![value];
    while let Some(v) = todo.pop() {
        match v {
            Value::String(s) if s.contains('\0') => return true,
            Value::Array(items) => todo.extend(items),
            Value::Object(map) => {
                if map.keys().any(|k| k.contains('\0')) {
                    return true;
                }
                todo.extend(map.values());
            }
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use serde_json::json;

    use super::{json, text};

    #[test]
    fn text_without_a_nul_is_borrowed_and_each_nul_written_as_the_replacement_character() {
        assert!(matches!(text("Canon"), Cow::Borrowed("Canon")));
        assert_eq!(text("a\0b\0"), "a\u{fffd}b\u{fffd}");
    }

    #[test]
    fn json_has_each_nul_of_its_strings_and_keys_written_as_the_replacement_character() {
        let clean = json!({"failures": [{"path": "a.jpg", "reason": "x"}], "n": 1});
        assert!(matches!(json(&clean), Cow::Borrowed(_)), "nothing to change: borrowed");
        let dirty = json!({"failures": [{"path": "a.jpg", "reason": "bad\0byte"}], "k\0": ["\0", 2, null, true]});
        let want = json!({"failures": [{"path": "a.jpg", "reason": "bad\u{fffd}byte"}], "k\u{fffd}": ["\u{fffd}", 2, null, true]});
        assert_eq!(json(&dirty).into_owned(), want);
    }
}

//! Text a file's metadata carries (a camera's make and model, a lens, an identifier), as the catalogue keeps it.

/// Metadata text as the catalogue keeps it: NULs and blanks before it skipped, ended at the first NUL after (a C
/// string's end: what follows is padding, or a damaged writer's leftovers), read as UTF-8 with anything else
/// replaced, and trimmed. Empty is none. PostgreSQL's `text` holds no NUL: a value with one inside was refused at
/// the catalogue's write, and stopped the crawl at that file.
pub(crate) fn metadata_text(bytes: &[u8]) -> Option<String> {
    let start = bytes.iter().position(|b| *b != 0 && !b.is_ascii_whitespace()).unwrap_or(bytes.len());
    let rest = &bytes[start..];
    let end = memchr::memchr(0, rest).unwrap_or(rest.len());
    let text = String::from_utf8_lossy(&rest[..end]);
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::metadata_text;

    #[test]
    fn metadata_text_ends_at_its_first_nul_and_is_trimmed() {
        assert_eq!(metadata_text(b"Canon"), Some("Canon".into()));
        assert_eq!(metadata_text(b"Canon\0"), Some("Canon".into()), "a C string's end");
        assert_eq!(metadata_text(b"Can\0on"), Some("Can".into()), "a NUL inside ends it");
        assert_eq!(metadata_text(b"\0\0 Canon EOS \0\0junk"), Some("Canon EOS".into()), "padding before it skipped");
        assert_eq!(metadata_text(b"Caf\xe9"), Some("Caf\u{fffd}".into()), "not UTF-8: replaced");
        assert_eq!(metadata_text(b"\0\0\0"), None);
        assert_eq!(metadata_text(b"  "), None);
        assert_eq!(metadata_text(b""), None);
    }
}
